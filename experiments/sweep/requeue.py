"""A SLURM job warned of its time limit or preempted: finish the step, checkpoint, record `requeued`, requeue the
job, and let the requeued job resume exactly where this one stopped. The job side of hydra/launcher=slurm.

    in the job's process (hydra_plugins/archlab_slurm_launcher, around Hydra's run_job):
        arm(timeout_min, max_num_timeout, timeouts)    SIGUSR2 now asks the run to stop (run/interrupt.py)
        ... the run trains; SIGUSR2 arrives; the step finishes; the loop saves a checkpoint and asks
        decide()                                       -> Decision: requeue or not, and the reason for the summary
        ... summary.json says `requeued` (or `interrupted` when the job may not be requeued again)
        requeue_now(delayed)                           write the job's next submission, `scontrol requeue`, exit

Which signal: submitit's sbatch script asks SLURM for `--signal=USR2@<signal_delay_s>` (SIGUSR2 that many seconds
before the time limit); a preemption is the same signal sent by hand or by a site's preemption script
(`scancel --signal=USR2 <job>`). SIGTERM (plain `scancel`, or the time limit itself) is a stop, not a requeue:
`interrupted` (run/interrupt.py).

Timeouts vs preemptions, as submitit counts them (its `max_num_timeout`, whose docs apply): a SIGUSR2 is a timeout
when the job has run at least min(0.8 x limit, limit - 10 min) of its `timeout_min`, else a preemption. A job is
requeued after any preemption and after at most `max_num_timeout` timeouts; the next timeout records `interrupted`
with the reason and the sweep's resume command picks it up.

The requeued job runs the same pickled launcher call with `train.resume=true` added to its overrides, so it restores
the checkpoint (bit for bit on CPU: experiments/rundir/checkpoint.py) and continues the same wandb run (the run id
lives in the run dir). Its summary then reads running, completed, ... like any resumed run.

A packed job (hydra/launcher=slurm hydra.launcher.pack=true: one array task trains several runs as one stacked
model, experiments/run/pack.py) is requeued as one: every member checkpoints and records `requeued` with the same
decision, and the requeued task resumes every member (train.resume=true added to each member's overrides).

Not handled: requeue of a multi-task (DDP) job is decided by global rank 0 alone (as submitit does); a job whose
scontrol requeue fails records `interrupted` with scontrol's message.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from experiments.run.interrupt import arm_requeue
from experiments.rundir.layout import RunStatus
from experiments.sweep.records import record_unfinished

log = logging.getLogger(__name__)

RESUME = "train.resume=true"


@dataclass(frozen=True)
class Armed:
    """What the job knows when it starts: its time limit, how many timeouts it may still be requeued after, and when
    this instance of it started (a requeued job starts its clock again)."""

    timeout_min: float
    max_num_timeout: int
    timeouts: int        # timeouts this job has had so far (carried in its pickled launcher across requeues)
    started: float       # time.time() at the start of this instance


@dataclass(frozen=True)
class Decision:
    requeue: bool
    timed_out: bool
    reason: str          # one line for summary.json's `error`

    @property
    def outcome(self) -> tuple[RunStatus, str]:
        """(status, error) for summary.json: `requeued`, or `interrupted` when the job is not requeued."""
        return (RunStatus.REQUEUED if self.requeue else RunStatus.INTERRUPTED), self.reason


_ARMED: list[Armed] = []
_DECIDED: list[Decision] = []


def arm(timeout_min: float, max_num_timeout: int, timeouts: int) -> None:
    """The launcher, in the job's process, before the run starts: SIGUSR2 becomes a requeue request."""
    _ARMED[:] = [Armed(float(timeout_min), int(max_num_timeout), int(timeouts), time.time())]
    _DECIDED.clear()
    arm_requeue(True)


def armed() -> Armed | None:
    return _ARMED[0] if _ARMED else None


def is_timeout(a: Armed, now: float | None = None) -> bool:
    """submitit's rule: the signal came after the walltime SLURM guaranteed, min(0.8 x limit, limit - 10 min)."""
    limit_s = a.timeout_min * 60
    return (now if now is not None else time.time()) - a.started >= min(0.8 * limit_s, limit_s - 600)


def decide(step: int, now: float | None = None) -> Decision:
    """Called by the loop after the checkpoint at `step` is saved: requeue this job or not, and why. The members of a
    pack (experiments/run/pack.py) each call it; the first call of the job decides whether it timed out, so every
    member of one job reads the same decision (only the step in the reason is its own)."""
    a = armed()
    if a is None:  # SIGUSR2 without the SLURM launcher: not ours to requeue
        d = Decision(False, False, f"SIGUSR2 at step {step}; checkpoint saved, resume with train.resume=true")
    else:
        timed_out = _DECIDED[0].timed_out if _DECIDED else is_timeout(a, now)
        used = a.timeouts + int(timed_out)
        job = os.environ.get("SLURM_JOB_ID", "?")
        what = "time limit near" if timed_out else "preempted"
        if used > a.max_num_timeout:
            d = Decision(False, True, f"SIGUSR2 at step {step} ({what}): timeout {used} of max_num_timeout="
                                      f"{a.max_num_timeout}, not requeued; checkpoint saved, resume with "
                                      f"train.resume=true")
        else:
            d = Decision(True, timed_out, f"SIGUSR2 at step {step} ({what}): checkpoint saved, SLURM job {job} "
                                          f"requeued (timeouts {used} of {a.max_num_timeout}); it resumes by itself")
    _DECIDED[:] = [d]
    return d


def pending() -> Decision | None:
    """The decision of this job's run when it was to be requeued, else None (finished, stopped, or never signalled)."""
    return _DECIDED[0] if _DECIDED and _DECIDED[0].requeue else None


def with_resume(overrides: list[str]) -> list[str]:
    """The job's overrides with train.resume=true (replacing any train.resume=...)."""
    return [*(o for o in overrides if not o.startswith("train.resume=")), RESUME]


def requeue_now(delayed: Any, submitted_pickle: Path, job_id: str, run_dirs: Sequence[Path]) -> None:
    """Write `delayed` (submitit's DelayedSubmission of the next instance) where submitit's job script reads it,
    requeue the job and exit without a result, so the submitter keeps waiting for the requeued instance. When
    `scontrol requeue` fails, the job's runs (one, or every member of a pack) are recorded `interrupted` with
    scontrol's message and this returns (the job then ends with its result, and the sweep's resume command continues
    them)."""
    tmp = submitted_pickle.with_name(submitted_pickle.name + ".requeue")
    delayed.dump(tmp)
    os.replace(tmp, submitted_pickle)
    proc = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True)
    if proc.returncode != 0:
        message = " ".join((proc.stderr or proc.stdout).split()) or f"exit {proc.returncode}"
        for run_dir in run_dirs:
            record_unfinished(run_dir, RunStatus.INTERRUPTED, f"scontrol requeue {job_id} failed: {message}; "
                                                              f"checkpoint saved, resume with train.resume=true")
        return
    log.info("SLURM job %s requeued; exiting this instance", job_id)
    sys.exit(-1)  # as submitit does: no result file, the requeued job writes it
