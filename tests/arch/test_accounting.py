"""arch.accounting and arch.info: closed-form counts against built models (every registry combination, and every
decoder knob: n_kv_heads x qk_norm x block x norm x bias), HF GPT-2 and FlopCounterMode; the sliding-window
attention term; the shape solver against brute force over nearby widths and depths."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from arch.accounting import (
    count_params,
    flops_per_token,
    kaplan_params,
    matmul_params,
    param_breakdown,
    shape_for,
    shape_report,
)
from arch.build import build_model
from arch.config import ACTIVATIONS, NORM_PLACEMENTS, NORM_TYPES, POS_KINDS, ModelConfig, PosConfig
from arch.info import PRESETS, format_table, info_row, main


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=37, n_ctx=8, d_model=16, n_layers=2, n_heads=2)
    base.update(kw)
    return ModelConfig(**base)


def numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied tensor once


# ---------------------------------------------------------------------------------------------------------
# count_params == the built model, for every registry combination

COMBOS = list(itertools.product(POS_KINDS, NORM_PLACEMENTS, NORM_TYPES, ACTIVATIONS, (True, False), (True, False)))


@pytest.mark.parametrize("pos,norm,norm_type,activation,bias,tie", COMBOS)
def test_count_params_matches_built_model(pos, norm, norm_type, activation, bias, tie):
    cfg = tiny(
        pos=PosConfig(kind=pos, num_buckets=6), norm=norm, norm_type=norm_type, activation=activation,
        bias=bias, tie_embeddings=tie,
    )  # fmt: skip
    model = build_model(cfg)
    assert count_params(cfg) == numel(model)


KNOB_COMBOS = list(itertools.product((None, 1, 2), (None, "layernorm", "rmsnorm"), ("sequential", "parallel"),
                                     NORM_PLACEMENTS, (True, False)))


@pytest.mark.parametrize("n_kv_heads,qk_norm,block,norm,bias", KNOB_COMBOS)
def test_count_params_matches_built_model_with_decoder_knobs(n_kv_heads, qk_norm, block, norm, bias):
    cfg = tiny(n_heads=4, n_kv_heads=n_kv_heads, qk_norm=qk_norm, block=block, norm=norm, bias=bias,
               norm_type="rmsnorm" if bias else "layernorm", window=3, pos=PosConfig(kind="relative", num_buckets=6))
    model = build_model(cfg)
    assert count_params(cfg) == numel(model)
    # non-embedding: all but wte and the relative table (an independent count over the built model)
    assert count_params(cfg, non_embedding=True) == numel(model) - cfg.vocab_size * 16 - 6 * 4


@pytest.mark.parametrize("pos", POS_KINDS)
def test_count_params_explicit_head_and_mlp_sizes(pos):
    # d_head * n_heads != d_model and a non-default d_mlp: the attention width and MLP width are free
    cfg = tiny(pos=PosConfig(kind=pos), n_heads=3, d_head=6, d_mlp=20, activation="swiglu", tie_embeddings=False)
    assert count_params(cfg) == numel(build_model(cfg))


@pytest.mark.parametrize("pos", POS_KINDS)
@pytest.mark.parametrize("tie", [True, False])
def test_non_embedding_drops_exactly_vocab_and_position_params(pos, tie):
    cfg = tiny(pos=PosConfig(kind=pos), tie_embeddings=tie)
    model = build_model(cfg)
    # independent count: every parameter that is not a vocab-sized matrix or a position parameter
    vocab_or_pos = {
        id(p) for name, p in model.named_parameters()
        if p.shape[0] == cfg.vocab_size or name.split(".")[-2] in ("wpe", "rel_bias")
    }  # fmt: skip
    expected = sum(p.numel() for p in model.parameters() if id(p) not in vocab_or_pos)
    assert count_params(cfg, non_embedding=True) == expected
    assert count_params(cfg) - count_params(cfg, non_embedding=True) == (
        cfg.vocab_size * cfg.d_model * (1 if tie else 2)
        + {"learned": cfg.n_ctx * cfg.d_model, "relative": cfg.pos.num_buckets * cfg.n_heads}.get(pos, 0)
    )


def test_non_embedding_count_is_the_same_for_every_position_kind():
    counts = {count_params(tiny(pos=PosConfig(kind=k)), non_embedding=True) for k in POS_KINDS}
    assert len(counts) == 1


def test_breakdown_sums_to_total():
    cfg = tiny(activation="swiglu", norm="sandwich", tie_embeddings=False)
    parts = param_breakdown(cfg)
    assert sum(parts.values()) == count_params(cfg)
    assert parts["attention"] + parts["mlp"] + parts["norms"] == count_params(cfg, non_embedding=True)


# ---------------------------------------------------------------------------------------------------------
# presets: GPT-2 against Hugging Face (built on the meta device: shapes only, no memory), GPT-3 against 175B


@pytest.mark.parametrize(  # (~2.5 s each: HF's model on the meta device; the larger three in the slow tier)
    "name,shape", [("gpt2-small", (12, 768, 12))] + [pytest.param(n, s, marks=pytest.mark.slow) for n, s in (
        ("gpt2-medium", (24, 1024, 16)), ("gpt2-large", (36, 1280, 20)), ("gpt2-xl", (48, 1600, 25)))]
)
def test_gpt2_presets_match_hf_parameter_count(name, shape):
    transformers = pytest.importorskip("transformers")
    n_layer, n_embd, n_head = shape
    hf_cfg = transformers.GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_head, vocab_size=50257, n_positions=1024)
    with torch.device("meta"):
        hf = transformers.GPT2LMHeadModel(hf_cfg)
    assert count_params(PRESETS[name]) == numel(hf)


def test_gpt2_small_is_exactly_124_439_808():
    cfg = PRESETS["gpt2-small"]
    assert count_params(cfg) == 124_439_808
    # nanoGPT's get_num_params() (non_embedding=True there subtracts only wpe) is our matmul N
    assert matmul_params(cfg) == 124_439_808 - 1024 * 768
    assert count_params(cfg, non_embedding=True) == 124_439_808 - 50257 * 768 - 1024 * 768


def test_gpt2_small_matches_our_own_built_model():
    with torch.device("meta"):
        model = build_model(PRESETS["gpt2-small"])
    assert numel(model) == 124_439_808


def test_gpt3_175b_within_one_percent():
    n = count_params(PRESETS["gpt3-175b"])
    assert abs(n - 175e9) / 175e9 < 0.01
    assert PRESETS["gpt3-175b"].d_head == 128


@pytest.mark.parametrize("name", list(PRESETS))
def test_kaplan_approximation_is_close_for_presets(name):
    cfg = PRESETS[name]
    exact, approx = count_params(cfg, non_embedding=True), kaplan_params(cfg)
    assert approx == 12 * cfg.n_layers * cfg.d_model**2
    assert approx < exact and (exact - approx) / exact < 0.002  # biases + norms: 13·L·d + 2d


# ---------------------------------------------------------------------------------------------------------
# FLOPs: our closed form against torch's FlopCounterMode (counts matmul FLOPs: 2·m·n·k each)


@pytest.mark.parametrize("knobs", [{}, dict(n_heads=4, n_kv_heads=1, qk_norm="rmsnorm", block="parallel")],
                         ids=["mha", "mqa-qknorm-parallel"])
@pytest.mark.parametrize("pos", ["learned", "rope"])
@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_flops_per_token_matches_flop_counter(pos, activation, knobs):
    # bias=False: FlopCounterMode counts addmm as a pure matmul, so bias params would be in N but not counted;
    # norm weights are in N (PaLM counts all non-embedding params) but do no matmul: subtract them.
    cfg = tiny(pos=PosConfig(kind=pos), activation=activation, bias=False, attention="explicit", n_ctx=16, **knobs)
    B, T = 3, 12
    model = build_model(cfg)
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    norm_params = param_breakdown(cfg)["norms"]

    with FlopCounterMode(display=False) as fwd:
        model(ids)
    assert fwd.get_total_flops() == B * T * (flops_per_token(cfg, seq_len=T, training=False) - 2 * norm_params)

    with FlopCounterMode(display=False) as train:
        model(ids).sum().backward()
    assert train.get_total_flops() == B * T * (flops_per_token(cfg, seq_len=T) - 6 * norm_params)


@pytest.mark.parametrize("window", [1, 5, 12, 100])
def test_sliding_window_counts_min_of_length_and_window_keys(window):
    cfg = tiny(window=window, n_ctx=16)
    full = tiny(n_ctx=16)
    L, H, D, T = 2, 2, 8, 12
    keys = min(T, window)
    assert flops_per_token(cfg, seq_len=T) == flops_per_token(full, seq_len=T) - 12 * L * H * D * (T - keys)
    assert flops_per_token(cfg, seq_len=T, training=False) == 2 * matmul_params(cfg) + 4 * L * H * D * keys
    assert count_params(cfg) == count_params(full)  # a window adds no parameters
    # the kernels compute the masked (T, T) scores anyway: measured FLOPs are the unwindowed formula's
    unbiased = dataclasses.replace(full, bias=False, attention="explicit")  # see the FlopCounterMode test above
    model = build_model(dataclasses.replace(unbiased, window=window))
    with FlopCounterMode(display=False) as fwd:
        model(torch.randint(0, cfg.vocab_size, (1, T)))
    norm_params = param_breakdown(unbiased)["norms"]
    assert fwd.get_total_flops() == T * (flops_per_token(unbiased, seq_len=T, training=False) - 2 * norm_params)


def test_flops_per_token_gpt2_small_closed_form():
    cfg = PRESETS["gpt2-small"]
    assert flops_per_token(cfg) == 6 * 123_653_376 + 12 * 12 * 12 * 64 * 1024
    assert flops_per_token(cfg, seq_len=256, training=False) == 2 * 123_653_376 + 4 * 12 * 12 * 64 * 256


# ---------------------------------------------------------------------------------------------------------
# shape solver


def _count_at(d_model: int, n_layers: int, g_heads: int | None, d_head: int | None, **kw) -> int:
    heads = dict(n_heads=g_heads) if g_heads is not None else dict(n_heads=d_model // d_head)
    return count_params(ModelConfig(d_model=d_model, n_layers=n_layers, **heads, **kw), non_embedding=True)


SOLVER_KW = dict(vocab_size=1000, n_ctx=64)


@pytest.mark.parametrize("target", [3e5, 2e6, 1.23e7])
@pytest.mark.parametrize("n_layers", [2, 4, 8, 16])
@pytest.mark.parametrize("mode", ["d_head64", "d_head32", "n_heads4"])
@pytest.mark.parametrize("extra", [{}, {"activation": "swiglu", "norm_type": "rmsnorm", "bias": False}])
def test_shape_for_picks_the_best_multiple(target, n_layers, mode, extra):
    heads = {"d_head64": dict(d_head=64), "d_head32": dict(d_head=32), "n_heads4": dict(n_heads=4)}[mode]
    g = heads.get("d_head") or heads["n_heads"]
    cfg = shape_for(target, n_layers=n_layers, **heads, **SOLVER_KW, **extra)
    assert cfg.n_layers == n_layers and cfg.d_model % g == 0
    if "d_head" in heads:
        assert cfg.d_head == heads["d_head"] and cfg.n_heads == cfg.d_model // g
    else:
        assert cfg.n_heads == 4
    real = count_params(cfg, non_embedding=True)

    def count(d: int) -> int:
        return _count_at(d, n_layers, heads.get("n_heads"), heads.get("d_head"), **SOLVER_KW, **extra)

    # brute force: every multiple of g up to well past the answer
    candidates = range(g, 4 * cfg.d_model + g, g)
    errors = {d: abs(count(d) - target) for d in candidates}
    best = min(errors.values())
    assert errors[cfg.d_model] == best
    assert cfg.d_model == min(d for d, e in errors.items() if e == best)  # ties go to the narrower one
    assert real == count(cfg.d_model)
    # deviation within half the rounding step around the answer (unless clamped at the narrowest width)
    if cfg.d_model > g:
        step = max(count(cfg.d_model + g) - real, real - count(cfg.d_model - g))
        assert abs(real - target) <= step / 2


def test_shape_for_recovers_gpt2_shapes():
    for name in ("gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"):
        p = PRESETS[name]
        cfg = shape_for(count_params(p, non_embedding=True), n_layers=p.n_layers, vocab_size=50257, n_ctx=1024)
        assert (cfg.d_model, cfg.n_heads, cfg.d_head) == (p.d_model, p.n_heads, p.d_head), name
        assert count_params(cfg) == count_params(p)


@pytest.mark.parametrize("aspect_ratio", [8, 32, 128])
@pytest.mark.parametrize("target", [1e6, 2e7])
def test_shape_for_aspect_ratio_picks_the_closest_depth(aspect_ratio, target):
    cfg = shape_for(target, aspect_ratio=aspect_ratio, d_head=16, **SOLVER_KW)
    # brute force over a wide range of depths, each with its best width
    options = [shape_for(target, n_layers=L, d_head=16, **SOLVER_KW) for L in range(1, 80)]
    best = min(abs(math.log(c.d_model / c.n_layers / aspect_ratio)) for c in options)
    assert abs(math.log(cfg.d_model / cfg.n_layers / aspect_ratio)) == pytest.approx(best, abs=1e-12)
    assert cfg == shape_for(target, n_layers=cfg.n_layers, d_head=16, **SOLVER_KW)


def test_shape_for_depth_sweep_is_iso_parameter():
    # the experiments' depth-vs-width sweep at one budget. count ≈ c·d², so one step of g in d_model moves the
    # count by < 2g/d relative, and the best multiple is within half of that: |deviation| < g / d_model.
    target, g = 5e6, 4
    widths = []
    for L in (2, 4, 8, 16, 32):
        rep = shape_report(shape_for(target, n_layers=L, n_heads=g, **SOLVER_KW), target)
        assert abs(rep["deviation"]) < g / rep["d_model"], rep
        widths.append(rep["d_model"])
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == len(widths)


def test_shape_for_rope_with_fixed_heads_keeps_d_head_even():
    # with n_heads=4 the granularity is 4, but rope needs an even d_head: steps of 8 instead
    for L in (2, 3, 5, 16):
        kw = dict(SOLVER_KW, pos=PosConfig(kind="rope"))
        cfg = shape_for(2e6, n_layers=L, n_heads=4, **kw)
        assert cfg.d_head % 2 == 0 and cfg.d_model % 8 == 0
        errors = {d: abs(_count_at(d, L, 4, None, **kw) - 2e6) for d in range(8, 4 * cfg.d_model, 8)}
        assert errors[cfg.d_model] == min(errors.values())
    assert shape_for(2e6, n_layers=16, n_heads=4, **SOLVER_KW).d_head % 2 == 1  # learned: any d_head


def test_shape_report():
    cfg = shape_for(1e6, n_layers=4, n_heads=4, vocab_size=512, n_ctx=128)
    rep = shape_report(cfg, 1e6)
    assert rep["non_embedding_params"] == count_params(cfg, non_embedding=True)
    assert rep["params"] == count_params(cfg)
    assert rep["deviation"] == (rep["non_embedding_params"] - 1e6) / 1e6
    assert rep["aspect_ratio"] == cfg.d_model / 4
    assert "deviation" not in shape_report(cfg)


def test_shape_for_rejects_bad_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        shape_for(1e6, **SOLVER_KW)
    with pytest.raises(ValueError, match="exactly one"):
        shape_for(1e6, n_layers=2, aspect_ratio=10, **SOLVER_KW)
    with pytest.raises(ValueError, match="d_model"):
        shape_for(1e6, n_layers=2, d_model=64, **SOLVER_KW)
    with pytest.raises(ValueError, match="positive"):
        shape_for(0, n_layers=2, **SOLVER_KW)


# ---------------------------------------------------------------------------------------------------------
# python -m arch.info


def test_info_table_and_json(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in PRESETS:
        assert name in out
    assert "124,439,808" in out and "85,056,000" in out

    assert main(["--json", "--preset", "gpt2-small", "--seq-len", "256"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows == [info_row("gpt2-small", PRESETS["gpt2-small"], seq_len=256)]
    assert rows[0]["params"] == 124_439_808
    assert rows[0]["flops_per_token"] == flops_per_token(PRESETS["gpt2-small"], seq_len=256)
    assert "gpt2-small" in format_table(rows)
