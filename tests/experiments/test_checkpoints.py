"""Checkpoints: safetensors weights beside the training state, step dirs with keep_last_k, best by val/loss, and
load_run picking a run back up."""

from __future__ import annotations

import json

import pytest
import torch

from experiments import load_run
from experiments.use.load import RunLoadError
from experiments.run.train import train


def _weights(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # reads without pickle

    return load_file(str(path))


def test_keep_last_k_best_and_load_run(make_cfg, tmp_path):
    run = tmp_path / "run"
    s = train(make_cfg("train.steps=6", "train.eval_interval=1", "train.ckpt_interval=1", "train.keep_last_k=6"))
    assert s["status"] == "completed"
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step_*")) == [f"step_{i:08d}" for i in range(1, 7)]
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "val/loss" in line]
    best_step = min(evals, key=lambda r: r["val/loss"])["step"]
    best = _weights(ckpts / "best.safetensors")
    at_best = _weights(ckpts / f"step_{best_step:08d}" / "model.safetensors")
    assert best.keys() == at_best.keys() and all(torch.equal(best[k], at_best[k]) for k in best)
    assert "lm_head.weight" not in best  # tied to wte.weight: stored once

    model, tok, cfg = load_run(run)  # best
    assert all(torch.equal(model.state_dict()[k], best[k]) for k in best)
    assert not model.training and cfg["model"]["d_model"] == 32 and tok.vocab_size == cfg["model"]["vocab_size"]
    last, _, _ = load_run(run, which="last")
    final = _weights(ckpts / "step_00000006" / "model.safetensors")
    assert all(torch.equal(last.state_dict()[k], final[k]) for k in final)
    # the loaded model reproduces the run's final val/loss on the same val windows
    from experiments.config.check import validate
    from experiments.run.eval_lm import evaluate_model
    from experiments.data.cache import prepare_data

    c = validate(make_cfg())
    data = prepare_data(c["data"], c["tokenizer"], c["data"]["cache_dir"]).data
    got = evaluate_model(last, data.val, n_ctx=32, batch_size=4, max_batches=2, bytes_per_token=data.bytes_per_token, device="cpu")
    assert got["val/loss"] == pytest.approx(s["final_val_loss"], abs=1e-6)


def test_keep_last_k_prunes(make_cfg, tmp_path):
    train(make_cfg("train.steps=5", "train.ckpt_interval=1", "train.keep_last_k=2"))
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")) == ["step_00000004", "step_00000005"]


def test_load_run_errors_are_one_line(make_cfg, tmp_path):
    with pytest.raises(RunLoadError, match="no config.yaml"):
        load_run(tmp_path)
    train(make_cfg())
    with pytest.raises(RunLoadError, match=r"no checkpoint at step 2 \(steps kept: 3\)"):
        load_run(tmp_path / "run", which=2)
    with pytest.raises(RunLoadError, match="choose from best, last"):
        load_run(tmp_path / "run", which="first")
