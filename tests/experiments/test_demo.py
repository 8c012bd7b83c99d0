"""The demo's sweep has seeds: every encoding runs with each seed, so the report's differences get intervals."""

from __future__ import annotations

import re

import pytest

from experiments.demo import main, sweep_defaults
from experiments.python_command import python_command


def test_default_sweep_is_four_encodings_by_three_seeds():
    assert sweep_defaults() == ("learned,sinusoidal,alibi,rope", "0,1,2")


def test_seeds_give_each_difference_an_interval(cache_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["--pos", "learned,rope", "--seeds", "0,1", "--tokens", "3000", "--out", str(out), "--cache-dir",
               str(cache_dir), "--jobs", "2", "train.eval_interval=10", "train.eval_batches=2",
               "train.extrap_max_tokens=1024"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "0_model.pos=learned,seed=0", "1_model.pos=rope,seed=0", "2_model.pos=learned,seed=1", "3_model.pos=rope,seed=1",
        "report"]
    assert "x 2 seeds" in text and "no confidence interval" not in text
    md = (out / "report" / "report.md").read_text()
    row = next(ln for ln in md.splitlines() if ln.startswith("| final val/loss | pos=rope |"))
    assert "| 2 |" in row and "no interval" not in row
    assert re.search(r"\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\] \| paired", row), row  # the difference's interval


@pytest.mark.slow  # (~11 s: a second demo; test_seeds_give_each_difference_an_interval runs it by default)
def test_one_seed_says_why_there_is_no_interval(cache_dir, tmp_path, capfd):
    rc = main(["--pos", "learned", "--seeds", "0", "--tokens", "2000", "--out", str(tmp_path / "demo"), "--cache-dir",
               str(cache_dir), "train.eval_interval=10", "train.eval_batches=2", "train.extrap_max_tokens=1024"])
    text, err = capfd.readouterr()  # the file descriptors: the runs' worker processes write there too
    assert rc == 0, text + err
    assert "one seed per encoding: the report's differences have no confidence interval (n=1)" in text
    # stdout has the results and the command to rebuild the report, runnable as printed; stderr (not a terminal
    # here) is quiet: no progress lines, no log lines (issue 30: only real warnings belong there)
    assert "  model.pos=learned" in text and "completed" in text
    assert f"compare by hand: {python_command()} -m experiments.compare {tmp_path / 'demo'}" in text
    assert err == "", err


def test_bad_max_steps_is_one_line_before_anything_runs(monkeypatch, tmp_path, capfd):
    monkeypatch.setenv("ARCHLAB_MAX_STEPS", "0")
    assert main(["--quick", "--out", str(tmp_path / "demo")]) == 2
    out, err = capfd.readouterr()
    assert err == "config error: ARCHLAB_MAX_STEPS (environment): must be an integer >= 1, got '0'\n" and out == ""
    assert not (tmp_path / "demo").exists()


def test_bad_seeds_are_one_line(capsys):
    assert main(["--seeds", "0,x"]) == 2
    assert capsys.readouterr().err.strip() == "config error: --seeds: comma-separated integers, got '0,x'"
