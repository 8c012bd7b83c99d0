"""Stop requests (Ctrl-C, SIGTERM) of the `bpe` commands, which are never lost (issue 31).

    with stop_signals():          # main thread: SIGINT -> KeyboardInterrupt, SIGTERM -> Terminated
        work()                    # raised where the signal lands, as Python's own Ctrl-C handler does ...
        check()                   # ... or here, if it landed where a raise is dropped

Python runs a signal's handler between two bytecodes of the main thread, wherever that is. When that is a finalizer
(a `__del__`: regex's `Group.__del__` runs while a pattern compiles), the exception the handler raises is printed as
"Exception ignored in ..." and dropped, and the command went on to write its output and exit 0 (issue 31: 2 of 46
Ctrl-Cs of `bpe train`, 1 of 5 runs of `bpe encode`). So the handler first records the request, then raises only
when no `__del__` frame is on the stack (a raise there would be dropped, with a traceback on stderr), and
`check()` raises a recorded request. It is called:

* where an output is committed: `outputs.atomic_output` and `atomic_directory`, before their rename, so a
  stopped command never writes its output;
* in the long loops, so a deferred stop is prompt: the counting pool's results (`workers.WorkerPool`), the
  encoder's rounds (`stream.encode_chunks`), each merge (`merge.learn_merges`);
* when the `stop_signals()` block ends without an exception.

Outside a `stop_signals()` block (a library caller; a training run with its own handlers, experiments/run/
interrupt.py) nothing is recorded and `check()` does nothing. A signal the process inherited as ignored (a shell's
background job) stays ignored. Not handled: a finalizer Python calls without a `__del__` frame (a weakref or gc
callback) still drops the raise and prints it; the request is kept and raised at the next check.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(BaseException):
    """SIGTERM arrived in a `stop_signals()` block; like KeyboardInterrupt, not an Exception."""


_EXCEPTIONS: dict[int, type[BaseException]] = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated}
_pending: int | None = None  # the signal of a request not yet known to have been raised


def check() -> None:
    """Raise the exception of a stop request recorded in a `stop_signals()` block (KeyboardInterrupt or
    Terminated); nothing when there is none."""
    if _pending is not None:
        raise _EXCEPTIONS[_pending]


def _in_finalizer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _handler(signum: int, frame: FrameType | None) -> None:
    global _pending
    if _pending is None:
        _pending = signum  # a second signal keeps the first one's meaning
    if not _in_finalizer(frame):
        check()


@contextmanager
def stop_signals() -> Iterator[None]:
    """For the block, SIGINT and SIGTERM are stop requests that are never lost (see the module docstring); the
    previous handlers are put back after. In a thread other than the main one, the block changes nothing."""
    global _pending
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in _EXCEPTIONS}
    _pending = None
    try:
        for s, handler in previous.items():
            if handler != signal.SIG_IGN:
                signal.signal(s, _handler)
        yield
        check()
    finally:
        for s, handler in previous.items():
            if handler is not None:  # None: a handler installed from C, which Python cannot put back
                signal.signal(s, handler)
        _pending = None
