"""KV cache: token-by-token and uneven-chunk decoding equals full recomputation at every position, for every
position encoding, attention kernel and norm placement; reorder / crop; batch checks; model.generate delegates."""

from __future__ import annotations

import itertools

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.config import ATTENTION_IMPLS, NORM_PLACEMENTS, POS_KINDS

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
