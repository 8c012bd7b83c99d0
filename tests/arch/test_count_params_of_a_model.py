"""`count_params` takes a built model as well as its config (README: `count_params(model)`), and refuses anything
else with a TypeError naming what it takes. The reference is torch's own count of the model's parameters."""

from __future__ import annotations

import pytest
import torch

from arch import EncDecConfig, ModelConfig, PosConfig, build_model, count_params


def numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied tensor once


@pytest.mark.parametrize("cfg", [
    ModelConfig(vocab_size=97, n_ctx=16, d_model=16, n_layers=2, n_heads=2, pos=PosConfig(kind="rope"),
                norm_type="rmsnorm", activation="swiglu"),
    ModelConfig(vocab_size=97, n_ctx=16, d_model=16, n_layers=1, n_heads=2, tie_embeddings=False),
    EncDecConfig(vocab_size=61, n_ctx=16, d_model=16, n_encoder_layers=1, n_decoder_layers=2, n_heads=2),
], ids=["rope-swiglu", "untied", "encdec"])
def test_a_model_counts_as_its_config(cfg):
    model = build_model(cfg)
    assert count_params(model) == numel(model) == count_params(cfg)
    assert count_params(model, non_embedding=True) == count_params(cfg, non_embedding=True) < numel(model)


@pytest.mark.parametrize("bad", [torch.nn.Linear(2, 2), {"d_model": 16}, None])
def test_anything_else_is_a_type_error_naming_what_it_takes(bad):
    with pytest.raises(TypeError, match="ModelConfig, an EncDecConfig or a model built from one"):
        count_params(bad)
