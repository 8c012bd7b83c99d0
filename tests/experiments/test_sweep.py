"""Sweeps end to end (slow): a named experiment as a Hydra multirun with the joblib launcher, and the demo."""

from __future__ import annotations

import json
import subprocess

import pytest

from .conftest import PYTHON, REPO, TINY

pytestmark = pytest.mark.slow


def test_pos_encodings_experiment_multirun_with_joblib(cli_env, cache_dir, tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run(
        [PYTHON, "-m", "experiments.train", "-m", "experiment=pos_encodings", "hydra/launcher=joblib_2",
         *[a for a in TINY if not a.startswith("train.steps=")], "train.tokens=400", "train.eval_interval=100", f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}"],
        cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]
    assert len(summaries) == 6 * 3
    assert {s["status"] for s in summaries} == {"completed"}
    assert {s["tokens"] for s in summaries} == {4 * 4 * 32}  # one token budget for every run
    kinds = sorted(s["run_name"] for s in summaries)
    assert sum("model/pos=rope" in k for k in kinds) == 3
    assert f"python -m experiments.compare {sweep}" in proc.stderr
    auto_report = sweep / "report" / "report.html"  # built by the sweep callback at the end of the multirun
    assert f"report: {auto_report}" in proc.stderr and auto_report.stat().st_size > 0

    from experiments.compare import build_report

    report = build_report([str(sweep)], tmp_path / "report", by=["model.pos.kind"])
    assert report.exists() and report.stat().st_size > 0


def test_demo_quick(cache_dir, tmp_path, capsys):
    from experiments.demo import main

    out = tmp_path / "demo"
    rc = main(["--quick", "--tokens", "3000", "--out", str(out), "--cache-dir", str(cache_dir), "--jobs", "2",
               "train.eval_interval=10", "train.eval_batches=2"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "vocab size      1024" in text and "bytes/token" in text and "longest tokens" in text
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["0_model.pos=learned", "1_model.pos=rope", "report"]
    assert f"report: {out / 'report' / 'report.html'}" in text
