"""attn_max_logit/layer_{i} and attn_max_logit (Wortsman et al. 2023, arXiv:2309.14322): the largest attention
logit each layer softmaxes at an eval, checked against q and k recomputed by hand from the weights (norms, c_attn,
qk-norm, rope written out here; ALiBi's bias from its slopes), causal mask applied, for qk_norm none / layernorm
and learned / rope / alibi positions; and that a training run logs them in its eval rows."""

from __future__ import annotations

import json
import math

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from experiments.run.eval_lm import evaluate_model
from experiments.run.train import train

V, T, C, H, D = 37, 8, 16, 4, 4


def layer_norm(x, weight, bias, eps):  # over the last dim, by hand
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * weight
    return y if bias is None else y + bias


def rope(x, base):  # x (B, T, heads, D); rotate-half: dim i pairs with i + D/2, angle p * base^(-2i/D)
    half = x.shape[-1] // 2
    out = torch.empty_like(x)
    for p in range(x.shape[1]):
        for i in range(half):
            a = p * base ** (-2 * i / x.shape[-1])
            x1, x2 = x[:, p, :, i], x[:, p, :, i + half]
            out[:, p, :, i] = x1 * math.cos(a) - x2 * math.sin(a)
            out[:, p, :, i + half] = x2 * math.cos(a) + x1 * math.sin(a)
    return out


def hand_max_logits(model, inputs) -> list[tuple[float, float]]:
    """Per layer: (max logit over the causal (query, key) pairs, max over all pairs, mask ignored), in float64."""
    cfg = model.cfg
    names = [f"blocks.{i}.hook_resid_pre" for i in range(cfg.n_layers)]
    _, acts = model.run_with_cache(inputs, names=names)  # only the stream entering each block
    out = []
    for i, blk in enumerate(model.blocks):
        x = acts[names[i]].double()
        ln = blk.ln_1
        x = layer_norm(x, ln.weight.double(), None if ln.bias is None else ln.bias.double(), ln.eps)
        W, b = blk.attn.c_attn.weight.double(), blk.attn.c_attn.bias.double()
        hkv = cfg.n_kv_heads or H
        qkv = x @ W.T + b  # (B, T, H*D + 2*Hkv*D)
        q = qkv[..., : H * D].reshape(*x.shape[:2], H, D)
        k = qkv[..., H * D: (H + hkv) * D].reshape(*x.shape[:2], hkv, D)
        if cfg.qk_norm == "layernorm":
            q = layer_norm(q, blk.attn.q_norm.weight.double(), None, blk.attn.q_norm.eps)
            k = layer_norm(k, blk.attn.k_norm.weight.double(), None, blk.attn.k_norm.eps)
        if cfg.pos.kind == "rope":
            q, k = rope(q, cfg.pos.rope_base), rope(k, cfg.pos.rope_base)
        masked, full = -math.inf, -math.inf
        for h in range(H):
            kh = k[:, :, h // (H // hkv)]  # (B, T, D): query head h reads kv head h // G
            s = torch.einsum("btd,bsd->bts", q[:, :, h], kh) / math.sqrt(D)  # (B, T, T)
            if cfg.pos.kind == "alibi":  # slope 2^(-8(h+1)/H), bias -slope * (t - s)
                dist = torch.arange(T)[:, None] - torch.arange(T)[None, :]
                s = s - 2.0 ** (-8 * (h + 1) / H) * dist.double()
            causal = torch.ones(T, T, dtype=torch.bool).tril()
            masked = max(masked, s[:, causal].max().item())
            full = max(full, s.max().item())
        out.append((masked, full))
    return out


def scrambled_model(pos: str, qk_norm: str | None, n_kv_heads: int | None = None):
    """A tiny model with every parameter drawn N(0, 0.5) (norm weights and biases included), so logits are O(1)."""
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, n_ctx=T, d_model=C, n_layers=2, n_heads=H, pos=PosConfig(kind=pos),
                      qk_norm=qk_norm, n_kv_heads=n_kv_heads)
    model = build_model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


# mask_matters: with these weights and tokens some future key has a larger logit than every visible one, so a
# max taken without the causal mask would fail the case (in the others the max sits on a visible pair anyway)
@pytest.mark.parametrize("pos,qk_norm,n_kv_heads,mask_matters", [
    ("learned", None, None, True), ("learned", "layernorm", None, False), ("rope", None, None, False),
    ("rope", "layernorm", 2, True), ("alibi", None, None, False), ("alibi", "layernorm", 1, True)])
def test_max_logit_is_the_hand_computed_one(pos, qk_norm, n_kv_heads, mask_matters):
    model = scrambled_model(pos, qk_norm, n_kv_heads)
    toks = torch.randint(0, V, (4 * T + 1,), generator=torch.Generator().manual_seed(3)).numpy()
    out = evaluate_model(model, toks, n_ctx=T, batch_size=4, max_batches=None, bytes_per_token=1.0, device="cpu")
    inputs = torch.stack([torch.from_numpy(toks[s: s + T]).long() for s in range(0, 4 * T, T)])  # the one batch
    with torch.no_grad():
        want = hand_max_logits(model, inputs)
    got = [out[f"attn_max_logit/layer_{i}"] for i in range(2)]
    assert got == pytest.approx([m for m, _ in want], rel=1e-5)
    assert out["attn_max_logit"] == max(got)
    assert any(full > m + 1e-3 for m, full in want) is mask_matters


def test_no_hooks_no_max_logit_keys():
    """A model without arch's hooks (only run_with_cache, as the entropy needs) gets no attn_max_logit keys."""

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = scrambled_model("learned", None)
            self.max_len = T

        def forward(self, ids):
            return self.inner(ids)

        def run_with_cache(self, ids):
            return self.inner.run_with_cache(ids)

    toks = torch.randint(0, V, (2 * T + 1,), generator=torch.Generator().manual_seed(3)).numpy()
    out = evaluate_model(Plain(), toks, n_ctx=T, batch_size=2, max_batches=None, bytes_per_token=1.0, device="cpu")
    assert "attn_entropy/layer_1" in out and not any(k.startswith("attn_max_logit") for k in out)


def test_eval_is_unchanged_by_the_reading():
    """val/loss comes from the plain forward pass as before (sdpa), not from the hooked one."""
    model = scrambled_model("rope", "layernorm")
    toks = torch.randint(0, V, (4 * T + 1,), generator=torch.Generator().manual_seed(3)).numpy()
    kw = dict(n_ctx=T, batch_size=2, max_batches=None, bytes_per_token=1.0, device="cpu")
    with_stats, without = evaluate_model(model, toks, **kw), evaluate_model(model, toks, attn_entropy=False, **kw)
    assert with_stats["val/loss"] == without["val/loss"] and "attn_max_logit" not in without


def test_a_run_logs_the_max_logits_at_every_eval(make_cfg, tmp_path):
    train(make_cfg("train.steps=4", "train.eval_interval=2", "train.ckpt_interval=4"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val/loss" in r]
    assert len(evals) == 2
    for r in evals:
        layers = [r[f"attn_max_logit/layer_{i}"] for i in range(2)]
        assert all(math.isfinite(v) for v in layers) and r["attn_max_logit"] == max(layers)
        assert "attn_max_logit/layer_2" not in r
