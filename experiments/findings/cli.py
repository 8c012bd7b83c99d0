"""`python -m experiments.findings`: run a finding's pre-registered sweep, judge it by its rule, write its doc.

    python -m experiments.findings --list                     # name and claim of every finding
    python -m experiments.findings rope_vs_learned data=text 'data.paths=[../shared/data/bench/tinystories_v1_train_head_lowercase.txt]'
    python -m experiments.findings rope_vs_learned --data-file tinystories.txt   # a copy of the same data file
    python -m experiments.findings rope_vs_learned data=tinystories                # the hub's TinyStories instead
    python -m experiments.findings rope_vs_learned --smoke    # seconds; the doc goes into the sweep dir
    python -m experiments.findings --index                    # rewrite docs/findings/README.md's table
    python -m experiments.findings rope_vs_learned --from-sweep multirun/findings/rope_vs_learned/<time>   # doc again
    python -m experiments.findings rope_vs_learned_v2 --from-data   # the doc again from docs/findings/<name>/data.json
    python -m experiments.findings rope_vs_learned --resume --out-dir multirun/findings/rope_vs_learned/<time>
    python -m experiments.findings rope_vs_learned_v2 --register   # fix a (new) finding's module and YAML

Registration (registration.py): `--register` records the finding's module and sweep YAML (text, sha256, date) in
experiments/findings/registered/<name>.json and never overwrites one. A full run refuses, in one line before
anything runs, a finding that is not registered or whose files differ from the registration (a changed setup is a
new version, `<name>_v2`); a smoke run goes ahead and its doc shows the diff. The check made at run time is kept in
the sweep's finding.json and is what the doc states.
A run is `python -m experiments.train -m experiment=finding_<name> hydra/launcher=joblib_2 hydra.sweep.dir=<dir>
[smoke overrides] [your overrides]` as a subprocess (its output goes to stderr; the sweep callback's default report
is switched off: this command builds the report itself, grouped by the finding's keys against its baseline), then
experiments.compare.build_report into <dir>/report/, the finding's own measurement (if any), then its runs as data
(rundata.py: docs/findings/<name>/data.json beside the doc's figures; a smoke run's inside its sweep dir) and, from
that data alone (from_data.py), its rule's verdict and the doc with its figures (judge.py), so that `--from-data`
gives the same doc again anywhere: no training, no data file, nothing but the doc and its figures written; a missing,
unreadable, other-version or other finding's data file is refused in one line (rebuild.py). When the sweep starts,
the command records its provenance in finding.json (provenance.py: git commit and dirty files, Python, torch, CPU,
GPU, and the setup hash of every git-tracked file under arch/, tokenizer/, experiments/, conf/, with the files
changed since the registration when the registration recorded its own), which the doc states. stdout gets only the
doc's path. A full run without data overrides trains on the pre-registered
file (experiments/findings/data.py: what it is, where to get it; `--data-file` names a copy, checked by sha256).
Ctrl-C / SIGTERM (to this command, or to the whole terminal group): passed on to the sweep as its soft stop
request (experiments.run.interrupt), so the runs in progress save a checkpoint and record `interrupted`, the others
record that they never started; no doc is written, and one line gives the command that continues the sweep,
`--resume --out-dir <dir>` (train.resume=true on the same sweep; its finding.json, written before the sweep starts,
holds the arguments, and every minute the attempt's seconds so far: attempts.py). A second signal is passed on as
it is (the sweep then stops at once).
A tuned finding (its YAML selects `hydra/sweeper=tuned`: every arm tuned over an lr grid, then at its best lr on
fresh seeds; experiments/sweep/tune.py) runs the same way: --smoke gives its sweeper the 2 smoke seeds and one
tuning seed (hydra.sweeper.seeds / tune_seeds, SMOKE_TUNED_SEEDS) and keeps its grid, a `seed` override is refused
(the sweeper sets every run's seed), --resume continues its tuning or final phase (the sweeper's train.resume=true),
and the doc reads the final runs (tuned.py). A finding whose YAML selects its data (`finding/data: eltec`) gets it
checked (data.run_data) and the smoke's embedded corpus unless other data is given.
The sweep dir is claimed before anything is checked (out_dir.py: a lock; a second command on it is refused at
once), and a command refused or failed before its sweep started (experiments.train's exit 2 included) leaves it as
it found it, so the corrected command runs.
Exit status: 0 done (whatever the verdict), 2 bad arguments (one line `findings: error: ...`, or the sweep's own
refusal), 130 stopped by a signal, 1 when the sweep produced no run to judge, or when some runs failed or were
interrupted (the doc is still written for the others). Not handled: SLURM launchers.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import registration
from experiments.findings.attempts import Attempt
from experiments.findings.data import DataError, run_data
from experiments.findings.judge import judge
from experiments.findings.out_dir import OutDir
from experiments.findings.rebuild import DOCS_DIR, doc_path, from_data, from_sweep, read_meta
from experiments.findings.registration import RegistrationError, SetupCheck
from experiments.findings.registry import FINDINGS, Finding, next_version
from experiments.findings.tuned import is_tuned
from tokenizer.cli_args import OneLineParser, UsageError, non_empty, non_empty_path, positive_int

SEED_OVERRIDE = re.compile(r"^[+~]*seed=")
OWN_OVERRIDE = re.compile(r"^[+~]*hydra(/launcher=|\.sweep\.dir=|\.launcher\.)")  # set by --jobs / --out-dir
REFUSED = 2  # experiments.train's exit status for a command it refused before any run started


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m experiments.findings", description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", help="the finding to run (see --list)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides for every run, e.g. data=text 'data.paths=[a.txt]'")
    p.add_argument("--list", action="store_true", help="list the findings and exit")
    p.add_argument("--index", action="store_true", help="rewrite the table of <docs-dir>/README.md from the docs present")
    p.add_argument("--docs-dir", type=non_empty_path, default=DOCS_DIR,
                   help=f"where the finding docs live (default {DOCS_DIR})")
    p.add_argument("--smoke", action="store_true", help="a seconds-long version of the sweep (not a result)")
    p.add_argument("--jobs", type=positive_int, default=None,
                   help="runs at a time (1: Hydra's basic launcher, in one process); default 2, with --smoke 1")
    p.add_argument("--packed", action="store_true",
                   help="train the runs that differ only in seed, lr, ... as stacked models, one pack at a time "
                        "(hydra/launcher=packed, docs/packing.md): for a GPU")
    p.add_argument("--out-dir", type=non_empty_path, default=None,
                   help="sweep dir (default multirun/findings/<name>/<time>[_smoke]); must be new or empty")
    p.add_argument("--doc", type=non_empty_path, default=None,
                   help="where to write the doc (default <docs-dir>/<name>.md; with --smoke <sweep dir>/<name>.md)")
    p.add_argument("--from-sweep", type=non_empty_path, default=None, metavar="DIR",
                   help="no training: rebuild the report and doc of an earlier run of this finding in DIR")
    p.add_argument("--from-data", action="store_true",
                   help="no training: rebuild the doc and its figures from <docs-dir>/<name>/data.json alone (the "
                        "runs a full run committed)")
    p.add_argument("--data-file", type=non_empty, default=None, metavar="PATH",
                   help="a local copy of the pre-registered data file (checked by its sha256), for machines without "
                        "../shared/data; see docs/findings/README.md#data")
    p.add_argument("--resume", action="store_true",
                   help="continue the stopped sweep in --out-dir (train.resume=true), then judge it and write the doc")
    p.add_argument("--register", action="store_true",
                   help="record the finding's module and sweep YAML (text, sha256, today's date) in "
                        "experiments/findings/registered/<name>.json; an existing registration is never replaced")
    p.add_argument("--note", type=non_empty, default=None,
                   help="with --register: a note kept in the registration (e.g. what this version changes)")
    return p


def list_text() -> str:
    width = max(len(n) for n in FINDINGS)
    return "\n".join(f"{name:<{width}}  {f.title}" for name, f in FINDINGS.items())


def parse_overrides(overrides: Sequence[str]) -> list[Any]:
    """Hydra's parsed overrides; UsageError for one it cannot parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:
        raise UsageError(f"cannot parse the overrides: {str(e).splitlines()[0]}") from None


def point_overrides(overrides: Sequence[str]) -> list[str]:
    """The single-valued, non-hydra overrides (one sweep point's settings shared by every run)."""
    return [text for text, o in zip(overrides, parse_overrides(overrides))
            if not o.is_sweep_override() and not o.is_delete() and not o.key_or_group.startswith("hydra")]


def launcher_overrides(jobs: int, packed: bool = False) -> tuple[list[str], str]:
    if packed:
        return ["hydra/launcher=packed"], "packed"
    if jobs == 1:
        return ["hydra/launcher=basic"], "basic"
    if jobs == 2:
        return ["hydra/launcher=joblib_2"], "joblib_2"
    return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"], f"joblib (n_jobs={jobs})"


def train_argv(f: Finding, sweep_dir: Path, jobs: int, overrides: Sequence[str], packed: bool = False) -> list[str]:
    """`python -m experiments.train` arguments of the finding's sweep. Settings shared by every run (the smoke shape,
    the data) are kept out of the run dir names, so a run dir reads `3_model.pos=alibi,seed=0`."""
    from experiments.config.compose import compose_config

    launcher = launcher_overrides(jobs, packed)[0]  # the sweep's own launcher: --jobs 1 composes without joblib
    base = list(compose_config([f"experiment={f.experiment}", *launcher], return_hydra_config=True)
                .hydra.job.config.override_dirname.exclude_keys)
    shared = [o.key_or_group for o in parse_overrides(overrides)
              if not o.is_sweep_override() and not o.key_or_group.startswith("hydra")]
    exclude = list(dict.fromkeys([*base, *shared]))
    return ["-m", f"experiment={f.experiment}", *launcher, f"hydra.sweep.dir={sweep_dir}",
            "~hydra.callbacks.sweep_report",
            "hydra.job.config.override_dirname.exclude_keys=[" + ",".join(f"'{k}'" for k in exclude) + "]",
            *overrides]


def check_config(f: Finding, argv: list[str], overrides: Sequence[str]) -> None:
    """Every command-line and value mistake as one UsageError before any run starts (experiments.config.precheck,
    then config_check.validate of one sweep point)."""
    from experiments.config.precheck import precheck
    from experiments.config.compose import compose_config
    from experiments.config.check import validate
    from experiments.config.errors import ConfigError

    try:
        precheck(argv)
        validate(compose_config([f"experiment={f.experiment}", *point_overrides(overrides)]))
    except ConfigError as e:
        raise UsageError(f"config error: {e}") from None
    except UsageError:
        raise
    except Exception as e:  # Hydra's own composition errors
        raise UsageError(f"config error: {str(e).splitlines()[0]}") from None


def _stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def run_sweep(argv: list[str]) -> tuple[int, float]:
    """Run the training command; (exit status, wall seconds). Its stdout goes to our stderr. A first Ctrl-C /
    SIGTERM to this process is passed on as the sweep's soft stop request, a second as it is; either way this
    waits for the sweep to record its runs and exit."""
    from experiments.run.interrupt import SWEEP_STOP, StopRequest

    t0 = time.perf_counter()
    fd = _stderr_fd()
    p = subprocess.Popen([sys.executable, "-m", "experiments.train", *argv], stdout=fd if fd is not None else None)

    def soft_stop() -> None:
        if SWEEP_STOP is not None and p.poll() is None:
            p.send_signal(SWEEP_STOP)

    with StopRequest(forward=soft_stop):
        while True:
            try:
                rc = p.wait()
                break
            except KeyboardInterrupt as e:  # the second signal: pass it on and keep waiting for the sweep to exit
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM if "SIGTERM" in str(e) else signal.SIGINT)
    return rc, time.perf_counter() - t0


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def setup_check(f: Finding) -> SetupCheck:
    try:
        return registration.check(f.name, f.extra_files)
    except RegistrationError as e:
        raise UsageError(str(e)) from None


def run_provenance(f: Finding) -> dict[str, Any]:
    """provenance.collect() for f's sweep starting now: its own files (registration.setup_paths and the record) left
    out of what changed since the registration, against the tree the registration recorded (if it did)."""
    from experiments.findings.provenance import collect

    own = [*(p.as_posix() for p in registration.setup_paths(f.name, f.extra_files).values()),
           (registration.REGISTERED / f"{f.name}.json").as_posix()]
    try:
        record = registration.load(f.name) or {}
    except RegistrationError:
        record = {}
    return collect(own, record.get("tree"))


def require_registered(f: Finding, check: SetupCheck) -> None:
    """A full run's setup must be the registered one: UsageError (one line) saying what to do otherwise."""
    if check.status == "unregistered":
        raise UsageError(f"{f.name} is not registered: run `python -m experiments.findings {f.name} --register` "
                         "(it records the module and the sweep YAML as they are now) before its full run")
    if check.status == "changed":
        nxt = next_version(f.name)
        raise UsageError(f"{f.name}: the setup differs from its registration of {check.registered} "
                         f"({', '.join(check.changed_paths())}; --smoke shows the diff); a changed setup is a new "
                         f"version: copy both files to {nxt} (experiments/findings/claims/{nxt}.py, "
                         f"conf/experiment/finding_{nxt}.yaml) and run "
                         f"`python -m experiments.findings {nxt} --register`")


def register(f: Finding, args: argparse.Namespace) -> int:
    """--register: the registration record of f, or one line when it exists."""
    if args.overrides or args.smoke or args.resume or args.from_sweep or args.out_dir or args.data_file is not None \
            or args.doc or args.jobs is not None or args.packed:
        raise UsageError("--register takes no overrides or other options than --note (it records the files as "
                         "they are)")
    try:
        print(registration.register(f.name, note=args.note or "", extra=f.extra_files))
    except RegistrationError as e:
        nxt = next_version(f.name)
        more = (f"; a changed setup is a new version: {nxt} (its own experiments/findings/claims/{nxt}.py, "
                f"conf/experiment/finding_{nxt}.yaml and --register)") if "already registered" in str(e) else ""
        raise UsageError(f"{e}{more}") from None
    return 0


def run(f: Finding, args: argparse.Namespace) -> int:
    """The finding's sweep, then judge(), in a sweep dir claimed before anything is checked (out_dir.py)."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S") + ("_smoke" if args.smoke else "")
    sweep_dir = args.out_dir or Path("multirun") / "findings" / f.name / stamp
    with OutDir(sweep_dir, fresh=True) as out:
        return _run(f, args, sweep_dir, stamp, out)


def _run(f: Finding, args: argparse.Namespace, sweep_dir: Path, stamp: str, out: OutDir) -> int:
    if f.requires is not None and (why := f.requires()):
        raise UsageError(f"{f.name} {why}")
    smoke = args.smoke
    check = setup_check(f)
    if not smoke:
        require_registered(f, check)
    jobs = args.jobs if args.jobs is not None else 1 if smoke or args.packed else 2
    if args.packed and args.jobs is not None:
        raise UsageError("--packed trains one pack at a time: it takes no --jobs")
    doc = doc_path(f, args, sweep_dir, smoke)
    if own := [o for o in args.overrides if OWN_OVERRIDE.match(o)]:
        raise UsageError(f"{own[0]}: the launcher and the sweep dir are set by --jobs, --packed and --out-dir")
    user = list(args.overrides)
    tuned = is_tuned(f.experiment)
    if tuned and (seed := next((o for o in user if SEED_OVERRIDE.match(o)), None)):
        raise UsageError(f"{seed}: {f.name} is a tuned sweep, whose sweeper sets every run's seed: its fresh seeds "
                         "are hydra.sweeper.seeds=[...], its tuning seeds hydra.sweeper.tune_seeds=[...]")
    try:  # the pre-registered data (or its checked copy), unless the user gave other data
        data, smoke_data = run_data(f.data, user, args.data_file, smoke)
    except DataError as e:
        raise UsageError(str(e)) from None
    overrides = [*(f.smoke_overrides(tuned, smoke_data) if smoke else []), *data, *user]
    argv = train_argv(f, sweep_dir, jobs, overrides, args.packed)
    check_config(f, argv, overrides)
    launcher = launcher_overrides(jobs, args.packed)[1]
    cli_args = [*(["--smoke"] if smoke else []), *(["--jobs", str(args.jobs)] if args.jobs is not None else []),
                *(["--packed"] if args.packed else []),
                *(["--data-file", args.data_file] if args.data_file is not None else data), *user]  # the doc's command
    print(f"findings: {f.name}: sweep -> {sweep_dir}/ ({launcher}"
          f"{', smoke' if smoke else ''})", file=sys.stderr, flush=True)
    meta = {"name": f.name, "smoke": smoke, "args": cli_args, "overrides": overrides, "train_argv": argv,
            "train_rc": None, "sweep_dir": str(sweep_dir), "wall_s": 0.0, "attempts": 0, "cpus": cpu_count(),
            "jobs": jobs, "launcher": launcher, "started": stamp, "setup": check.to_meta(),
            "tuned": tuned, "provenance": run_provenance(f)}
    return sweep_and_judge(f, sweep_dir, meta, doc, argv, out)


def sweep_and_judge(f: Finding, sweep_dir: Path, meta: dict[str, Any], doc: Path, argv: list[str],
                    out: OutDir) -> int:
    """One attempt at the sweep (finding.json first, so that a stopped one can be resumed), then judge() unless it
    was stopped by a signal. A sweep that experiments.train refused (exit 2: before any run) leaves `out` as it was."""
    from experiments.run.interrupt import EXIT_CODE

    with Attempt(sweep_dir, meta) as attempt:  # finding.json holds this attempt's seconds even if it is killed
        rc, wall = run_sweep(argv)
        meta = attempt.close(rc, wall)
    if rc == REFUSED:
        print(f"findings: {f.name}: the sweep was refused (above); {sweep_dir} is left as it was", file=sys.stderr,
              flush=True)
        return REFUSED
    out.keep()
    if rc == EXIT_CODE:  # stopped: its runs are recorded; judging a part of the sweep would write a wrong doc
        print(f"findings: {f.name}: stopped; no doc written; resume with: python -m experiments.findings {f.name} "
              f"--resume --out-dir {shlex.quote(str(sweep_dir))}", file=sys.stderr, flush=True)
        return EXIT_CODE
    return judge(f, sweep_dir, meta, doc, point_overrides(meta.get("overrides", [])))


def resume(f: Finding, args: argparse.Namespace) -> int:
    """--resume: the stopped sweep in --out-dir again with train.resume=true, then judge it."""
    sweep_dir = args.out_dir
    if sweep_dir is None:
        raise UsageError("--resume needs --out-dir <the sweep dir of the stopped run>")
    with OutDir(sweep_dir, fresh=False) as out:
        return _resume(f, args, sweep_dir, out)


def _resume(f: Finding, args: argparse.Namespace, sweep_dir: Path, out: OutDir) -> int:
    meta = read_meta(f, sweep_dir, "--out-dir")
    if args.overrides or args.smoke or args.jobs is not None or args.packed or args.from_sweep \
            or args.data_file is not None or args.from_data:
        raise UsageError("--resume takes no overrides, --smoke, --jobs, --packed, --data-file, --from-sweep or "
                         "--from-data (they are those of the stopped run, in its finding.json)")
    doc = doc_path(f, args, sweep_dir, bool(meta.get("smoke")))
    if not meta.get("smoke"):  # the files the sweep started with must still be the registered ones
        require_registered(f, setup_check(f))
    if meta.get("provenance"):  # the code this attempt trains with, beside the first attempt's
        from experiments.findings.provenance import attempt

        meta["provenance"] = {**meta["provenance"],
                              "resumed": [*meta["provenance"].get("resumed", []), attempt()]}
    print(f"findings: {f.name}: resuming the sweep in {sweep_dir}/", file=sys.stderr, flush=True)
    return sweep_and_judge(f, sweep_dir, meta, doc, [*meta["train_argv"], "train.resume=true"], out)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_intermixed_args(list(sys.argv[1:] if argv is None else argv))
        if args.list:
            print(list_text())
            return 0
        if args.index:
            from experiments.findings.index import write_index

            print(write_index(list(FINDINGS.values()), args.docs_dir))
            return 0
        if not args.name:
            raise UsageError("name a finding (see --list), or pass --list / --index")
        if args.name not in FINDINGS:
            raise UsageError(f"unknown finding {args.name!r}; choose from {', '.join(FINDINGS)}")
        f = FINDINGS[args.name]
        if args.from_data:  # before --register and --note, which it refuses
            return from_data(f, args)
        if args.note is not None and not args.register:
            raise UsageError("--note goes with --register")
        if args.register:
            return register(f, args)
        return resume(f, args) if args.resume else from_sweep(f, args, point_overrides) if args.from_sweep else \
            run(f, args)
    except UsageError as e:
        print(f"findings: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the training runs checkpoint themselves (train.resume=true per run dir)
        print("findings: interrupted", file=sys.stderr)
        return 130
