"""One writer per run dir: a second process that opens a run dir another live process holds is refused in one line.

    with RunDirLock(run_dir):   # ConfigError: run dir X is in use by another process (pid 4242); ...
        ...                     # check the dir, load data, train, write summary.json

The lock is an OS file lock (filelock: flock on POSIX, msvcrt on Windows) on `<run dir>/.archlab.lock`, taken
before anything in the dir is checked or written and held until the block ends, however it ends: returned, raised,
Ctrl-C. It is never waited for: a second start, or `train.resume=true` while the first process still trains, is
refused at once instead of becoming a second writer. A process killed with SIGKILL leaves the file but not the
lock (the OS drops a lock with its process), so a later resume is not blocked by it. The file holds the holder's
pid for the refusal message ("pid unknown" when it cannot be read). On release the file is removed (while still
locked, so a process that opened the old file is refused, never let in beside a new holder); a finished run dir
holds only the run's own files.

The run dir is created here when missing; a dir that cannot be created or written (a read-only mount, a path that
is a file) is one ConfigError naming it. Not handled: locks across machines on filesystems without working flock
(some NFS setups), where filelock falls back to a lock file that a SIGKILL leaves behind.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from types import TracebackType

from filelock import FileLock, Timeout

from experiments.config.errors import ConfigError

LOCK_NAME = ".archlab.lock"


class RunDirLock:
    """The lock of one run dir; `with RunDirLock(path):` holds it for the block (or `acquire()` / `release()`)."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.dir = Path(run_dir)
        self.path = self.dir / LOCK_NAME
        self._lock: FileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None

    def acquire(self) -> RunDirLock:
        """Take the lock now or raise ConfigError (one line): held by another process, or the dir is unusable."""
        if self.dir.exists() and not self.dir.is_dir():
            raise ConfigError(f"run dir {self.dir} exists and is not a directory")
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"run dir {self.dir} cannot be created ({e.strerror or type(e).__name__})") from None
        before = holder_pid(self.path)  # read first: some filelock versions truncate the file when they open it
        lock = FileLock(self.path)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            pid = holder_pid(self.path) or before
            raise ConfigError(
                f"run dir {self.dir} is in use by another process ({f'pid {pid}' if pid else 'pid unknown'}); wait "
                f"for it to end or stop it (then train.resume=true continues it), or choose another dir") from None
        except OSError as e:
            raise ConfigError(f"run dir {self.dir} is not writable ({e.strerror or type(e).__name__})") from None
        self._lock = lock
        with contextlib.suppress(OSError):  # the pid only names the holder in a refusal; not having it is fine
            self.path.write_text(f"{os.getpid()}\n")
        return self

    def release(self) -> None:
        """Remove the lock file, then unlock (idempotent)."""
        if self._lock is None:
            return
        with contextlib.suppress(OSError):  # Windows cannot remove a locked file: it stays, unlocked
            self.path.unlink()
        self._lock.release()
        self._lock = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def check_not_in_use(run_dir: str | os.PathLike) -> None:
    """ConfigError (the refusal of `RunDirLock.acquire`) when another live process holds `run_dir`; creates nothing
    when no lock file is there. For checks before a run starts (e.g. before Hydra writes `.hydra/` into the dir);
    the run still takes the lock itself, which is what keeps a second writer out."""
    if (Path(run_dir) / LOCK_NAME).exists():  # a holder's file exists while it holds
        RunDirLock(run_dir).acquire().release()


def held_by_another(run_dir: str | os.PathLike) -> bool:
    """True when another live process holds `run_dir`'s lock now. Unlike acquire() (which writes its pid) and
    release() (which removes the file), this writes nothing: the lock file is opened read-only and flock'd without
    waiting. False without a lock file, and where fcntl is missing (Windows)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def holder_pid(path: Path) -> int | None:
    """The pid written in a lock file, None when it is missing, empty or not a number."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
