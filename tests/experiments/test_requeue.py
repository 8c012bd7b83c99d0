"""The job side of SLURM requeue without a scheduler: which SIGUSR2 is a timeout (submitit's rule), when a job may
be requeued again, what SIGUSR2 does to a StopRequest (run/interrupt.py), and what the launcher records for a job
the scheduler ended (sweep/records.record_unfinished). The same paths under a real scheduler: test_slurm.py."""

from __future__ import annotations

import json
import os
import signal

import pytest

from experiments.run import interrupt
from experiments.run.interrupt import REQUEUE_NAME, REQUEUE_SIGNAL, StopRequest
from experiments.rundir.layout import RunDir, RunStatus, RunSummary
from experiments.sweep import job, requeue
from experiments.sweep.job import num_threads
from experiments.sweep.records import record_unfinished

pytestmark = pytest.mark.skipif(REQUEUE_SIGNAL is None, reason="no SIGUSR2 on this platform")


def send(sig: int) -> None:
    os.kill(os.getpid(), sig)
    sum(range(10))  # let the Python-level handler run


@pytest.fixture
def disarmed():
    yield
    requeue._ARMED.clear()
    requeue._DECIDED.clear()
    interrupt.arm_requeue(False)


# submitit's rule, by hand: a 60-minute limit guarantees min(0.8 x 60, 60 - 10) = 48 minutes; a 1-minute one
# guarantees min(0.8, -9) < 0 minutes, so every signal is a timeout.
@pytest.mark.parametrize("limit_min, after_s, timeout", [
    (60, 47 * 60 + 59, False), (60, 48 * 60, True), (240, 191 * 60, False), (240, 230 * 60, True),
    (1, 0, True), (20, 9 * 60 + 59, False), (20, 10 * 60, True)])
def test_a_signal_is_a_timeout_after_the_guaranteed_walltime(limit_min, after_s, timeout):
    armed = requeue.Armed(limit_min, 3, 0, started=1000.0)
    assert requeue.is_timeout(armed, now=1000.0 + after_s) is timeout


def test_preemptions_always_requeue_timeouts_up_to_max_num_timeout(disarmed, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    requeue.arm(60, 1, 0)
    start = requeue.armed().started
    early = requeue.decide(5, now=start + 60)
    assert (early.requeue, early.timed_out) == (True, False) and "preempted" in early.reason
    assert "SLURM job 77 requeued (timeouts 0 of 1)" in early.reason
    assert requeue.pending() == early and early.outcome == (RunStatus.REQUEUED, early.reason)
    requeue.arm(60, 1, 0)  # another instance of the same job, signalled later
    start = requeue.armed().started
    late = requeue.decide(9, now=start + 49 * 60)
    assert (late.requeue, late.timed_out) == (True, True) and "timeouts 1 of 1" in late.reason
    requeue.arm(60, 1, 1)  # the requeued instance carries its one timeout
    start = requeue.armed().started
    assert requeue.decide(3, now=start + 10).requeue  # a preemption still requeues
    requeue.arm(60, 1, 1)
    start = requeue.armed().started
    last = requeue.decide(4, now=start + 49 * 60)
    assert not last.requeue and "timeout 2 of max_num_timeout=1, not requeued" in last.reason
    assert requeue.pending() is None and last.outcome == (RunStatus.INTERRUPTED, last.reason)


@pytest.mark.parametrize("first_s, later_s", [(47 * 60 + 59, 48 * 60 + 1), (48 * 60, 10)])
def test_the_members_of_a_pack_read_one_decision(disarmed, monkeypatch, first_s, later_s):
    """A packed job's members each ask decide() after their checkpoint; the first answer holds for the job, even when
    the clock crosses the guaranteed walltime between members (else one member would read `requeued` and the next
    `interrupted` in one job), and each member's reason names its own step."""
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    requeue.arm(60, 0, 0)
    start = requeue.armed().started
    first = requeue.decide(20, now=start + first_s)
    later = requeue.decide(21, now=start + later_s)
    assert requeue.is_timeout(requeue.armed(), start + first_s) != requeue.is_timeout(requeue.armed(), start + later_s)
    assert (later.requeue, later.timed_out) == (first.requeue, first.timed_out)
    assert "at step 20 " in first.reason and "at step 21 " in later.reason


def test_without_the_launcher_sigusr2_is_not_a_requeue(disarmed):
    d = requeue.decide(12)
    assert not d.requeue and d.reason.startswith("SIGUSR2 at step 12")


def test_with_resume_replaces_any_resume_override():
    assert requeue.with_resume(["seed=1", "train.resume=false"]) == ["seed=1", "train.resume=true"]
    assert requeue.with_resume(["seed=1"]) == ["seed=1", "train.resume=true"]


def test_armed_sigusr2_is_a_soft_requeue_request(disarmed):
    interrupt.arm_requeue(True)
    with StopRequest() as stop:
        send(REQUEUE_SIGNAL)
        send(REQUEUE_SIGNAL)  # again: never the "second signal" that stops at once
        assert stop.requested == REQUEUE_NAME and stop.requeue
        send(signal.SIGTERM)  # scancel as well: a plain stop, not a requeue
        assert stop.requested == "SIGTERM" and not stop.requeue


def test_unarmed_sigusr2_keeps_the_process_handler(disarmed):
    seen = []
    previous = signal.signal(REQUEUE_SIGNAL, lambda s, f: seen.append(s))
    try:
        with StopRequest() as stop:
            send(REQUEUE_SIGNAL)
            assert stop.requested is None and seen == [REQUEUE_SIGNAL]
    finally:
        signal.signal(REQUEUE_SIGNAL, previous)


@pytest.mark.parametrize("status", [RunStatus.RUNNING, RunStatus.REQUEUED])
def test_record_unfinished_ends_a_run_the_scheduler_ended(tmp_path, status):
    RunDir(tmp_path).write_summary(RunSummary(status, run_name="seed=1", seed=1, steps=40, tokens=5120))
    record_unfinished(tmp_path, RunStatus.INTERRUPTED, "SLURM job 3_1 ended CANCELLED without a result")
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "interrupted" and on_disk["error"].startswith("SLURM job 3_1 ended CANCELLED")
    assert (on_disk["run_name"], on_disk["seed"], on_disk["steps"], on_disk["tokens"]) == ("seed=1", 1, 40, 5120)


def test_record_unfinished_keeps_a_runs_own_end(tmp_path):
    RunDir(tmp_path).write_summary(RunSummary(RunStatus.FAILED, error="RuntimeError: boom", run_name="a"))
    before = (tmp_path / "summary.json").read_bytes()
    record_unfinished(tmp_path, RunStatus.INTERRUPTED, "SLURM job 3_1 ended FAILED without a result")
    assert (tmp_path / "summary.json").read_bytes() == before


def test_record_unfinished_gives_a_job_that_never_made_its_dir_one(tmp_path):
    run_dir = tmp_path / "2_seed=2"
    record_unfinished(run_dir, RunStatus.INTERRUPTED, "SLURM job 3_2 ended NODE_FAIL without a result")
    on_disk = json.loads((run_dir / "summary.json").read_text())
    assert on_disk["status"] == "interrupted" and "NODE_FAIL" in on_disk["error"] and on_disk["run_name"] == "2_seed=2"


def test_a_slurm_job_uses_the_cpus_it_asked_for(monkeypatch):
    """Without CPU binding (task/none) torch would take every core of the node in each job; SLURM_CPUS_PER_TASK
    (hydra.launcher.cpus_per_task) sets the job's threads unless train.num_threads does."""
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(job, "busy_cpus", lambda cpus=None: 0)  # an idle machine (test_num_threads: a busy one)
    assert num_threads(None, 1) is None
    monkeypatch.setattr(job, "busy_cpus", lambda cpus=None: 1)  # SLURM's count wins over the load
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "3")
    assert num_threads(None, 1) == 3 and num_threads(5, 1) == 5
