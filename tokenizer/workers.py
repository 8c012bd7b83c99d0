"""Worker processes of the tokenizer (pre-token counting, batch encoding): how they start and how they stop.

Workers are forked from whatever process calls the tokenizer, and a fork inherits that process's Python signal
handlers: a training run that asks SIGINT/SIGTERM to mean "stop after this step" (experiments/run/interrupt.py),
a notebook, a web server. Inherited, such a handler makes a worker survive the SIGTERM with which its pool is
shut down (`Pool.terminate`, also on a normal `with Pool(...)` exit), and the caller then waits forever. So each
worker runs with:

* SIGTERM: the default action (the pool can always stop it);
* SIGINT: ignored (Ctrl-C is the caller's to handle; it stops the pool, which stops its workers: one message,
  not one KeyboardInterrupt traceback per worker);
* SIGUSR1: ignored (a sweep passes its stop request on as SIGUSR1; a worker has nothing to save).

Setting these in a pool initializer is not enough: between the fork and the initializer the worker still has
the caller's handlers, and a SIGTERM arriving then (a pool terminated right after it was created, under load) is
swallowed. `worker_context()` closes that window: the parent blocks the three signals around each fork, so the
child starts with them blocked, and the child sets the dispositions above before it unblocks them (a SIGTERM that
arrived in between is delivered then, and stops it). And a terminated worker is never waited for without bound:
`join()` after `terminate()` escalates to SIGKILL after KILL_AFTER_S.

Not handled: platforms without SIGUSR1 or pthread_sigmask (Windows; the dispositions are still set at start), and
start methods other than fork (spawn / forkserver children do not inherit the caller's handlers, so there is no
window to close; `worker_context()` returns them as they are).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from multiprocessing.context import BaseContext

KILL_AFTER_S = 10.0  # how long a terminated worker may take to exit before it is killed

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1") if hasattr(signal, name))
_CAN_BLOCK = hasattr(signal, "pthread_sigmask")


def init_worker_signals() -> None:
    """Set a worker's dispositions (see the module docstring), then unblock the stop signals."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if _CAN_BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


if hasattr(mp.context, "ForkProcess"):
    class _WorkerProcess(mp.context.ForkProcess):
        """A forked worker that starts with the stop signals blocked and can always be stopped."""

        _terminated = False

        def start(self) -> None:
            old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if _CAN_BLOCK else None
            try:
                super().start()  # the child inherits the blocked mask
            finally:
                if old is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old)

        def run(self) -> None:  # in the child, before the pool's worker loop and its initializer
            init_worker_signals()
            super().run()

        def terminate(self) -> None:
            self._terminated = True
            super().terminate()

        def join(self, timeout: float | None = None) -> None:
            if timeout is None and self._terminated:
                super().join(KILL_AFTER_S)
                if self.exitcode is None:
                    self.kill()
            super().join(timeout)

    class _WorkerContext(mp.context.ForkContext):
        Process = _WorkerProcess


def worker_context() -> BaseContext:
    """The multiprocessing context for tokenizer workers: `worker_context().Pool(n)`, or
    `ProcessPoolExecutor(mp_context=worker_context())`."""
    ctx = mp.get_context()
    if ctx.get_start_method() == "fork" and hasattr(mp.context, "ForkProcess"):
        return _WorkerContext()
    return ctx
