"""Causal multi-head self-attention with an optional additive bias, and the ATTENTION kernel registry.

Dims: B batch, T query positions (new tokens), Tk key positions (= cache length + T), C d_model,
H n_heads, D d_head. One fused c_attn Linear makes q, k, v; c_proj maps the H*D heads back to C.

A kernel takes q (B, H, T, D), k, v (B, H, Tk, D), `bias` and returns z (B, H, T, D):
  * bias None   -> plain causal attention; the model only passes None when T == Tk (or T == 1);
  * bias Tensor -> (H or 1, T, Tk) additive float bias with the causal -inf mask already folded in
                   (position bias and/or the mask of a cached chunk); the kernel adds it and masks nothing.
Kernels: `explicit` (matmul + softmax; can return the pattern), `sdpa` (F.scaled_dot_product_attention,
is_causal=True when there is no bias), `manual` (autograd.Function with a hand-derived backward).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arch.config import ModelConfig
from arch.kv_cache import KVCache
from arch.manual_attention import manual_attention


@dataclass
class Step:
    """What every layer needs to know about the current forward pass; the model builds it once."""

    start: int  # absolute position of the first new token (cache length before this call)
    bias: Tensor | None  # (H or 1, T, Tk) additive bias, causal mask folded in; None -> plain causal
    rotate: Callable[[Tensor, Tensor, int], tuple[Tensor, Tensor]]  # positional.rotate (identity unless rope)
    kv_cache: KVCache | None = None
    capture: dict[str, Tensor] | None = None  # run_with_cache fills attn_pattern.{i} here


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout_p: float, scale: float,
                       return_pattern: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + bias) v; with return_pattern also the (B, H, T, Tk) pattern before dropout."""
    s = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, T, Tk)
    if bias is not None:
        s = s + bias
    elif q.shape[-2] > 1:
        t, tk = s.shape[-2:]
        s = s.masked_fill(torch.ones(t, tk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    a = torch.softmax(s, dim=-1)  # (B, H, T, Tk)
    z = torch.matmul(F.dropout(a, dropout_p) if dropout_p > 0.0 else a, v)  # (B, H, T, D)
    return (z, a) if return_pattern else z


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout_p: float, scale: float) -> Tensor:
    """torch's fused kernel; is_causal cannot be combined with attn_mask, hence the folded mask in `bias`."""
    if bias is not None:
        bias = bias.to(q.dtype)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, dropout_p=dropout_p, is_causal=bias is None and q.shape[-2] > 1, scale=scale
    )


class CausalSelfAttention(nn.Module):
    """c_attn -> split heads -> rotate (rope) -> append to cache -> kernel -> merge heads -> c_proj -> dropout."""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        if cfg.attention not in ATTENTION:
            raise ValueError(f"unknown attention {cfg.attention!r}; choose from {sorted(ATTENTION)}")
        self.layer_idx = layer_idx
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.n_heads * cfg.d_head, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_heads * cfg.d_head, cfg.d_model, bias=cfg.bias)
        self.dropout_p = cfg.dropout  # on the attention probabilities
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.kernel = ATTENTION[cfg.attention]
        self.scale = 1.0 / math.sqrt(cfg.d_head)

    def forward(self, x: Tensor, step: Step) -> Tensor:  # (B, T, C) -> (B, T, C)
        B, T, _ = x.shape
        H, D = self.n_heads, self.d_head
        qkv = self.c_attn(x).view(B, T, 3, H, D).permute(2, 0, 3, 1, 4)  # (3, B, H, T, D)
        q, k, v = qkv.unbind(0)  # (B, H, T, D) each
        q, k = step.rotate(q, k, step.start)
        if step.kv_cache is not None:
            k, v = step.kv_cache.update(self.layer_idx, k, v)  # (B, H, Tk, D)
        p = self.dropout_p if self.training else 0.0
        if step.capture is not None:  # capture mode: always explicit, so the pattern exists
            z, pattern = explicit_attention(q, k, v, step.bias, p, self.scale, return_pattern=True)
            step.capture[f"attn_pattern.{self.layer_idx}"] = pattern
        else:
            z = self.kernel(q, k, v, step.bias, p, self.scale)  # (B, H, T, D)
        z = z.transpose(1, 2).reshape(B, T, H * D)  # (B, T, H*D)
        return self.resid_dropout(self.c_proj(z))


ATTENTION: dict[str, Callable[..., Tensor]] = {
    "explicit": explicit_attention,
    "sdpa": sdpa_attention,
    "manual": manual_attention,
}
