"""A Hydra callback that tells a multirun user where its runs are, builds their report, and sets the exit status.

Configured in conf/train.yaml (`hydra.callbacks.sweep_report`). At the start of a sweep it prints the sweep
directory; at the end, one line per run (status, final val/loss, and the reason of a run that did not complete),
then it builds `<sweep dir>/report/` with experiments.compare (always: a sweep whose runs all failed gets a report
that says so) and prints the path of report.html (or, if that fails, why, and the command to retry).

Exit status: a sweep in which any job `failed` or was `interrupted` (or left no summary) exits 1 after the report
is built, so a script or CI sees it; `diverged` is a result of the experiment, not a fault, and keeps exit 0.
Run dirs are read through experiments/rundir.py.
Not handled: SLURM sweeps whose jobs are still queued when the launcher returns (statuses then read `running`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from experiments.rundir import RUN_MARKERS, RunDir

# Statuses that make a sweep exit non-zero ("running" at the end of a sweep = a job that died without a summary).
FAULT_STATUSES = ("failed", "interrupted", "running")


def sweep_statuses(sweep_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(run dir, summary) of every job dir of a sweep, in job order (0_, 1_, ..., 10_); {} = no summary."""
    from experiments.compare.runs import natural_key

    jobs = {p.parent for marker in RUN_MARKERS for p in sweep_dir.glob(f"*/{marker}")}
    return [(d, RunDir(d).read_summary() or {}) for d in sorted(jobs, key=natural_key)]


def _status_line(run_dir: Path, s: dict[str, Any]) -> str:
    loss = s.get("final_val_loss")
    loss_txt = f"{loss:.4f}" if isinstance(loss, (int, float)) else "-"
    status = s.get("status") or "running"
    reason = " ".join(str(s.get("error") or "").split())
    return f"  {status:<11} val/loss {loss_txt:>8}  {run_dir}" + (f"  ({reason})" if reason else "")


def _status_lines(sweep_dir: Path) -> list[str]:
    return [_status_line(d, s) for d, s in sweep_statuses(sweep_dir)]


class SweepReport(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"[archlab] sweep {config.experiment_name}: runs go to {config.hydra.sweep.dir}/", file=sys.stderr, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        jobs = sweep_statuses(sweep_dir)
        print(f"[archlab] sweep {config.experiment_name} finished: {len(jobs)} run(s) in {sweep_dir}/", file=sys.stderr)
        for d, s in jobs:
            print(_status_line(d, s), file=sys.stderr)
        try:
            from experiments.compare import build_report

            report = build_report([str(sweep_dir)])
            print(f"[archlab] report: {report}", file=sys.stderr)
        except Exception as e:  # the runs are what matters; the report can be rebuilt by hand
            print(f"[archlab] report not built: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        print(f"[archlab] compare them: python -m experiments.compare {sweep_dir}", file=sys.stderr, flush=True)
        faults = [(d, s.get("status") or "running") for d, s in jobs if (s.get("status") or "running") in FAULT_STATUSES]
        if faults:
            names = ", ".join(f"{d.name} ({status})" for d, status in faults)
            print(f"[archlab] {len(faults)} of {len(jobs)} run(s) did not complete: {names}", file=sys.stderr, flush=True)
            raise SystemExit(1)
