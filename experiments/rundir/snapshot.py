"""A dir as it was: `DirSnapshot.take(path)` before something may write into it, `.restore()` puts it back.

    snap = DirSnapshot.take(run_dir, stat_only=RUN_OUTPUTS)   # before Hydra makes the dir or writes .hydra/ into it
    ...                                                       # Hydra writes; train() refuses the run
    if not snap.changed(RUN_OUTPUTS):                         # the run wrote nothing of its own
        snap.restore()                                        # every file's bytes, mode and mtime as they were

What is recorded: every file, symlink and dir below `path` (links are never followed): its kind, size, mode and
mtime, and a regular file's bytes when it is at most BYTES_LIMIT, not below a `stat_only` name (the run's own
outputs, which are only compared: a checkpoint is never read) and BYTES_TOTAL are not yet kept; whether `path`
existed, and if not, the nearest ancestor that did. `take(max_entries=N)` refuses a dir of more paths (TooLarge).

`restore()`: what was not there is removed (a dir only once empty); a file whose kind, size, mode or mtime differ
(or that is gone) gets its bytes back (a temp file beside it renamed over it), or, when its bytes were not kept and
it only grew (an appended log), is cut back to its old size; then its mode and mtime are put back, and last every
dir's mtime, deepest first. A `path` that did not exist is removed with the dirs made above it (each only when
empty). Returns what could not be put back (a file over BYTES_LIMIT rewritten, not appended; a stat_only file).
Not handled: ownership, atime, ctime (the OS sets it), extended attributes, special files (compared, not
restored), and another process writing while restore() runs (experiments/run/keep_dirs.py leaves a dir alone
whose lock another live process holds).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizer.outputs import atomic_write  # the repo's one atomic file write

BYTES_LIMIT = 1 << 20  # bigger files are compared by size and mtime; an appended one is cut back to its old size
BYTES_TOTAL = 64 << 20  # past this many kept bytes, the rest of the files are compared only
MAX_ENTRIES = 20_000  # take(max_entries=MAX_ENTRIES): a run dir holding more is not one (hydra.run.dir=. in a checkout)


class TooLarge(ValueError):
    """A dir with more paths below it than the snapshot's `max_entries`: no snapshot is taken of it."""


@dataclass(frozen=True)
class Entry:
    """One path below the snapshot's root, as it was."""

    kind: str               # "file" | "dir" | "link" | "other"
    size: int
    mode: int               # the permission bits
    atime_ns: int
    mtime_ns: int
    target: str | None = None   # a link's target
    data: bytes | None = None   # a regular file's bytes, when kept

    def same_as(self, other: Entry | None) -> bool:
        """Unchanged: kind, size, mode, mtime and link target are equal (atime is not compared)."""
        return other is not None and (self.kind, self.size, self.mode, self.mtime_ns, self.target) == (
            other.kind, other.size, other.mode, other.mtime_ns, other.target)


def _entry(path: Path, *, budget: list[int] | None = None) -> Entry | None:
    """The path as it is now; a regular file's bytes too while `budget` (bytes left to keep) allows."""
    try:
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode):
            kind, target = "link", os.readlink(path)
        else:
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
            target = None
        data = None
        if budget is not None and kind == "file" and st.st_size <= min(BYTES_LIMIT, budget[0]):
            data = path.read_bytes()
            budget[0] -= len(data)
    except OSError:  # gone meanwhile, unreadable: as if it were not there
        return None
    return Entry(kind, st.st_size, stat.S_IMODE(st.st_mode), st.st_atime_ns, st.st_mtime_ns, target, data)


def _scan(root: Path, *, keep_bytes: bool, stat_only: frozenset[str], limit: int | None) -> dict[str, Entry]:
    """relative posix path -> Entry for everything below `root` ("" is the root itself); TooLarge past `limit`."""
    if not root.is_dir():
        return {}
    found: dict[str, Entry] = {}
    budget = [BYTES_TOTAL]
    for here, dirs, files in os.walk(root, followlinks=False):
        base = Path(here)
        for name in (*dirs, *files):
            path = base / name
            rel = path.relative_to(root).as_posix()
            keep = keep_bytes and rel.split("/", 1)[0] not in stat_only
            entry = _entry(path, budget=budget if keep else None)
            if entry is not None:
                found[rel] = entry
            if limit is not None and len(found) > limit:
                raise TooLarge(f"{root} holds more than {limit} paths")
    top = _entry(root)
    if top is not None:
        found[""] = top
    return found


def _depth(rel: str) -> int:
    return rel.count("/") + (rel != "")


class DirSnapshot:
    """What `root` held when `take` ran; `changed()` says what differs now, `restore()` puts it back."""

    def __init__(self, root: Path, entries: dict[str, Entry], existing_ancestor: Path | None,
                 max_entries: int | None = None) -> None:
        self.root = root
        self.max_entries = max_entries
        self.entries = entries
        self.existed = "" in entries
        self.existing_ancestor = existing_ancestor  # the nearest ancestor that existed, when root did not

    @classmethod
    def take(cls, root: str | os.PathLike, *, stat_only: Iterable[str] = (),
             max_entries: int | None = None) -> DirSnapshot:
        """Record `root` now; files below the top-level names in `stat_only` are recorded without their bytes.
        TooLarge for a dir of more than `max_entries` paths (None: no bound)."""
        root = Path(os.path.realpath(root))  # a symlinked run dir: the dir it names
        entries = _scan(root, keep_bytes=True, stat_only=frozenset(stat_only), limit=max_entries)
        ancestor = None if entries else next((p for p in root.parents if p.exists()), None)
        return cls(root, entries, ancestor, max_entries)

    def changed(self, names: Iterable[str] | None = None) -> list[str]:
        """The relative paths that differ now (new, gone or changed), all of them or only below the top-level
        `names` (e.g. RUN_OUTPUTS: has the run written anything of its own?)."""
        try:
            now = _scan(self.root, keep_bytes=False, stat_only=frozenset(), limit=self.max_entries)
        except TooLarge:
            return ["."]  # grown past what a snapshot covers: everything may have changed
        wanted = None if names is None else set(names)
        out = []
        for rel in sorted(set(now) | set(self.entries)):
            if wanted is not None and rel.split("/", 1)[0] not in wanted:
                continue
            before = self.entries.get(rel)
            if before is None or not before.same_as(now.get(rel)):
                out.append(rel)
        return out

    def restore(self) -> list[str]:
        """Put `root` back as it was (see the module docstring); returns the relative paths it could not."""
        try:
            now = _scan(self.root, keep_bytes=False, stat_only=frozenset(), limit=self.max_entries)
        except TooLarge:
            return ["."]
        for rel in sorted(set(now) - set(self.entries), key=_depth, reverse=True):  # new: deepest first
            _remove(self.root / rel, now[rel])
        lost = []
        for rel in sorted(self.entries, key=_depth):  # gone dirs before the files in them
            was = self.entries[rel]
            if not was.same_as(now.get(rel)) and not _put_back(self.root / rel, was, now.get(rel)):
                lost.append(rel or ".")
        for rel in sorted((r for r, e in self.entries.items() if e.kind == "dir"), key=_depth, reverse=True):
            _set_times(self.root / rel, self.entries[rel])
        if not self.existed:
            self._remove_made_dirs()
        return lost

    def _remove_made_dirs(self) -> None:
        """Remove `root` and the dirs made above it up to the ancestor that existed, each only when empty."""
        for d in (self.root, *self.root.parents):
            if self.existing_ancestor is None or d == self.existing_ancestor or not d.is_relative_to(
                    self.existing_ancestor):
                return
            if not d.exists():  # the root itself, removed with what was new in it
                continue
            try:
                d.rmdir()
            except OSError:  # not empty (another command writes there too), or gone
                return


def _remove(path: Path, entry: Entry) -> None:
    try:
        if entry.kind == "dir":
            path.rmdir()  # emptied first (deepest first); one that is not empty stays
        else:
            path.unlink()
    except OSError:
        pass


def _put_back(path: Path, was: Entry, now: Entry | None) -> bool:
    """One path as `was` recorded it; False when that cannot be done."""
    try:
        if now is not None and (now.kind != was.kind or was.kind == "link"):
            _remove(path, now)
            now = None
        if was.kind == "dir":
            if now is None:
                path.mkdir(parents=True)
            os.chmod(path, was.mode)
            return True  # its mtime is set last, after everything below it
        if was.kind == "link":
            path.symlink_to(was.target)
            _set_times(path, was)
            return True
        if was.kind != "file":
            return False
        if was.data is not None:
            atomic_write(path, lambda f: f.write(was.data), binary=True)
        elif now is not None and now.size > was.size:
            os.truncate(path, was.size)  # an appended log: the lines added are cut off
        elif now is None or (now.size, now.mtime_ns) != (was.size, was.mtime_ns):
            return False  # rewritten: its bytes were not kept
        os.chmod(path, was.mode)
        _set_times(path, was)
        return True
    except OSError:
        return False


def _set_times(path: Path, entry: Entry) -> None:
    try:
        os.utime(path, ns=(entry.atime_ns, entry.mtime_ns), follow_symlinks=False)
    except OSError:
        pass
