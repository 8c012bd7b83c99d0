"""Ctrl-C and SIGTERM at a random moment of the work of `bpe train` (its counting workers) and `bpe encode` (its
encoding, streamed into a temp file) always end the same way (issue 31): within a bound, with exit 130 (SIGINT) or
143 (SIGTERM) and one line on stderr, no process of the command left (a /proc scan of its process group: workers
included, zombies included), and the output directory exactly as it was (no output, no temp file, no directory).

The signal goes to the whole process group, as a terminal's Ctrl-C does (the workers get it too). Each run is one
table row with its own seed, so a failure names the delay that caused it. 5 runs by default, 50 per command in the
slow tier. The corpus is generated here (14 MB of Zipf-distributed words: the counting pool is used from
MIN_POOL_TASKS 1 MB chunks on), long enough that each command is still at work MAX_DELAY_S after it began; a run
whose work had ended before the signal fails as a broken premise, not as a pass.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tokenizer.corpus import embedded_text
from tokenizer.train import train_bpe_from_iterator

REPO = Path(__file__).resolve().parents[2]
MAX_DELAY_S = 0.5  # the signal comes 0 to this many s after the work began (each command's work takes longer)
STOP_BOUND_S = 30.0  # from the signal to the exit (the pool's own worst case is 2 x KILL_AFTER_S)
EXIT = {signal.SIGINT: (130, "bpe: interrupted"), signal.SIGTERM: (143, "bpe: terminated")}

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _corpus(path: Path, n_bytes: int) -> None:
    rnd = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyzéü"
    words = ["".join(rnd.choices(letters, k=rnd.randint(1, 12))) for _ in range(30000)]
    cum, total = [], 0.0
    for i in range(len(words)):
        total += 1 / (i + 1)
        cum.append(total)
    with open(path, "w", encoding="utf-8") as f:
        size = 0
        while size < n_bytes:
            line = " ".join(rnd.choices(words, cum_weights=cum, k=1000)) + f". {rnd.randint(0, 9999)}\n"
            size += f.write(line)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("interrupt")
    corpus = d / "corpus.txt"
    # 14 MB (3.5 MB four times): 14 counting tasks, ~1.5 s of counting with 2 workers, ~2 s of encoding on this
    # CPU; 3.5 MB took less than MAX_DELAY_S of either (a third of the train runs came after the counting)
    _corpus(d / "part.txt", 3_500_000)
    corpus.write_text((d / "part.txt").read_text(encoding="utf-8") * 4, encoding="utf-8")
    tok = train_bpe_from_iterator([embedded_text()], 512, ["<|endoftext|>"], workers=1, progress=False)
    tok.save(d / "tokenizer.json")
    return {"corpus": corpus, "tokenizer": d / "tokenizer.json"}


def _stat(pid: str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    return s[s.rindex(")") + 2:].split()


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process in process group `pgid` (zombies too)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            fields = _stat(d)
            if fields is not None and int(fields[2]) == pgid:
                out.append((int(d), fields[0]))
    return out


def has_children(pid: int) -> bool:
    return any((f := _stat(d)) is not None and int(f[1]) == pid for d in os.listdir("/proc") if d.isdigit())


@contextmanager
def sigint_by_default():
    """The command must get SIGINT's default disposition whatever runs this suite: a shell starts background jobs
    with SIGINT ignored, and an ignored signal stays ignored across exec (Python then installs no handler)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupt_once(argv: list[str], out_dir: Path, working, sig: int, delay: float) -> dict:
    """Start `bpe argv` in its own process group, wait until `working(pid)` says its work has begun, wait `delay`,
    send `sig` to the group; return how it ended."""
    before = sorted(os.listdir(out_dir))
    with sigint_by_default():
        p = subprocess.Popen([sys.executable, "-m", "tokenizer", *argv], cwd=REPO, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not working(p.pid):
            assert p.poll() is None, f"bpe ended (exit {p.returncode}) before its work began: {p.stderr.read()}"
            assert time.monotonic() < deadline, "the work never began"
            time.sleep(0.005)
        time.sleep(delay)
        in_work = working(p.pid)
        os.killpg(p.pid, sig)
        start = time.monotonic()
        try:
            err = p.communicate(timeout=STOP_BOUND_S)[1]
        except subprocess.TimeoutExpired:
            pytest.fail(f"bpe {argv[0]} still running {STOP_BOUND_S} s after {signal.Signals(sig).name} "
                        f"(sent {delay:.2f} s into its work): {group_members(p.pid)}")
        took = time.monotonic() - start
        left = group_members(p.pid)
        deadline = time.monotonic() + 5  # a process between its exit and its removal from the group
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = group_members(p.pid)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    return {"rc": p.returncode, "err": err, "took": took, "left": left, "in_work": in_work,
            "after": sorted(os.listdir(out_dir)), "before": before}


def _train(inputs: dict[str, Path], out_dir: Path) -> tuple[list[str], object]:
    argv = ["train", str(inputs["corpus"]), "--vocab-size", "3000", "--workers", "2", "--out", str(out_dir / "tok")]
    return argv, has_children  # the counting workers are its only children


def _encode(inputs: dict[str, Path], out_dir: Path) -> tuple[list[str], object]:
    argv = ["encode", "--tokenizer", str(inputs["tokenizer"]), str(inputs["corpus"]), "--out", str(out_dir / "t.bin")]
    return argv, lambda _pid: any(name.endswith(".tmp") for name in os.listdir(out_dir))  # the ids' temp file


COMMANDS = {"train": _train, "encode": _encode}
SIGNALS = (signal.SIGINT, signal.SIGTERM)
DEFAULT_RUNS = [("train", signal.SIGINT, 0), ("train", signal.SIGTERM, 1), ("train", signal.SIGINT, 2),
                ("encode", signal.SIGINT, 3), ("encode", signal.SIGTERM, 4)]
SLOW_RUNS = [(cmd, SIGNALS[i % 2], 1000 + 100 * j + i) for j, cmd in enumerate(COMMANDS) for i in range(50)]


def check_run(inputs: dict[str, Path], tmp_path: Path, command: str, sig: int, seed: int) -> None:
    delay = random.Random(seed).uniform(0.0, MAX_DELAY_S)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    argv, working = COMMANDS[command](inputs, out_dir)
    got = interrupt_once(argv, out_dir, working, sig, delay)
    code, line = EXIT[sig]
    what = f"bpe {command}, {signal.Signals(sig).name} {delay:.2f} s into its work"
    assert got["in_work"], f"{what}: the work had ended before the signal was sent (the test's input is too small)"
    assert got["rc"] == code, f"{what}: exit {got['rc']}, stderr {got['err'][-500:]!r}"
    assert got["err"].strip().splitlines()[-1] == line and "Traceback" not in got["err"], what
    assert got["left"] == [], f"{what}: processes left in its group: {got['left']}"
    assert got["after"] == got["before"], f"{what}: the output dir changed: {got['after']}"
    assert got["took"] < STOP_BOUND_S


@pytest.mark.parametrize("command,sig,seed", DEFAULT_RUNS, ids=lambda v: getattr(v, "name", v))
def test_a_stop_signal_during_the_work_exits_cleanly(inputs, tmp_path, command, sig, seed):
    check_run(inputs, tmp_path, command, sig, seed)


@pytest.mark.slow
@pytest.mark.parametrize("command,sig,seed", SLOW_RUNS, ids=lambda v: getattr(v, "name", v))
def test_a_stop_signal_during_the_work_exits_cleanly_many_times(inputs, tmp_path, command, sig, seed):
    check_run(inputs, tmp_path, command, sig, seed)
