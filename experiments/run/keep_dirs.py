"""A single run that ends before it writes anything of its own leaves its dirs as it found them, Hydra's files too.

Hydra makes a run's dir and writes `.hydra/{config,hydra,overrides}.yaml` and its job log (`train.log`) into it
before train() runs. So a run that train() then refuses (a resume whose tokenizer, data or checkpoint differ from
the run's, a damaged checkpoint, a dir another process took meanwhile) or that stops in setup (Ctrl-C while the
data is prepared, an exception) would leave an earlier run's `.hydra/` rewritten and its log appended, and a fresh
run refused there would leave a dir holding only Hydra's files. Here:

    hydra.callbacks.keep_dirs (conf/train.yaml)   KeepDirs.on_run_start: before Hydra makes or writes the dirs, a
                                                  snapshot of the run dir (train.run_dir, else hydra.run.dir) and
                                                  of Hydra's output dir (experiments/rundir/snapshot.py)
    cli() (experiments/run/train.py)              with kept_unless_started(): main()

When the command exits non-zero and none of the run's own files (RUN_OUTPUTS: config.yaml, metrics.jsonl,
summary.json, tokenizer.json, checkpoints/, wandb/) changed, every file of those dirs gets back its bytes, mode
and mtime, what was not there is removed, and a dir that did not exist is removed again. A run that reached its
loop, or recorded its failure in its summary.json (a fresh run that failed in setup), keeps what it wrote and
Hydra's record of it. A dir whose lock another live process holds now (it started there meanwhile) is left to it.
Only single runs: a sweep's jobs each record their own failure, and a sweep dir is the sweep's. Only the process
of rank 0 (under torchrun every rank runs Hydra; their writes may race with the restore: not handled). Not a dir of
more than snapshot.MAX_ENTRIES paths (hydra.run.dir=. in a checkout): such a run is not guarded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from experiments.run import distributed
from experiments.rundir.layout import RUN_OUTPUTS
from experiments.rundir.lock import held_by_another
from experiments.rundir.snapshot import MAX_ENTRIES, DirSnapshot, TooLarge


@dataclass
class Kept:
    """The snapshots of one single run: its run dir's first (whose RUN_OUTPUTS say whether the run started)."""

    run_dir: DirSnapshot
    others: list[DirSnapshot]

    def put_back_unless_started(self) -> list[str]:
        """Restore every dir when the run wrote none of its own files; returns what could not be put back."""
        snaps = (self.run_dir, *self.others)
        if any(snap.changed(RUN_OUTPUTS) for snap in snaps) or held_by_another(self.run_dir.root):
            return []  # the run started (a run's files in Hydra's dir too: never remove a run's output)
        lost = []
        for snap in snaps:
            lost += [str(snap.root / rel) for rel in snap.restore()]
        return lost


_TAKEN: list[Kept] = []  # set by KeepDirs.on_run_start, read by kept_unless_started (one run per process)


def _select(config: DictConfig, key: str) -> str | None:
    try:
        value = OmegaConf.select(config, key)
    except Exception:  # noqa: BLE001 - a value Hydra cannot resolve either: Hydra refuses the run itself
        return None
    return str(value) if value not in (None, "") else None


class KeepDirs(Callback):
    """Hydra callback (`hydra.callbacks.keep_dirs`): snapshot a single run's dirs before Hydra's job starts."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _TAKEN.clear()
        if not distributed.env_info().is_main:
            return
        hydra_dir = _select(config, "hydra.run.dir")  # resolved here: run_job reads the same ${now:...} value
        own = _select(config, "train.run_dir")
        run_dir = os.path.expanduser(own) if own else hydra_dir
        if run_dir is None:
            return
        if own and hydra_dir and OmegaConf.select(config, "hydra.job.chdir") and not os.path.isabs(run_dir):
            run_dir = os.path.join(hydra_dir, run_dir)  # train() resolves it in the job's dir, where Hydra chdir'd
        try:
            others = [DirSnapshot.take(hydra_dir, max_entries=MAX_ENTRIES)] if hydra_dir is not None and own and \
                Path(hydra_dir).absolute() != Path(run_dir).absolute() else []
            _TAKEN.append(Kept(DirSnapshot.take(run_dir, stat_only=RUN_OUTPUTS, max_entries=MAX_ENTRIES), others))
        except TooLarge:  # not a run dir (hydra.run.dir=. in a checkout): left as before, unguarded
            pass


@contextmanager
def kept_unless_started() -> Iterator[None]:
    """Around a Hydra run: on a non-zero exit (or an exception), the dirs KeepDirs snapshotted are put back unless
    the run wrote files of its own. Snapshots taken before this block (another command in this process) are dropped."""
    _TAKEN.clear()
    ok = False
    try:
        yield
        ok = True
    except SystemExit as e:
        ok = e.code in (0, None)
        raise
    finally:
        kept = list(_TAKEN)
        _TAKEN.clear()
        if not ok:
            lost = [path for k in kept for path in k.put_back_unless_started()]
            if lost:
                print(f"could not put back {', '.join(lost[:3])}{' ...' if len(lost) > 3 else ''} as it was",
                      file=sys.stderr, flush=True)
