"""Tokenizer worker pools always stop: no window after the fork in which a worker keeps its caller's SIGTERM
handler, and no unbounded wait for a worker that does not die (tokenizer/workers.py).

Each scenario runs in a fresh interpreter under a timeout, so that a regression fails the test instead of hanging
the suite.
"""

from __future__ import annotations

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

# The caller handles the stop signals itself (as a training run's "stop after this step" does), and each worker
# is slow to start (as under load): terminated at once, every worker is still between its fork and its start-up.
RACE = """
import signal, sys, time
from tokenizer.workers import init_worker_signals, worker_context

def slow_start():
    time.sleep(0.3)
    init_worker_signals()

for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
    signal.signal(sig, lambda *a: None)
for _ in range(ROUNDS):
    pool = worker_context().Pool(2, initializer=slow_start)
    pool.terminate()
print("stopped")
"""


def _run(script: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_a_pool_terminated_right_after_it_starts_stops():
    """Before the fix this hung in Pool.terminate -> join on every round (the worker swallowed the SIGTERM with
    the inherited handler, then waited on the task queue forever)."""
    start = time.monotonic()
    out = _run(RACE.replace("ROUNDS", "5"), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "stopped"
    assert time.monotonic() - start < 30  # not by way of the SIGKILL escalation (10 s a worker)


def test_a_worker_that_ignores_sigterm_is_killed():
    """join() after terminate() is bounded: a worker that survives SIGTERM is killed after KILL_AFTER_S."""
    script = """
    import signal, time
    from tokenizer import workers

    def deaf():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    workers.KILL_AFTER_S = 0.5
    pool = workers.worker_context().Pool(2, initializer=deaf)
    pool.apply(time.sleep, (0.1,))  # the workers are up and deaf
    busy = [pool.apply_async(time.sleep, (30,)) for _ in range(2)]  # and busy: no sentinel reaches them
    time.sleep(0.5)
    start = time.monotonic()
    pool.terminate()
    print(round(time.monotonic() - start, 1))
    """
    out = _run(script, timeout=60)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) < 10  # 30 s without the escalation


def test_workers_start_with_the_stop_signals_unblocked():
    """Blocking is only for the window: a worker must not keep SIGTERM blocked (then terminate could not stop it)."""
    script = """
    import signal
    from tokenizer.workers import worker_context

    def mask(_):
        return sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))

    with worker_context().Pool(2) as pool:
        print(pool.map(mask, range(4)))
    """
    out = _run(script, timeout=60)
    assert out.returncode == 0, out.stderr
    blocked = {int(s) for s in out.stdout.strip("[]\n ").replace("[", "").replace("]", "").split(",") if s.strip()}
    assert not blocked & {int(signal.SIGTERM), int(signal.SIGINT), int(signal.SIGUSR1)}
