"""The hook point blocks.{i}.attn.hook_attn_scores: the logits the softmax takes (q·kᵀ·scale + position bias, -inf
at masked keys), (B, H, T, Tk). softmax of it is the pattern bit for bit; hooking it computes the layer
explicitly, as a pattern hook does; a replacement changes the pattern; with a KV cache and a window it holds the
new queries' rows against every cached key, -inf outside the band."""

from __future__ import annotations

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.config import ATTENTION_IMPLS

V, T = 29, 7


def make(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, n_ctx=T, d_model=16, n_layers=2, n_heads=4, **kw)
    return build_model(cfg).eval()


def ids_(seed=1):
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pos", ["learned", "relative", "alibi", "rope"])
@torch.no_grad()
def test_softmax_of_the_scores_is_the_pattern(pos):
    model = make(pos=PosConfig(kind=pos), n_kv_heads=2)
    names = [f"blocks.{i}.attn.{p}" for i in range(2) for p in ("hook_attn_scores", "hook_pattern", "hook_q",
                                                                  "hook_k")]
    _, a = model.run_with_cache(ids_(), names=names)
    for i in range(2):
        s = a[f"blocks.{i}.attn.hook_attn_scores"]
        assert s.shape == (2, 4, T, T)
        assert torch.equal(torch.softmax(s, -1), a[f"blocks.{i}.attn.hook_pattern"])
        assert torch.isneginf(s[..., torch.ones(T, T, dtype=torch.bool).triu(1)]).all()  # future keys masked
        q, k = a[f"blocks.{i}.attn.hook_q"], a[f"blocks.{i}.attn.hook_k"].repeat_interleave(2, dim=1)
        plain = (q @ k.transpose(-2, -1)) / 2.0  # scale 1/sqrt(d_head = 4)
        bias = s - plain  # the position bias on the visible pairs: none for learned / rope
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        if pos in ("learned", "rope"):
            torch.testing.assert_close(bias[..., causal], torch.zeros_like(bias[..., causal]), atol=1e-6, rtol=0)
        else:
            assert bias[..., causal].abs().max() > 1e-3  # alibi / T5 bias is in the logits


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
@torch.no_grad()
def test_a_scores_hook_runs_the_layer_as_a_pattern_hook_does(attention):
    model = make(attention=attention)
    ids = ids_()
    by_pattern = model.run_with_hooks(ids, [("blocks.0.attn.hook_pattern", lambda a, h: None)])
    by_scores = model.run_with_hooks(ids, [("blocks.0.attn.hook_attn_scores", lambda s, h: None)])
    assert torch.equal(by_scores, by_pattern)
    torch.testing.assert_close(by_scores, model(ids), atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_a_replaced_score_changes_the_pattern():
    model = make()
    seen = {}

    def flat(s, hook):  # every visible key the same logit: a uniform causal pattern
        return torch.where(torch.isneginf(s), s, torch.zeros_like(s))

    model.run_with_hooks(ids_(), [("blocks.1.attn.hook_attn_scores", flat),
                                  ("blocks.1.attn.hook_pattern", lambda a, h: seen.setdefault("a", a))])
    want = torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]
    torch.testing.assert_close(seen["a"], want.expand(2, 4, T, T))


@torch.no_grad()
def test_cached_rows_and_the_window_band():
    model = make(pos=PosConfig(kind="rope"), window=3)
    ids = ids_()
    name = "blocks.1.attn.hook_attn_scores"
    _, full = model.run_with_cache(ids, names=[name])
    cache = model.new_kv_cache(2)
    model(ids[:, :4], kv_cache=cache)
    _, part = model.run_with_cache(ids[:, 4:], kv_cache=cache, names=[name])
    assert part[name].shape == (2, 4, 3, T)
    visible = torch.ones(T, T, dtype=torch.bool).tril() & ~torch.ones(T, T, dtype=torch.bool).tril(-3)
    assert torch.isneginf(full[name][..., ~visible]).all() and torch.isfinite(full[name][..., visible]).all()
    torch.testing.assert_close(part[name], full[name][:, :, 4:], atol=1e-6, rtol=1e-5)
