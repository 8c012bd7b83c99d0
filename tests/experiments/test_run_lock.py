"""One writer per run dir (experiments/rundir/lock.py): a second process on a run dir another live process holds is
refused in one line naming the dir and the holder's pid; the lock goes away on every exit path of the holder
(return, exception, Ctrl-C, SIGKILL), so a later resume is never blocked by a dead one. Real processes throughout:
an OS lock between threads of one process proves nothing."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from experiments.config.errors import ConfigError
from experiments.rundir.lock import LOCK_NAME, RunDirLock, check_not_in_use

from .conftest import PYTHON, REPO, TINY
from .small_fs import tmpfs

HOLDER = """
import signal, sys, time
from experiments.rundir.lock import RunDirLock
# Ctrl-C raises KeyboardInterrupt even when the suite was started in the background (`make test &`): a shell
# starts background jobs with SIGINT ignored, and a child inherits that
signal.signal(signal.SIGINT, signal.default_int_handler)
how = sys.argv[2]
with RunDirLock(sys.argv[1]):
    print("held", flush=True)
    if how == "sleep":
        time.sleep(600)  # until the test signals it
    line = sys.stdin.readline()
    if how == "raise":
        raise RuntimeError("boom")
"""

CONTENDER = """
import sys
from experiments.config.errors import ConfigError
from experiments.rundir.lock import RunDirLock
try:
    RunDirLock(sys.argv[1]).acquire()
except ConfigError as e:
    print(e, file=sys.stderr)
    sys.exit(2)
print("acquired")
"""


def _hold(run_dir: Path, how: str) -> subprocess.Popen:
    proc = subprocess.Popen([PYTHON, "-c", HOLDER, str(run_dir), how], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held", proc.stderr.read()
    return proc


def _contend(run_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", CONTENDER, str(run_dir)], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_second_process_is_refused_in_one_line_naming_the_dir_and_the_holder(tmp_path):
    run_dir = tmp_path / "run"
    holder = _hold(run_dir, "stdin")
    try:
        for _ in range(2):  # every later contender too, not only the first
            proc = _contend(run_dir)
            assert proc.returncode == 2 and proc.stdout == "", proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1 and str(run_dir) in lines[0] and f"(pid {holder.pid})" in lines[0], lines
            assert "in use by another process" in lines[0]
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    assert _contend(run_dir).stdout.strip() == "acquired"


def test_check_not_in_use_refuses_a_held_dir_and_touches_no_other(tmp_path):
    run_dir = tmp_path / "run"
    check_not_in_use(run_dir)
    assert not run_dir.exists()  # nothing created for a dir nobody holds
    holder = _hold(run_dir, "stdin")
    try:
        with pytest.raises(ConfigError, match=rf"in use by another process \(pid {holder.pid}\)"):
            check_not_in_use(run_dir)
        assert (run_dir / LOCK_NAME).exists()  # the holder's lock is untouched
    finally:
        holder.communicate("\n", timeout=60)
    check_not_in_use(run_dir)
    assert list(run_dir.iterdir()) == []


@pytest.mark.parametrize("how", ["return", "raise", "sigint", "sigkill"])
def test_the_lock_dies_with_its_holder_on_every_exit_path(tmp_path, how):
    run_dir = tmp_path / "run"
    holder = _hold(run_dir, "sleep" if how.startswith("sig") else how)
    assert _contend(run_dir).returncode == 2
    if how == "sigint":
        holder.send_signal(signal.SIGINT)  # KeyboardInterrupt through the with block
    elif how == "sigkill":
        holder.kill()
    else:
        holder.stdin.write("\n")
        holder.stdin.flush()
    holder.communicate(timeout=60)
    assert holder.returncode != 0 if how != "return" else holder.returncode == 0
    # a SIGKILLed holder leaves its file, not its lock; every other exit removes the file as well
    assert (run_dir / LOCK_NAME).exists() == (how == "sigkill")
    with RunDirLock(run_dir):  # a later resume is not blocked
        pass
    assert list(run_dir.iterdir()) == []


def test_a_dir_that_cannot_be_a_run_dir_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    cases = {tmp_path / "file": "exists and is not a directory"}
    if Path("/proc/self").is_dir():
        cases[Path("/proc/self/archlab_run")] = "cannot be created"
    for path, why in cases.items():
        with pytest.raises(ConfigError) as e:
            RunDirLock(path).acquire()
        assert "\n" not in str(e.value) and str(path) in str(e.value) and why in str(e.value)


def test_a_read_only_run_dir_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        for path in (ro, ro / "new_run"):
            with pytest.raises(ConfigError) as e:
                RunDirLock(path).acquire()
            msg = str(e.value)
            assert "\n" not in msg and str(path) in msg and "Read-only file system" in msg, msg


# ------------------------------------------------------------------------------------------ two trainers, one dir


def test_a_second_trainer_on_a_running_run_dir_is_refused_and_a_killed_one_resumes(cli_env, train_cli, cache_dir,
                                                                                   tmp_path):
    """The first trainer is another process (it is killed); the second ones and the resume run in this process
    (conftest's train_cli), as `python -m experiments.train` would."""
    run = tmp_path / "run"
    args = [*TINY, "train.steps=3000", "train.ckpt_interval=50", "train.eval_interval=1000",
            f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}"]
    first = subprocess.Popen([PYTHON, "-m", "experiments.train", *args], cwd=REPO, env=cli_env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not any(run.glob("checkpoints/step_*/state.pt")) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.poll() is None, "the first trainer ended before the test could contend with it"
        for extra in ([], ["train.resume=true"]):  # a second start, and a resume while the first still trains
            second = train_cli(*args, *extra)
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 2 and len(lines) == 1 and str(run) in lines[0], second.stderr[-2000:]
            if extra:  # (a second start is refused earlier, by the precheck: the dir already holds a run)
                assert lines[0].startswith("config error: hydra.run.dir: run dir ")  # the precheck names the key
                assert "in use by another process" in lines[0]
                assert f"(pid {first.pid})" in lines[0], lines
        assert first.poll() is None, "the refused trainers must not have stopped the first"
    finally:
        first.kill()  # SIGKILL: its lock file stays, its lock does not
        first.communicate(timeout=60)
    assert (run / LOCK_NAME).exists()
    last = max(int(p.name.split("_")[1]) for p in run.glob("checkpoints/step_*"))
    # the resume that follows is not blocked; its budget ends a few steps after the last checkpoint (test time)
    resumed = train_cli(*args, "train.resume=true", f"train.steps={last + 5}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == last + 5
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if "train/loss" in line]
    assert steps == list(range(1, last + 6))  # one writer throughout: no step twice, none lost
    assert not (run / LOCK_NAME).exists()
