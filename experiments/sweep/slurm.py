"""The submitting side of hydra/launcher=slurm: submit a batch of jobs as one SLURM array, wait for them, record how
the ones that died ended, and what Ctrl-C on the submitting command means. The job side (requeue on SLURM's warning
signal) is experiments/sweep/requeue.py; the Hydra plugin that ties both to submitit is
hydra_plugins/archlab_slurm_launcher.

    params = array_tasks(overrides, idx0, packs, state)  each array task's call arguments (packs: one task a pack)
    jobs = submit_array(executor, fn, params, before)   one sbatch for the batch; refused: one line, exit 1
    returns = SweepJobs(jobs, overrides, run_dirs, sweep).wait()   one JobReturn per job, in order; never raises
                                                                   for a failed job
    SweepJobs(jobs, overrides, run_dirs, sweep, members=packs)     a packed sweep: SLURM job k ran the sweep jobs
                                                                   packs[k] together (one JobReturn each)

sbatch refusing the array (a partition, account or QOS the cluster does not have, resources no node has, no
controller to talk to): nothing was submitted (one sbatch call per array: never half of one), so the sweep dir is
put back as it was before (sweep_snapshot, experiments/rundir/snapshot.py: no multirun.yaml of a sweep that never
ran, no job pickles, no run dir) and the command ends with one line, sbatch's own words in it, and exit 1:
    [archlab] sbatch refused the job array (2 job(s)), nothing was submitted and multirun/x is as it was before
    this command: sbatch:
    invalid partition specified: nosuch; Batch job submission failed: Invalid partition name specified

How a job's end is known: its result file (submitit writes it when the job's function returns, which it does for
every run that completes, diverges, fails or is stopped by SIGTERM), or, for a job that died without one, the
scheduler's state from `squeue` (CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, ..., or no longer listed) seen on two
polls in a row. A job whose summary.json then still says `running` or `requeued` (or has none) is recorded
`interrupted` with the SLURM state as its reason (records.record_unfinished), never left `running`. PENDING,
RUNNING, REQUEUED, ...: still waiting. `sacct` is not needed (clusters without accounting, as the local test
cluster, have none).

Ctrl-C / SIGTERM on the submitting command (held by SweepStop: run/interrupt.py): the jobs keep running on the
cluster, which is what a cluster is for. The command stops waiting, prints the ids of the jobs still queued or
running, the `scancel` line that cancels them, and `python -m experiments.compare <sweep>` to build the report once
they end, and exits 130. Resume the sweep (train.resume=true) only after they ended or were cancelled.

Not handled: jobs submitted by an earlier command (re-attach by waiting with `squeue`, then `compare`), heterogeneous
jobs, and `sacct`-only states (a job purged from squeue before its end was seen reads "no longer listed").
"""

from __future__ import annotations

import contextlib
import getpass
import io
import pickle
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus

from experiments.run.interrupt import EXIT_CODE, release_sweep, sweep_stopped
from experiments.rundir.layout import RunStatus
from experiments.rundir.snapshot import DirSnapshot
from experiments.sweep.records import record_unfinished
from experiments.sweep.resume import sweep_resume_command

WAITING = {"PENDING", "RUNNING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "COMPLETING", "RESIZING",
           "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
GONE = "no longer listed by squeue"


def squeue_states(job_ids: Sequence[str]) -> dict[str, str] | None:
    """{job id: SLURM state} of this user's jobs among `job_ids` (array tasks one per line, `12_3`); None when
    squeue cannot be asked (a passing error of the controller: the caller asks again at its next poll)."""
    try:
        proc = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-u", getpass.getuser(), "-o", "%i|%T"],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    wanted, states = set(job_ids), {}
    for line in proc.stdout.splitlines():
        job, _, state = line.strip().partition("|")
        if job in wanted:
            states[job] = state.split()[0] if state else "UNKNOWN"
    return states


def read_result(path: Path) -> tuple[str, Any] | None:
    """submitit's result file: ("success", [one result per task]) or ("error", traceback text); None if absent."""
    try:
        with path.open("rb") as f:
            return pickle.load(f)
    except (FileNotFoundError, EOFError):
        return None


def sbatch_message(text: str) -> str:
    """sbatch's error output as one line: `sbatch: <line>; <line>` (its `sbatch: error: ` prefixes dropped)."""
    lines = [re.sub(r"^sbatch: (error|fatal): ", "", line.strip()) for line in text.splitlines() if line.strip()]
    return "sbatch: " + "; ".join(lines) if lines else "sbatch failed without a message"


def sweep_snapshot(sweep: Path) -> DirSnapshot:
    """The sweep dir now, to put back if sbatch refuses: the bytes of its own files (multirun.yaml, tuning.json);
    the files in its dirs (runs, .submitit, report: nothing rewrites them before a job starts) only by their stat."""
    dirs = [p.name for p in sweep.iterdir() if p.is_dir()] if sweep.is_dir() else []
    return DirSnapshot.take(sweep, stat_only=dirs)


def submit_array(executor: Any, fn: Any, params: Sequence[tuple], before: DirSnapshot,
                 since: str = "this command") -> list[Any]:
    """executor.map_array(fn, *params): the jobs, or, when sbatch refuses, `before` (the sweep dir before `since`)
    restored, one line, exit 1."""
    from submitit.core.utils import FailedJobError  # lazy: only a SLURM sweep's submitter needs it

    said = io.StringIO()  # submitit prints sbatch's stderr before raising it: the one line below says it
    try:
        with contextlib.redirect_stderr(said):
            return executor.map_array(fn, *zip(*params))
    except FailedJobError as e:
        before.restore()
        release_sweep(str(before.root))
        state = f"is as it was before {since}" if before.existed else "was not created"
        later = "" if since == "this command" else f"; once fixed, resume with: {sweep_resume_command(before.root)}"
        print(f"[archlab] sbatch refused the job array ({len(params)} job(s)), nothing was submitted and "
              f"{before.root} {state}: {sbatch_message(str(e) or said.getvalue())}{later}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def array_tasks(job_overrides: Sequence[Sequence[str]], initial_job_idx: int, packs: Sequence[Sequence[int]] | None,
                state: Any) -> list[tuple]:
    """The launcher's call arguments for each array task, (overrides, "hydra.sweep.dir", job num, job id, Singleton
    state): one task per job, or with `packs` (job indices, experiments.sweep.packed_launch.plan_packs) one per pack,
    a pack of several carrying the list of its members' overrides and the list of their job nums."""
    packs = packs if packs is not None else [[i] for i in range(len(job_overrides))]
    tasks = []
    for pack in packs:
        nums = [initial_job_idx + i for i in pack]
        if len(pack) == 1:
            tasks.append((list(job_overrides[pack[0]]), "hydra.sweep.dir", nums[0], f"job_id_for_{nums[0]}", state))
        else:
            tasks.append(([list(job_overrides[i]) for i in pack], "hydra.sweep.dir", nums, f"job_id_for_{nums[0]}",
                          state))
    return tasks


def is_pack(sweep_overrides: Sequence[Any]) -> bool:
    """Whether an array task's overrides are a pack's (a list of its members' override lists)."""
    return bool(sweep_overrides) and isinstance(sweep_overrides[0], (list, tuple))


class SweepJobs:
    """The jobs of one launch() and the run dirs they write into, waited on together. SLURM job k carries the sweep
    jobs `members[k]` (indices into overrides / run_dirs): one each by default, several for a packed array task
    (hydra.launcher.pack=true), whose result is then a list of JobReturns, one per member, in its order."""

    def __init__(self, jobs: Sequence[Any], overrides: Sequence[Sequence[str]], run_dirs: Sequence[Path],
                 sweep: str, members: Sequence[Sequence[int]] | None = None) -> None:
        self.jobs, self.overrides, self.run_dirs, self.sweep = list(jobs), list(overrides), list(run_dirs), sweep
        self.members = [list(m) for m in members] if members is not None else [[k] for k in range(len(self.jobs))]
        assert len(self.members) == len(self.jobs) and sorted(sum(self.members, [])) == list(range(len(run_dirs)))
        self.ended: dict[int, list[JobReturn]] = {}  # SLURM job index -> its members' returns
        self._seen_end: dict[int, str] = {}  # job index -> the end state seen at the last poll, without a result

    def wait(self, poll_s: float = 1.0, max_poll_s: float = 10.0) -> list[JobReturn]:
        """Until every job ended (or the user stopped the command: exit 130 with what to do, module docstring).
        One JobReturn per sweep job (per member of a pack), in the order of `overrides`. The result files (a stat
        each) are looked at every poll_s, so a job that returned is seen within poll_s; `squeue`, a request to the
        controller, backs off from poll_s to max_poll_s (x1.25 a time), as it only finds the jobs that died."""
        delay, ask_at = poll_s, 0.0
        while True:
            ask = time.monotonic() >= ask_at
            self.poll(ask_slurm=ask)
            if len(self.ended) == len(self.jobs):
                break
            if ask:
                ask_at, delay = time.monotonic() + delay, min(max_poll_s, delay * 1.25)
            self._sleep(poll_s)
        returns: dict[int, JobReturn] = {}
        for k, members in enumerate(self.members):
            returns.update(zip(members, self.ended[k]))
        return [returns[i] for i in range(len(self.run_dirs))]

    def poll(self, ask_slurm: bool = True) -> None:
        """Record the jobs that ended: by their result files, and (ask_slurm) by SLURM's state of the rest."""
        todo = [k for k in range(len(self.jobs)) if k not in self.ended]
        states = squeue_states([self.jobs[k].job_id for k in todo]) if ask_slurm else None
        for k in todo:
            result = read_result(self.jobs[k].paths.result_pickle)
            if result is not None:
                self.ended[k] = self._from_result(k, result)
            elif states is not None:
                state = states.get(self.jobs[k].job_id, GONE)
                if state in WAITING:
                    self._seen_end.pop(k, None)
                elif self._seen_end.get(k) == state:  # the same end twice: no result file is coming
                    self.ended[k] = self._died(k, f"SLURM job {self.jobs[k].job_id} ended {state} without a result")
                else:
                    self._seen_end[k] = state

    def _from_result(self, k: int, result: tuple[str, Any]) -> list[JobReturn]:
        outcome, value = result
        if outcome == "success":
            ret = value[0] if isinstance(value, list) and value else value
            rets = ret if isinstance(ret, list) else [ret]
            if len(rets) == len(self.members[k]) and all(isinstance(r, JobReturn) for r in rets):
                return rets
        last = str(value).strip().splitlines()[-1] if str(value).strip() else outcome
        return self._died(k, f"SLURM job {self.jobs[k].job_id}: {last}", status=RunStatus.FAILED)

    def _died(self, k: int, why: str, status: RunStatus = RunStatus.INTERRUPTED) -> list[JobReturn]:
        """Every run of SLURM job k that did not end is recorded with `why` (records.record_unfinished)."""
        rets = []
        for i in self.members[k]:
            record_unfinished(self.run_dirs[i], status, f"{why}; resume the sweep with train.resume=true")
            ret = JobReturn(overrides=list(self.overrides[i]), working_dir=str(self.run_dirs[i]))
            ret.status, ret.return_value = JobStatus.COMPLETED, None  # the run dir's summary says what happened
            rets.append(ret)
        return rets

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if sweep_stopped(self.sweep):
                self.leave_running()
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))

    def leave_running(self) -> None:
        """Ctrl-C / SIGTERM on the submitter: say what keeps running and how to cancel or collect it; exit 130."""
        left = [self.jobs[k].job_id for k in range(len(self.jobs)) if k not in self.ended]
        why = sweep_stopped(self.sweep)
        lines = [f"[archlab] stopped waiting ({why}): {len(left)} SLURM job(s) of {self.sweep} keep running on the "
                 f"cluster: {' '.join(left)}"]
        if left:
            lines += [f"[archlab] cancel them: {shlex.join(['scancel', *left])}",
                      f"[archlab] when they end, build the report: python -m experiments.compare {self.sweep}"]
        print("\n".join(lines), file=sys.stderr, flush=True)
        raise SystemExit(EXIT_CODE)
