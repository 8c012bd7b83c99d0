"""A NaN/inf loss ends the run as `diverged` (summary.json and return value), train() returns normally, and in a
multirun the other jobs still complete."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from experiments.run.train import train

from .conftest import PYTHON, REPO, TINY


def test_huge_learning_rate_diverges_and_returns(make_cfg, tmp_path):
    summary = train(make_cfg("optim.lr=1e30", "schedule.warmup_steps=0", "train.grad_clip=null", "train.steps=20"))
    assert summary["status"] == "diverged"
    assert summary["steps"] < 20 and summary["diverged_at_step"] == summary["steps"] + 1
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["status"] == "diverged"
    last = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["step"] == summary["diverged_at_step"] and not math.isfinite(last["train/loss"])


def test_injected_inf_after_an_eval_keeps_the_earlier_val_loss(make_cfg, monkeypatch):
    from arch.model import Transformer

    real_loss = Transformer.loss
    calls = {"n": 0}

    def loss(self, ids, targets):
        calls["n"] += 1
        out = real_loss(self, ids, targets)
        return out * float("inf") if calls["n"] == 4 else out  # the 4th training step

    monkeypatch.setattr(Transformer, "loss", loss)
    summary = train(make_cfg("train.steps=6", "train.eval_interval=2"))
    assert summary["status"] == "diverged" and summary["diverged_at_step"] == 4
    assert summary["steps"] == 3
    assert math.isfinite(summary["final_val_loss"])  # from the eval at step 2
    assert math.isfinite(summary["final_train_loss"])


def test_healthy_run_is_not_flagged(make_cfg):
    assert train(make_cfg())["status"] == "completed"


@pytest.mark.slow
def test_a_diverging_job_does_not_stop_the_sweep(cli_env, tmp_path):
    proc = subprocess.run(
        [PYTHON, "-m", "experiments.train", "-m", *TINY, "schedule.warmup_steps=0", "train.grad_clip=null",
         "train.steps=10", "train.eval_interval=10", "optim.lr=1e30,1e-3", f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    statuses = sorted(json.loads(p.read_text())["status"] for p in (tmp_path / "sweep").glob("*/summary.json"))
    assert statuses == ["completed", "diverged"]
    assert "python -m experiments.compare" in proc.stderr


def test_a_failing_job_does_not_end_the_sweep(monkeypatch, caplog):
    # Hydra's BasicSweeper re-raises a job's exception after the batch, which skipped the sweep callback
    # (status lines + report); in a multirun, main() logs the failure and returns instead.
    from omegaconf import OmegaConf

    from experiments.run import train as train_mod

    def boom(cfg):
        raise RuntimeError("out of disk")

    monkeypatch.setattr(train_mod, "train", boom)
    cfg = OmegaConf.create({})
    monkeypatch.setattr(train_mod, "is_multirun", lambda: True)
    assert train_mod.main.__wrapped__(cfg) is None
    assert "out of disk" in caplog.text
    monkeypatch.setattr(train_mod, "is_multirun", lambda: False)  # a single run still raises
    with pytest.raises(RuntimeError, match="out of disk"):
        train_mod.main.__wrapped__(cfg)
