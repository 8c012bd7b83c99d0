"""Validation metrics: loss / perplexity / bits per byte, attention entropy, activation RMS, length extrapolation.

Windows are fixed, never random, so an evaluation is a deterministic function of (model, val_tokens).
A window of length L over tokens t[0..N) starting at s feeds inputs t[s : s+L] and scores targets
t[s+1 : s+L+1]; "scored tokens" below are those targets.

* `evaluate_model`: windows of L = n_ctx starting at 0, n_ctx, 2·n_ctx, ... (inputs tile the stream, so every
  token from t[1] on is scored at most once, with 0..n_ctx-1 tokens of context), only full windows (a tail
  shorter than n_ctx+1 tokens is not scored). When the split has more than k = `max_batches · batch_size` of
  them, k are taken evenly spread over the whole split (`spread`: the first, the last and every ~W/k-th between),
  not the first k: a fixed prefix of the split is not a sample of it (the start of a text can be easier).
  `val/loss` is the mean over all scored tokens of -ln p(target) (nats/token); `val/ppl = exp(val/loss)`;
  `val/bpb = val/loss / ln 2 / bytes_per_token` = bits per byte of raw text, where `bytes_per_token` is
  measured on the val split as n_bytes(utf-8 text) / n_tokens. Since total bits / total bytes does not depend
  on how the text was cut into tokens, bpb compares runs with different tokenizers; loss and ppl do not.
  (`bits_per_byte(total_nats, total_bytes)` is the same formula on totals.)
  `attn_entropy/layer_{i}`: from `model.run_with_cache` on the first batch, the Shannon entropy (nats) of each
  attention row, averaged over batch, heads and query positions. A uniform causal row at query t has
  entropy ln(t+1); fully peaked is 0.
  `attn_max_logit/layer_{i}`: in the same forward pass on the same first batch, the largest attention logit of
  layer i over batch, heads, queries and the keys each query may see, and `attn_max_logit` the max over layers
  (Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training instabilities",
  arXiv:2309.14322: attention-logit growth, which qk-norm prevents). The logit is what the model softmaxes,
  read at `blocks.{i}.attn.hook_attn_scores`: q·kᵀ/√d_head after qk-norm and rope, **plus the position bias**
  (ALiBi, T5 relative); masked keys (future positions, outside a window) are -inf there, so they never count.
  Only for models with arch's hooks (`model.hooks`); the keys are omitted otherwise.
  `act_rms/layer_{i}`: in the same forward pass, the RMS sqrt(mean x²) over (B, T, C) of block i's output (the
  residual stream at `resid_post.{i}`), and `act_rms/logits` that of the logits over (B, T, V): the coordinate
  check of μP (Yang et al. 2022, arXiv:2203.03466, Fig. 5) read across a width sweep (experiments/compare/coord.py).
* `evaluate_held_out`: `{prefix}/loss` and `{prefix}/bpb` (prefix `test` or `test/<name>`: experiments.data.heldout)
  on the same tiling of L = n_ctx windows, every full window of the set (`held_out_starts`), or with `max_tokens`
  k = max(1, max_tokens // n_ctx) of them spread evenly as above; the loss is the mean over all scored tokens, bpb
  uses the set's own bytes per token. No attention statistics. Deterministic in (model, tokens).
* `length_extrapolation`: for each factor k, L = k·n_ctx, on the first `max_tokens` tokens:
  - `nonoverlap`: windows at 0, L, 2L, ... (the same tiling as above, with L); every scored token counts.
  - `sliding`: windows at 0, S, 2S, ... with stride S = L // 2 by default (`stride=` sets it). The first window
    scores all L targets; each later one scores only its last S targets, i.e. those no earlier window scored
    (HF's "perplexity of fixed-length models" recipe), so every scored token after the first window has at
    least L - S tokens of context. With S == L this is exactly `nonoverlap`.
  Keys `extrap/{mode}/loss@{k}x` (mean nats/token). The value is None (N/A) when the model cannot run at L
  (`model.max_len` is set and L > max_len, e.g. learned positions past n_ctx), when fewer than L+1 tokens are
  available, or when the forward pass raises (e.g. out of memory; logged as a warning). It never raises.
  `batch_size` windows per forward at 1x, `max(1, batch_size // k)` at k×, to bound activation memory.
  Different k score different (nested, prefix) token sets; with max_tokens a multiple of 8·n_ctx plus one,
  nonoverlap scores the same tokens at every k.
Not handled: padding / partial windows, document boundaries (an <|endoftext|> token is just a token), and
models whose attention patterns are not in `run_with_cache` (the entropy keys are then omitted; a model without
`run_with_cache`, the encoder-decoder, gets neither these nor act_rms); the attention statistics and act_rms are
of the first batch only (B windows, the start of the spread), not of every eval batch: they come
from the one explicit forward pass the entropy already costs, while the loss keeps the model's own kernel.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

log = logging.getLogger(__name__)

MODES = ("nonoverlap", "sliding")


def bits_per_byte(total_nats: float, total_bytes: float) -> float:
    """Total cross-entropy in nats over a text -> bits per byte of that text.

    >>> bits_per_byte(math.log(2) * 8, 4)  # 8 bits spread over 4 bytes
    2.0
    """
    return total_nats / math.log(2) / total_bytes


def attention_entropy(pattern: Tensor) -> Tensor:
    """Shannon entropy in nats of each attention row: pattern (..., T_k) -> (...); 0·ln 0 counts as 0.

    >>> attention_entropy(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    tensor([0.0000, 0.6931])
    """
    ent = torch.special.entr(pattern.double()).sum(-1)  # entr(p) = -p ln p, entr(0) = 0
    return (ent + 0.0).to(pattern.dtype)  # + 0.0 turns -0.0 (one-hot rows) into 0.0


def window_starts(n_tokens: int, length: int, stride: int) -> list[int]:
    """Starts of the full windows (length inputs + 1 target) of a stream of n_tokens, every `stride` tokens.

    >>> window_starts(10, 4, 2)  # needs s + 4 + 1 <= 10
    [0, 2, 4]
    """
    if n_tokens < length + 1:
        return []
    return list(range(0, n_tokens - length, stride))


def spread(items: Sequence[int], k: int) -> list[int]:
    """k of `items` evenly spread from the first to the last (all of them when k >= len(items)); k = 1: the middle.

    Item i·(n-1)/(k-1) for i = 0..k-1, rounded half up, so the gaps differ by at most one item.

    >>> spread(list(range(10)), 4)
    [0, 3, 6, 9]
    >>> spread([0, 16, 32, 48, 64], 2), spread([0, 16, 32], 1)
    ([0, 64], [16])
    """
    n = len(items)
    if k >= n:
        return list(items)
    if k == 1:
        return [items[(n - 1) // 2]]
    return [items[(2 * i * (n - 1) + k - 1) // (2 * (k - 1))] for i in range(k)]


def _batches(starts: Sequence[int], batch_size: int) -> Iterator[Sequence[int]]:
    for i in range(0, len(starts), batch_size):
        yield starts[i : i + batch_size]


def _window_batch(tokens: np.ndarray, starts: Sequence[int], length: int, device: Any) -> tuple[Tensor, Tensor]:
    rows = np.stack([np.asarray(tokens[s : s + length + 1], dtype=np.int64) for s in starts])  # (B, L+1)
    batch = torch.from_numpy(rows).to(device)
    return batch[:, :-1], batch[:, 1:]  # inputs (B, L), targets (B, L)


def _token_nll(model: torch.nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    logits = model(inputs)  # (B, L, V)
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")  # (B*L,)
    return nll.view(targets.shape)  # (B, L)


class _eval_mode:
    """model.eval() + torch.no_grad() for the block; restores the previous train/eval mode."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model, self.was_training = model, model.training
        self.no_grad = torch.no_grad()

    def __enter__(self) -> None:
        self.model.eval()
        self.no_grad.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.no_grad.__exit__(*exc)
        self.model.train(self.was_training)


def evaluate_model(
    model: torch.nn.Module,
    val_tokens: np.ndarray,
    *,
    n_ctx: int,
    batch_size: int,
    max_batches: int | None,
    bytes_per_token: float,
    device: Any,
    attn_entropy: bool = True,
) -> dict[str, float]:
    """`val/loss`, `val/ppl`, `val/bpb` on fixed windows, and with `attn_entropy` the statistics of the first batch:
    `attn_entropy/layer_{i}`, `attn_max_logit/layer_{i}`, `attn_max_logit`, `act_rms/layer_{i}`, `act_rms/logits`
    (see the module docstring)."""
    starts = window_starts(len(val_tokens), n_ctx, n_ctx)
    if max_batches is not None:
        starts = spread(starts, max_batches * batch_size)  # over the whole split, not its first windows
    if not starts:
        raise ValueError(f"val split has {len(val_tokens)} tokens; evaluating needs at least n_ctx + 1 = {n_ctx + 1}")
    out: dict[str, float] = {}
    first = (lambda inputs: out.update(attention_stats(model, inputs))) if attn_entropy else None
    loss = _mean_nll(model, val_tokens, starts, n_ctx, batch_size, device, first)
    metrics = {"val/loss": loss, "val/ppl": math.exp(min(loss, 700.0)), "val/bpb": bits_per_byte(loss, bytes_per_token)}
    return {**metrics, **out}


def _mean_nll(model: torch.nn.Module, tokens: np.ndarray, starts: Sequence[int], n_ctx: int, batch_size: int,
              device: Any, on_first: Any = None) -> float:
    """Mean -ln p(target) over every target of the windows at `starts` (L = n_ctx), in eval mode; `on_first(inputs)`
    is called with the first batch's inputs."""
    total_nats, total_tokens = 0.0, 0
    with _eval_mode(model):
        for i, batch_starts in enumerate(_batches(starts, batch_size)):
            inputs, targets = _window_batch(tokens, batch_starts, n_ctx, device)
            total_nats += _token_nll(model, inputs, targets).double().sum().item()
            total_tokens += targets.numel()
            if i == 0 and on_first is not None:
                on_first(inputs)
    return total_nats / total_tokens


def held_out_starts(n_tokens: int, n_ctx: int, max_tokens: int | None) -> list[int]:
    """The window starts `evaluate_held_out` scores: every full window, or max(1, max_tokens // n_ctx) spread evenly.

    >>> held_out_starts(100, 10, None), held_out_starts(100, 10, 25)
    ([0, 10, 20, 30, 40, 50, 60, 70, 80], [0, 80])
    """
    starts = window_starts(n_tokens, n_ctx, n_ctx)
    return starts if max_tokens is None else spread(starts, max(1, max_tokens // n_ctx))


def evaluate_held_out(model: torch.nn.Module, tokens: np.ndarray, *, prefix: str, n_ctx: int, batch_size: int,
                      max_tokens: int | None, bytes_per_token: float, device: Any) -> dict[str, float]:
    """`{prefix}/loss` (mean nats per scored token) and `{prefix}/bpb` on `held_out_starts` (module docstring)."""
    starts = held_out_starts(len(tokens), n_ctx, max_tokens)
    if not starts:
        raise ValueError(f"{prefix} has {len(tokens)} tokens; evaluating needs at least n_ctx + 1 = {n_ctx + 1}")
    loss = _mean_nll(model, tokens, starts, n_ctx, batch_size, device)
    return {f"{prefix}/loss": loss, f"{prefix}/bpb": bits_per_byte(loss, bytes_per_token)}


def attention_stats(model: torch.nn.Module, inputs: Tensor) -> dict[str, float]:
    """One `model.run_with_cache(inputs)`: `attn_entropy/layer_{i}` (mean row entropy over (B, H, T), nats) and,
    where the model has `hooks`, `attn_max_logit/layer_{i}` and `attn_max_logit` (max over (B, H, T, Tk) of the
    logits softmaxed, read at blocks.{i}.attn.hook_attn_scores; masked keys are -inf there); `activation_rms`."""
    run_with_cache = getattr(model, "run_with_cache", None)
    if run_with_cache is None:
        return {}
    max_logits: dict[int, float] = {}

    def read_max(scores: Tensor, hook: Any) -> None:  # scores (B, H, T, Tk)
        max_logits[hook.layer] = scores.float().max().item()

    hooks = getattr(model, "hooks", None)
    with nullcontext() if hooks is None else hooks([(lambda name: name.endswith("attn.hook_attn_scores"), read_max)]):
        logits, cache = run_with_cache(inputs)
    out = {}
    i = 0
    while f"attn_pattern.{i}" in cache:
        pattern = cache[f"attn_pattern.{i}"]  # (B, H, T, T)
        out[f"attn_entropy/layer_{i}"] = attention_entropy(pattern.float()).double().mean().item()
        i += 1
    out.update({f"attn_max_logit/layer_{i}": max_logits[i] for i in sorted(max_logits)})
    if max_logits:
        out["attn_max_logit"] = max(max_logits.values())
    return {**out, **activation_rms(logits, cache)}


def activation_rms(logits: Tensor, cache: dict[str, Tensor]) -> dict[str, float]:
    """`act_rms/layer_{i}`: RMS of cache["resid_post.{i}"] (B, T, C), block i's output, for every block the cache
    holds; `act_rms/logits`: RMS of logits (B, T, V). In float32 (the forward pass may be bf16 under autocast)."""
    out = {}
    i = 0
    while f"resid_post.{i}" in cache:
        out[f"act_rms/layer_{i}"] = _rms(cache[f"resid_post.{i}"])
        i += 1
    return {**out, "act_rms/logits": _rms(logits)}


def _rms(x: Tensor) -> float:
    return x.float().pow(2).mean().sqrt().item()


def _windowed_loss(
    model: torch.nn.Module, tokens: np.ndarray, length: int, stride: int, batch_size: int, device: Any
) -> float | None:
    """Mean nats per scored token: windows every `stride`, the first scores all, later ones their last `stride`."""
    starts = window_starts(len(tokens), length, stride)
    if not starts:
        return None
    total_nats, total_tokens = 0.0, 0
    for batch_starts in _batches(starts, batch_size):
        inputs, targets = _window_batch(tokens, batch_starts, length, device)
        nll = _token_nll(model, inputs, targets)  # (B, L)
        # scored positions: all for the window at 0, else the last `stride` (the tokens no earlier window scored)
        first = torch.tensor([s == 0 for s in batch_starts], device=nll.device)[:, None]  # (B, 1)
        pos = torch.arange(length, device=nll.device)[None, :]  # (1, L)
        scored = first | (pos >= length - stride)  # (B, L)
        total_nats += nll[scored].double().sum().item()
        total_tokens += int(scored.sum().item())
    return total_nats / total_tokens


def length_extrapolation(
    model: torch.nn.Module,
    val_tokens: np.ndarray,
    *,
    n_ctx: int,
    factors: Sequence[int] = (1, 2, 4, 8),
    modes: Sequence[str] = MODES,
    max_tokens: int,
    device: Any,
    batch_size: int = 8,
    stride: int | None = None,
) -> dict[str, float | None]:
    """`extrap/{mode}/loss@{k}x` for L = k·n_ctx; None = N/A (see the module docstring). Never raises on L."""
    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"unknown extrapolation mode(s) {sorted(unknown)}; choose from {list(MODES)}")
    tokens = val_tokens[:max_tokens]
    max_len = getattr(model, "max_len", None)
    out: dict[str, float | None] = {}
    with _eval_mode(model):
        for k in factors:
            length = k * n_ctx
            for mode in modes:
                key = f"extrap/{mode}/loss@{k}x"
                out[key] = None
                if max_len is not None and length > max_len:
                    continue
                step = length if mode == "nonoverlap" else min(stride or length // 2, length)
                try:
                    out[key] = _windowed_loss(model, tokens, length, max(step, 1), max(1, batch_size // k), device)
                except (RuntimeError, ValueError) as exc:  # OOM, or a model that rejects the length itself
                    log.warning("length extrapolation %s at %dx failed (%s: %s); reporting N/A", mode, k, type(exc).__name__, exc)
                    if isinstance(exc, torch.OutOfMemoryError) and torch.cuda.is_available():
                        torch.cuda.empty_cache()
    return out
