"""Named hook points on the decoder-only Transformer: read, patch or ablate any activation of a forward pass, and
the logit lens. The API is TransformerLens's (hook names `blocks.{i}.hook_resid_pre`, `run_with_hooks`,
`fn(tensor, hook)`), without a module per hook point: the model keeps one HookSet while hooks are set and passes
each block's hooks down in `Step.hooks`.

    def zero_head_3(z, hook):                       # z (B, T, H, D): attention output per head, before c_proj
        z = z.clone(); z[:, :, 3] = 0.0
        return z                                    # a tensor of the same shape replaces it; None only reads
    logits = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head_3)])
    with model.hooks([(lambda name: name.endswith("hook_resid_post"), save)]):   # removed on exit, also on errors
        out = model.generate(ids, max_new_tokens=8)  # the hooks fire at every cached step, on the new positions
    lens = logit_lens(model, ids)                   # (n_layers + 1, B, T, V) logits; lens[-1] == model(ids)

HOOK_POINTS lists every point with its shape; docs/arch.md ("Hooks and logit lens") says where each sits.
With no hook set nothing here runs: Transformer.hidden checks one attribute and takes the plain loop, every block
gets `step.hooks = None`, and a block none of whose points is hooked runs that plain path too (its sdpa kernel
included). A hook on `attn.hook_pattern` makes that layer compute its attention explicitly (matmul + softmax; the
sdpa kernel never forms the pattern), so its logits match the `explicit` kernel's, not necessarily sdpa's bits.
Not handled: the encoder-decoder (arch.encdec: its Step has no hooks), backward hooks (use tensor.register_hook
inside a forward hook), torch.compile, several threads sharing one model while hooks are set (the HookSet is
model state).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

import torch
from torch import Tensor

if TYPE_CHECKING:
    from arch.kv_cache import KVCache
    from arch.model import Transformer

# hook name -> shape; dims as in arch/attention.py (B, T new positions, Tk keys incl. the cache, C d_model, H heads,
# Hkv key/value heads, D d_head, M d_mlp, F = M, or 2·M for swiglu's gate | up)
BLOCK_POINTS = {  # blocks.{i}.<point>, in the order they fire
    "hook_resid_pre": "(B, T, C)",  # residual stream entering the block
    "attn.hook_q": "(B, H, T, D)",  # after c_attn, qk-norm and rope, before the kernel
    "attn.hook_k": "(B, Hkv, T, D)",  # same place; new positions only, before they enter the KV cache
    "attn.hook_v": "(B, Hkv, T, D)",  # same place
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

# run_with_cache's default keys (its original capture set): short key -> hook name
CACHE_KEYS = {"embed": "hook_embed", "resid_pre.{i}": "blocks.{i}.hook_resid_pre",
              "attn_pattern.{i}": "blocks.{i}.attn.hook_pattern", "resid_post.{i}": "blocks.{i}.hook_resid_post",
              "final": "hook_final"}

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


def hook_names(model: Transformer) -> list[str]:
    """Every hook point of `model`, in the order they fire. Parallel blocks have no hook_resid_mid.
    Example: hook_names(build_model(ModelConfig(vocab_size=8, n_ctx=4, d_model=8, n_layers=1, n_heads=2)))[:3]
    -> ['hook_embed', 'blocks.0.hook_resid_pre', 'blocks.0.attn.hook_q']"""
    points = [p for p in BLOCK_POINTS if not (p == "hook_resid_mid" and model.cfg.block == "parallel")]
    blocks = [f"blocks.{i}.{p}" for i in range(model.cfg.n_layers) for p in points]
    return ["hook_embed", *blocks, "hook_final"]


def resolve(model: Transformer, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]]) -> list[tuple[str, HookFn]]:
    """(name, fn) pairs for fwd_hooks: a name must be one of hook_names(model) (else ValueError with the closest
    names); a filter (name -> bool) takes every name it accepts, possibly none."""
    names = hook_names(model)
    valid = set(names)
    out: list[tuple[str, HookFn]] = []
    for item in fwd_hooks:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and callable(item[1])):
            raise TypeError(f"fwd_hooks holds (name or filter, fn) pairs; got {item!r}")
        key, fn = item
        if isinstance(key, str):
            if key not in valid:
                close = difflib.get_close_matches(key, names, n=3)
                hint = f"; close matches: {', '.join(close)}" if close else ""
                raise ValueError(f"unknown hook point {key!r}{hint} (model.hook_names() lists all "
                                 f"{len(names)}; docs/arch.md, 'Hooks and logit lens')")
            out.append((key, fn))
        elif callable(key):
            out += [(n, fn) for n in names if key(n)]
        else:
            raise TypeError(f"a hook is named by a str or a filter function; got {type(key).__name__}")
    return out


@contextmanager
def hooks(model: Transformer, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]]) -> Iterator[Transformer]:
    """Set fwd_hooks on model for the `with` block (added after any hooks an enclosing block set); the model's
    previous hooks are back on exit, also when the block raises. Hooks that match no point change nothing."""
    pairs = resolve(model, fwd_hooks)
    previous = model._hook_set
    if pairs:
        active = HookSet(model.cfg.n_layers) if previous is None else previous.copy()
        for name, fn in pairs:
            active.add(name, fn)
        model._hook_set = active
    try:
        yield model
    finally:
        model._hook_set = previous


def run_with_hooks(model: Transformer, ids: Tensor, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]] = (),
                   kv_cache: KVCache | None = None) -> Tensor:
    """logits (B, T, V) of model(ids, kv_cache=kv_cache) with fwd_hooks set for this call only."""
    with hooks(model, fwd_hooks):
        return model(ids, kv_cache=kv_cache)


def run_with_cache(model: Transformer, ids: Tensor, kv_cache: KVCache | None = None,
                   names: Sequence[str] | Callable[[str], bool] | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """(logits, activations). names None: the short keys of CACHE_KEYS (embed, resid_pre.{i}, attn_pattern.{i},
    resid_post.{i}, final); else the hook points named (a list of names, or a filter), keyed by hook name.
    Values are the tensors as they pass the point (not detached, not copied)."""
    cache: dict[str, Tensor] = {}

    def store(key: str) -> HookFn:
        def fn(x: Tensor, hook: HookPoint) -> None:
            cache[key] = x
        return fn

    if names is None:
        fwd = []
        for short, name in CACHE_KEYS.items():
            layers = range(model.cfg.n_layers) if "{i}" in name else [None]
            fwd += [(name.format(i=i), store(short.format(i=i))) for i in layers]
    elif callable(names):
        fwd = [(n, store(n)) for n in hook_names(model) if names(n)]
    else:
        fwd = [(n, store(n)) for n in names]
    logits = run_with_hooks(model, ids, fwd, kv_cache=kv_cache)
    return logits, cache


def _stream(model: Transformer, ids: Tensor, kv_cache: KVCache | None) -> list[Tensor]:
    L = model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{i}.hook_resid_post" for i in range(L))]
    _, cache = run_with_cache(model, ids, kv_cache=kv_cache, names=names)
    return [cache[n] for n in names]


def residual_stream(model: Transformer, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
    """(n_layers + 1, B, T, C): [0] the stream entering block 0 (hook_resid_pre), [i + 1] the stream leaving
    block i (hook_resid_post)."""
    return torch.stack(_stream(model, ids, kv_cache))


def logit_lens(model: Transformer, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
    """The residual stream after each layer read out as the last layer's is, lm_head(ln_f(stream)):
    (n_layers + 1, B, T, V) logits (log_softmax(-1) gives log-probs). [0] reads the embeddings, [i + 1] the output
    of block i, and [-1] equals model(ids) exactly (each layer goes through ln_f and lm_head on its own, with the
    forward pass's shapes). Holds (n_layers + 1)·B·T·V floats; for a large vocabulary read residual_stream() out
    one layer at a time. nostalgebraist 2020, "interpreting GPT: the logit lens"
    (https://www.lesswrong.com/posts/AcKRB8wDpdaN6v6ru/interpreting-gpt-the-logit-lens)."""
    return torch.stack([model.lm_head(model.ln_f(x)) for x in _stream(model, ids, kv_cache)])
