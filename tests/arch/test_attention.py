"""Attention kernels: float64 gradcheck of the hand-derived backward, and explicit == sdpa == manual in forward
and backward (outputs and every parameter gradient) for every position encoding; grouped-query k / v (fewer
heads than q) against the same kernels on k / v repeated per query head."""

from __future__ import annotations

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.components.attention import explicit_attention, sdpa_attention
from arch.config import ATTENTION_IMPLS, POS_KINDS
from arch.manual_attention import ManualAttentionFunction, manual_attention


def qkv(B=2, H=2, T=5, Tk=5, D=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64, requires_grad=True)  # noqa: E731
    return mk(B, H, T, D), mk(B, H, Tk, D), mk(B, H, Tk, D)


def reference(q, k, v, bias, causal, scale):
    """Independent reference: plain autograd ops, the mask built with a python loop."""
    tq, tk = q.shape[-2], k.shape[-2]
    mask = torch.zeros(tq, tk, dtype=q.dtype)
    for i in range(tq):
        for j in range(tk):
            if causal and j > i + (tk - tq):
                mask[i, j] = float("-inf")
    s = q @ k.transpose(-2, -1) * scale + mask + (0 if bias is None else bias)
    return torch.softmax(s, -1) @ v


def test_manual_gradcheck_no_bias():
    q, k, v = qkv()
    assert torch.autograd.gradcheck(lambda q, k, v: ManualAttentionFunction.apply(q, k, v, None, True, 0.7, None),
                                    (q, k, v))
    torch.testing.assert_close(ManualAttentionFunction.apply(q, k, v, None, True, 0.7, None),
                               reference(q, k, v, None, True, 0.7))


def test_manual_gradcheck_with_learned_bias_and_cached_keys():
    q, k, v = qkv(T=3, Tk=6)  # 3 new queries at positions 3..5 over 6 keys
    g = torch.Generator().manual_seed(1)
    bias = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    bias = bias.masked_fill(torch.ones(3, 6, dtype=torch.bool).triu(4), float("-inf")).requires_grad_()
    f = lambda q, k, v, b: ManualAttentionFunction.apply(q, k, v, b, False, 0.5, None)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v, bias))
    out = f(q, k, v, bias)
    finite = torch.where(torch.isinf(bias), 0.0, bias.detach())
    torch.testing.assert_close(out, reference(q, k, v, finite, True, 0.5))
    out.sum().backward()
    assert bias.grad.shape == (2, 3, 6)
    assert (bias.grad[torch.isinf(bias)] == 0).all() and bias.grad.abs().sum() > 0


def test_manual_gradcheck_with_dropout_mask():
    q, k, v = qkv()
    g = torch.Generator().manual_seed(2)
    mask = (torch.rand(2, 2, 5, 5, generator=g) > 0.3).double() / 0.7
    f = lambda q, k, v: ManualAttentionFunction.apply(q, k, v, None, True, 0.6, mask)  # noqa: E731
    assert torch.autograd.gradcheck(f, (q, k, v))
    # the same dropout by autograd: softmax pattern times the mask
    s = (q @ k.transpose(-2, -1) * 0.6).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    torch.testing.assert_close(f(q, k, v), (torch.softmax(s, -1) * mask) @ v)


@pytest.mark.parametrize("with_bias", [False, True])
def test_kernels_agree(with_bias):
    q, k, v = qkv(T=4, Tk=4)
    bias = None
    if with_bias:
        bias = torch.randn(2, 4, 4, dtype=torch.float64).masked_fill(
            torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))
    want = reference(q, k, v, None if bias is None else torch.where(torch.isinf(bias), 0.0, bias), True, 0.4)
    for kernel in (explicit_attention, sdpa_attention, manual_attention):
        torch.testing.assert_close(kernel(q, k, v, bias, 0.0, 0.4), want)


def test_manual_gradcheck_grouped_query():
    # 4 query heads over 2 (then 1) key/value heads, with a learned bias and a dropout mask
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, 3, 5, generator=g, dtype=torch.float64)
    bias = bias.masked_fill(torch.ones(3, 5, dtype=torch.bool).triu(3), float("-inf")).requires_grad_()
    mask = (torch.rand(1, 4, 3, 5, generator=g) > 0.3).double() / 0.7
    for hkv in (2, 1):
        k = torch.randn(1, hkv, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
        v = torch.randn(1, hkv, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
        f = lambda q, k, v, b: ManualAttentionFunction.apply(q, k, v, b, False, 0.5, mask)  # noqa: E731
        assert torch.autograd.gradcheck(f, (q, k, v, bias))
        assert torch.autograd.gradcheck(lambda q, k, v: ManualAttentionFunction.apply(q, k, v, None, True, 0.5, None),
                                        (q, k[:, :, :3], v[:, :, :3]))


@pytest.mark.parametrize("hkv", [1, 2])
@pytest.mark.parametrize("with_bias", [False, True])
def test_kernels_grouped_query_equal_repeated_kv(hkv, with_bias):
    # reference: the plain reference on k, v repeated so that query head h reads kv head h // (H / Hkv)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, hkv, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, hkv, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
    bias = None
    if with_bias:
        bias = torch.randn(4, 4, 4, generator=g, dtype=torch.float64).masked_fill(
            torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))
    rep = lambda t: t.repeat_interleave(4 // hkv, dim=1)  # noqa: E731
    want = reference(q, rep(k), rep(v), None if bias is None else torch.where(torch.isinf(bias), 0.0, bias), True, 0.4)
    dq, dk, dv = torch.autograd.grad(want.square().sum(), (q, k, v))
    for kernel in (explicit_attention, sdpa_attention, manual_attention):
        got = kernel(q, k, v, bias, 0.0, 0.4)
        torch.testing.assert_close(got, want)
        for a, b in zip(torch.autograd.grad(got.square().sum(), (q, k, v)), (dq, dk, dv)):
            torch.testing.assert_close(a, b)
    _, pattern = explicit_attention(q, k, v, bias, 0.0, 0.4, return_pattern=True)
    assert pattern.shape == (2, 4, 4, 4)


def _grads(model, ids):
    model.zero_grad()
    loss = model.loss(ids, ids.roll(-1, dims=1))
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind", POS_KINDS)
def test_impls_equal_forward_and_backward(kind):
    torch.manual_seed(0)
    base = dict(vocab_size=37, n_ctx=12, d_model=24, n_layers=2, n_heads=3, pos=PosConfig(kind=kind))
    models = {a: build_model(ModelConfig(**base, attention=a)) for a in ATTENTION_IMPLS}
    state = models["explicit"].state_dict()
    for m in models.values():
        m.load_state_dict(state)
    ids = torch.randint(0, 37, (2, 12))
    loss0, grads0 = _grads(models["explicit"], ids)
    logits0 = models["explicit"](ids)
    for a in ("sdpa", "manual"):
        torch.testing.assert_close(models[a](ids), logits0, atol=1e-5, rtol=1e-5)
        loss, grads = _grads(models[a], ids)
        torch.testing.assert_close(loss, loss0, atol=1e-6, rtol=1e-6)
        assert grads.keys() == grads0.keys()
        for name in grads0:
            torch.testing.assert_close(grads[name], grads0[name], atol=1e-6, rtol=1e-4, msg=f"{a}: {name}")
