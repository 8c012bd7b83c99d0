"""Atomic file replacement: readers see the old file or the new one, never a partial one.

Write to a temp file in the same directory, flush + fsync, then os.replace (atomic on POSIX and Windows for
paths on one filesystem). Used for checkpoints and summary.json. Not handled: fsync of the directory entry
itself (a power cut right after the rename may still lose the new name on some filesystems).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | os.PathLike, write: Callable[[IO[Any]], object], *, binary: bool) -> None:
    """Call `write(f)` on a temp file beside `path`, then atomically move it to `path` (parents are created).

    >>> atomic_write("summary.json", lambda f: f.write("{}"), binary=False)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
