"""`train.flops`: each run trains for as many tokens as its own FLOPs/token allows (equal compute across shapes),
takes precedence over `train.tokens`, and the summary says which budget was held equal."""

from __future__ import annotations

import math

import pytest

from experiments.config.errors import ConfigError
from experiments.run.train import train

B, T, D, H, VOCAB = 4, 32, 32, 2, 1024  # TINY: batch 4, n_ctx 32, d_model 32, 2 heads; tokenizer vocab 1024


@pytest.mark.parametrize("n_layers", [1, 3])
def test_flops_budget_sets_the_tokens_of_each_shape(make_cfg, tmp_path, n_layers):
    budget = 4e8
    s = train(make_cfg(f"model.n_layers={n_layers}", f"train.flops={budget}", "train.tokens=999999"))
    # FLOPs per training token written out (PaLM appendix B): 6 N + 12 L H d_head T, N = non-embedding params +
    # the unembedding; non_embedding_params == numel is tested in tests/arch/test_accounting.py
    fpt = 6 * (s["non_embedding_params"] + VOCAB * D) + 12 * n_layers * H * (D // H) * T
    steps = math.ceil(budget / fpt / (B * T))
    assert s["budget"] == "flops" and s["steps"] == steps and s["tokens"] == steps * B * T
    assert s["flops"] == pytest.approx(fpt * s["tokens"])
    assert steps > 3  # the budget, not TINY's train.steps=3, decided the length


def test_equal_flops_gives_the_deeper_model_fewer_tokens(make_cfg, tmp_path):
    shallow = train(make_cfg("model.n_layers=1", "train.flops=4e8", run_dir=tmp_path / "a"))
    deep = train(make_cfg("model.n_layers=3", "train.flops=4e8", run_dir=tmp_path / "b"))
    assert deep["tokens"] < shallow["tokens"]
    assert deep["flops"] == pytest.approx(shallow["flops"], rel=0.05)  # equal up to the last step's rounding


def test_tokens_budget_is_recorded(make_cfg):
    s = train(make_cfg("train.tokens=300"))
    assert s["budget"] == "tokens" and s["tokens"] == math.ceil(300 / (B * T)) * B * T


@pytest.mark.parametrize("value", ["-1", "0", "abc"])
def test_bad_flops_is_one_config_error(make_cfg, value):
    with pytest.raises(ConfigError, match=r"^train\.flops: ") as e:
        train(make_cfg(f"train.flops={value}"))
    assert "\n" not in str(e.value)
