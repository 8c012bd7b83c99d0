"""Read, patch or ablate any activation of the decoder-only Transformer's forward pass, and the logit lens. The API
is TransformerLens's (hook names `blocks.{i}.hook_resid_pre`, `run_with_hooks`, `fn(tensor, hook)`); the hook points
and the HookSet that carries them through a forward pass are arch.hook_points.

    def zero_head_3(z, hook):                       # z (B, T, H, D): attention output per head, before c_proj
        z = z.clone(); z[:, :, 3] = 0.0
        return z                                    # a tensor of the same shape replaces it; None only reads
    logits = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head_3)])
    with model.hooks([(lambda name: name.endswith("hook_resid_post"), save)]):   # removed on exit, also on errors
        out = model.generate(ids, max_new_tokens=8)  # the hooks fire at every cached step, on the new positions
    lens = logit_lens(model, ids)                   # (n_layers + 1, B, T, V) logits; lens[-1] == model(ids)

HOOK_POINTS (arch.hook_points) lists every point with its shape; docs/arch.md ("Hooks and logit lens") says where
each sits. With no hook set nothing here runs: Transformer.hidden checks one attribute and takes the plain loop,
every block gets `step.hooks = None`, and a block none of whose points is hooked runs that plain path too (its sdpa
kernel included). A hook on `attn.hook_attn_scores` or `attn.hook_pattern` makes that layer compute its attention
explicitly (matmul + softmax; the sdpa kernel never forms either), so its logits match the `explicit` kernel's,
not necessarily sdpa's bits. The functions take any model shaped as HookedModel (arch.model.Transformer's methods call them).
Not handled: the encoder-decoder (arch.encdec: its Step has no hooks), backward hooks (use tensor.register_hook
inside a forward hook), torch.compile, several threads sharing one model while hooks are set (the HookSet is
model state).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol, TypeVar

import torch
from torch import Tensor, nn

from arch.components.kv_cache import KVCache
from arch.config import ModelConfig
from arch.hook_points import BLOCK_POINTS, HookFn, HookPoint, HookSet, NameOrFilter

# run_with_cache's default keys (its original capture set): short key -> hook name
CACHE_KEYS = {"embed": "hook_embed", "resid_pre.{i}": "blocks.{i}.hook_resid_pre",
              "attn_pattern.{i}": "blocks.{i}.attn.hook_pattern", "resid_post.{i}": "blocks.{i}.hook_resid_post",
              "final": "hook_final"}


class HookedModel(Protocol):
    """What the functions here use of a model: arch.model.Transformer (a structural type, so that this module needs
    no import of the model whose methods call it)."""

    cfg: ModelConfig
    _hook_set: HookSet | None  # the hooks in effect; None: none set
    ln_f: nn.Module
    lm_head: nn.Module

    def __call__(self, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor: ...


M = TypeVar("M", bound=HookedModel)


def hook_names(model: HookedModel) -> list[str]:
    """Every hook point of `model`, in the order they fire. Parallel blocks have no hook_resid_mid.
    Example: hook_names(build_model(ModelConfig(vocab_size=8, n_ctx=4, d_model=8, n_layers=1, n_heads=2)))[:3]
    -> ['hook_embed', 'blocks.0.hook_resid_pre', 'blocks.0.attn.hook_q']"""
    points = [p for p in BLOCK_POINTS if not (p == "hook_resid_mid" and model.cfg.block == "parallel")]
    blocks = [f"blocks.{i}.{p}" for i in range(model.cfg.n_layers) for p in points]
    return ["hook_embed", *blocks, "hook_final"]


def resolve(model: HookedModel, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]]) -> list[tuple[str, HookFn]]:
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
def hooks(model: M, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]]) -> Iterator[M]:
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


def run_with_hooks(model: HookedModel, ids: Tensor, fwd_hooks: Iterable[tuple[NameOrFilter, HookFn]] = (),
                   kv_cache: KVCache | None = None) -> Tensor:
    """logits (B, T, V) of model(ids, kv_cache=kv_cache) with fwd_hooks set for this call only."""
    with hooks(model, fwd_hooks):
        return model(ids, kv_cache=kv_cache)


def run_with_cache(model: HookedModel, ids: Tensor, kv_cache: KVCache | None = None,
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


def _stream(model: HookedModel, ids: Tensor, kv_cache: KVCache | None) -> list[Tensor]:
    L = model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{i}.hook_resid_post" for i in range(L))]
    _, cache = run_with_cache(model, ids, kv_cache=kv_cache, names=names)
    return [cache[n] for n in names]


def residual_stream(model: HookedModel, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
    """(n_layers + 1, B, T, C): [0] the stream entering block 0 (hook_resid_pre), [i + 1] the stream leaving
    block i (hook_resid_post)."""
    return torch.stack(_stream(model, ids, kv_cache))


def logit_lens(model: HookedModel, ids: Tensor, kv_cache: KVCache | None = None) -> Tensor:
    """The residual stream after each layer read out as the last layer's is, lm_head(ln_f(stream)):
    (n_layers + 1, B, T, V) logits (log_softmax(-1) gives log-probs). [0] reads the embeddings, [i + 1] the output
    of block i, and [-1] equals model(ids) exactly (each layer goes through ln_f and lm_head on its own, with the
    forward pass's shapes). Holds (n_layers + 1)·B·T·V floats; for a large vocabulary read residual_stream() out
    one layer at a time. nostalgebraist 2020, "interpreting GPT: the logit lens"
    (https://www.lesswrong.com/posts/AcKRB8wDpdaN6v6ru/interpreting-gpt-the-logit-lens)."""
    return torch.stack([model.lm_head(model.ln_f(x)) for x in _stream(model, ids, kv_cache)])
