"""Transformer: the GPT-style causal decoder.

    ids (B, T) -> wte + pos.embed -> dropout -> blocks -> ln_f (Identity for post-LN) -> lm_head -> logits (B, T, V)

With cfg = ModelConfig(pos=learned, norm=pre, activation=gelu, norm_type=layernorm, bias=True,
tie_embeddings=True) this is exactly GPT-2 (see arch.convert.from_hf_gpt2). Parameter names:
`wte`, `pos.wpe` (learned) / `pos.rel_bias` (relative), `blocks.{i}.{ln_1,attn.c_attn,attn.c_proj,ln_2,
mlp.c_fc,mlp.c_proj}` (+ `ln_1_out`, `ln_2_out` for sandwich; no `ln_2` / `ln_2_out` in parallel blocks),
`blocks.{i}.attn.{q_norm,k_norm}` (qk_norm only), `ln_f` (pre / sandwich), `lm_head` (untied only; an
arch.mup.Readout: a Linear whose input μP multiplies by base_width / d_model).
The parts are arch.components (positional, block, attention, mlp, norms; the init schemes INITS, the causal mask
CausalMasking, the KVCache). Sliding-window attention (cfg.window) is a band folded into the causal mask, so every
kernel and position encoding gets it through the same additive bias.
model.loss(ids, targets) is arch.fused_loss.lm_loss: the chunked fused lm_head + cross-entropy (never stores the
logits) where arch.fused_loss.use_fused allows; model(ids) still returns the logits.
Hook points (read or patch any activation: run_with_hooks, `with model.hooks(...)`, run_with_cache) and the logit
lens are arch.hooks (the mechanism: arch.hook_points); with no hook set the forward pass checks one attribute and
runs the plain loop. build_model(cfg) is arch.build; the encoder-decoder is arch.encdec.
Not handled here: padding masks (left-padded batches), mixed-precision policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from torch import Tensor, nn

import arch.hooks as hooks_mod
from arch.components.attention import Step
from arch.components.block import block_class
from arch.components.init import INITS
from arch.components.kv_cache import KVCache
from arch.components.masking import CausalMasking
from arch.components.norms import build_norm
from arch.components.positional import build_positional
from arch.config import ModelConfig
from arch.fused_loss import lm_loss
from arch.generate import generate
from arch.hook_points import HookFn, HookSet, NameOrFilter
from arch.mup import Readout, readout_mult, rescale_init


class Transformer(CausalMasking, nn.Module):
    """The decoder-only model; build_model(cfg) (arch.build) or Transformer(cfg) make it from a ModelConfig."""

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
        self.lm_head = Readout(cfg.d_model, cfg.vocab_size, bias=False, input_mult=readout_mult(cfg))
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight  # one Parameter, listed once (as wte.weight)
        self.fused_loss = True  # loss() default: chunked fused lm_head + cross-entropy (arch.fused_loss)
        self._hook_set: HookSet | None = None  # forward hooks while a model.hooks(...) block is open (arch.hooks)
        # 0 where key j is visible to query i (j <= i, and i - window < j with a window), -inf elsewhere: folded
        # into float biases (sdpa cannot mix is_causal + mask)
        self.register_buffer("causal_mask", self._causal_table(cfg.n_ctx), persistent=False)
        INITS[cfg.init](self)
        rescale_init(self)  # μP's hidden-matrix init (arch.mup); nothing for SP

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
        return generate(self, ids, **kwargs)
