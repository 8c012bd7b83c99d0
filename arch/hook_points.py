"""The hook mechanism: named hook points and the hook functions set on them (HookPoint, PointHooks, HookSet).

A hook point is a name (`hook_embed`, `blocks.{i}.attn.hook_z`, ... : HOOK_POINTS, with shapes) where the forward
pass calls `hooks.fire(point, x)`; each function set there sees the tensor and may return a replacement of the same
shape. There is no module per point (TransformerLens has a HookPoint nn.Module each): while hooks are set the model
holds one HookSet, and each block gets its own PointHooks in `Step.hooks` (None when that block has none), so a
forward pass without hooks runs no code from here. Firing them is the components' job (arch.model,
arch.components.{block, attention, mlp}); choosing and setting them, run_with_hooks, run_with_cache and the logit
lens are arch.hooks. Not handled: backward hooks, hook points in the encoder-decoder.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Union

from torch import Tensor

# hook name -> shape; dims as in arch/components/attention.py (B, T new positions, Tk keys incl. the cache,
# C d_model, H heads, Hkv key/value heads, D d_head, M d_mlp, F = M, or 2·M for swiglu's gate | up)
BLOCK_POINTS = {  # blocks.{i}.<point>, in the order they fire
    "hook_resid_pre": "(B, T, C)",  # residual stream entering the block
    "attn.hook_q": "(B, H, T, D)",  # after c_attn, qk-norm and rope, before the kernel
    "attn.hook_k": "(B, Hkv, T, D)",  # same place; new positions only, before they enter the KV cache
    "attn.hook_v": "(B, Hkv, T, D)",  # same place
    "attn.hook_attn_scores": "(B, H, T, Tk)",  # the logits softmax takes: q·kᵀ·scale + position bias, -inf at
                                               # masked keys (causal, window); forces explicit
    "attn.hook_pattern": "(B, H, T, Tk)",  # softmax probabilities (before attention dropout); forces explicit
    "attn.hook_z": "(B, T, H, D)",  # attention output per head, before c_proj
    "hook_attn_out": "(B, T, C)",  # attention sublayer output: after c_proj and dropout, before any out-norm / add
    "hook_resid_mid": "(B, T, C)",  # between the attention and MLP sublayers (sequential blocks only)
    "mlp.hook_pre": "(B, T, F)",  # c_fc output, before the activation
    "mlp.hook_post": "(B, T, M)",  # after the activation (swiglu: silu(gate) * up), the input of c_proj
    "hook_mlp_out": "(B, T, C)",  # MLP sublayer output: after c_proj and dropout, before any out-norm / add
    "hook_resid_post": "(B, T, C)",  # residual stream leaving the block
}
HOOK_POINTS = {
    "hook_embed": "(B, T, C)",  # token + absolute position embedding, after dropout
    **{f"blocks.{{i}}.{point}": shape for point, shape in BLOCK_POINTS.items()},
    "hook_final": "(B, T, C)",  # after ln_f (identity for post-LN): the input of lm_head
}

_BLOCK_NAME = re.compile(r"blocks\.(\d+)\.(.+)")


@dataclass(frozen=True)
class HookPoint:
    """A hook function's second argument: `name` ('blocks.1.attn.hook_z') and `layer` (1; None at the top level)."""

    name: str
    layer: int | None


HookFn = Callable[[Tensor, HookPoint], Union[Tensor, None]]
NameOrFilter = Union[str, Callable[[str], bool]]


class PointHooks:
    """The hook functions of one scope (one block, or the top level): point -> [fn, ...] in the order added."""

    def __init__(self, layer: int | None) -> None:
        self.layer = layer
        self.fns: dict[str, list[HookFn]] = {}
        self.points: dict[str, HookPoint] = {}

    def add(self, point: str, fn: HookFn) -> None:
        name = point if self.layer is None else f"blocks.{self.layer}.{point}"
        self.points.setdefault(point, HookPoint(name, self.layer))
        self.fns.setdefault(point, []).append(fn)

    def has(self, point: str) -> bool:
        return point in self.fns

    def fire(self, point: str, x: Tensor) -> Tensor:
        """Run the functions hooked at `point` on x in order; each may return a replacement of the same shape."""
        fns = self.fns.get(point)
        if fns is None:
            return x
        hook = self.points[point]
        for fn in fns:
            out = fn(x, hook)
            if out is not None:
                if not isinstance(out, Tensor) or out.shape != x.shape:
                    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
                    raise ValueError(f"hook on {hook.name} returned {got}; expected None or a tensor of shape "
                                     f"{tuple(x.shape)}")
                x = out
        return x

    def copy(self) -> PointHooks:
        new = PointHooks(self.layer)
        new.fns = {k: list(v) for k, v in self.fns.items()}
        new.points = dict(self.points)
        return new


class HookSet:
    """Every hook set on a model: the top-level points and one PointHooks per block (None: no hook in that block)."""

    def __init__(self, n_layers: int) -> None:
        self.top = PointHooks(None)
        self.layers: list[PointHooks | None] = [None] * n_layers

    def add(self, name: str, fn: HookFn) -> None:
        m = _BLOCK_NAME.fullmatch(name)
        if m is None:
            self.top.add(name, fn)
            return
        i = int(m[1])
        if self.layers[i] is None:
            self.layers[i] = PointHooks(i)
        self.layers[i].add(m[2], fn)

    def copy(self) -> HookSet:
        new = HookSet(len(self.layers))
        new.top = self.top.copy()
        new.layers = [None if p is None else p.copy() for p in self.layers]
        return new
