"""Ctrl-C and SIGTERM as a request to stop a training run cleanly after the step in progress.

    with StopRequest() as stop:          # installs handlers for SIGINT and SIGTERM, restores the old ones on exit
        while training:
            ...one optimizer step...
            if stop.requested:           # "SIGINT" / "SIGTERM" once a signal arrived
                save a checkpoint, mark summary.json `interrupted`, raise RunInterrupted(...)

The first signal only sets `stop.requested` (the step, an eval or a checkpoint write in progress finishes, so
nothing is left half-written); a second one raises KeyboardInterrupt at once, for a user who does not want to wait.
The CLI prints one line and exits 130 (128 + SIGINT, the shell's convention for Ctrl-C) for either signal.

Handled: the main thread of the process (signal handlers can only be installed there; elsewhere, e.g. in a
joblib worker thread, StopRequest does nothing and Python's default handling stays). Not handled: SIGKILL (it
cannot be caught: the last atomic checkpoint is what a resume starts from) and SIGHUP.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_CODE = 130


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal after saving its checkpoint; `summary` is what summary.json now holds."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary

    def __str__(self) -> str:
        return str(self.args[0])


class StopRequest:
    """Context manager: while active, SIGINT/SIGTERM set `requested` to the signal's name instead of raising."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested is not None:  # the second signal: stop now
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}")
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
