"""The tokenizer's worker pool always stops, and its stop never waits on something that cannot happen
(tokenizer/workers.py): no window after the fork in which a worker keeps its caller's SIGTERM handler (issue 16), no
unbounded wait for a worker that does not die, and no wait on a pipe that nobody reads any more (issue 31: a task
larger than the pipe buffer being written when the workers were stopped hung multiprocessing.Pool.terminate).

Each scenario runs in a fresh interpreter under a timeout, so that a regression fails the test instead of hanging
the suite; each prints what it measured and the test checks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not hasattr(signal, "pthread_sigmask") or not hasattr(signal, "SIGUSR1"),
                                reason="POSIX signals")

# Helpers every scenario shares: the children of this process, and a Ctrl-C's stop timed from the signal.
PRELUDE = """
import json, os, signal, sys, threading, time
from tokenizer import workers
from tokenizer.workers import WorkerPool, WorkerDied

def children():
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            if int(s[s.rindex(")") + 2:].split()[1]) == os.getpid():
                out.append(int(d))
    return out

def stop_time(pool, fn, tasks, interrupt_after):
    # seconds from a Ctrl-C sent `interrupt_after` s into running `tasks` on `pool` to the pool being stopped
    sent = []
    threading.Timer(interrupt_after, lambda: (sent.append(time.monotonic()), os.kill(os.getpid(), signal.SIGINT))).start()
    try:
        with pool:
            for _ in pool.imap_unordered(fn, tasks):
                pass
    except KeyboardInterrupt:
        return time.monotonic() - sent[0]
    raise AssertionError("the tasks ended before the Ctrl-C")
"""


def _run(script: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(script)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def _last_json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_pool_stopped_right_after_it_starts_stops():
    """The caller handles the stop signals itself (as a training run's "stop after this step" does) and each worker
    is slow to start (as under load): stopped at once, every worker is still between its fork and its start-up.
    With the caller's handlers inherited, the SIGTERM would be swallowed and the stop would wait for ever."""
    script = """
    def slow_start():
        time.sleep(0.3)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *a: None)
    took = []
    for _ in range(5):
        pool = WorkerPool(2, initializer=slow_start)
        start = time.monotonic()
        pool.close(kill=True)
        took.append(time.monotonic() - start)
    print(json.dumps({"took": max(took), "left": children()}))
    """
    got = _last_json(_run(script, timeout=60))
    assert got["left"] == []
    assert got["took"] < 1.5  # SIGTERM acted: not by way of the SIGKILL escalation (KILL_AFTER_S = 2 s)


def test_a_worker_that_ignores_sigterm_is_killed():
    """The stop is bounded: a worker that survives SIGTERM is killed KILL_AFTER_S later."""
    script = """
    def deaf():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    workers.KILL_AFTER_S = 0.5
    took = stop_time(WorkerPool(2, initializer=deaf), time.sleep, [(30,), (30,)], 0.5)
    print(json.dumps({"took": took, "left": children()}))
    """
    got = _last_json(_run(script, timeout=60))
    assert got["left"] == []
    assert got["took"] < 10  # 30 s without the escalation


def test_workers_start_with_the_stop_signals_unblocked():
    """Blocking is only for the fork window: a worker must not keep SIGTERM blocked (then the stop could not end it),
    and it ignores SIGINT/SIGUSR1 and takes SIGTERM's default action whatever its caller installed."""
    script = """
    def state(_):
        name = {signal.SIG_DFL: "default", signal.SIG_IGN: "ignore"}
        return (sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
                [name.get(signal.getsignal(s), "python") for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)])

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda *a: None)
    with WorkerPool(2) as pool:
        print(json.dumps([r for _, r in pool.imap_unordered(state, [(i,) for i in range(6)])]))
    """
    got = _last_json(_run(script, timeout=60))
    assert len(got) == 6
    for blocked, dispositions in got:
        assert not set(blocked) & {int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGUSR1)}
        assert dispositions == ["default", "ignore", "ignore"]


# The hang of issue 31, forced: the parent is in the middle of writing a task far larger than any pipe buffer to
# a worker that is not reading (its start-up takes 30 s), and Ctrl-C arrives. multiprocessing.Pool's equivalent
# (its task thread writing, terminate joining that thread after killing the readers) waited for ever.
def test_a_stop_while_a_large_task_is_being_written_returns():
    script = """
    def stuck():
        time.sleep(30)

    big = "x" * (16 << 20)
    took = stop_time(WorkerPool(2, initializer=stuck), len, [(big,)] * 4, 0.5)
    print(json.dumps({"took": took, "left": children()}))
    """
    got = _last_json(_run(script, timeout=60))
    assert got["left"] == []
    assert got["took"] < 5


def test_a_worker_killed_while_its_task_is_being_written_is_an_error_not_a_wait():
    """A worker that dies while the parent writes its task (EPIPE), or while it holds a task, ends the pool with
    WorkerDied naming it, at once."""
    script = """
    def stuck():
        time.sleep(30)

    big = "x" * (16 << 20)
    with WorkerPool(1, initializer=stuck) as probe:
        pid = probe._workers[0].process.pid
        threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
        start = time.monotonic()
        try:
            for _ in probe.imap_unordered(len, [(big,)]):
                pass
            error = None
        except WorkerDied as e:
            error = str(e)
    took = time.monotonic() - start

    def die(code):
        os._exit(code)

    try:
        with WorkerPool(2) as pool:
            for _ in pool.imap_unordered(die, [(3,)]):
                pass
        busy_error = None
    except WorkerDied as e:
        busy_error = str(e)
    print(json.dumps({"error": error, "took": took, "busy_error": busy_error, "left": children()}))
    """
    got = _last_json(_run(script, timeout=60))
    assert got["left"] == []
    assert got["took"] < 5
    assert got["error"] is not None and "killed by signal 9" in got["error"]
    assert got["busy_error"] is not None and "exited with 3" in got["busy_error"]


def test_results_errors_and_order_are_the_callers():
    """Every task's result comes back once, under its index (against the plain map); an exception raised by the
    task is raised in the caller, and its workers are reaped; the pool leaves no pipe ends open."""
    script = """
    def fd_count():
        return len(os.listdir("/proc/self/fd"))

    def square_or_fail(x):
        if x == 13:
            raise ValueError("thirteen")
        return x * x

    before = fd_count()
    with WorkerPool(3) as pool:
        got = dict(pool.imap_unordered(square_or_fail, [(x,) for x in range(12)]))
    try:
        with WorkerPool(3) as pool:
            list(pool.imap_unordered(square_or_fail, [(x,) for x in range(20)]))
        error = None
    except ValueError as e:
        error = str(e)
    print(json.dumps({"got": sorted(got.items()), "error": error, "left": children(), "fds": fd_count() - before}))
    """
    got = _last_json(_run(script, timeout=60))
    assert got["got"] == [[i, i * i] for i in range(12)]
    assert got["error"] == "thirteen"
    assert got["left"] == []
    assert got["fds"] == 0


def test_workers_of_a_killed_parent_exit_on_their_own():
    """SIGKILL of the parent (nothing of it runs any more): an idle worker reads EOF, a busy one gets EPIPE for
    its result; either way no worker is left behind. This holds only if no worker holds a sibling's pipe ends."""
    script = """
    pool = WorkerPool(3)
    print(json.dumps([w.process.pid for w in pool._workers]), flush=True)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
    for _ in pool.imap_unordered(time.sleep, [(0.01,), (0.01,), (0.01,), (1.0,)]):
        pass
    """
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(script)], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL, out.stderr
    pids = json.loads(out.stdout.splitlines()[0])
    assert len(pids) == 3
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone: its parent, here init, reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
