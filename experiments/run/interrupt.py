"""Ctrl-C and SIGTERM as a request to stop a training run, or a whole sweep, cleanly after the step in progress.

    with StopRequest() as stop:          # installs handlers for SIGINT and SIGTERM, restores the old ones on exit
        while training:
            ...one optimizer step...
            if stop.requested:           # "Ctrl-C (SIGINT)" / "SIGTERM": what the user did (signal_name)
                save a checkpoint, mark summary.json `interrupted`, raise RunInterrupted(...)

The first signal only sets `stop.requested` (the step, an eval or a checkpoint write in progress finishes, so
nothing is left half-written); a second one raises KeyboardInterrupt at once, for a user who does not want to wait.
The CLI prints one line and exits 130 (128 + SIGINT, the shell's convention for Ctrl-C) for either signal.

Sweeps (`StopRequest(sweep=<sweep dir>)`, `hold_sweep(sweep, forward=...)`): the stop is recorded for the whole
sweep in this process, so the job in progress stops after its step and every later job of that sweep records
itself `interrupted` without starting ("not started: the sweep was stopped by Ctrl-C (SIGINT)"). The launcher
process (`forward=True`) passes the request on to its job processes (joblib's workers) as SWEEP_STOP (SIGUSR1): a
*soft* request that never counts as the second signal, because a Ctrl-C in a terminal reaches the workers directly
as well (the whole process group gets it), and a `kill` of the launcher or of the findings command reaches only
that one process. Only a second SIGINT/SIGTERM means "stop now".

SLURM (`arm_requeue()`, called by the SLURM launcher in the job's process, experiments/sweep/requeue.py): the
scheduler's warning signal REQUEUE_SIGNAL (SIGUSR2: submitit's `--signal=USR2@signal_delay_s` before the time limit,
or `scancel --signal=USR2` for a preemption) is a soft request too: the step finishes, a checkpoint is saved, and
`stop.requeue` tells the loop to record `requeued` (or `interrupted`, when the job may not be requeued again) instead
of `interrupted`. Without arm_requeue, SIGUSR2 keeps whatever handler the process had.

Handled: the main thread of the process (signal handlers can only be installed there; elsewhere, e.g. in a
joblib worker thread, StopRequest does nothing and Python's default handling stays). Not handled: SIGKILL (it
cannot be caught: the last atomic checkpoint is what a resume starts from), SIGHUP, and platforms without SIGUSR1
(Windows: a sweep's jobs then only see the signals sent to them directly).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SWEEP_STOP: int | None = getattr(signal, "SIGUSR1", None)  # launcher -> its jobs: stop after the step (soft)
REQUEUE_SIGNAL: int | None = getattr(signal, "SIGUSR2", None)  # SLURM -> a job: time limit near / preempted (soft)
REQUEUE_NAME = "SIGUSR2 (SLURM: time limit near or preemption)"
EXIT_CODE = 130


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal after saving its checkpoint, or (`started=False`) a sweep job that never began
    because its sweep was stopped first; `summary` is what summary.json now holds."""

    def __init__(self, message: str, summary: dict[str, Any], *, started: bool = True) -> None:
        super().__init__(message)
        self.summary = summary
        self.started = started

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class _State:
    requested: str | None = None  # the name of the signal that asked to stop (the user's, when one arrived)
    hard: int = 0                 # SIGINT/SIGTERM received (SWEEP_STOP does not count): the second stops now
    requeue: bool = False         # the request was REQUEUE_SIGNAL alone (no Ctrl-C / SIGTERM): the job may be requeued


_SWEEPS: dict[str, _State] = {}  # sweep dir -> its stop state in this process (a job process may run many jobs)
_REQUEUE_ARMED = [False]         # set by arm_requeue() in a SLURM job's process


def arm_requeue(armed: bool = True) -> None:
    """Handle REQUEUE_SIGNAL in every StopRequest entered from now on (the SLURM launcher, in the job's process)."""
    _REQUEUE_ARMED[0] = armed and REQUEUE_SIGNAL is not None


def sweep_stopped(sweep: str | os.PathLike[str]) -> str | None:
    """The signal that stopped sweep `sweep` in this process, or None."""
    state = _SWEEPS.get(str(sweep))
    return state.requested if state else None


def signal_name(signum: int) -> str:
    """What the user did, as messages and summary.json say it: `Ctrl-C (SIGINT)`, `SIGTERM`; SWEEP_STOP is only how
    a launcher passes the user's Ctrl-C or SIGTERM on (which of the two, the job cannot tell)."""
    if signum == SWEEP_STOP:
        return "Ctrl-C or SIGTERM (passed on by the sweep)"
    if signum == signal.SIGINT:
        return "Ctrl-C (SIGINT)"
    if signum == REQUEUE_SIGNAL:
        return REQUEUE_NAME
    return signal.Signals(signum).name


class StopRequest:
    """Context manager: while active, SIGINT/SIGTERM (and SWEEP_STOP) set `requested` to the signal's name instead
    of raising. With `sweep`, the state is the sweep's, shared by every StopRequest of that sweep in this process
    (a request that came before this one was entered is already `requested`). `forward` is called once, at the
    first request (the launcher passes it on to its job processes: forward_stop)."""

    def __init__(self, sweep: str | os.PathLike[str] | None = None, forward: Callable[[], Any] | None = None) -> None:
        self._state = _SWEEPS.setdefault(str(sweep), _State()) if sweep is not None else _State()
        self._forward = forward
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> str | None:
        return self._state.requested

    @property
    def requeue(self) -> bool:
        """The stop was asked by SLURM's warning signal only (a Ctrl-C or SIGTERM as well makes it a plain stop)."""
        return self._state.requeue and self._state.hard == 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        st, first = self._state, self._state.requested is None
        if signum == REQUEUE_SIGNAL:
            st.requeue = True
            if first:
                st.requested = signal_name(signum)
        elif signum != SWEEP_STOP:
            st.hard += 1
            if st.hard > 1:  # the second Ctrl-C / SIGTERM: stop now
                raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
            st.requested = signal_name(signum)  # named by the user's signal even if the sweep's came first
        elif first:
            st.requested = signal_name(signum)
        if first and self._forward is not None:
            self._forward()

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            armed = [REQUEUE_SIGNAL] if _REQUEUE_ARMED[0] else []
            for sig in (*SIGNALS, *([SWEEP_STOP] if SWEEP_STOP is not None else []), *armed):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


def forward_stop() -> list[int]:
    """Send SWEEP_STOP to this process's live child processes (a joblib/loky launcher's workers); their pids."""
    if SWEEP_STOP is None:
        return []
    pids = []
    for child in multiprocessing.active_children():
        if child.pid is not None:
            try:
                os.kill(child.pid, SWEEP_STOP)
                pids.append(child.pid)
            except ProcessLookupError:
                pass
    return pids


_HELD: dict[str, StopRequest] = {}


def hold_sweep(sweep: str | os.PathLike[str], forward: bool = False, fresh: bool = False) -> StopRequest:
    """Keep this process's handlers on sweep `sweep` for as long as the process serves it (between its jobs too:
    a joblib worker that is idle when Ctrl-C comes must record it, not die). Idempotent per sweep; `fresh` (the
    launcher, at the start of a sweep) forgets an earlier stop of a sweep in the same dir."""
    key = str(sweep)
    if fresh:
        release_sweep(key)
        _SWEEPS.pop(key, None)
    if key not in _HELD:
        _HELD[key] = StopRequest(key, forward=forward_stop if forward else None).__enter__()
    return _HELD[key]


def held_sweeps() -> list[str]:
    return list(_HELD)


def release_sweep(sweep: str | os.PathLike[str]) -> None:
    """Put back the handlers that hold_sweep replaced (the launcher, at the end of the sweep)."""
    held = _HELD.pop(str(sweep), None)
    if held is not None:
        held.__exit__()
