"""Transformer (a GPT-style causal decoder) and build_model(cfg).

    ids (B, T) -> wte + pos.embed -> dropout -> blocks -> ln_f (Identity for post-LN) -> lm_head -> logits (B, T, V)

With cfg = ModelConfig(pos=learned, norm=pre, activation=gelu, norm_type=layernorm, bias=True,
tie_embeddings=True) this is exactly GPT-2 (see arch.convert.from_hf_gpt2). Parameter names:
`wte`, `pos.wpe` (learned) / `pos.rel_bias` (relative), `blocks.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,
mlp.c_fc,mlp.c_proj}` (+ `ln_1_out`, `ln_2_out` for sandwich; no `ln_2` / `ln_2_out` in parallel blocks),
`blocks.{i}.attn.{q_norm,k_norm}` (qk_norm only), `ln_f` (pre / sandwich), `lm_head` (untied only).
Sliding-window attention (cfg.window) is a band folded into the causal mask, so every kernel and position
encoding gets it through the same additive bias.
model.loss(ids, targets) uses the chunked fused lm_head + cross-entropy of arch.fused_loss (never stores the
logits) where arch.fused_loss.use_fused allows; model(ids) still returns the logits.
Hook points (read or patch any activation: run_with_hooks, `with model.hooks(...)`, run_with_cache) and the logit
lens live in arch.hooks; with no hook set the forward pass checks one attribute and runs the plain loop.
The encoder-decoder (arch.encdec) reuses CausalMasking, lm_loss, INITS and the blocks; build_model builds it
from an EncDecConfig. Not handled here: padding masks (left-padded batches), mixed-precision policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arch import hooks as hooks_mod
from arch.attention import CausalSelfAttention, CrossAttention, Step
from arch.block import block_class
from arch.config import EncDecConfig, ModelConfig
from arch.fused_loss import fused_linear_cross_entropy, use_fused
from arch.hooks import HookFn, HookSet, NameOrFilter
from arch.kv_cache import KVCache
from arch.mlp import MLP
from arch.norms import build_norm
from arch.positional import build_positional

if TYPE_CHECKING:
    from arch.encdec import EncoderDecoder


def init_gpt2(model: Transformer) -> None:
    """GPT-2 init: Linear/Embedding weights N(0, 0.02), biases 0, norms 1 (and 0), and the residual output
    projections (attn.c_proj, mlp.c_proj; cross_attn.c_proj too) N(0, 0.02 / sqrt(2 n_layers)).
    (Radford et al. 2019, section 2.3). `model` is any stack with `cfg` and `wte`: a Transformer, or an
    encoder-decoder's Encoder / Decoder (each scaled by its own depth)."""
    std = 0.02
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            proj = name.endswith("attn.c_proj") or name.endswith("mlp.c_proj")
            nn.init.normal_(module.weight, mean=0.0, std=std / math.sqrt(2 * model.cfg.n_layers) if proj else std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


def _fused_blocks(model: Transformer) -> dict[nn.Linear, tuple[int, ...]]:
    """Linears that fuse several logical matrices, with their row-block sizes: c_attn = q | k | v, and swiglu's
    c_fc = gate | up. Xavier's fans belong to each logical matrix, not to the fused one."""
    out: dict[nn.Linear, tuple[int, ...]] = {}
    for module in model.modules():
        if isinstance(module, CausalSelfAttention):
            out[module.c_attn] = module.qkv_sizes
        elif isinstance(module, CrossAttention):
            out[module.c_kv] = module.kv_sizes
        elif isinstance(module, MLP):
            out[module.c_fc] = module.fc_sizes
    return out


@torch.no_grad()
def init_xavier(model: Transformer) -> None:
    """Xavier init as Xiong et al. 2020 analyse the original Transformer (https://arxiv.org/abs/2002.04745,
    Vaswani et al. 2017): every Linear weight xavier_uniform, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)) so
    std = sqrt(2 / (fan_in + fan_out)), per logical matrix (q, k, v and swiglu's gate / up each get their own
    fans); biases 0; every Embedding (wte, wpe, the relative-bias table) N(0, 1 / d_model); norms 1 (and 0).
    No residual-projection scaling. A tied lm_head keeps wte's embedding init."""
    fused = _fused_blocks(model)
    std_embed = model.cfg.d_model ** -0.5
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std_embed)
        elif isinstance(module, nn.Linear):
            if module.weight is model.wte.weight:
                continue  # tied output projection: one matrix, initialised as the embedding
            fan_in = module.weight.shape[1]
            for rows in module.weight.split(fused.get(module, (module.weight.shape[0],)), dim=0):
                a = math.sqrt(6.0 / (fan_in + rows.shape[0]))
                rows.uniform_(-a, a)  # a view: writes into the weight
            if module.bias is not None:
                nn.init.zeros_(module.bias)


class CausalMasking:
    """The causal (and sliding-window) mask table and the per-call attention bias of a causal stack: Transformer
    and the encoder-decoder's Decoder. The host has `cfg`, `pos` and a `causal_mask` buffer from `_causal_table`."""

    cfg: ModelConfig
    causal_mask: Tensor

    def _causal_table(self, n: int) -> Tensor:
        mask = torch.full((n, n), float("-inf")).triu(1)  # (Tq, Tk)
        if self.cfg.window is not None:  # sliding window: also hide keys j <= i - window
            mask = mask + torch.full((n, n), float("-inf")).tril(-self.cfg.window)
        return mask

    def _attn_bias(self, start: int, t: int) -> Tensor | None:
        """(H or 1, t, start + t) float bias with the causal mask folded in, or None for plain causal."""
        bias = self.pos.attn_bias(start, t)  # (H, t, Tk) or None
        end = start + t
        banded = self.cfg.window is not None and end > self.cfg.window  # a key left some query's window
        if bias is None and not banded and (start == 0 or t == 1):
            return None  # square causal (kernel masks), or one query that may see every key
        if end > self.causal_mask.shape[0]:
            self.causal_mask = self._causal_table(max(end, 2 * self.causal_mask.shape[0])).to(self.causal_mask)
        mask = self.causal_mask[start:end, :end]  # (t, Tk)
        return mask[None] if bias is None else bias + mask


def lm_loss(x: Tensor, lm_head: nn.Linear, targets: Tensor, fused: bool) -> Tensor:
    """Mean cross-entropy of lm_head(x) against targets != -100: x (B, T, C), targets (B, T). fused: the chunked
    arch.fused_loss path where use_fused allows it, else lm_head + F.cross_entropy (same value and gradients)."""
    if fused and use_fused(x, lm_head.weight):
        return fused_linear_cross_entropy(x.reshape(-1, x.shape[-1]), lm_head.weight, targets.reshape(-1))
    logits = lm_head(x)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


class Transformer(CausalMasking, nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.init not in INITS:
            raise ValueError(f"unknown init {cfg.init!r}; choose from {sorted(INITS)}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = build_positional(cfg)
        self.drop = nn.Dropout(cfg.dropout)
        block_cls = block_class(cfg)
        self.blocks = nn.ModuleList(block_cls(cfg, i) for i in range(cfg.n_layers))
        self.ln_f = build_norm(cfg) if block_cls.final_norm else nn.Identity()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # one Parameter, listed once (as wte.weight)
        self.fused_loss = True  # loss() default: chunked fused lm_head + cross-entropy (arch.fused_loss)
        self._hook_set: HookSet | None = None  # forward hooks while a model.hooks(...) block is open (arch.hooks)
        # 0 where key j is visible to query i (j <= i, and i - window < j with a window), -inf elsewhere: folded
        # into float biases (sdpa cannot mix is_causal + mask)
        self.register_buffer("causal_mask", self._causal_table(cfg.n_ctx), persistent=False)
        INITS[cfg.init](self)

    @property
    def max_len(self) -> int | None:
        """n_ctx for learned positions; None when any sequence length runs."""
        return self.pos.max_len

    def new_kv_cache(self, batch_size: int) -> KVCache:
        return KVCache(self.cfg.n_layers, batch_size)

    def forward(self, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
        """ids (B, T) long -> logits (B, T, V). With kv_cache, ids are the next T positions after the cache."""
        return self.lm_head(self.hidden(ids, kv_cache=kv_cache))  # (B, T, V)

    def hidden(self, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
        """ids (B, T) -> final hidden states (B, T, C) (after ln_f), the input of lm_head."""
        B, T = ids.shape
        start = 0
        if kv_cache is not None:
            if kv_cache.batch_size != B:
                raise ValueError(f"kv_cache holds batch_size={kv_cache.batch_size}; got ids with B={B}")
            start = kv_cache.length
        x = self.drop(self.pos.embed(self.wte(ids), start))  # (B, T, C)
        step = Step(start=start, bias=self._attn_bias(start, T), rotate=self.pos.rotate, kv_cache=kv_cache)
        hooks = self._hook_set
        if hooks is None:
            for block in self.blocks:
                x = block(x, step)
            x = self.ln_f(x)
        else:  # hooks set (arch.hooks): each block gets its own in step.hooks; a block with none runs as above
            x = hooks.top.fire("hook_embed", x)
            for block, layer in zip(self.blocks, hooks.layers):
                if layer is None:
                    x = block(x, step)
                    continue
                x = layer.fire("hook_resid_pre", x)
                x = layer.fire("hook_resid_post", block(x, replace(step, hooks=layer)))
            x = hooks.top.fire("hook_final", self.ln_f(x))
        if kv_cache is not None:
            kv_cache.advance(T)
        return x

    def loss(self, ids: Tensor, targets: Tensor, fused: bool | None = None) -> Tensor:
        """Mean next-token cross-entropy over targets (B, T) != -100 (all ignored: nan, as F.cross_entropy).

        fused (None -> self.fused_loss, default True): chunked linear + cross-entropy (arch.fused_loss), which
        never stores the (B*T, V) logits; used where `arch.fused_loss.use_fused` holds (CPU, fp32/fp64, no
        autocast, not compiling), the unfused lm_head + F.cross_entropy elsewhere. Same value and gradients."""
        x = self.hidden(ids)
        return lm_loss(x, self.lm_head, targets, self.fused_loss if fused is None else fused)

    def hooks(self, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]]) -> AbstractContextManager[Transformer]:
        """`with model.hooks([(name or filter, fn), ...]):` sets forward hooks for the block, removed on exit (also
        on an exception). fn(tensor, hook) returns None (read) or a replacement of the same shape. arch.hooks."""
        return hooks_mod.hooks(self, fwd_hooks)

    def run_with_hooks(self, ids: Tensor, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]] = (),
                       kv_cache: KVCache | None = None) -> Tensor:
        """logits (B, T, V) with fwd_hooks set for this call only (arch.hooks.run_with_hooks)."""
        return hooks_mod.run_with_hooks(self, ids, fwd_hooks, kv_cache=kv_cache)

    def hook_names(self) -> list[str]:
        """Every hook point, in the order they fire: hook_embed, blocks.{i}.hook_resid_pre, ..., hook_final."""
        return hooks_mod.hook_names(self)

    def run_with_cache(self, ids: Tensor, kv_cache: KVCache | None = None,
                       names: Sequence[str] | Callable[[str], bool] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
        """logits plus activations: by default embed, resid_pre.{i}, resid_post.{i} (B, T, C), attn_pattern.{i}
        (B, H, T, Tk) and final (B, T, C, after ln_f); with `names` (hook names or a filter) those hook points,
        keyed by hook name. A captured pattern makes its layer compute attention explicitly (arch.hooks)."""
        return hooks_mod.run_with_cache(self, ids, kv_cache=kv_cache, names=names)

    def logit_lens(self, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
        """(n_layers + 1, B, T, V) logits: lm_head(ln_f(.)) of the stream entering block 0 and leaving each block;
        [-1] == self(ids) exactly (arch.hooks.logit_lens)."""
        return hooks_mod.logit_lens(self, ids, kv_cache=kv_cache)

    def generate(self, ids: Tensor, **kwargs: Any) -> Tensor:
        """Delegates to arch.generate.generate(self, ids, **kwargs) (greedy / sampling / beam search)."""
        from arch.generate import generate

        return generate(self, ids, **kwargs)


INITS: dict[str, Callable[[Transformer], None]] = {
    "gpt2": init_gpt2,
    "xavier": init_xavier,
}


def build_model(cfg: ModelConfig | EncDecConfig) -> Transformer | EncoderDecoder:
    """build_model(ModelConfig(vocab_size=256, n_ctx=64, d_model=64, n_layers=2, n_heads=4)) -> Transformer;
    an EncDecConfig gives an arch.encdec.EncoderDecoder."""
    if isinstance(cfg, EncDecConfig):
        from arch.encdec import EncoderDecoder  # encdec imports this module

        return EncoderDecoder(cfg)
    return Transformer(cfg)
