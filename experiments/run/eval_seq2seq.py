"""Seq2seq metrics: teacher-forced loss and token accuracy, and greedy exact match, overall and per length.

    evaluate_seq2seq(model, pairs, pad_id=..., bos_id=..., eos_id=..., batch_size=64, device="cpu", prefix="test")
    -> {"test/loss": ..., "test/token_acc": ..., "test/exact_match": ..., "test/exact_match@len12": ..., ...}

* `loss`: mean cross-entropy (nats) over every target token including the final eos, decoder fed the gold prefix
  (teacher forcing), pads ignored; `token_acc`: the share of those tokens whose argmax is right.
* `exact_match`: greedy decoding from `<|bos|>` (arch.generate, temperature 0, the encoder run once per batch and
  the decoder cached) stops at `<|eos|>` or after len(target) + 1 tokens; a pair counts when the ids before the
  first eos equal the target's ids exactly. `exact_match@len{k}` and `token_acc@len{k}`: the same over the pairs
  of task length k (data.test_lengths), the curve of length generalisation.
Pairs are scored in their given order in batches of `batch_size` (deterministic). Not handled: beam search or
sampling in the metric, BLEU (exact match and token accuracy are what the synthetic tasks need).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
import torch.nn.functional as F

from experiments.data.pairs import IGNORE, EncodedPairs, collate


@torch.no_grad()
def evaluate_seq2seq(model: torch.nn.Module, pairs: EncodedPairs, *, pad_id: int, bos_id: int, eos_id: int,
                     batch_size: int, device: Any, prefix: str, max_pairs: int | None = None,
                     exact_match: bool = True) -> dict[str, float]:
    n = len(pairs.src) if max_pairs is None else min(max_pairs, len(pairs.src))
    was_training = model.training
    model.eval()
    nll, tokens, correct = 0.0, 0, 0
    by_len: dict[int, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # exact, pairs, correct tokens, tokens
    try:
        for start in range(0, n, batch_size):
            index = list(range(start, min(start + batch_size, n)))
            src, tgt_in, tgt_out = (t.to(device) for t in collate(pairs, index, pad_id))
            logits = model(src, tgt_in)  # (B, T, V)
            scored = tgt_out != IGNORE  # (B, T)
            nll += F.cross_entropy(logits[scored].float(), tgt_out[scored], reduction="sum").item()
            hits = (logits.argmax(-1) == tgt_out) & scored  # (B, T)
            correct += int(hits.sum())
            tokens += int(scored.sum())
            if exact_match:
                start_ids = torch.full((len(index), 1), bos_id, dtype=torch.long, device=device)
                out = model.generate(src, start_ids, max_new_tokens=int(tgt_out.size(1)) + 1, temperature=0.0,
                                     eos_id=eos_id)[:, 1:]  # (B, <= T + 1) without the start id
            for row, i in enumerate(index):
                k, target = pairs.lengths[i], pairs.tgt_out[i][:-1]  # the target's ids, eos dropped
                stats = by_len[k]
                stats[2] += int(hits[row].sum())
                stats[3] += int(scored[row].sum())
                if exact_match:
                    gen = out[row].tolist()
                    gen = gen[: gen.index(eos_id)] if eos_id in gen else gen
                    stats[0] += int(gen == target)
                stats[1] += 1
    finally:
        model.train(was_training)
    result = {f"{prefix}/loss": nll / max(tokens, 1), f"{prefix}/token_acc": correct / max(tokens, 1)}
    if exact_match:
        result[f"{prefix}/exact_match"] = sum(s[0] for s in by_len.values()) / max(n, 1)
    for k in sorted(by_len):
        exact, count, good, total = by_len[k]
        if exact_match:
            result[f"{prefix}/exact_match@len{k}"] = exact / count
        result[f"{prefix}/token_acc@len{k}"] = good / max(total, 1)
    return result
