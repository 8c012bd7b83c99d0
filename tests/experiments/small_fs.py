"""Real small and read-only filesystems for fault tests: a tmpfs of a few KB (ENOSPC) and a read-only mount.

    with tmpfs(path, "size=12k") as d: ...         # writes past 12 KB fail with ENOSPC
    remount(d, "ro") / remount(d, "rw,size=1m")    # read-only / writable again (the "free space, resume" step)

Needs root and permission to mount (a container without CAP_SYS_ADMIN has neither): `tmpfs` skips the test then,
and the tests that simulate the same fault by patching the write call still run.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at `path` (created) with `options` ("size=12k", "ro,size=64k"); unmounted afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        proc = _mount("-t", "tmpfs", "-o", options, "tmpfs", str(path))
    except FileNotFoundError:
        pytest.skip("no mount command")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, options: str) -> None:
    proc = _mount("-o", f"remount,{options}", str(path))
    assert proc.returncode == 0, proc.stderr


def temp_leftovers(root: Path) -> list[str]:
    """Temp files / dirs a writer leaves while it works (`.name.XXXX.tmp`, `.key.XXXX/`), which must not outlive it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if not p.name.endswith(".lock"))
