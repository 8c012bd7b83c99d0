"""Worker processes of the tokenizer (pre-token counting, batch encoding): their signal handling.

Workers are forked from whatever process calls the tokenizer, and a fork inherits that process's Python signal
handlers: a training run that asks SIGINT/SIGTERM to mean "stop after this step" (experiments/interrupt.py),
a notebook, a web server. Inherited, such a handler makes a worker survive the SIGTERM with which its pool is
shut down (`Pool.terminate`, also on a normal `with Pool(...)` exit), and the caller then waits forever. So each
worker starts with:

* SIGTERM: the default action (the pool can always stop it);
* SIGINT: ignored (Ctrl-C is the caller's to handle; it stops the pool, which stops its workers: one message,
  not one KeyboardInterrupt traceback per worker);
* SIGUSR1: ignored (a sweep passes its stop request on as SIGUSR1; a worker has nothing to save).

Not handled: platforms without SIGUSR1 (the rest still applies).
"""

from __future__ import annotations

import signal


def init_worker_signals() -> None:
    """Call first in every worker process (a Pool / ProcessPoolExecutor initializer)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
