"""ModelConfig / PosConfig: derived sizes, dict round trip, and validation messages that list valid choices."""

from __future__ import annotations

import pytest

from arch.components.attention import ATTENTION
from arch.components.block import BLOCK_KINDS, BLOCKS
from arch.components.init import INITS
from arch.components.mlp import MLPS
from arch.components.norms import NORMS
from arch.components.positional import POSITIONAL, ROPE_SCALING
from arch.config import (ACTIVATIONS, ATTENTION_IMPLS, BLOCK_KINDS as BLOCK_KIND_NAMES, INIT_SCHEMES,
                         NORM_PLACEMENTS, NORM_TYPES, POS_KINDS, QK_NORMS, ROPE_SCALINGS, ModelConfig, PosConfig)

BASE = dict(vocab_size=100, n_ctx=16, d_model=32, n_layers=2, n_heads=4)


def test_derived_sizes():
    cfg = ModelConfig(**BASE)
    assert (cfg.d_head, cfg.d_mlp) == (8, 128)
    cfg = ModelConfig(**BASE, d_head=5, d_mlp=7)
    assert (cfg.d_head, cfg.d_mlp) == (5, 7)
    # d_head given explicitly: d_model need not divide by n_heads
    assert ModelConfig(**{**BASE, "d_model": 30}, d_head=8).d_head == 8


def test_defaults_are_gpt2():
    cfg = ModelConfig(**BASE)
    assert (cfg.pos.kind, cfg.norm, cfg.norm_type, cfg.activation, cfg.bias, cfg.tie_embeddings) == (
        "learned", "pre", "layernorm", "gelu", True, True)
    assert cfg.layer_norm_eps == 1e-5 and cfg.init == "gpt2" and cfg.dropout == 0.0
    assert (cfg.pos.num_buckets, cfg.pos.max_distance, cfg.pos.rope_base) == (32, 128, 10000.0)
    assert (cfg.n_kv_heads, cfg.window, cfg.qk_norm, cfg.block) == (None, None, None, "sequential")
    assert (cfg.pos.rope_scaling, cfg.pos.rope_scaling_factor, cfg.pos.original_n_ctx) == (None, 1.0, None)


def test_dict_round_trip_and_nested_pos():
    d = {**BASE, "pos": {"kind": "relative", "num_buckets": 16}, "norm": "post", "attention": "manual"}
    cfg = ModelConfig.from_dict(d)
    assert cfg.pos == PosConfig(kind="relative", num_buckets=16)
    out = cfg.to_dict()
    assert out["pos"] == {"kind": "relative", "num_buckets": 16, "max_distance": 128, "rope_base": 10000.0,
                          "scale": None, "rope_scaling": None, "rope_scaling_factor": 1.0, "original_n_ctx": None}
    assert ModelConfig.from_dict(out) == cfg


def test_dict_round_trip_of_the_decoder_knobs():
    d = {**BASE, "n_kv_heads": 2, "window": 5, "qk_norm": "rmsnorm", "block": "parallel", "init": "xavier",
         "pos": {"kind": "rope", "rope_scaling": "yarn", "rope_scaling_factor": 4.0, "original_n_ctx": 8}}
    cfg = ModelConfig.from_dict(d)
    out = cfg.to_dict()
    assert {k: out[k] for k in ("n_kv_heads", "window", "qk_norm", "block", "init")} == {
        "n_kv_heads": 2, "window": 5, "qk_norm": "rmsnorm", "block": "parallel", "init": "xavier"}
    assert (out["pos"]["rope_scaling"], out["pos"]["rope_scaling_factor"], out["pos"]["original_n_ctx"]) == (
        "yarn", 4.0, 8)
    assert ModelConfig.from_dict(out) == cfg and ModelConfig.from_dict(out) != ModelConfig(**BASE)


@pytest.mark.parametrize("d, key", [({**BASE, "n_embd": 3}, "n_embd"), ({**BASE, "pos": {"knd": "rope"}}, "knd")])
def test_unknown_keys_are_named_with_valid_keys(d, key):
    with pytest.raises(ValueError) as err:
        ModelConfig.from_dict(d)
    assert repr(key) in str(err.value)
    assert "'kind'" in str(err.value) or "'d_model'" in str(err.value)  # the valid keys are listed


@pytest.mark.parametrize("field, value, choices", [
    ("activation", "tanh", ACTIVATIONS),
    ("norm", "middle", NORM_PLACEMENTS),
    ("norm_type", "batchnorm", NORM_TYPES),
    ("attention", "flash", ATTENTION_IMPLS),
    ("init", "kaiming", INIT_SCHEMES),
    ("block", "serial", BLOCK_KIND_NAMES),
    ("qk_norm", "l2", QK_NORMS),
])
def test_unknown_choice_lists_valid_ones(field, value, choices):
    with pytest.raises(ValueError) as err:
        ModelConfig(**BASE, **{field: value})
    msg = str(err.value)
    assert repr(value) in msg and all(c in msg for c in choices)


def test_nullable_choices_say_none_is_valid():
    with pytest.raises(ValueError, match=r"unknown qk_norm 'none'; choose from \['layernorm', 'rmsnorm'\] or None"):
        ModelConfig(**BASE, qk_norm="none")
    with pytest.raises(ValueError, match=r"choose from \['linear', 'ntk', 'yarn'\] or None"):
        PosConfig(kind="rope", rope_scaling="dynamic")


@pytest.mark.parametrize("kw, message", [
    (dict(n_kv_heads=3), "n_kv_heads must be a positive divisor of n_heads=4"),
    (dict(n_kv_heads=0), "n_kv_heads must be a positive divisor"),
    (dict(n_kv_heads=8), "n_kv_heads must be a positive divisor"),
    (dict(window=0), "window must be a positive int"),
    (dict(window=2.5), "window must be a positive int"),
    (dict(d_head=2, pos={"kind": "rope", "rope_scaling": "ntk", "rope_scaling_factor": 2.0}), "d_head must be > 2"),
])
def test_decoder_knob_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        ModelConfig(**{**BASE, **kw})
    for ok in (1, 2, 4, None):
        assert ModelConfig(**BASE, n_kv_heads=ok).n_kv_heads == ok


@pytest.mark.parametrize("kw, message", [
    (dict(kind="alibi", rope_scaling="linear"), "needs pos.kind='rope'"),
    (dict(kind="rope", rope_scaling="linear", rope_scaling_factor=0.5), "rope_scaling_factor must be a number >= 1"),
    (dict(kind="rope", rope_scaling_factor=4.0), "rope_scaling_factor=4.0 needs pos.rope_scaling"),
    (dict(kind="rope", rope_scaling="linear", rope_scaling_factor=2.0, original_n_ctx=64),
     "read by rope_scaling='yarn'"),
    (dict(kind="rope", rope_scaling="yarn", rope_scaling_factor=2.0, original_n_ctx=0), "original_n_ctx must be"),
])
def test_rope_scaling_validation(kw, message):
    with pytest.raises(ValueError, match=message):
        PosConfig(**kw)


def test_unknown_pos_kind_lists_valid_ones():
    with pytest.raises(ValueError) as err:
        ModelConfig(**BASE, pos={"kind": "xpos"})
    assert all(k in str(err.value) for k in POS_KINDS)


@pytest.mark.parametrize("field", ["vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "d_head", "d_mlp"])
@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_sizes(field, value):
    with pytest.raises(ValueError, match=field):
        ModelConfig(**{**BASE, field: value})


def test_indivisible_heads_and_odd_rope_head():
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        ModelConfig(**{**BASE, "n_heads": 3})
    with pytest.raises(ValueError, match="d_head must be even"):
        ModelConfig(**BASE, d_head=5, pos={"kind": "rope"})
    with pytest.raises(ValueError, match="dropout"):
        ModelConfig(**BASE, dropout=1.0)


def test_registries_match_config_choices():
    assert set(POSITIONAL) == set(POS_KINDS)
    assert set(BLOCKS) == set(NORM_PLACEMENTS)
    assert set(BLOCK_KINDS) == set(BLOCK_KIND_NAMES)
    assert all(set(kinds) == set(NORM_PLACEMENTS) for kinds in BLOCK_KINDS.values())
    assert set(QK_NORMS) <= set(NORMS)
    assert set(ROPE_SCALING) == set(ROPE_SCALINGS)
    assert set(NORMS) == set(NORM_TYPES)
    assert set(MLPS) == set(ACTIVATIONS)
    assert set(ATTENTION) == set(ATTENTION_IMPLS)
    assert set(INITS) == set(INIT_SCHEMES)


@pytest.mark.parametrize("max_distance", [8, 16])
def test_relative_max_distance_must_exceed_the_exact_buckets(max_distance):
    # with max_distance <= num_buckets // 2 the log-spaced buckets would be negative or nan (an index error or a
    # silently wrapped bias row at run time); the config refuses it up front
    with pytest.raises(ValueError, match="max_distance must be > num_buckets // 2 = 16"):
        PosConfig(kind="relative", num_buckets=32, max_distance=max_distance)
    PosConfig(kind="relative", num_buckets=32, max_distance=17)
    PosConfig(kind="rope", num_buckets=32, max_distance=max_distance)  # fields other kinds ignore
