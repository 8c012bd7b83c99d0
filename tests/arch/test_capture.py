"""run_with_cache: documented keys and shapes, same logits as forward, patterns recomputed independently."""

from __future__ import annotations

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.config import ATTENTION_IMPLS


def make(pos="learned", attention="sdpa", norm="pre"):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=31, n_ctx=8, d_model=16, n_layers=2, n_heads=4, pos=PosConfig(kind=pos),
                      attention=attention, norm=norm)
    return build_model(cfg).eval()


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
@torch.no_grad()
def test_keys_shapes_and_logits(attention):
    model = make(attention=attention)
    ids = torch.randint(0, 31, (2, 7))
    logits, cache = model.run_with_cache(ids)
    torch.testing.assert_close(logits, model(ids))
    want = {"embed", "final"} | {f"{k}.{i}" for i in range(2) for k in ("resid_pre", "resid_post", "attn_pattern")}
    assert set(cache) == want
    for i in range(2):
        assert cache[f"resid_pre.{i}"].shape == cache[f"resid_post.{i}"].shape == (2, 7, 16)
        pattern = cache[f"attn_pattern.{i}"]
        assert pattern.shape == (2, 4, 7, 7)
        torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 4, 7))
        assert (pattern.triu(1) == 0).all()  # causal
    torch.testing.assert_close(cache["resid_pre.0"], cache["embed"])
    torch.testing.assert_close(cache["resid_pre.1"], cache["resid_post.0"])
    torch.testing.assert_close(model.ln_f(cache["resid_post.1"]), cache["final"])
    torch.testing.assert_close(model.lm_head(cache["final"]), logits)


@pytest.mark.parametrize("pos", ["learned", "alibi"])
@torch.no_grad()
def test_pattern_matches_independent_recomputation(pos):
    model = make(pos=pos)
    ids = torch.randint(0, 31, (1, 6))
    _, cache = model.run_with_cache(ids)
    for i, block in enumerate(model.blocks):
        x = block.ln_1(cache[f"resid_pre.{i}"])[0]  # (T, C)
        q, k, _ = block.attn.c_attn(x).split(16, dim=-1)
        for h in range(4):
            qh, kh = q[:, 4 * h:4 * h + 4], k[:, 4 * h:4 * h + 4]
            for t in range(6):
                scores = [float(qh[t] @ kh[s]) / 2.0 for s in range(t + 1)]  # scale 1/sqrt(4)
                if pos == "alibi":
                    scores = [sc - 2.0 ** (-2 * (h + 1)) * (t - s) for s, sc in enumerate(scores)]  # slopes 2^-2h
                z = torch.tensor(scores).softmax(-1)
                torch.testing.assert_close(cache[f"attn_pattern.{i}"][0, h, t, : t + 1], z)


@torch.no_grad()
def test_capture_with_kv_cache_gives_rows_for_new_queries():
    model = make(pos="rope")
    ids = torch.randint(0, 31, (2, 7))
    _, full = model.run_with_cache(ids)
    kv = model.new_kv_cache(2)
    model(ids[:, :4], kv_cache=kv)
    _, part = model.run_with_cache(ids[:, 4:], kv_cache=kv)
    assert part["attn_pattern.1"].shape == (2, 4, 3, 7)
    torch.testing.assert_close(part["attn_pattern.1"], full["attn_pattern.1"][:, :, 4:], atol=1e-6, rtol=1e-5)
