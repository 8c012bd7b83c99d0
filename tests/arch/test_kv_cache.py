"""KV cache: token-by-token and uneven-chunk decoding equals full recomputation at every position, for every
position encoding, attention kernel and norm placement, and for every decoder knob (GQA / MQA, sliding window,
QK-norm, parallel blocks, rope scaling) with every encoding and kernel; the cache holds n_kv_heads heads;
reorder / crop; batch checks; model.generate delegates; cached == uncached generation with the knobs."""

from __future__ import annotations

import itertools

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.config import ATTENTION_IMPLS, NORM_PLACEMENTS, POS_KINDS
from arch.generate import generate

from .knobs import KNOBS, ROPE_SCALED, kernel_rotation

V = 29


def make(pos: str, attention: str = "sdpa", norm: str = "pre", n_ctx: int = 8, **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, n_ctx=n_ctx, d_model=16, n_layers=2, n_heads=2, pos=PosConfig(kind=pos),
                      attention=attention, norm=norm, **kw)
    return build_model(cfg).eval()


def incremental(model, ids, chunks):
    cache = model.new_kv_cache(ids.shape[0])
    out, at = [], 0
    for n in chunks:
        assert cache.length == at
        out.append(model(ids[:, at:at + n], kv_cache=cache))
        at += n
    assert cache.length == at == ids.shape[1]
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("pos, attention", list(itertools.product(POS_KINDS, ATTENTION_IMPLS)))
@torch.no_grad()
def test_cache_equals_full_recompute(pos, attention):
    T = 8 if pos == "learned" else 13  # non-learned: run past n_ctx = 8 through the cache too
    model = make(pos, attention)
    ids = torch.randint(0, V, (2, T))
    full = model(ids)
    torch.testing.assert_close(incremental(model, ids, [1] * T), full, atol=1e-5, rtol=1e-5)
    chunks = [3, 1, 4] if T == 8 else [3, 1, 5, 2, 2]
    torch.testing.assert_close(incremental(model, ids, chunks), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm", NORM_PLACEMENTS)
@torch.no_grad()
def test_cache_across_norm_placements(norm):
    model = make("rope", "explicit", norm, norm_type="rmsnorm", activation="swiglu")
    ids = torch.randint(0, V, (3, 8))
    torch.testing.assert_close(incremental(model, ids, [2, 1, 5]), model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("pos", ["relative", "rope", "learned"])
@torch.no_grad()
def test_reorder_and_crop(pos):
    model = make(pos)
    ids = torch.randint(0, V, (3, 8))
    cache = model.new_kv_cache(3)
    model(ids[:, :5], kv_cache=cache)
    index = torch.tensor([2, 0, 0, 1])
    cache.reorder(index)
    assert cache.batch_size == 4 and cache.length == 5
    got = model(ids[index, 5:], kv_cache=cache)
    torch.testing.assert_close(got, model(ids[index])[:, 5:], atol=1e-5, rtol=1e-5)
    cache.crop(3)
    assert cache.length == 3
    got = model(ids[index, 3:6], kv_cache=cache)
    torch.testing.assert_close(got, model(ids[index, :6])[:, 3:], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="crop"):
        cache.crop(10)


@torch.no_grad()
def test_cache_errors():
    model = make("learned")
    cache = model.new_kv_cache(2)
    with pytest.raises(ValueError, match="batch_size=2"):
        model(torch.zeros(3, 1, dtype=torch.long), kv_cache=cache)
    model(torch.zeros(2, 8, dtype=torch.long), kv_cache=cache)
    with pytest.raises(ValueError, match="n_ctx=8; got T=9"):
        model(torch.zeros(2, 1, dtype=torch.long), kv_cache=cache)


@torch.no_grad()
def test_generate_method_is_greedy_argmax_loop():
    model = make("alibi")
    ids = torch.randint(0, V, (2, 3))
    out = model.generate(ids, max_new_tokens=6, temperature=0.0)
    seq = ids
    for _ in range(6):  # independent greedy loop without a cache
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


# (knob, pos, attention): every knob with every encoding and kernel; rope scalings with rope only
KNOB_CASES = [(k, p, a) for k in KNOBS for p in POS_KINDS for a in ATTENTION_IMPLS] + \
             [(k, "rope", a) for k in ROPE_SCALED for a in ATTENTION_IMPLS]


def make_knob(knob: str, pos: str, attention: str, norm: str = "pre", **kw):
    pos_kw = ROPE_SCALED.get(knob, dict(kind=pos))
    torch.manual_seed(0)
    cfg = ModelConfig(**{**dict(vocab_size=V, n_ctx=8, d_model=16, n_layers=2, n_heads=2, attention=attention,
                                norm=norm), **KNOBS.get(knob, {}), **kw, "pos": PosConfig(**pos_kw)})
    return build_model(cfg).eval()


@pytest.mark.parametrize("knob, pos, attention", kernel_rotation(KNOB_CASES))
@torch.no_grad()
def test_cache_with_every_knob(knob, pos, attention):
    # non-learned encodings run past n_ctx = 8, and every window (1, 3) is passed many times over
    T = 8 if pos == "learned" else 13
    model = make_knob(knob, pos, attention, norm=NORM_PLACEMENTS[KNOB_CASES.index((knob, pos, attention)) % 3])
    ids = torch.randint(0, V, (2, T))
    full = model(ids)
    torch.testing.assert_close(incremental(model, ids, [1] * T), full, atol=1e-5, rtol=1e-5)
    chunks = [3, 1, 4] if T == 8 else [3, 1, 5, 2, 2]
    torch.testing.assert_close(incremental(model, ids, chunks), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_heads, n_kv_heads", [(4, 1), (4, 2), (4, 4), (4, None)])
@torch.no_grad()
def test_cache_stores_n_kv_heads(n_heads, n_kv_heads):
    model = make_knob("", "rope", "sdpa", n_heads=n_heads, n_kv_heads=n_kv_heads)
    cache = model.new_kv_cache(3)
    model(torch.randint(0, V, (3, 5)), kv_cache=cache)
    for k, v in zip(cache.k, cache.v):
        assert k.shape == v.shape == (3, n_kv_heads or n_heads, 5, 16 // n_heads)  # (B, Hkv, T, D)


@pytest.mark.parametrize("knob", [*KNOBS, *ROPE_SCALED])
@torch.no_grad()
def test_generation_with_knobs_cached_equals_uncached(knob):
    # float64 and larger weights, so that greedy continuations are not degenerate and no argmax flips on rounding
    model = make_knob(knob, "alibi" if knob not in ROPE_SCALED else "rope", "sdpa", bias=False,
                      tie_embeddings=False).double()
    for p in model.parameters():
        if p.dim() == 2:
            p.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(p.numel()))
    ids = torch.randint(0, V, (3, 4), generator=torch.Generator().manual_seed(1))
    cached = generate(model, ids, 14, temperature=0.0, use_cache=True)  # 18 tokens: past n_ctx = 8 and the window
    seq = ids
    for _ in range(14):  # independent greedy loop, full recomputation
        seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, seq)
    assert torch.equal(generate(model, ids, 14, temperature=0.0, use_cache=False), seq)
    assert len(set(seq[:, 4:].flatten().tolist())) > 1
