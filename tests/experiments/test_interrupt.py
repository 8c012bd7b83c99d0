"""experiments/run/interrupt.py: which signal stops a run after its step, which stops it at once, and how a sweep's
stop reaches the jobs that have not started yet. Signals are sent to this process; the handlers run at the next
bytecode, so each `os.kill` is followed by a no-op to let them run."""

from __future__ import annotations

import os
import signal

import pytest

from experiments.run import interrupt
from experiments.run.interrupt import SWEEP_STOP, StopRequest, hold_sweep, release_sweep, sweep_stopped

pytestmark = pytest.mark.skipif(SWEEP_STOP is None, reason="no SIGUSR1 on this platform")


def send(sig: int) -> None:
    os.kill(os.getpid(), sig)
    sum(range(10))  # let the Python-level handler run


def test_the_first_signal_asks_the_second_stops_now():
    with StopRequest() as stop:
        assert stop.requested is None
        send(signal.SIGTERM)
        assert stop.requested == "SIGTERM"
        with pytest.raises(KeyboardInterrupt, match="second SIGINT"):
            send(signal.SIGINT)


def test_the_sweeps_soft_request_never_counts_as_the_second_signal():
    """A terminal Ctrl-C reaches a job directly and, through its launcher, as SWEEP_STOP too, in either order.
    Each is named by what the user did: SWEEP_STOP (SIGUSR1) is only how the launcher passes it on."""
    with StopRequest() as stop:
        send(SWEEP_STOP)
        assert stop.requested == "Ctrl-C or SIGTERM (passed on by the sweep)"
        send(SWEEP_STOP)                    # again: still only a request
        send(signal.SIGINT)                 # the user's own signal names it, and is the first hard one
        assert stop.requested == "Ctrl-C (SIGINT)"
        send(SWEEP_STOP)
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT)


def test_handlers_are_put_back(monkeypatch):
    seen = []
    previous = {sig: signal.signal(sig, lambda s, f: seen.append(s)) for sig in (signal.SIGINT, signal.SIGTERM, SWEEP_STOP)}
    try:
        with StopRequest():
            send(signal.SIGTERM)
        assert seen == []
        for sig in (signal.SIGINT, signal.SIGTERM, SWEEP_STOP):
            send(sig)
        assert seen == [signal.SIGINT, signal.SIGTERM, SWEEP_STOP]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_sweeps_stop_holds_for_its_later_jobs_only(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with StopRequest(a) as first:
        send(signal.SIGINT)
        assert first.requested == "Ctrl-C (SIGINT)"
    with StopRequest(a) as later, StopRequest(b) as other:  # the next job of sweep a starts stopped; b does not
        assert later.requested == "Ctrl-C (SIGINT)" and other.requested is None
    assert sweep_stopped(a) == "Ctrl-C (SIGINT)" and sweep_stopped(b) is None
    with StopRequest(a):
        with pytest.raises(KeyboardInterrupt):  # the sweep already had its first hard signal
            send(signal.SIGTERM)


def test_hold_sweep_records_a_signal_between_jobs_and_forwards_once(tmp_path, monkeypatch):
    sweep = str(tmp_path / "sweep")
    sent = []
    monkeypatch.setattr(interrupt, "forward_stop", lambda: sent.append(1))
    before = signal.getsignal(signal.SIGINT)
    try:
        hold_sweep(sweep, forward=True, fresh=True)
        assert hold_sweep(sweep) is hold_sweep(sweep)  # idempotent
        send(signal.SIGINT)                              # between jobs: recorded, not raised
        send(SWEEP_STOP)
        assert sweep_stopped(sweep) == "Ctrl-C (SIGINT)" and sent == [1]
        hold_sweep(sweep, forward=True, fresh=True)      # a new sweep in the same dir starts clean
        assert sweep_stopped(sweep) is None
    finally:
        release_sweep(sweep)
    assert signal.getsignal(signal.SIGINT) is before


def test_forward_stop_reaches_child_processes():
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_child_waits_for_stop, args=(ready, done))
    child.start()
    try:
        assert ready.wait(60)
        assert child.pid in interrupt.forward_stop()
        assert done.wait(60)
    finally:
        child.join(30)
    assert child.exitcode == 0


def _child_waits_for_stop(ready, done) -> None:
    import time

    with StopRequest() as stop:
        ready.set()
        deadline = time.monotonic() + 50
        while stop.requested is None and time.monotonic() < deadline:
            time.sleep(0.01)
    if stop.requested == "Ctrl-C or SIGTERM (passed on by the sweep)":
        done.set()
