"""train(cfg) end to end on the embedded corpus with a tiny model: every position encoding and norm placement
runs 3 steps and leaves the run-dir files of docs/design.md; the same seed gives the same metrics."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from experiments.run.train import train

POS = ["learned", "sinusoidal", "relative", "alibi", "rope", "none"]
NORMS = ["pre", "post", "sandwich"]
SUMMARY_KEYS = {"status", "experiment", "run_name", "overrides", "seed", "final_val_loss", "best_val_loss",
                "final_val_bpb", "best_val_bpb", "final_train_loss", "params", "non_embedding_params", "tokens",
                "steps", "wall_time_s", "tokens_per_s", "mfu", "extrap"}


def read_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("pos", POS)
def test_every_position_encoding_trains(make_cfg, tmp_path, pos):
    summary = train(make_cfg(f"model/pos={pos}"))
    run = tmp_path / "run"
    assert summary["status"] == "completed"
    assert summary["steps"] == 3 and summary["tokens"] == 3 * 4 * 32
    assert math.isfinite(summary["final_val_loss"]) and math.isfinite(summary["final_train_loss"])
    assert json.loads((run / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert SUMMARY_KEYS <= set(summary)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["pos"]["kind"] == pos
    assert config["model"]["vocab_size"] == 1024  # from the tokenizer, not the preset's null
    rows = read_rows(run)
    train_rows = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3]
    for r in train_rows:
        for key in ("tokens", "flops", "time", "lr", "grad_norm", "grad_norm/layer_0", "grad_norm/layer_1", "tokens_per_s", "mfu"):
            assert key in r, key
        assert r["flops"] > 0 and r["grad_norm/layer_1"] > 0
    eval_rows = [r for r in rows if "val/loss" in r]
    assert len(eval_rows) == 1 and {"val/ppl", "val/bpb", "attn_entropy/layer_0"} <= set(eval_rows[0])
    assert any((run / "checkpoints").glob("step_*/model.safetensors"))


@pytest.mark.parametrize("norm", NORMS)
def test_every_norm_placement_trains(make_cfg, norm):
    summary = train(make_cfg(f"model.norm={norm}", "model.norm_type=rmsnorm" if norm == "sandwich" else "model.norm_type=layernorm"))
    assert summary["status"] == "completed" and math.isfinite(summary["final_val_loss"])


def test_same_seed_same_metrics_and_other_seed_differs(make_cfg, tmp_path):
    def losses(run_dir, seed):
        train(make_cfg(f"seed={seed}", run_dir=run_dir))
        return [(r["step"], r.get("train/loss"), r.get("grad_norm"), r.get("val/loss")) for r in read_rows(run_dir)]

    a = losses(tmp_path / "a", 0)
    b = losses(tmp_path / "b", 0)
    c = losses(tmp_path / "c", 1)
    assert a == b
    assert a != c


def test_token_budget_takes_precedence_over_steps(make_cfg):
    # 4 x 32 tokens per step: 300 tokens -> ceil(300 / 128) = 3 steps, whatever train.steps says
    summary = train(make_cfg("train.tokens=300", "train.steps=50"))
    assert summary["steps"] == 3 and summary["tokens"] == 384


def test_extrapolation_at_the_end(make_cfg):
    summary = train(make_cfg("model/pos=alibi", "train.extrap=end", "train.extrap_factors=[1,2]", "train.extrap_max_tokens=512"))
    assert set(summary["extrap"]) == {f"extrap/{m}/loss@{k}x" for m in ("nonoverlap", "sliding") for k in (1, 2)}
    assert all(math.isfinite(v) for v in summary["extrap"].values())


def test_model_shape_is_solved_for_the_budget(make_cfg, tmp_path):
    summary = train(make_cfg("model.shape={n_params:20000,n_layers:1,n_heads:2}", "train.steps=1", "train.eval_interval=1"))
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["model"]["n_layers"] == 1
    assert abs(summary["non_embedding_params"] - 20000) / 20000 < 0.15


@pytest.mark.slow
def test_torch_compile_path(make_cfg):
    summary = train(make_cfg("train.compile=true"))
    assert summary["status"] == "completed" and math.isfinite(summary["final_val_loss"])


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_cuda_bf16_run(make_cfg):
    summary = train(make_cfg("train.device=cuda", "train.dtype=auto"))
    assert summary["status"] == "completed" and summary["device"].startswith("cuda")
    assert math.isfinite(summary["final_val_loss"])


def test_n_ctx_longer_than_the_data_is_a_config_error_before_the_model_is_built(make_cfg, monkeypatch):
    # n_ctx=100000 on the embedded corpus: the causal mask alone would be 40 GB, so the data check must come first
    import arch

    from experiments.config.errors import ConfigError

    def no_model(*args, **kwargs):
        raise AssertionError("build_model called before the token counts were checked")

    monkeypatch.setattr(arch, "build_model", no_model)
    with pytest.raises(ConfigError, match="n_ctx"):
        train(make_cfg("train.n_ctx=100000", "model/pos=rope"))


def test_run_name_leaves_out_the_keys_the_sweep_dir_names_leave_out(monkeypatch, tmp_path):
    # docs/wandb.md: the wandb name of a pos_encodings job is `model/pos=rope,seed=1`, not `...,experiment=...`
    from omegaconf import OmegaConf

    from experiments.sweep import job

    hc = OmegaConf.create({
        "overrides": {"task": ["model/pos=rope", "seed=1", "experiment=pos_encodings", "logger=disabled",
                               "hydra/launcher=joblib_2"]},
        "job": {"config": {"override_dirname": {"exclude_keys": ["experiment", "logger", "hydra/launcher"]}}},
    })
    monkeypatch.setattr(job, "hydra_runtime", lambda: hc)
    name, overrides = job.run_identity(tmp_path / "3_model.pos=rope,seed=1")
    assert name == "model/pos=rope,seed=1"
    assert overrides == ["model/pos=rope", "seed=1", "experiment=pos_encodings", "logger=disabled"]


def test_files_a_run_writes_respect_the_umask(make_cfg, tmp_path):
    # mkstemp / mkdtemp alone make 0600 / 0700: summary.json, config.yaml and the checkpoints were private
    import os
    import stat

    old = os.umask(0o027)
    try:
        train(make_cfg())
    finally:
        os.umask(old)
    run = tmp_path / "run"
    files = ["summary.json", "config.yaml", "metrics.jsonl", "tokenizer.json", "checkpoints/best.safetensors",
             "checkpoints/step_00000003/model.safetensors", "checkpoints/step_00000003/state.pt"]
    assert {f: oct(stat.S_IMODE((run / f).stat().st_mode)) for f in files} == {f: oct(0o640) for f in files}
    assert oct(stat.S_IMODE((run / "checkpoints/step_00000003").stat().st_mode)) == oct(0o750)
