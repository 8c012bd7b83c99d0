"""Faults on the data side: two processes sharing the cache, entries left damaged by a crash, a full or read-only
disk under the cache, token files whose ids do not fit the tokenizer. Each is one line (a ConfigError / a
TokenFileError) and leaves no cache entry that a later run would take as valid."""

from __future__ import annotations

import subprocess
import time

import pytest

from .conftest import PYTHON, REPO

# ------------------------------------------------------------------------------------------ the cache lock

HOLD = """
import sys, time
if {block_fcntl}:
    sys.modules["fcntl"] = None  # a platform without fcntl (Windows)
from pathlib import Path
from experiments.data.cache import file_lock
lock, log, role = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def say(what):
    with log.open("a") as f:
        f.write(f"{{role}} {{what}} {{time.monotonic()}}\\n")
def seen(what):
    return what in log.read_text() if log.exists() else False
say("ready")
# the first takes the lock once both are ready; the second asks for it while the first holds it
while not (seen("second ready") if role == "first" else seen("first in")):
    time.sleep(0.01)
with file_lock(lock):
    say("in")
    time.sleep(1.0 if role == "first" else 0)
    say("out")
"""


@pytest.mark.parametrize("block_fcntl", [False, True], ids=["fcntl", "no_fcntl"])
def test_the_cache_lock_excludes_a_second_process_on_every_platform(tmp_path, block_fcntl):
    script = HOLD.format(block_fcntl=block_fcntl)
    lock, log = tmp_path / "locks" / ".entry.lock", tmp_path / "log.txt"
    procs = [subprocess.Popen([PYTHON, "-c", script, str(lock), str(log), role], cwd=REPO) for role in ("first", "second")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    events = [line.split()[:2] for line in log.read_text().splitlines() if "ready" not in line]
    # the holds never overlap: the second enters only after the first left
    assert events == [["first", "in"], ["first", "out"], ["second", "in"], ["second", "out"]], events
