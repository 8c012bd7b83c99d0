"""AdamW parameter groups (no decay on biases, norms, embeddings) and the warmup + decay schedules."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from experiments.config.schema import OptimConfig
from experiments.run.optim import build_optimizer, param_groups
from experiments.run.schedule import SCHEDULES, lr_at


@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_no_decay_on_biases_norms_and_embeddings(norm_type):
    cfg = ModelConfig(vocab_size=64, n_ctx=16, d_model=16, n_layers=2, n_heads=2, norm_type=norm_type,
                      pos=PosConfig(kind="learned"), tie_embeddings=True)
    model = build_model(cfg)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert decayed and all(n.endswith("weight") and ("attn" in n or "mlp" in n) for n in decayed), decayed
    assert "wte.weight" in kept and "pos.wpe.weight" in kept
    assert any("ln_1" in n for n in kept) and any(n.endswith("bias") for n in kept)
    assert len(decayed) + len(kept) == len(list(model.parameters()))  # every parameter once (tied lm_head too)


def test_optimizer_uses_the_config():
    model = build_model(ModelConfig(vocab_size=64, n_ctx=16, d_model=16, n_layers=1, n_heads=2))
    opt = build_optimizer(model, OptimConfig(name="adamw", lr=0.01, betas=[0.8, 0.9], eps=1e-6, weight_decay=0.2,
                                             decay_embeddings=False), torch.device("cpu"))
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.2, 0.0] and opt.param_groups[0]["betas"] == (0.8, 0.9)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_warmup_then_decay_to_min_ratio(name):
    kw = dict(name=name, base_lr=1.0, total_steps=100, warmup_steps=10, min_lr_ratio=0.1)
    lrs = [lr_at(s, **kw) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)  # linear warmup, never 0
    assert all(a < b for a, b in zip(lrs[:10], lrs[1:10]))
    if name == "constant":
        assert lrs[10:] == [1.0] * 90
    else:
        assert lrs[-1] == pytest.approx(0.1)
        assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
        assert min(lrs) == pytest.approx(0.1)


def test_no_warmup_starts_near_peak():
    assert lr_at(0, name="cosine", base_lr=2.0, total_steps=1000, warmup_steps=0, min_lr_ratio=0.0) == pytest.approx(2.0, rel=1e-4)


def test_unknown_schedule_lists_the_choices():
    with pytest.raises(ValueError, match="choose from"):
        lr_at(0, name="step", base_lr=1.0, total_steps=10)


@pytest.mark.parametrize("pos", ["learned", "relative"])
def test_decay_embeddings_decays_every_matrix_as_nanogpt(pos):
    """optim.decay_embeddings=true: the decay group is nanoGPT's configure_optimizers rule, every parameter with
    >= 2 dims (embeddings, the tied head and T5's relative-bias table included); norms and biases stay undecayed."""
    model = build_model(ModelConfig(vocab_size=64, n_ctx=16, d_model=16, n_layers=2, n_heads=2,
                                    pos=PosConfig(kind=pos), tie_embeddings=True))
    decay, no_decay = param_groups(model, 0.1, decay_embeddings=True)
    names = {id(p): n for n, p in model.named_parameters()}
    nanogpt = {n for n, p in model.named_parameters() if p.dim() >= 2}
    assert {names[id(p)] for p in decay["params"]} == nanogpt
    assert {names[id(p)] for p in no_decay["params"]} == {n for n, p in model.named_parameters() if p.dim() < 2}
    assert "wte.weight" in nanogpt and any("wpe" in n or "rel_bias" in n for n in nanogpt)


def test_decay_embeddings_default_is_off_and_the_config_sets_it():
    """The default keeps embeddings out of decay (conf/optim/adamw.yaml says false); decay_embeddings=true moves
    them, and nothing else, into the decayed group."""
    from experiments.config.compose import compose_config

    assert compose_config([]).optim.decay_embeddings is False
    model = build_model(ModelConfig(vocab_size=64, n_ctx=16, d_model=16, n_layers=1, n_heads=2))
    cfg = OptimConfig(name="adamw", lr=0.01, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1, decay_embeddings=False)
    old = build_optimizer(model, cfg, torch.device("cpu"))
    on = build_optimizer(model, dataclasses.replace(cfg, decay_embeddings=True), torch.device("cpu"))
    emb = {id(model.wte.weight), id(model.pos.wpe.weight)}
    assert not emb & {id(p) for p in old.param_groups[0]["params"]}
    assert emb <= {id(p) for p in on.param_groups[0]["params"]}
    assert len(on.param_groups[0]["params"]) == len(old.param_groups[0]["params"]) + 2
