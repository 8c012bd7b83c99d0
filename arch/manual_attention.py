"""Attention (causal by default) as a torch.autograd.Function whose backward is derived by hand (no autograd inside).

Forward, per batch row and head (scores S, pattern A, output Z):
    S = Q K^T * scale + bias  (+ causal -inf above the diagonal when `causal`)
    A = softmax(S)            (row-wise)
    Z = (A * M) V             (M: the inverted-dropout mask already divided by 1 - p, or all ones)
Backward, given dZ:
    dV = (A * M)^T dZ                     dA = (dZ V^T) * M
    dS = A * (dA - rowsum(dA * A))        (softmax Jacobian-vector product)
    dQ = dS K * scale                     dK = dS^T Q * scale
    dBias = dS summed over the dims the bias was broadcast along (e.g. over the batch for (H, T, T))
Grouped-query attention (K, V with Hkv = H / G heads): query head h reads key/value head h // G, computed on a
(B, Hkv, G, T, .) view of Q, A and dZ, so no head is copied; dK and dV are then summed over the G query heads
that share them. It keeps A (B, H, T, T) for backward, i.e. O(T^2) memory, like the explicit path. Under autocast
q, k, v are cast to the autocast dtype and both passes run in it (the softmax's exponentials in fp32): the backward,
written by hand, runs outside autocast and would otherwise meet fp32 and bf16/fp16 operands. Not handled:
fused kernels, numerically-stable online softmax; this exists to be read and to be checked against autograd
(gradcheck).
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import Tensor


def qk_scores(q: Tensor, k: Tensor, G: int) -> Tensor:
    """q (B, H, Tq, D) @ k (B, H // G, Tk, D)^T -> (B, H, Tq, Tk); query head h against key head h // G."""
    if G == 1:
        return torch.matmul(q, k.transpose(-2, -1))
    B, H, Tq, D = q.shape
    s = torch.matmul(q.view(B, H // G, G, Tq, D), k.unsqueeze(2).transpose(-2, -1))  # (B, Hkv, G, Tq, Tk)
    return s.view(B, H, Tq, -1)


def mix_values(a: Tensor, v: Tensor, G: int) -> Tensor:
    """a (B, H, Tq, Tk) @ v (B, H // G, Tk, D) -> (B, H, Tq, D); head h mixes value head h // G."""
    if G == 1:
        return torch.matmul(a, v)
    B, H, Tq, Tk = a.shape
    return torch.matmul(a.view(B, H // G, G, Tq, Tk), v.unsqueeze(2)).view(B, H, Tq, -1)  # (B, H, Tq, D)


def _kv_grad(x: Tensor, y: Tensor, G: int) -> Tensor:
    """x (B, H, Tq, Tk)^T @ y (B, H, Tq, D), summed over each group of G heads -> (B, H // G, Tk, D)."""
    g = torch.matmul(x.transpose(-2, -1), y)  # (B, H, Tk, D)
    if G == 1:
        return g
    B, H, Tk, D = g.shape
    return g.view(B, H // G, G, Tk, D).sum(dim=2)


class ManualAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, causal: bool, scale: float,
                dropout_mask: Tensor | None) -> Tensor:
        # q (B, H, Tq, D); k, v (B, Hkv, Tk, D) with Hkv dividing H; bias broadcastable to (B, H, Tq, Tk)
        G = q.shape[1] // k.shape[1]  # query heads per key/value head
        s = qk_scores(q, k, G) * scale  # (B, H, Tq, Tk)
        if bias is not None:
            s = s + bias
        if causal:
            tq, tk = s.shape[-2:]
            s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        # (B, H, Tq, Tk); exponentials in fp32 at least (bf16 / fp16 under autocast), fp64 stays fp64
        a = torch.softmax(s, dim=-1, dtype=torch.promote_types(s.dtype, torch.float32)).to(s.dtype)
        a_drop = a if dropout_mask is None else a * dropout_mask
        z = mix_values(a_drop, v, G)  # (B, H, Tq, D)
        ctx.save_for_backward(q, k, v, a, dropout_mask)
        ctx.scale, ctx.G = scale, G
        ctx.bias_shape = None if bias is None else bias.shape
        return z

    @staticmethod
    def backward(ctx, dz: Tensor):
        q, k, v, a, dropout_mask = ctx.saved_tensors
        G = ctx.G
        a_drop = a if dropout_mask is None else a * dropout_mask
        dv = _kv_grad(a_drop, dz, G)  # (B, Hkv, Tk, D)
        da = qk_scores(dz, v, G)  # dZ V^T: (B, H, Tq, Tk)
        if dropout_mask is not None:
            da = da * dropout_mask
        ds = a * (da - (da * a).sum(dim=-1, keepdim=True))  # (B, H, Tq, Tk); zero where masked (a = 0)
        dq = mix_values(ds, k, G) * ctx.scale  # dS K: (B, H, Tq, D)
        dk = _kv_grad(ds, q, G) * ctx.scale  # dS^T Q summed over the group: (B, Hkv, Tk, D)
        dbias = None
        if ctx.bias_shape is not None and ctx.needs_input_grad[3]:
            dbias = ds.sum_to_size(ctx.bias_shape)  # e.g. (H, Tq, Tk): summed over the batch
        return dq, dk, dv, dbias, None, None, None


def manual_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout_p: float, scale: float,
                     causal: bool = True) -> Tensor:
    """Attention through ManualAttentionFunction; same contract as the other ATTENTION kernels (causal=False: an
    encoder or cross-attention, where bias None means no mask)."""
    causal = causal and bias is None and q.shape[-2] > 1
    device = q.device.type
    autocast = torch.is_autocast_enabled(device)
    if autocast:  # one dtype throughout: autocast would leave q, k (rope) or the softmax in fp32 and v in bf16/fp16,
        dtype = torch.get_autocast_dtype(device)  # and the hand-written backward runs outside autocast
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    mask = None
    if dropout_p > 0.0:
        shape = (*q.shape[:-1], k.shape[-2])  # (B, H, Tq, Tk)
        mask = torch.empty(shape, dtype=q.dtype, device=q.device).bernoulli_(1.0 - dropout_p) / (1.0 - dropout_p)
    if bias is not None:
        bias = bias.to(q.dtype)
    with torch.autocast(device, enabled=False) if autocast else nullcontext():
        return ManualAttentionFunction.apply(q, k, v, bias, causal, scale, mask)
