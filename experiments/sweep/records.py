"""Where a sweep records a job that failed or never ran: what summary.json then says, and who writes it.

    before the training loop (this module):
        record_config_error(cfg, e)   a refused config                        failed       "config error: ..."
        record_not_started(cfg, why)  the sweep was stopped before this job   interrupted  "not started: ..."
        record_setup_failure(...)     an exception / Ctrl-C in setup (data,   failed /     "RuntimeError: ..."
                                      model, checkpoint)                      interrupted
    in the loop: TrainingRun.finish (experiments/run/loop.py): failed (the exception), interrupted (checkpoint
        saved), diverged (non-finite loss or grad norm)
    on SLURM: requeued (the loop, after the scheduler's warning signal: experiments/sweep/requeue.py);
        record_unfinished(dir, ...)   a job the scheduler ended without      interrupted  "SLURM job 12_1 ended
                                      its loop's last word (scancel, kill)                 CANCELLED ..."
    at the end of the sweep: experiments/sweep/callbacks.py prints one line per job with its reason, builds the
        report (which lists them) and exits 1 when a job failed or was interrupted

A record is written only into a dir that holds no run yet (never over another run's files; a failed resume
leaves the earlier run as it was). A single CLI run (not a sweep) whose config is refused leaves no dir: its
one-line error says it all. A job SIGKILLed keeps the `running` its loop wrote.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.config.errors import ConfigError
from experiments.rundir.layout import RunDir, RunDirError, RunStatus, RunSummary
from experiments.sweep.job import hydra_runtime, is_multirun, run_identity


def record_config_error(cfg: DictConfig | dict, error: ConfigError) -> dict[str, Any]:
    """A sweep job (or a train() call with train.run_dir) whose config is refused still leaves summary.json
    `failed` with the reason in its own run dir, when that dir holds no run yet."""
    return record_not_run(cfg, RunStatus.FAILED, f"config error: {error}")


def record_not_started(cfg: DictConfig | dict, why: str) -> dict[str, Any]:
    """A job of a sweep stopped (by `why`: Ctrl-C, SIGTERM) before the job began: `interrupted`, not started."""
    return record_not_run(cfg, RunStatus.INTERRUPTED, f"not started: the sweep was stopped by {why} before this job "
                                                      f"began; resume the sweep with train.resume=true")


def record_not_run(cfg: DictConfig | dict, status: RunStatus, error: str) -> dict[str, Any]:
    """summary.json with `status` and `error` for a job that never reached its loop, in its own run dir when that
    dir holds no run yet; returns the summary written, else the dir's own summary ({} if none). Nothing for a
    single CLI run (its one line says it all) or a train() call outside Hydra without train.run_dir."""
    raw = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)

    def select(key: str) -> Any:
        try:
            return OmegaConf.select(raw, key, default=None, throw_on_resolution_failure=False)
        except Exception:  # noqa: BLE001 - the config is broken: record what can be read
            return None

    explicit, hc = select("train.run_dir"), hydra_runtime()
    if hc is not None and not is_multirun():
        return {}  # a single CLI run: the one-line error is the whole story, no dir is left behind for it
    path = Path(os.path.expanduser(str(explicit))) if explicit else (Path(hc.runtime.output_dir) if hc else None)
    if path is None:
        return {}  # train() outside Hydra without a run dir: nothing of the user's names a place for it
    rd = RunDir(path)
    try:
        rd.check_can_start(resume=False, overwrite=False)
    except RunDirError:
        return rd.read_summary() or {}
    run_name, overrides = run_identity(path)
    seed = select("seed")
    summary = RunSummary(status, error=error, experiment=select("experiment_name"), run_name=run_name,
                         overrides=overrides, seed=seed if isinstance(seed, int) else None, run_dir=str(path))
    rd.write_summary(summary)
    return summary.to_dict()


def setup_failure_status(e: BaseException) -> RunStatus:
    """A Ctrl-C during setup is `interrupted`; anything else `failed`."""
    return RunStatus.INTERRUPTED if isinstance(e, KeyboardInterrupt) else RunStatus.FAILED


def record_setup_failure(run_dir: Path, e: BaseException, *, experiment: str, seed: int, steps: int,
                         tokens: int) -> None:
    """summary.json for a run that failed (or was stopped) before its loop, with the reason on one line. The
    caller writes it only into a dir that held no other run."""
    error = f"config error: {e}" if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
    run_name, overrides = run_identity(run_dir)
    RunDir(run_dir).write_summary(RunSummary(setup_failure_status(e), error=" ".join(error.split()),
                                             experiment=experiment, run_name=run_name, overrides=overrides, seed=seed,
                                             steps=steps, tokens=tokens, run_dir=str(run_dir)))


def record_unfinished(run_dir: Path, status: RunStatus, error: str) -> dict[str, Any]:
    """A job that ended without its run's last word (its summary still `running` or `requeued`, or none: killed by
    the scheduler, the node lost) gets `status` and `error`, its other fields kept; a run that wrote its own end
    (completed, interrupted, failed, ...) keeps it. Returns the summary now on disk (a job that died before its run
    dir was made gets the dir, so the sweep's report and exit status count it)."""
    rd = RunDir(run_dir)
    on_disk = rd.read_summary()
    if on_disk is None:
        run_dir.mkdir(parents=True, exist_ok=True)
        summary = RunSummary(status, error=error, run_name=run_dir.name, run_dir=str(run_dir))
    elif RunStatus.of(on_disk.get("status")) in (RunStatus.RUNNING, RunStatus.REQUEUED):
        summary = replace(RunSummary.from_dict(on_disk), status=status, error=error)
    else:
        return on_disk
    rd.write_summary(summary)
    return summary.to_dict()
