"""A findings command killed without notice (SIGKILL, the machine or the session going away) still has its attempt's
seconds in finding.json up to its last heartbeat; the next --resume or --from-sweep counts that attempt as killed,
and the doc says so (experiments/findings/attempts.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time

import pytest

from experiments.findings import attempts
from experiments.findings.attempts import Attempt, killed_text, settled
from experiments.findings.cli import main
from experiments.findings.doc import as_run

from .conftest import PYTHON, REPO

KILLED_COMMAND = textwrap.dedent("""
    import sys, time
    from experiments.findings import attempts, cli
    attempts.HEARTBEAT_S = 0.05
    cli.run_sweep = lambda argv: time.sleep(600)   # a sweep that is still training when the kill comes
    cli.main(["rope_vs_learned", "--smoke", "--out-dir", sys.argv[1], "--doc", sys.argv[2]])
""")


def _read(path):
    return json.loads(path.read_text())


def test_a_killed_command_leaves_its_seconds_and_resume_counts_them(tmp_path, monkeypatch):
    sweep, doc = tmp_path / "s", tmp_path / "doc.md"
    proc = subprocess.Popen([PYTHON, "-c", KILLED_COMMAND, str(sweep), str(doc)], cwd=REPO,
                            env={**os.environ, "WANDB_MODE": "disabled"}, stderr=subprocess.PIPE, text=True)
    t0, deadline = time.monotonic(), time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:  # every read must find whole JSON: the heartbeat replaces the file, it never writes into it
            beat = _read(sweep / "finding.json").get("running", {}).get("wall_s", 0.0)
        except FileNotFoundError:
            beat = 0.0
        if beat >= 0.3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    alive = time.monotonic() - t0
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    left = _read(sweep / "finding.json")
    assert left["attempts"] == 1 and left["running"]["source"] == "heartbeat"
    assert 0.3 <= left["running"]["wall_s"] < alive and left.get("wall_s", 0.0) == 0.0

    from experiments.findings import cli

    monkeypatch.setattr(cli, "run_sweep", lambda argv: (1, 3.0))  # the resumed sweep: 3 s, no run to judge
    assert main(["rope_vs_learned", "--resume", "--out-dir", str(sweep), "--doc", str(doc)]) == 1
    meta = _read(sweep / "finding.json")
    assert "running" not in meta and meta["attempts"] == 2 and meta["train_rc"] == 1
    assert meta["killed"] == [left["running"]]
    assert meta["wall_s"] == pytest.approx(left["running"]["wall_s"] + 3.0)


def test_the_heartbeat_writes_the_elapsed_seconds_and_close_adds_them(tmp_path):
    meta = {"name": "x", "attempts": 2, "wall_s": 10.0, "running": {"since": "t", "wall_s": 4.0, "source": "heartbeat"}}
    with Attempt(tmp_path, meta, every=0.02) as attempt:
        time.sleep(0.15)
        beat = _read(tmp_path / "finding.json")
        closed = attempt.close(0, 7.5)
    assert beat["attempts"] == 3 and beat["killed"] == [meta["running"]] and beat["wall_s"] == 14.0
    assert 0.02 <= beat["running"]["wall_s"] <= 1.0
    assert closed == _read(tmp_path / "finding.json")
    assert "running" not in closed and closed["wall_s"] == 14.0 + 7.5 and closed["train_rc"] == 0
    assert meta["attempts"] == 2 and meta["wall_s"] == 10.0  # the caller's dict is not changed


def test_settled_counts_an_open_attempt_once_and_leaves_a_closed_meta_alone():
    closed = {"attempts": 2, "wall_s": 5.0}
    assert settled(closed) == closed and killed_text(closed) == ""
    open_ = {"attempts": 2, "wall_s": 5.0, "running": {"since": "t", "wall_s": 2.5, "source": "heartbeat"}}
    s = settled(open_)
    assert s["wall_s"] == 7.5 and s["killed"] == [open_["running"]] and "running" not in s
    assert settled(s) == s and "running" in open_


def test_the_doc_says_how_each_killed_attempt_was_counted():
    beat = {"since": "t", "wall_s": 1.0, "source": "heartbeat"}
    told = {"since": "t", "wall_s": 9.0, "source": "the run logs' last checkpoint"}
    assert killed_text({"killed": [beat]}) == ("; 1 of them killed without notice (the machine or the session went "
                                               f"away): counted up to its last heartbeat (at most "
                                               f"{attempts.HEARTBEAT_S:.0f} s short)")
    two = killed_text({"killed": [beat, told]})
    assert two.startswith("; 2 of them killed") and "1 counted up to its last heartbeat" in two
    assert two.endswith("one counted as the run logs' last checkpoint")
    meta = {"attempts": 3, "wall_s": 3700.0, "killed": [beat, told], "cpus": 2, "launcher": "joblib_2", "jobs": 2}
    wall = next(line for line in as_run(meta, []) if line.startswith("- Wall time"))
    assert "1 h 01 min" in wall and f"the sum of 3 attempts: stopped, then resumed with `--resume`{two})." in wall
