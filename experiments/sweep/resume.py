"""The commands that continue a stopped run or a stopped sweep, printed on the last line of an interrupted one.

    resume_command(run_dir)       python -m experiments.train <the same overrides> hydra.run.dir=<dir> train.resume=true
    sweep_resume_command(sweep)   python -m experiments.train -m <the same overrides> hydra.sweep.dir=<dir> train.resume=true

Both repeat this command's own arguments (sys.argv) without train.resume / train.overwrite / the multirun flag,
so the resumed run composes the same config. Not handled: arguments that were only in the environment
(ARCHLAB_CACHE, ...): the resumed command inherits the environment it is run in.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def _kept_args(argv: list[str] | None, drop: tuple[str, ...]) -> list[str]:
    """This command's arguments (sys.argv[1:] by default, `python -c ... args` too) without train.resume,
    train.overwrite, the multirun flag and the `drop` prefixes: what a resume command repeats."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["-c"]:  # python -c "...main()" args...
        argv = argv[1:]
    return [a for a in argv if not a.startswith(("train.resume=", "train.overwrite=", "-m", "--multirun", *drop))]


def resume_command(run_dir: Path, argv: list[str] | None = None) -> str:
    """The command that continues an interrupted run: this command's overrides with train.resume=true, and the
    run dir pinned (hydra.run.dir) when the command did not name one."""
    keep = _kept_args(argv, ())
    if not any(a.startswith(("hydra.run.dir=", "train.run_dir=")) for a in keep):
        keep.append(f"hydra.run.dir={run_dir}")
    return shlex.join(["python", "-m", "experiments.train", *keep, "train.resume=true"])


def sweep_resume_command(sweep: str | Path, argv: list[str] | None = None) -> str:
    """The command that continues a stopped sweep: the same multirun with its sweep dir pinned and
    train.resume=true (interrupted jobs continue, jobs that never started start, completed ones stay completed)."""
    keep = _kept_args(argv, ("hydra.sweep.dir=",))
    return shlex.join(["python", "-m", "experiments.train", "-m", *keep, f"hydra.sweep.dir={sweep}",
                       "train.resume=true"])
