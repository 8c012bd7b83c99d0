"""A findings command owns its sweep dir (--out-dir, --from-sweep) from its first check to its last write.

    with OutDir(sweep_dir, fresh=True) as out:   # UsageError (one line): in use by another findings command, not
        ...                                      #   empty, not a directory, cannot be created
        out.keep()                               # the sweep started: what is written from now on stays
    # a block left without keep() (a refusal, an error, the sweep itself refused) puts the dir back as it was

Claiming is the first thing a command does with the dir, and it is atomic: an OS file lock (flock, never waited
for) on `<dir>/.findings.lock`, so of two commands started together on one dir exactly one goes on and the other is
refused at once, naming the holder's pid. A fresh run (fresh=True) then requires the dir to be new or empty (the
lock file aside); a --resume / --from-sweep requires it to exist (fresh=False). A SIGKILLed holder leaves the file
but not the lock (the OS drops it with the process), so the next command is not blocked by it.

As it was: unless keep() was called, the dirs this command made are removed again (if still empty) and finding.json
and the lock file get back the bytes they held at the claim (or are removed, when there were none); after keep()
the lock file is removed on release (while still locked, so that a command that opened the old file is refused, not let in beside a
new holder; a lock taken on a file that is no longer the dir's lock file is dropped and taken again).
Not handled: filesystems without working flock (some NFS setups); Windows (no fcntl).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

from experiments.rundir.lock import holder_pid
from tokenizer.cli_args import UsageError

LOCK_NAME = ".findings.lock"
RESTORED = ("finding.json",)  # the files a findings command writes before its sweep starts


class OutDir:
    """The sweep dir of one findings command; `option` names it in messages (--out-dir, --from-sweep)."""

    def __init__(self, path: str | os.PathLike, *, fresh: bool, option: str = "--out-dir") -> None:
        self.path, self.fresh, self.option = Path(path), fresh, option
        self.lock_path = self.path / LOCK_NAME
        self.made: list[Path] = []                     # dirs this command created, outermost first
        self.before: dict[str, bytes | None] = {}      # RESTORED files' bytes at the claim (None: absent)
        self.kept = False
        self.lock_before: bytes | None = None
        self._fd: int | None = None

    def __enter__(self) -> OutDir:
        self._make()
        try:
            self._lock()
            self._check()
        except BaseException:
            self._undo(remove_lock=self._fd is not None)
            raise
        self.before = {name: _read(self.path / name) for name in RESTORED}
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self.kept:
            for name, data in self.before.items():
                _put_back(self.path / name, data)
        self._undo(remove_lock=True)

    def keep(self) -> None:
        """What the command has written, and will write, stays when the block ends (however it ends)."""
        self.kept = True

    # -- claiming

    def _make(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise UsageError(f"{self.option} {self.path} exists and is not a directory; choose another")
        if not self.fresh and not self.path.is_dir():
            raise UsageError(f"{self.option} {self.path}: no such directory (not a findings sweep dir)")
        missing = [p for p in (self.path, *self.path.parents) if not p.exists()][::-1]
        for p in missing:
            try:
                p.mkdir()
            except FileExistsError:
                continue  # made by another command just now: not ours to remove
            except OSError as e:
                self._undo(remove_lock=False)
                raise UsageError(f"{self.option} {self.path} cannot be created "
                                 f"({e.strerror or type(e).__name__})") from None
            self.made.append(p)

    def _lock(self) -> None:
        self.lock_before = _read(self.lock_path)  # a SIGKILLed holder's file: put back as it was on a refusal
        for _ in range(3):  # a holder that released between our open and our lock: take the new file
            try:
                fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise UsageError(f"{self.option} {self.path} is not writable ({e.strerror or type(e).__name__})") \
                    from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise UsageError(f"{self.option} {self.path} cannot be locked ({e.strerror})") from None
                pid = holder_pid(self.lock_path)
                raise UsageError(f"{self.option} {self.path} is in use by another findings command "
                                 f"({f'pid {pid}' if pid else 'pid unknown'}); wait for it to end, or choose "
                                 f"another {self.option}") from None
            if _same_file(fd, self.lock_path):
                self._fd = fd
                with contextlib.suppress(OSError):  # names the holder in a refusal; not having it is fine
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                return
            os.close(fd)
        raise UsageError(f"{self.option} {self.path} is in use by other findings commands; try again")

    def _check(self) -> None:
        if self.fresh and any(p.name != LOCK_NAME for p in self.path.iterdir()):
            raise UsageError(f"{self.option} {self.path} already exists and is not an empty directory; choose "
                             f"another (or continue the sweep in it: --resume --out-dir {self.path})")

    # -- as it was

    def _undo(self, *, remove_lock: bool) -> None:
        """Release the lock (removing its file first) and remove the dirs this command made, when empty."""
        if remove_lock:
            with contextlib.suppress(OSError):
                _put_back(self.lock_path, None if self.kept else self.lock_before)
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
        for p in reversed(self.made):
            with contextlib.suppress(OSError):  # not empty (another command's files): it stays
                p.rmdir()
        self.made = []


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _put_back(path: Path, data: bytes | None) -> None:
    """The file as it was: `data` written back (atomically), or removed when it did not exist."""
    if _read(path) == data:
        return
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    tmp = path.with_name(f".{path.name}.restore")
    tmp.write_bytes(data)
    tmp.replace(path)
