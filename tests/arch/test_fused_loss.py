"""arch.fused_loss: the chunked fused linear + cross-entropy equals F.cross_entropy(h @ W.T) in value and
gradients (gradcheck in float64; tied / untied heads through model.loss; ignored rows; edge cases)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from arch import ModelConfig, PosConfig, build_model
from arch.fused_loss import FusedLinearCrossEntropy, chunk_rows, fused_linear_cross_entropy, use_fused


def reference(h, w, t):
    return F.cross_entropy(h @ w.t(), t, ignore_index=-100)


def data(n=37, c=16, v=53, dtype=torch.float32, ignore=(0, 5, 9), seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, c, generator=g, dtype=dtype, requires_grad=True)
    w = torch.randn(v, c, generator=g, dtype=dtype, requires_grad=True)
    t = torch.randint(0, v, (n,), generator=g)
    t[list(ignore)] = -100
    return h, w, t


@pytest.mark.parametrize("chunk", [None, 1, 5, 36, 37, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_value_and_grads_equal_unfused(chunk, dtype):
    h, w, t = data(dtype=dtype)
    want = reference(h, w, t)
    want_gh, want_gw = torch.autograd.grad(want, (h, w))
    got = fused_linear_cross_entropy(h, w, t, chunk_size=chunk)
    assert got.grad_fn is not None and got.dtype == dtype and got.shape == ()
    gh, gw = torch.autograd.grad(got, (h, w))
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(gh, want_gh, **tol)
    torch.testing.assert_close(gw, want_gw, **tol)


@pytest.mark.parametrize("chunk", [None, 2, 3])
def test_gradcheck_float64(chunk):
    h, w, t = data(n=7, c=4, v=9, dtype=torch.float64, ignore=(1, 4))
    assert torch.autograd.gradcheck(lambda h, w: fused_linear_cross_entropy(h, w, t, chunk), (h, w))


def test_grad_output_scales_and_only_requested_grads():
    h, w, t = data()
    (3.5 * fused_linear_cross_entropy(h, w, t, 8)).backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    (3.5 * reference(h, w, t)).backward()
    torch.testing.assert_close(gh, h.grad)
    torch.testing.assert_close(gw, w.grad)
    # only h (a frozen head) / only w; retain_graph: a second backward gives the same gradient
    hf = h.detach().requires_grad_()
    loss = fused_linear_cross_entropy(hf, w.detach(), t, 8)
    loss.backward(retain_graph=True)
    first = hf.grad.clone()
    loss.backward()
    torch.testing.assert_close(hf.grad, 2 * first)
    torch.testing.assert_close(first, torch.autograd.grad(reference(hf, w.detach(), t), hf)[0])


def test_no_grad_is_loss_only_and_equal():
    h, w, t = data()
    with torch.no_grad():
        got = fused_linear_cross_entropy(h, w, t, 4)
        want = reference(h, w, t)
    assert got.grad_fn is None
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(fused_linear_cross_entropy(h.detach(), w.detach(), t), want)


def test_all_ignored_is_nan_with_zero_grads_like_f_cross_entropy():
    h, w, t = data(n=6, ignore=range(6))
    want = reference(h, w, t)
    want_g = torch.autograd.grad(want, (h, w))
    got = fused_linear_cross_entropy(h, w, t, 4)
    got_g = torch.autograd.grad(got, (h, w))
    assert torch.isnan(want) and torch.isnan(got)
    for a, b in zip(got_g, want_g):
        assert torch.equal(a, b) and not a.any()


def test_errors():
    h, w, t = data(n=4, ignore=(0,))
    for bad in (53, -1, -101):
        tt = t.clone()
        tt[2] = bad
        with pytest.raises(IndexError, match="out of bounds"):
            fused_linear_cross_entropy(h, w, tt)
    with pytest.raises(ValueError, match="expected h"):
        fused_linear_cross_entropy(h, w[:, :3], t)
    with pytest.raises(ValueError, match="chunk_size"):
        fused_linear_cross_entropy(h, w, t, chunk_size=0)


def test_chunk_rows():
    assert chunk_rows(2048, 50257, 4) == 1024  # 2 equal chunks of 206 MB at the benchmark shape
    assert chunk_rows(100, 512, 4) == 100  # small: one chunk
    assert chunk_rows(10, 100, 4, chunk_bytes=1) == 1
    assert chunk_rows(2049, 50257, 4) == 1025  # equal chunks, never a sliver


def test_use_fused_policy():
    h, w = torch.zeros(2, 3), torch.zeros(4, 3)
    assert use_fused(h, w) and use_fused(h.double(), w.double())
    assert not use_fused(h.bfloat16(), w.bfloat16()) and not use_fused(h, w.double())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not use_fused(h, w)


@pytest.mark.parametrize("tie", [True, False])
def test_model_loss_fused_equals_unfused(tie):
    cfg = ModelConfig(vocab_size=97, n_ctx=16, d_model=32, n_layers=2, n_heads=4, pos=PosConfig(kind="learned"),
                      tie_embeddings=tie)
    torch.manual_seed(0)
    model = build_model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ids = torch.randint(0, 97, (3, 16))
    targets = torch.randint(0, 97, (3, 16))
    targets[0, :4] = -100
    targets[2, 7] = -100
    grads = {}
    for fused in (True, False):
        model.zero_grad(set_to_none=True)
        loss = model.loss(ids, targets, fused=fused)
        loss.backward()
        grads[fused] = (loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    assert model.loss(ids, targets).grad_fn.name() == "FusedLinearCrossEntropyBackward"  # the default
    torch.testing.assert_close(grads[True][0], grads[False][0], atol=1e-6, rtol=1e-6)
    assert grads[True][1].keys() == grads[False][1].keys()
    assert ("lm_head.weight" in grads[True][1]) == (not tie)
    for name, g in grads[True][1].items():
        torch.testing.assert_close(g, grads[False][1][name], atol=1e-6, rtol=1e-4, msg=name)
    model.fused_loss = False  # the module switch
    assert model.loss(ids, targets).grad_fn.name() != "FusedLinearCrossEntropyBackward"
    logits = model(ids)  # forward still returns the logits
    assert logits.shape == (3, 16, 97)
    torch.testing.assert_close(model.loss(ids, targets, fused=True),
                               F.cross_entropy(logits.view(-1, 97), targets.view(-1)), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("where", ["autocast", "bf16_weights"])
def test_model_loss_fallback_equals_unfused_cross_entropy(where):
    """Where use_fused says no (autocast, bf16 weights), model.loss takes the unfused path; its value and
    gradients must equal F.cross_entropy over model(ids)'s logits computed the same way (ignored rows too)."""
    cfg = ModelConfig(vocab_size=64, n_ctx=8, d_model=16, n_layers=1, n_heads=2)
    torch.manual_seed(0)
    model = build_model(cfg)
    if where == "bf16_weights":
        model = model.to(torch.bfloat16)
    ids = torch.randint(0, 64, (2, 8))
    targets = torch.randint(0, 64, (2, 8))
    targets[0, :3] = -100
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if where == "autocast" else torch.enable_grad()
    with ctx:
        loss = model.loss(ids, targets)
    assert loss.grad_fn.name() != "FusedLinearCrossEntropyBackward"
    (got_grad,) = torch.autograd.grad(loss, model.wte.weight)
    with ctx:
        logits = model(ids)
        want = F.cross_entropy(logits.view(-1, 64), targets.view(-1), ignore_index=-100)
    (want_grad,) = torch.autograd.grad(want, model.wte.weight)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss.float(), want.float(), atol=1e-5, rtol=1e-5)  # the same bf16 logits
    torch.testing.assert_close(got_grad.float(), want_grad.float(), atol=1e-5, rtol=1e-3)


def test_function_is_direct_apply_compatible():
    h, w, t = data(n=5, ignore=(1,))
    loss = FusedLinearCrossEntropy.apply(h, w, t, None)
    torch.testing.assert_close(loss, reference(h, w, t))
