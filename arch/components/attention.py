"""Multi-head self-attention (causal; bidirectional in an encoder), cross-attention, and the ATTENTION kernel registry.

Dims: B batch, T query positions (new tokens), Tk key positions (= cache length + T), C d_model,
H n_heads (query heads), Hkv n_kv_heads (key/value heads, divides H), G = H // Hkv, D d_head. One fused c_attn
Linear makes q | k | v (H·D | Hkv·D | Hkv·D columns; Hkv = H is GPT-2's layout); c_proj maps H·D back to C.

A kernel takes q (B, H, T, D), k, v (B, Hkv, Tk, D), `bias` and returns z (B, H, T, D); query head h reads
key/value head h // G (grouped-query attention, Ainslie et al. 2023, https://arxiv.org/abs/2305.13245; Hkv = 1 is
multi-query, Shazeer 2019, https://arxiv.org/abs/1911.02150). No kernel copies k / v per query head.
  * bias None   -> plain causal attention; the model only passes None when T == Tk (or T == 1);
  * bias Tensor -> (H or 1, T, Tk) additive float bias with the causal -inf mask already folded in
                   (position bias, the mask of a cached chunk and/or the sliding-window band); the kernel adds
                   it and masks nothing. An encoder-decoder also passes (B, 1, 1, Tk) or (B, H, T, Tk) biases
                   (-inf at padded source keys).
  * causal=False (keyword; the encoder and cross-attention) -> bias None means no mask at all.
Kernels: `explicit` (matmul + softmax; can return the pattern), `sdpa` (F.scaled_dot_product_attention,
is_causal=True when there is no bias, enable_gqa for Hkv < H), `manual` (autograd.Function with a hand-derived
backward). QK-norm (cfg.qk_norm) normalises each head's q and k over D before the rope rotation and before k
enters the cache, so cached keys are normed and rotated: per head, one (D,) weight shared by the heads, as in
Gemma 3 / Qwen 3 / ViT-22B (https://arxiv.org/abs/2302.05442). OLMo 2 (https://arxiv.org/abs/2501.00656) norms
q and k over all heads jointly (H·D) instead; that variant is not handled.
CrossAttention (the decoder of arch.encdec): queries from the decoder stream, keys / values from the encoder
output (`Step.memory`), no position encoding and no causal mask; with a cache its K/V are computed once per source.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arch.components.kv_cache import KVCache
from arch.components.norms import build_norm
from arch.config import ModelConfig
from arch.hook_points import PointHooks
from arch.manual_attention import manual_attention, mix_values, qk_scores
from arch.mup import attention_scale

# F.scaled_dot_product_attention takes enable_gqa from torch 2.5; before that k / v are repeated per query head
_SDPA_GQA = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


@dataclass
class Step:
    """What every layer needs to know about the current forward pass; the model builds it once."""

    start: int  # absolute position of the first new token (cache length before this call)
    bias: Tensor | None  # (H or 1, T, Tk) additive bias, causal mask folded in; None -> plain causal
    rotate: Callable[[Tensor, Tensor, int], tuple[Tensor, Tensor]]  # positional.rotate (identity unless rope)
    kv_cache: KVCache | None = None
    hooks: PointHooks | None = None  # this block's hooks (arch.hook_points); None: none set, the plain path runs
    causal: bool = True  # False in an encoder: self-attention sees every key, and bias None means no mask
    memory: Tensor | None = None  # encoder-decoder: the encoder output (B, S, C) that cross-attention reads
    memory_bias: Tensor | None = None  # (B, 1, 1, S): -inf at padded source keys, 0 elsewhere; None: no padding


def attention_scores(q: Tensor, k: Tensor, bias: Tensor | None, scale: float, causal: bool = True) -> Tensor:
    """q k^T * scale + bias: the logits the softmax takes, (B, H, T, Tk), -inf at masked keys (the causal mask,
    folded into `bias` or applied here, and any window); the position bias (ALiBi, T5) included."""
    s = qk_scores(q, k, q.shape[1] // k.shape[1]) * scale  # (B, H, T, Tk)
    if bias is not None:
        return s + bias
    if causal and q.shape[-2] > 1:
        t, tk = s.shape[-2:]
        s = s.masked_fill(torch.ones(t, tk, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s


def attention_pattern(q: Tensor, k: Tensor, bias: Tensor | None, scale: float, causal: bool = True) -> Tensor:
    """softmax(q k^T * scale + bias) over the keys: (B, H, T, Tk), rows sum to 1 (the explicit kernel's pattern)."""
    return torch.softmax(attention_scores(q, k, bias, scale, causal), dim=-1)


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout_p: float, scale: float,
                       return_pattern: bool = False, causal: bool = True) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale + bias) v; with return_pattern also the (B, H, T, Tk) pattern before dropout."""
    a = attention_pattern(q, k, bias, scale, causal)  # (B, H, T, Tk)
    z = mix_values(F.dropout(a, dropout_p) if dropout_p > 0.0 else a, v, q.shape[1] // k.shape[1])  # (B, H, T, D)
    return (z, a) if return_pattern else z


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout_p: float, scale: float,
                   causal: bool = True) -> Tensor:
    """torch's fused kernel; is_causal cannot be combined with attn_mask, hence the folded mask in `bias`."""
    if bias is not None:
        bias = bias.to(q.dtype)
    kw = {}
    if k.shape[1] != q.shape[1]:  # grouped-query
        if _SDPA_GQA:
            kw["enable_gqa"] = True
        else:
            G = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(G, dim=1), v.repeat_interleave(G, dim=1)  # (B, H, Tk, D)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=bias, dropout_p=dropout_p, is_causal=causal and bias is None and q.shape[-2] > 1,
        scale=scale, **kw
    )


def _set_heads(attn: nn.Module, cfg: ModelConfig, layer_idx: int) -> tuple[int, int, int]:
    """Check cfg.attention, set layer_idx / n_heads / n_kv_heads / d_head on a self- or cross-attention module;
    returns (H, Hkv, D)."""
    if cfg.attention not in ATTENTION:
        raise ValueError(f"unknown attention {cfg.attention!r}; choose from {sorted(ATTENTION)}")
    attn.layer_idx = layer_idx
    H, D = cfg.n_heads, cfg.d_head
    Hkv = cfg.n_kv_heads or H
    attn.n_heads, attn.n_kv_heads, attn.d_head = H, Hkv, D
    return H, Hkv, D


def _set_norms_and_kernel(attn: nn.Module, cfg: ModelConfig) -> None:
    """After the projections (module order = state-dict and init order): qk-norm, dropouts, kernel, scale.
    The per-head norm is over D with one weight (D,) shared by all heads (Gemma 3 / Qwen 3 / ViT-22B); no shift."""
    D = cfg.d_head
    attn.q_norm = build_norm(cfg, cfg.qk_norm, D, bias=False) if cfg.qk_norm else nn.Identity()
    attn.k_norm = build_norm(cfg, cfg.qk_norm, D, bias=False) if cfg.qk_norm else nn.Identity()
    attn.dropout_p = cfg.dropout  # on the attention probabilities
    attn.resid_dropout = nn.Dropout(cfg.dropout)
    attn.kernel = ATTENTION[cfg.attention]
    attn.scale = attention_scale(cfg)  # 1 / sqrt(d_head); μP: ∝ 1 / d_head (arch.mup)


class CausalSelfAttention(nn.Module):
    """c_attn -> split heads -> qk-norm -> rotate (rope) -> append to cache -> kernel -> merge heads -> c_proj
    -> dropout. q_norm / k_norm are nn.Identity unless cfg.qk_norm is set. Causal unless step.causal is False
    (an encoder's self-attention)."""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        H, Hkv, D = _set_heads(self, cfg, layer_idx)
        self.qkv_sizes = (H * D, Hkv * D, Hkv * D)  # c_attn's output columns: q | k | v
        self.c_attn = nn.Linear(cfg.d_model, sum(self.qkv_sizes), bias=cfg.bias)
        self.c_proj = nn.Linear(H * D, cfg.d_model, bias=cfg.bias)
        _set_norms_and_kernel(self, cfg)

    def forward(self, x: Tensor, step: Step) -> Tensor:  # (B, T, C) -> (B, T, C)
        B, T, _ = x.shape
        H, Hkv, D = self.n_heads, self.n_kv_heads, self.d_head
        q, k, v = self.c_attn(x).split(self.qkv_sizes, dim=-1)  # (B, T, H*D), (B, T, Hkv*D) x 2
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(B, T, Hkv, D).transpose(1, 2)  # (B, Hkv, T, D)
        q, k = self.q_norm(q), self.k_norm(k)
        q, k = step.rotate(q, k, step.start)
        hooks = step.hooks
        if hooks is not None:
            q, k, v = hooks.fire("attn.hook_q", q), hooks.fire("attn.hook_k", k), hooks.fire("attn.hook_v", v)
        if step.kv_cache is not None:
            k, v = step.kv_cache.update(self.layer_idx, k, v)  # (B, Hkv, Tk, D)
        p = self.dropout_p if self.training else 0.0
        if hooks is not None and (hooks.has("attn.hook_attn_scores") or hooks.has("attn.hook_pattern")):
            # sdpa never forms the scores or the pattern: explicit here
            s = hooks.fire("attn.hook_attn_scores", attention_scores(q, k, step.bias, self.scale, step.causal))
            a = hooks.fire("attn.hook_pattern", torch.softmax(s, dim=-1))  # (B, H, T, Tk)
            z = mix_values(F.dropout(a, p) if p > 0.0 else a, v, H // Hkv)  # (B, H, T, D)
        else:
            z = self.kernel(q, k, v, step.bias, p, self.scale, causal=step.causal)  # (B, H, T, D)
        z = z.transpose(1, 2)  # (B, T, H, D)
        if hooks is None:
            return self.resid_dropout(self.c_proj(z.reshape(B, T, H * D)))
        z = hooks.fire("attn.hook_z", z)
        return hooks.fire("hook_attn_out", self.resid_dropout(self.c_proj(z.reshape(B, T, H * D))))


class CrossAttention(nn.Module):
    """Encoder-decoder attention: queries from the decoder stream x (B, T, C), keys and values from the encoder
    output step.memory (B, S, C). c_q -> q heads, c_kv -> k | v heads (Hkv·D | Hkv·D columns) -> qk-norm ->
    kernel -> merge heads -> c_proj -> dropout. No position encoding (as T5 / BART) and no causal mask;
    step.memory_bias masks padded source keys. With an EncDecKVCache the K/V are computed from the memory on the
    first call and reused at every later decoding step. https://arxiv.org/abs/1706.03762 (section 3.2.3)"""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        H, Hkv, D = _set_heads(self, cfg, layer_idx)
        self.kv_sizes = (Hkv * D, Hkv * D)  # c_kv's output columns: k | v
        self.c_q = nn.Linear(cfg.d_model, H * D, bias=cfg.bias)
        self.c_kv = nn.Linear(cfg.d_model, sum(self.kv_sizes), bias=cfg.bias)
        self.c_proj = nn.Linear(H * D, cfg.d_model, bias=cfg.bias)
        _set_norms_and_kernel(self, cfg)

    def memory_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of the encoder output: memory (B, S, C) -> k, v (B, Hkv, S, D), k normed."""
        B, S, _ = memory.shape
        k, v = self.c_kv(memory).split(self.kv_sizes, dim=-1)  # (B, S, Hkv*D) x 2
        k = k.view(B, S, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, Hkv, S, D)
        v = v.view(B, S, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, Hkv, S, D)
        return self.k_norm(k), v

    def forward(self, x: Tensor, step: Step) -> Tensor:  # (B, T, C) -> (B, T, C)
        B, T, _ = x.shape
        H, D = self.n_heads, self.d_head
        q = self.q_norm(self.c_q(x).view(B, T, H, D).transpose(1, 2))  # (B, H, T, D)
        if step.kv_cache is not None:  # computed on the first call for this source, then reused
            k, v = step.kv_cache.cross(self.layer_idx, lambda: self.memory_kv(step.memory))
        else:
            k, v = self.memory_kv(step.memory)  # (B, Hkv, S, D)
        p = self.dropout_p if self.training else 0.0
        z = self.kernel(q, k, v, step.memory_bias, p, self.scale, causal=False)  # (B, H, T, D)
        z = z.transpose(1, 2).reshape(B, T, H * D)  # (B, T, H*D)
        return self.resid_dropout(self.c_proj(z))


ATTENTION: dict[str, Callable[..., Tensor]] = {
    "explicit": explicit_attention,
    "sdpa": sdpa_attention,
    "manual": manual_attention,
}
