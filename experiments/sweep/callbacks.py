"""Hydra callbacks of a multirun: stopping it cleanly (SweepStop), and telling the user where its runs are,
building their report and setting the exit status (SweepReport).

SweepStop (`hydra.callbacks.sweep_stop`): from the start of the sweep, the launcher process holds SIGINT/SIGTERM
(experiments.run.interrupt.hold_sweep): the first one is passed on to the job processes as a soft stop, every job
in progress finishes its step, saves a checkpoint and records `interrupted`, and every job not yet started records
`interrupted` without starting. At the end it prints how many runs were stopped and the one command that resumes
the sweep (`... -m <same overrides> hydra.sweep.dir=<dir> train.resume=true`), and exits 130. A second signal
stops everything at once (`stopped_at_once`: jobs in progress may then read `running`; resume the same way).

SweepReport (`hydra.callbacks.sweep_report`): At the start of a sweep it prints the sweep
directory; at the end, one line per run (status, final val/loss, and the reason of a run that did not complete),
then it builds `<sweep dir>/report/` with experiments.compare (always: a sweep whose runs all failed gets a report
that says so) and prints the path of report.html (or, if that fails, why, and the command to retry).

A job refused without writing anything (its dir already held a run: a sweep run again into the same
hydra.sweep.dir without train.resume=true) keeps the old run's summary; the callback knows it from the summaries
it read at the start (`untouched`; not on train.resume=true, where a finished job is skipped on purpose): its
line says `not run by this sweep`, and when no job ran at all the sweep says so, with the commands that continue
or replace the runs, instead of reading as "finished ... completed".

Exit status: 130 for a sweep stopped by a signal (SweepStop); else a sweep in which any job `failed` or was
`interrupted` (or left no summary) or was refused exits 1 after the report is built, so a script or CI sees it
(with the command that resumes the sweep when a job was stopped or refused rather than failed); `diverged` is a
result of the experiment, not a fault, and keeps exit 0. The commands printed name the interpreter that ran this
one when a plain `python` would be another (experiments/python_command.py: `.venv/bin/python` outside the venv).
Run dirs are read through experiments/rundir/layout.py.
On SLURM (hydra/launcher=slurm) the launcher returns when every job ended (experiments/sweep/slurm.py), so the same
lines, report and exit status hold there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from experiments.compare import build_report, natural_key
from experiments.python_command import python_command
from experiments.run.interrupt import EXIT_CODE, held_sweeps, hold_sweep, release_sweep, sweep_stopped
from experiments.rundir.layout import RUN_MARKERS, RunDir, RunStatus
from experiments.sweep.resume import sweep_resume_command


def sweep_statuses(sweep_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(run dir, summary) of every job dir of a sweep, in job order (0_, 1_, ..., 10_); {} = no summary."""
    jobs = {p.parent for marker in RUN_MARKERS for p in sweep_dir.glob(f"*/{marker}")}
    return [(d, RunDir(d).read_summary() or {}) for d in sorted(jobs, key=natural_key)]


def status_of(summary: dict[str, Any]) -> str:
    """A job's status; a job without one (no summary, or killed before its end) reads `running`."""
    return str(summary.get("status") or RunStatus.RUNNING)


def is_fault(status: str) -> bool:
    """failed / interrupted / running (at the end of a sweep: a job that died without a summary): the sweep exits
    1. `diverged` is a result of the experiment, not a fault."""
    known = RunStatus.of(status)
    return known is not None and not known.has_result


NOT_RUN = "not run by this sweep: its dir already held a run, left as it was"


def _status_line(run_dir: Path, s: dict[str, Any], untouched: bool = False) -> str:
    loss = s.get("final_val_loss")
    loss_txt = f"{loss:.4f}" if isinstance(loss, (int, float)) else "-"
    status = status_of(s)
    reason = NOT_RUN if untouched else " ".join(str(s.get("error") or "").split())
    return f"  {status:<11} val/loss {loss_txt:>8}  {run_dir}" + (f"  ({reason})" if reason else "")


def _status_lines(sweep_dir: Path) -> list[str]:
    return [_status_line(d, s) for d, s in sweep_statuses(sweep_dir)]


def summary_bytes(sweep_dir: Path) -> dict[Path, bytes]:
    """{job dir: its summary.json's bytes} for the jobs of a sweep dir that have one (at the start of a sweep)."""
    out = {}
    for d, _ in sweep_statuses(sweep_dir):
        try:
            out[d] = RunDir(d).summary_path.read_bytes()
        except OSError:
            pass
    return out


def untouched(before: dict[Path, bytes], jobs: list[tuple[Path, dict[str, Any]]]) -> set[Path]:
    """The job dirs whose summary.json is byte for byte what it was at the start: this sweep did not run them."""
    out = set()
    for d, _ in jobs:
        try:
            if d in before and RunDir(d).summary_path.read_bytes() == before[d]:
                out.add(d)
        except OSError:
            pass
    return out


class SweepStop(Callback):
    """Ctrl-C / SIGTERM stops the whole sweep cleanly; the end says how to resume it (module docstring)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # joblib's workers are other processes: they get the stop passed on; the basic launcher runs the jobs here
        # (its child processes, e.g. tokenizer workers, are not jobs and get nothing)
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
        hold_sweep(str(config.hydra.sweep.dir), forward="joblib" in launcher.lower(), fresh=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = str(config.hydra.sweep.dir)
        release_sweep(sweep)
        why = sweep_stopped(sweep)
        if why is None:
            return
        jobs = sweep_statuses(Path(sweep))
        stopped = sum(1 for _, s in jobs if status_of(s) != RunStatus.COMPLETED)
        print(f"[archlab] sweep stopped by {why}: {stopped} of {len(jobs)} run(s) not completed; resume with: "
              f"{sweep_resume_command(sweep)}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CODE)


def stopped_at_once() -> None:
    """The launcher's second Ctrl-C / SIGTERM (KeyboardInterrupt out of Hydra): one line and exit 130, no traceback."""
    sweeps = held_sweeps()
    for sweep in sweeps:
        print(f"[archlab] sweep stopped at once: runs in progress in {sweep} may read `running`; resume with: "
              f"{sweep_resume_command(sweep)}", file=sys.stderr, flush=True)
    if not sweeps:  # Ctrl-C before any run started (e.g. while Hydra composed the config)
        print("interrupted before any run started", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_CODE)


class SweepReport(Callback):
    def __init__(self) -> None:
        self.before: dict[Path, bytes] = {}  # the job dirs' summaries when the sweep started

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.before = summary_bytes(Path(str(config.hydra.sweep.dir)))
        print(f"[archlab] sweep {config.experiment_name}: runs go to {config.hydra.sweep.dir}/", file=sys.stderr, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        jobs = sweep_statuses(sweep_dir)
        # on train.resume=true a job that holds a result is not run again on purpose (the tuned sweeper skips it)
        old = set() if OmegaConf.select(config, "train.resume", default=False) else untouched(self.before, jobs)
        print(f"[archlab] sweep {config.experiment_name} finished: {len(jobs)} run(s) in {sweep_dir}/", file=sys.stderr)
        for d, s in jobs:
            print(_status_line(d, s, d in old), file=sys.stderr)
        if old and len(old) == len(jobs) and not sweep_stopped(str(sweep_dir)):  # nothing ran: the old report stands
            release_sweep(str(sweep_dir))
            print(f"[archlab] nothing ran: each of the {len(jobs)} job dirs already held a run, left as it was; "
                  f"continue them with: {sweep_resume_command(sweep_dir)} (or train.overwrite=true to replace them, "
                  f"or another hydra.sweep.dir)", file=sys.stderr, flush=True)
            raise SystemExit(1)
        try:
            report = build_report([str(sweep_dir)])
            print(f"[archlab] report: {report}", file=sys.stderr)
        except Exception as e:  # the runs are what matters; the report can be rebuilt by hand
            print(f"[archlab] report not built: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        print(f"[archlab] compare them: {python_command()} -m experiments.compare {sweep_dir}", file=sys.stderr,
              flush=True)
        faults = [(d, NOT_RUN if d in old else status_of(s)) for d, s in jobs if d in old or is_fault(status_of(s))]
        if faults and not sweep_stopped(str(sweep_dir)):  # a stopped sweep: SweepStop prints how to resume, exit 130
            release_sweep(str(sweep_dir))  # SweepStop.on_multirun_end never runs after this SystemExit
            names = ", ".join(f"{d.name} ({status})" for d, status in faults)
            print(f"[archlab] {len(faults)} of {len(jobs)} run(s) did not complete: {names}", file=sys.stderr, flush=True)
            if any(status != RunStatus.FAILED for _, status in faults):  # stopped / requeued / refused: they can go on
                print(f"[archlab] resume them with: {sweep_resume_command(sweep_dir)}", file=sys.stderr, flush=True)
            raise SystemExit(1)
