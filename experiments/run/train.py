"""One training run: corpus -> tokenizer -> token memmaps -> model -> metrics, checkpoints and a summary.

    python -m experiments.train model=small model/pos=rope train.tokens=1000000    # one run
    python -m experiments.train -m experiment=pos_encodings                         # a sweep
    torchrun --nproc_per_node 2 -m experiments.train ...                            # DDP
    from experiments.run.train import train; summary = train(cfg)                       # tests, notebooks

`train(cfg)` validates the whole config first (experiments.config.check: one ConfigError before any data is
read), then trains for `train.flops` FLOPs, else `train.tokens` tokens, else `train.steps` steps, and leaves in its run dir `config.yaml`
(resolved, with the real model shape and vocab_size), `metrics.jsonl`, `summary.json` and `checkpoints/last.pt`
(the layout belongs to experiments/rundir/layout.py). This module is the Hydra app (train, main, cli); the steps
of a run are the methods of `TrainingRun` (experiments/run/loop.py: open the run dir, load data, build the model,
restore a checkpoint, start tracking, loop), what differs between tasks is experiments/run/tasks.py, and what a
sweep job leaves when it never reaches its loop is experiments/sweep/records.py.

What happens to a run, and what summary.json then says:
* a dir that already holds a run is refused (ConfigError naming `train.resume=true` and `train.overwrite=true`)
  before any data is read; `train.overwrite=true` removes exactly the files a run writes, nothing else; a dir
  another live process trains in is refused too, resume or not (experiments/rundir/lock.py: one writer per dir);
* a NaN/inf loss or grad norm: `diverged`; train() returns normally, so the other jobs of a sweep go on;
* Ctrl-C / SIGTERM: the step in progress finishes, a checkpoint is saved, `interrupted`, RunInterrupted is raised
  (the CLI prints one line with the resume command and exits 130); `train.resume=true` then finishes the run
  exactly as if it had never stopped (bit-exact on the CPU); in a sweep (any launcher) the request holds for the
  whole sweep: later jobs record `interrupted` without starting, and `train.resume=true` on the same multirun
  resumes it (experiments/run/interrupt.py, experiments/sweep/callbacks.py);
* an exception or a config error, during setup or in the loop: `failed` with the reason in `error` (a failed
  resume leaves the earlier run's files untouched); a damaged checkpoint is one ConfigError naming the file;
* SIGKILL: summary.json keeps `running`; `train.resume=true` continues from the last atomic checkpoint;
* SIGUSR2 in a job of hydra/launcher=slurm (time limit near, preemption): checkpoint, `requeued`, the job requeues
  itself and resumes (experiments/sweep/requeue.py).
Under torchrun each rank samples its own windows (seeded per rank), the
logged loss is the mean over ranks, and only rank 0 evaluates, logs and checkpoints.
Not handled: gradient accumulation across DDP ranks with uneven batches, FSDP, evaluation on all ranks.
"""

from __future__ import annotations

import logging
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from experiments.config import resolvers  # noqa: F401  (registers ${archlab_dirname:...})
from experiments.config.check import validate
from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError
from experiments.config.precheck import precheck_or_exit
from experiments.run import distributed
from experiments.run.interrupt import EXIT_CODE, RunInterrupted, hold_sweep, sweep_stopped
from experiments.run.keep_dirs import kept_unless_started
from experiments.run.loop import TrainingRun
from experiments.rundir.layout import RunDir
from experiments.rundir.lock import RunDirLock
from experiments.sweep.callbacks import stopped_at_once
from experiments.sweep.job import is_multirun, parallel_jobs, resolve_run_dir, sweep_dir
from experiments.sweep.records import record_config_error, record_not_started
from experiments.sweep.resume import resume_command

log = logging.getLogger(__name__)


def train(cfg: DictConfig | dict) -> dict[str, Any]:
    """Train one model as configured; returns the summary dict (also written to <run dir>/summary.json).

    Raises ConfigError (before any data is read) for a config that cannot run, RunInterrupted after a
    Ctrl-C / SIGTERM (checkpoint saved, summary `interrupted`), and any other exception as it came (summary
    `failed` with the reason). See the module docstring for what is written where.
    """
    info = distributed.env_info()
    try:
        rc = validate(cfg)
    except ConfigError as e:
        if info.is_main:
            record_config_error(cfg, e)
        raise
    sweep = sweep_dir()
    if sweep is not None:  # a sweep job: keep the sweep's stop handlers between jobs too (interrupt.hold_sweep)
        hold_sweep(sweep)
        if why := sweep_stopped(sweep):
            raise RunInterrupted(f"not started: the sweep was stopped by {why}", record_not_started(cfg, why),
                                 started=False)
    device = distributed.pick_device(rc.train.device, info, parallel=parallel_jobs() > 1)
    distributed.setup(info, device)
    threads_before = torch.get_num_threads()  # train.num_threads is per run, not for the rest of the process
    try:
        run = TrainingRun(rc, info, device)
        with RunDirLock(run.run_dir) if info.is_main else nullcontext():  # one writer per run dir (rundir/lock.py)
            return run.run()
    finally:
        torch.set_num_threads(threads_before)
        distributed.teardown()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    """CLI entry: train(cfg). Every outcome but success is one line on stderr:

    * a ConfigError: `config error: ...`, exit 2 (in a sweep the job's summary says `failed` and the others go on);
    * Ctrl-C / SIGTERM: `interrupted at step N; ... resume with: <command>`, exit 130; in a sweep the job returns,
      the later jobs record themselves `interrupted` without starting, and the sweep's callback prints the
      command that resumes them all and exits 130 (experiments.sweep.callbacks.SweepStop);
    * any other exception: a single run keeps its traceback (a bug should show where); in a sweep it is logged,
      the job's summary.json says `failed` with the reason, and the sweep goes on (the sweep callback then
      exits 1). Re-raised, Hydra's sweeper would stop at it after the batch, skipping the report.

    Returns the final val loss (for Hydra sweepers that optimise it)."""
    try:
        summary = train(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr, flush=True)
        if is_multirun():
            return None
        sys.exit(2)
    except KeyboardInterrupt as e:
        run_dir = Path((getattr(e, "summary", None) or {}).get("run_dir") or resolve_run_dir(cfg))
        how = str(e) if isinstance(e, RunInterrupted) else "interrupted"
        if is_multirun():  # the other jobs record themselves; the sweep's last line says how to resume them all
            started = not isinstance(e, RunInterrupted) or e.started
            status = (getattr(e, "summary", None) or {}).get("status") or "interrupted"
            print(f"{how}; {run_dir}: summary.json says {status}" if started else f"{run_dir}: {how}",
                  file=sys.stderr, flush=True)
            return None
        status = (RunDir(run_dir).read_summary() or {}).get("status")  # a resume stopped in setup keeps its own
        said = f"summary.json says {status}" if status else "no summary.json"
        print(f"{how}; {run_dir}: {said}; resume with: {resume_command(run_dir)}", file=sys.stderr, flush=True)
        sys.exit(EXIT_CODE)
    except Exception:
        if not is_multirun():
            raise
        log.exception("run failed; the sweep goes on")
        return None
    return summary.get("final_val_loss")


def cli() -> None:
    """`python -m experiments.train ...`: the argument checks Hydra cannot do (one line each), then main(); a single
    run that ends before writing its own files leaves its dirs as they were (experiments/run/keep_dirs.py)."""
    precheck_or_exit(sys.argv[1:])
    with kept_unless_started():
        try:
            main()
        except KeyboardInterrupt:  # a sweep's launcher got a second Ctrl-C / SIGTERM: its jobs were stopped at once
            stopped_at_once()


if __name__ == "__main__":
    cli()
