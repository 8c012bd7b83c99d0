"""Worker processes of the tokenizer (pre-token counting, batch encoding): how they start, how tasks reach them,
and how they stop. `WorkerPool` is the one process pool of tokenizer/; its stop cannot hang.

    with WorkerPool(2) as pool:                                   # any exception or interrupt: workers killed
        for i, counts in pool.imap_unordered(count_texts, ((batch, pattern, specials) for batch in batches)):
            ...                                                   # (task index, result) as each one finishes

Why not multiprocessing.Pool or concurrent.futures.ProcessPoolExecutor: both hand tasks to their workers from a
background thread that writes each pickled task into one pipe that all workers read. A task larger than the pipe
buffer (64 KiB on Linux; a 1 MB chunk of corpus is one task) is written in pieces as a worker reads it, and a
pool being stopped (Ctrl-C: `Pool.__exit__` -> terminate) kills its workers and then joins that thread, which
can be blocked in the middle of such a write with nobody left to read the rest: it waits forever (issue 31:
`bpe train` hung after Ctrl-C, the main thread in `_terminate_pool -> task_handler.join()`, the task handler in
`Connection._send`). ProcessPoolExecutor's feeder thread is joined the same way. Keeping tasks below the pipe
buffer would not close the class (the buffer's size is the OS's; results flow the other way), so this pool has no
threads at all:

* each worker has its own two pipes (tasks in, results out), and the calling thread writes a task only to an idle
  worker, which is reading it. A worker's pipe ends are held by that worker alone: the parent closes its copies,
  and a forked worker closes the parent's ends it inherits (its own and its older siblings'). So a write to a
  worker that died fails at once (EPIPE), and a worker whose parent died reads EOF and exits;
* the calling thread waits for results and for worker deaths together (`multiprocessing.connection.wait` on the
  result pipes and the process sentinels): a worker that dies is `WorkerDied`, never a wait;
* a stop never writes a task and never joins a thread. On an error or an interrupt (KeyboardInterrupt, the CLI's
  SIGTERM exception) every worker gets SIGTERM at once, the parent closes its pipe ends and reaps the workers,
  with SIGKILL for one still alive after KILL_AFTER_S. A normal end sends each idle worker a stop message (a few
  bytes: it fits any pipe buffer) and reaps them the same way. The stop runs with the stop signals blocked in the
  calling thread, so a second Ctrl-C does not cut it short; a signal that came meanwhile is delivered after it.

Workers are forked from whatever process calls the tokenizer, and a fork inherits that process's Python signal
handlers: a training run that asks SIGINT/SIGTERM to mean "stop after this step" (experiments/run/interrupt.py),
a notebook, a web server. Inherited, such a handler would make a worker survive the SIGTERM with which the pool
stops it. So each worker runs with:

* SIGTERM: the default action (the pool can always stop it);
* SIGINT: ignored (Ctrl-C is the caller's to handle; it stops the pool, which stops its workers: one message,
  not one KeyboardInterrupt traceback per worker);
* SIGUSR1: ignored (a sweep passes its stop request on as SIGUSR1; a worker has nothing to save).

The parent blocks the three signals around each fork, so the child starts with them blocked, and the child sets
the dispositions above before it unblocks them (a SIGTERM that arrived in between is delivered then, and stops
it): no window in which a worker runs the caller's handlers (issue 16).

Not handled: platforms without SIGUSR1 or pthread_sigmask (Windows; the dispositions are still set at start); a
worker stuck in the kernel (uninterruptible I/O) is left unreaped after SIGKILL and KILL_AFTER_S more.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection, wait
from typing import Any

from tokenizer.stop import check as check_stop

KILL_AFTER_S = 2.0  # how long a stopped worker may take to exit before it is killed (ours exit at once)

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1") if hasattr(signal, name))
_CAN_BLOCK = hasattr(signal, "pthread_sigmask")
_STOP = None  # the message that ends a worker's loop


class WorkerDied(RuntimeError):
    """A worker process ended while it had a task (killed by the OOM killer, by a signal, or crashed)."""


def init_worker_signals() -> None:
    """Set a worker's dispositions (see the module docstring), then unblock the stop signals."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGUSR1"):
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    if _CAN_BLOCK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Hold back SIGTERM/SIGINT/SIGUSR1 in this thread for the block; one that arrives meanwhile is delivered (and
    its handler runs, e.g. raising KeyboardInterrupt) when the block ends."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if _CAN_BLOCK else None
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _worker_main(tasks: Connection, results: Connection, inherited: list[Connection],
                 initializer: Callable[..., Any] | None, initargs: tuple) -> None:
    """A worker's life: answer (fn, args) with (True, fn(*args)) or (False, exception) until the stop message or
    EOF (the parent is gone)."""
    for conn in inherited:  # fork: the parent's pipe ends, so that EOF/EPIPE mean what they say
        conn.close()
    init_worker_signals()
    if initializer is not None:
        initializer(*initargs)
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):
            return
        if task is _STOP:
            return
        fn, args = task
        del task
        try:
            reply = (True, fn(*args))
        except Exception as e:  # noqa: BLE001 - raised again in the parent, with this traceback as a note
            e.add_note("in a tokenizer worker process:\n" + "".join(traceback.format_exception(e)).rstrip())
            reply = (False, e)
        try:
            try:
                data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as e:  # noqa: BLE001 - an unpicklable result or exception
                data = pickle.dumps((False, RuntimeError(f"{fn.__name__} in a worker: {type(e).__name__}: {e}")))
            del reply
            results.send_bytes(data)
        except OSError:  # the parent is gone
            return


class _Worker:
    def __init__(self, process, tasks: Connection, results: Connection):
        self.process, self.tasks, self.results = process, tasks, results
        self.task: int | None = None  # index of the task it holds


class WorkerPool:
    """`n` worker processes fed by the calling thread (see the module docstring). Use it as a context manager:
    leaving the block normally stops the workers politely, leaving it with an exception kills them."""

    def __init__(self, n: int, initializer: Callable[..., Any] | None = None, initargs: tuple = ()):
        if n < 1:
            raise ValueError(f"a pool needs at least 1 worker, got {n}")
        self._ctx = mp.get_context()
        self._workers: list[_Worker] = []
        self._closed = False
        try:
            for _ in range(n):
                self._start(initializer, initargs)
        except BaseException:
            self.close(kill=True)
            raise

    def _start(self, initializer: Callable[..., Any] | None, initargs: tuple) -> None:
        task_r, task_w = self._ctx.Pipe(duplex=False)
        result_r, result_w = self._ctx.Pipe(duplex=False)
        forked = self._ctx.get_start_method() == "fork"
        # a forked child gets copies of every parent-side end (its own included); it closes them first thing
        inherited = [c for w in self._workers for c in (w.tasks, w.results)] + [task_w, result_r] if forked else []
        process = self._ctx.Process(target=_worker_main, args=(task_r, result_w, inherited, initializer, initargs),
                                    daemon=True)
        with stop_signals_blocked():  # the child starts with them blocked (see the module docstring)
            try:
                process.start()
                self._workers.append(_Worker(process, task_w, result_r))
            finally:
                task_r.close()
                result_w.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(kill=exc_type is not None)

    def imap_unordered(self, fn: Callable[..., Any], tasks: Iterable[tuple]) -> Iterator[tuple[int, Any]]:
        """Yield (i, fn(*args)) for the i-th args tuple of `tasks`, in the order they finish. `tasks` is read
        lazily: one task per worker in flight and one read ahead, so memory stays flat. An exception raised by
        `fn` in a worker is raised here; a worker that dies raises WorkerDied."""
        tasks = enumerate(tasks)
        ahead = next(tasks, None)
        idle = list(self._workers)
        while True:
            while idle and ahead is not None:  # hand out tasks, then read the next one while the workers work
                self._send(idle.pop(), fn, ahead)
                ahead = next(tasks, None)
            busy = [w for w in self._workers if w.task is not None]
            if not busy:
                return
            check_stop()  # a stop request whose raise was dropped (tokenizer/stop.py)
            done = []
            for w in self._ready(busy):
                done.append((w.task, self._receive(w)))
                w.task = None
                if ahead is not None:  # keep the worker busy before spending time on its result
                    self._send(w, fn, ahead)
                    ahead = next(tasks, None)
                else:
                    idle.append(w)
            for i, data in done:
                ok, value = pickle.loads(data)
                del data
                if not ok:
                    raise value
                yield i, value

    def _send(self, worker: _Worker, fn: Callable[..., Any], task: tuple[int, tuple]) -> None:
        i, args = task
        try:
            worker.tasks.send((fn, args))
        except OSError:  # EPIPE: it died (see the module docstring)
            raise self._died(worker) from None
        worker.task = i

    def _ready(self, busy: list[_Worker]) -> list[_Worker]:
        """The busy workers that have a result to read; WorkerDied for one that ended without one."""
        by_result = {w.results: w for w in busy}
        by_sentinel = {w.process.sentinel: w for w in busy}
        ready = wait([*by_result, *by_sentinel])
        out = [by_result[r] for r in ready if r in by_result]
        for r in ready:
            w = by_sentinel.get(r)
            if w is not None and w not in out and not w.results.poll():
                raise self._died(w)
        return out

    def _receive(self, worker: _Worker) -> bytes:
        try:
            return worker.results.recv_bytes()
        except (EOFError, OSError):
            raise self._died(worker) from None

    @staticmethod
    def _died(worker: _Worker) -> WorkerDied:
        worker.process.join(KILL_AFTER_S)
        code = worker.process.exitcode
        how = "is stuck" if code is None else f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        return WorkerDied(f"a worker process (pid {worker.process.pid}) {how} while it had a task")

    def close(self, kill: bool = False) -> None:
        """Stop every worker and reap it; never blocks on a pipe or a thread (see the module docstring). `kill`:
        SIGTERM at once (after an error or an interrupt); else idle workers get the stop message."""
        if self._closed:
            return
        self._closed = True
        with stop_signals_blocked():
            try:
                for w in self._workers:
                    if kill or w.task is not None:
                        _signal(w.process, "terminate")
                    else:
                        try:
                            w.tasks.send(_STOP)  # a few bytes into an empty pipe: cannot block
                        except OSError:
                            pass
            finally:
                for w in self._workers:
                    w.tasks.close()
                    w.results.close()
                _reap([w.process for w in self._workers])


def _signal(process, how: str) -> None:
    try:
        getattr(process, how)()  # terminate: SIGTERM, kill: SIGKILL
    except (OSError, ValueError, AttributeError):  # already reaped, or not started
        pass


def _reap(processes: list) -> None:
    """Join every process; SIGKILL those still alive KILL_AFTER_S later, and join them for KILL_AFTER_S more.
    Each one reaped is closed (its sentinel fd)."""
    for escalate in (True, False):
        deadline = time.monotonic() + KILL_AFTER_S
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
        alive = [p for p in processes if p.exitcode is None]
        if not alive or not escalate:
            break
        for p in alive:
            _signal(p, "kill")
    for p in processes:
        if p.exitcode is not None:
            p.close()
