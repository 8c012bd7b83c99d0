"""Autoregressive decoding for archlab models: greedy, temperature / top-k / top-p sampling, beam search.

Works with any model that maps ids (B, T) to logits (B, T, V) and has `max_len` (None or the longest context
it accepts). With `use_cache=True` a model that has `new_kv_cache(batch_size)` is fed only the new ids,
`model(ids, kv_cache=cache)`; the cache knows its `length` and `reorder(index)`s its batch rows (beam search).
Models without `new_kv_cache` are recomputed in full each step.
Seq2seq (`src=` given; an arch.encdec.EncoderDecoder): `ids` is the decoder prompt (e.g. a column of the start
id). The source is encoded once (`model.encode`); each step runs `model.decode(new_ids, memory, src_mask,
kv_cache)`, and the cache's cross-attention K/V are computed once per source row
(`model.new_kv_cache(B, memory)`) and gathered for the beams. Learned decoder positions past n_ctx raise.

Decisions:

* Sampling applies temperature, then top-k, then top-p (the Hugging Face order). `temperature == 0` is greedy.
* Beam search ranks hypotheses by `sum of token log-probs / length ** length_penalty` (HF's formula; `length`
  = generated tokens, the first eos included, the prompt not), at every step: finished and running beams
  compete on it. The default `length_penalty=0` is the plain sum. With `num_beams` covering every prefix the
  search is exact for any `length_penalty` (tested against brute force). A finished beam (it emitted
  `eos_id`) keeps its score and length and is extended only by `eos_id` at zero cost. Beam search is
  deterministic: it ignores `temperature` and `generator`, and refuses `top_k` / `top_p`.
* `eos_id`: each row stops at its first `eos_id` and is padded with `eos_id` afterwards; once every row has
  finished, decoding stops early, so the output can be shorter than `T + max_new_tokens`.
* Context limit: when the sequence outgrows `model.max_len` (learned positions), only the last `max_len`
  tokens are fed, as nanoGPT does. A KV cache cannot shift positions, so from that step on the cache is
  dropped and each step recomputes the cropped window.

Streaming: `on_token` sees each step's new ids (greedy / sampling). Not handled: padding / ragged prompts (all
rows share the prompt length; ragged *sources* are fine: src_mask / src_pad_id), repetition penalties,
streaming beam search, GNMT's ((5 + length) / 6) ** alpha penalty and its coverage penalty, HF's early-stopping
heuristics (a beam set here runs until every beam has finished or max_new_tokens).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the k largest logits of each row, set the rest to -inf (ties with the k-th value are kept).

    >>> top_k_filter(torch.tensor([[1.0, 3.0, 2.0]]), 2)
    tensor([[-inf, 3., 2.]])
    """
    if k < 1:
        raise ValueError(f"top_k must be >= 1, got {k}")
    if k >= logits.size(-1):
        return logits
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1) the k-th largest value
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of most-probable tokens whose probability sums to >= p.

    A token survives when the probability mass strictly before it (in descending order) is < p, so the most
    probable token always survives and p = 1 keeps everything.

    >>> top_p_filter(torch.log(torch.tensor([[0.5, 0.2, 0.3]])), 0.7)  # 0.5 + 0.3 reaches 0.7
    tensor([[-0.6931,    -inf, -1.2040]])
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    if p == 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # mass of the strictly more probable tokens
    drop_sorted = mass_before >= p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def _check_args(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None, num_beams: int) -> None:
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if num_beams > 1 and (top_k is not None or top_p is not None):
        raise ValueError("beam search is deterministic: top_k / top_p only apply with num_beams=1")


class _Stepper:
    """Feeds a growing sequence to the model and returns the last position's logits, using the KV cache
    while the sequence fits in `model.max_len` and recomputing a cropped window once it does not."""

    def __init__(self, model: torch.nn.Module, batch_size: int, use_cache: bool):
        self.model = model
        self.max_len = getattr(model, "max_len", None)
        self.cache = model.new_kv_cache(batch_size) if use_cache and hasattr(model, "new_kv_cache") else None

    def logits(self, seq: Tensor) -> Tensor:
        """seq (B, T) the whole sequence so far -> (B, V) logits for the next token."""
        if self.cache is not None:
            if self.max_len is None or seq.size(1) <= self.max_len:
                new = seq[:, self.cache.length :]  # (B, T_new) the ids the cache has not seen
                return self.model(new, kv_cache=self.cache)[:, -1, :]
            self.cache = None  # positions would have to shift: recompute from here on
        window = seq if self.max_len is None else seq[:, -self.max_len :]  # (B, <= max_len)
        return self.model(window)[:, -1, :]

    def reorder(self, index: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(index)


class _Seq2SeqStepper:
    """The _Stepper of an encoder-decoder: encodes `src` once, then feeds the growing target to the decoder (only
    the new ids with the cache, whose cross-attention K/V are computed here once per source row). `expand` > 1
    repeats every row that many times (beam search) by gathering memory, mask and cache, not by recomputing."""

    def __init__(self, model: torch.nn.Module, src: Tensor, src_mask: Tensor | None, use_cache: bool,
                 expand: int = 1):
        self.model = model
        self.src_mask = model.source_mask(src, src_mask)  # (B, S) bool or None
        self.memory = model.encode(src, self.src_mask)  # (B, S, C)
        self.cache = model.new_kv_cache(src.size(0), memory=self.memory) if use_cache else None
        if expand > 1:
            self.reorder(torch.arange(src.size(0), device=src.device).repeat_interleave(expand))

    def logits(self, seq: Tensor) -> Tensor:
        """seq (B, T) the whole target so far -> (B, V) logits for its next token."""
        if self.cache is not None:
            new = seq[:, self.cache.length :]  # (B, T_new) the ids the cache has not seen
            return self.model.decode(new, self.memory, self.src_mask, kv_cache=self.cache)[:, -1, :]
        return self.model.decode(seq, self.memory, self.src_mask)[:, -1, :]

    def reorder(self, index: Tensor) -> None:
        self.memory = self.memory.index_select(0, index)
        if self.src_mask is not None:
            self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def _make_stepper(model: torch.nn.Module, batch_size: int, use_cache: bool, src: Tensor | None,
                  src_mask: Tensor | None, expand: int = 1) -> _Stepper | _Seq2SeqStepper:
    """A decoder-only _Stepper for batch_size * expand rows, or (src given) a _Seq2SeqStepper."""
    if src is None:
        return _Stepper(model, batch_size * expand, use_cache)
    if src.size(0) != batch_size:
        raise ValueError(f"src has {src.size(0)} rows; the decoder prompt has {batch_size}")
    return _Seq2SeqStepper(model, src, src_mask, use_cache, expand)


def _sample(
    logits: Tensor, temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None
) -> Tensor:
    """(B, V) logits -> (B,) next ids."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature  # fp16/bf16 -> fp32
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    model: torch.nn.Module,
    ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    num_beams: int = 1,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    on_token: Callable[[Tensor], None] | None = None,
    length_penalty: float = 0.0,
    src: Tensor | None = None,
    src_mask: Tensor | None = None,
) -> Tensor:
    """Continue each row of `ids` (B, T) by up to `max_new_tokens` tokens; returns (B, T + n), prompt included.

    The model runs in eval mode (dropout off) and its training flag is restored afterwards. A 1-D prompt
    (T,) gives a 1-D result. Pass a seeded `torch.Generator` for reproducible sampling. `on_token(next_ids)` is
    called with each step's (B,) new ids as they are chosen (streaming; greedy and sampling only: beam search
    knows its tokens only at the end and refuses it). `length_penalty` (beam search): rank by
    sum log-prob / generated_length ** length_penalty (> 0 favours longer hypotheses, < 0 shorter).
    Seq2seq: `src` (B, S) source ids (and optionally `src_mask` (B, S), True at tokens) for an encoder-decoder;
    `ids` is then the decoder prompt, e.g. torch.full((B, 1), start_id).

    >>> out = generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=5, temperature=0)  # greedy, (1, 8)
    >>> out = generate(encdec, torch.full((2, 1), bos), 20, src=src, num_beams=4, eos_id=eos, length_penalty=0.6)
    """
    _check_args(max_new_tokens, temperature, top_k, top_p, num_beams)
    if on_token is not None and num_beams > 1:
        raise ValueError("on_token streams greedy or sampled tokens; beam search knows its tokens only at the end")
    squeeze = ids.dim() == 1
    if squeeze:
        ids = ids.unsqueeze(0)  # (1, T)
        if src is not None and src.dim() == 1:
            src = src.unsqueeze(0)  # (1, S)
            src_mask = None if src_mask is None else src_mask.unsqueeze(0)
    was_training = model.training
    model.eval()
    try:
        if num_beams > 1:
            out = _beam_search(model, ids, max_new_tokens, num_beams, eos_id, use_cache, length_penalty, src, src_mask)
        else:
            out = _decode(model, ids, max_new_tokens, temperature, top_k, top_p, eos_id, use_cache, generator, on_token,
                          src, src_mask)
    finally:
        model.train(was_training)
    return out.squeeze(0) if squeeze else out


def _decode(model, ids, max_new_tokens, temperature, top_k, top_p, eos_id, use_cache, generator, on_token=None,
            src=None, src_mask=None) -> Tensor:
    B = ids.size(0)
    stepper = _make_stepper(model, B, use_cache, src, src_mask)
    finished = torch.zeros(B, dtype=torch.bool, device=ids.device)
    for _ in range(max_new_tokens):
        nxt = _sample(stepper.logits(ids), temperature, top_k, top_p, generator)  # (B,)
        if eos_id is not None:
            nxt = nxt.masked_fill(finished, eos_id)  # finished rows are padded with eos
            finished |= nxt == eos_id
        ids = torch.cat([ids, nxt[:, None]], dim=1)  # (B, T + 1)
        if on_token is not None:
            on_token(nxt)
        if eos_id is not None and bool(finished.all()):
            break
    return ids


def _beam_search(model, ids, max_new_tokens, K, eos_id, use_cache, length_penalty=0.0, src=None,
                 src_mask=None) -> Tensor:
    B, T = ids.shape
    seqs = ids.repeat_interleave(K, dim=0)  # (B·K, T): beams of row b are rows b·K .. b·K + K - 1
    stepper = _make_stepper(model, B, use_cache, src, src_mask, expand=K)
    scores = torch.full((B, K), float("-inf"), device=ids.device, dtype=torch.float64)  # sums of log-probs
    scores[:, 0] = 0.0  # all beams start identical: only one may expand, or the first step picks duplicates
    finished = torch.zeros(B * K, dtype=torch.bool, device=ids.device)
    lengths = torch.zeros(B * K, dtype=torch.long, device=ids.device)  # generated tokens, frozen at the first eos
    base = (torch.arange(B, device=ids.device) * K)[:, None]  # (B, 1) first flat row of each batch row
    for step in range(max_new_tokens):
        logp = F.log_softmax(stepper.logits(seqs).double(), dim=-1)  # (B·K, V)
        V = logp.size(-1)
        if eos_id is not None:  # a finished beam can only emit eos, for free
            frozen = torch.full_like(logp, float("-inf"))
            frozen[:, eos_id] = 0.0
            logp = torch.where(finished[:, None], frozen, logp)
        cand = (scores[:, :, None] + logp.view(B, K, V)).view(B, K * V)  # (B, K·V) sums
        if length_penalty == 0:
            scores, flat = torch.topk(cand, K, dim=-1)  # (B, K) best K continuations, in descending order
        else:  # rank by sum / length ** alpha: a finished beam keeps its length, a running one has step + 1
            cand_len = torch.where(finished, lengths, step + 1).double().view(B, K, 1)  # (B, K, 1)
            rank = (cand.view(B, K, V) / cand_len**length_penalty).view(B, K * V)
            flat = torch.topk(rank, K, dim=-1).indices  # (B, K), best first
            scores = cand.gather(1, flat)
        beam = (base + flat // V).view(-1)  # (B·K,) flat index of each survivor's parent beam
        tok = (flat % V).view(-1)  # (B·K,)
        seqs = torch.cat([seqs[beam], tok[:, None]], dim=1)  # (B·K, T + step)
        stepper.reorder(beam)
        lengths = torch.where(finished[beam], lengths[beam], step + 1)
        if eos_id is not None:
            finished = finished[beam] | (tok == eos_id)
            if bool((finished | scores.view(-1).isinf()).all()):  # -inf beams are unused filler
                break
    return seqs.view(B, K, -1)[:, 0, :]  # (B, T + n) the best beam (topk is sorted)
