"""train.num_threads=null (experiments.sweep.job.num_threads): the rule bench/bench_threads.py chose, with the CPU
count, the affinity, the sweep's parallel jobs and the load faked, so nothing here depends on the machine.

The rule, in order: an explicit train.num_threads; SLURM_CPUS_PER_TASK; the CPUs divided among parallel sweep jobs x
local DDP ranks; for a single job, the CPUs no other process keeps busy (torch's default when none is busy).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.sweep import job


def stat(*cpu_busy_idle: tuple[int, int]) -> str:
    """A /proc/stat text whose cpuN line has `busy` user ticks and `idle` idle ticks (plus an aggregate line)."""
    lines = [f"cpu  {sum(b for b, _ in cpu_busy_idle)} 0 0 {sum(i for _, i in cpu_busy_idle)} 0 0 0 0 0 0"]
    lines += [f"cpu{n} {b} 0 0 {i} 0 0 0 0 0 0" for n, (b, i) in enumerate(cpu_busy_idle)]
    return "\n".join([*lines, "intr 12345 0 0", "ctxt 999", "procs_running 3"]) + "\n"


@pytest.fixture
def machine(monkeypatch):
    """A fake machine: set .cpus (the affinity), .busy (what busy_cpus measures), .jobs (parallel sweep jobs)."""

    class Machine:
        cpus, busy, jobs, probes = {0, 1}, 0, 1, 0

    m = Machine()

    def busy_cpus(cpus=None, probe_s=job.PROBE_S):
        m.probes += 1
        assert cpus == m.cpus  # the probe looks at this process's CPUs only
        return m.busy

    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # tests/conftest.py sets it for the suite
    monkeypatch.setattr(job.os, "sched_getaffinity", lambda pid: set(m.cpus))
    monkeypatch.setattr(job, "busy_cpus", busy_cpus)
    monkeypatch.setattr(job, "parallel_jobs", lambda: m.jobs)
    return m


def test_a_single_job_on_an_idle_machine_keeps_torchs_default(machine):
    machine.busy = 0
    assert job.num_threads(None, 1) is None and machine.probes == 1


@pytest.mark.parametrize("cpus, busy, threads", [(2, 1, 1), (2, 2, 1), (2, 5, 1), (8, 1, 7), (8, 3, 5), (8, 8, 1)])
def test_a_single_job_on_a_busy_machine_takes_the_cpus_left_free(machine, cpus, busy, threads):
    """bench_threads.py: on 2 cores with one or two other busy processes, 2 threads trained several times slower
    than 1 (each operator waits for the thread that shares its core); 1 thread was the best there."""
    machine.cpus, machine.busy = set(range(cpus)), busy
    assert job.num_threads(None, 1) == threads


def test_unknown_load_or_one_cpu_keeps_torchs_default(machine):
    machine.busy = None  # no /proc/stat (macOS, Windows)
    assert job.num_threads(None, 1) is None
    machine.cpus, machine.busy, machine.probes = {3}, 1, 0
    assert job.num_threads(None, 1) is None and machine.probes == 0  # one CPU: nothing to choose, no probe


def test_omp_num_threads_in_the_environment_wins_over_the_load(machine, monkeypatch):
    """torch reads OMP_NUM_THREADS itself: a user who set it keeps it (None), and no probe is made."""
    machine.cpus, machine.busy = set(range(8)), 1
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert job.num_threads(None, 1) is None and machine.probes == 0
    assert job.num_threads(4, 1) == 4


def test_an_explicit_count_or_slurms_wins_over_the_load(machine, monkeypatch):
    machine.busy = 2
    assert job.num_threads(3, 1) == 3
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert job.num_threads(None, 1) == 4 and job.num_threads(2, 1) == 2
    assert machine.probes == 0


@pytest.mark.parametrize("cpus, jobs, ranks, threads", [(2, 2, 1, 1), (8, 2, 1, 4), (8, 1, 2, 4), (8, 2, 2, 2),
                                                         (2, 4, 1, 1)])
def test_parallel_jobs_and_ranks_divide_the_cpus_without_a_probe(machine, cpus, jobs, ranks, threads):
    """The sweep's own jobs are the load: they split the CPUs, whatever else runs (the probe would count them)."""
    machine.cpus, machine.jobs, machine.busy = set(range(cpus)), jobs, 1
    assert job.num_threads(None, ranks) == threads and machine.probes == 0


@pytest.mark.parametrize("busy_ticks, own_s, expected", [
    ((0, 0), 0.0, 0),        # idle
    ((4, 0), 0.0, 0),        # 0.2 CPUs busy over 0.2 s: a daemon, under BUSY_SLACK
    ((6, 0), 0.0, 1),        # 0.3 CPUs: one busy
    ((20, 0), 0.0, 1),       # one core fully busy
    ((20, 6), 0.0, 2),       # 1.3 CPUs: both
    ((20, 20), 0.0, 2),
    ((20, 0), 0.2, 0),       # the busy core was this process itself
    ((20, 20), 0.2, 1),
])
def test_busy_by_others_counts_cpus_from_proc_stat_less_this_process(busy_ticks, own_s, expected):
    before = stat((100, 500), (200, 400))
    after = stat((100 + busy_ticks[0], 520 - busy_ticks[0]), (200 + busy_ticks[1], 420 - busy_ticks[1]))
    assert job.busy_by_others(before, after, own_s, 0.2, hz=100) == expected


def test_busy_by_others_looks_only_at_the_given_cpus():
    before, after = stat((0, 0), (0, 0), (0, 0)), stat((20, 0), (0, 20), (20, 0))
    assert job.busy_by_others(before, after, 0.0, 0.2, cpus={0, 1, 2}) == 2
    assert job.busy_by_others(before, after, 0.0, 0.2, cpus={1}) == 0
    assert job.busy_by_others(before, after, 0.0, 0.2, cpus={2}) == 1


def test_busy_cpus_without_proc_stat_is_unknown(monkeypatch, tmp_path):
    monkeypatch.setattr(job, "PROC_STAT", tmp_path / "missing")
    assert job.busy_cpus(probe_s=0) is None


def test_busy_cpus_reads_proc_stat_around_the_probe(monkeypatch):
    texts = iter([stat((0, 100), (0, 100)), stat((20, 100), (20, 100))])  # 0.2 s later: both CPUs were busy
    clock, cpu = iter([10.0, 10.2]), iter([1.0, 1.1])  # this process used 0.1 s of it
    fake = SimpleNamespace(sleep=lambda s: None, monotonic=lambda: next(clock), process_time=lambda: next(cpu))

    monkeypatch.setattr(job, "PROC_STAT", SimpleNamespace(read_text=lambda: next(texts)))
    monkeypatch.setattr(job, "time", fake)
    monkeypatch.setattr(job.os, "sysconf", lambda name: 100)
    assert job.busy_cpus() == 2  # (0.4 - 0.1) CPU-s / 0.2 s = 1.5 CPUs -> 2


def test_a_resume_keeps_the_thread_count_its_run_started_with(make_cfg, tmp_path, machine):
    """1 and 2 threads round differently (~1e-6 in the loss), so a resumed run with train.num_threads=null takes the
    count its summary.json records, not what the load-aware default would pick now: the resume stays bit-exact."""
    from experiments.run.train import train

    run_dir = tmp_path / "run"
    first = train(make_cfg("train.num_threads=2", "train.steps=2", "train.ckpt_interval=1", run_dir=run_dir))
    assert first["num_threads"] == 2
    machine.cpus, machine.busy = {0, 1}, 1  # now loaded: a fresh run would take 1 thread
    again = train(make_cfg("train.num_threads=null", "train.steps=4", "train.resume=true", run_dir=run_dir))
    assert again["status"] == "completed" and again["num_threads"] == 2
    fresh = train(make_cfg("train.num_threads=null", "train.steps=2", run_dir=tmp_path / "fresh"))
    assert fresh["num_threads"] == 1
