"""A slow, obviously correct BPE trainer: the reference that tests (and bench/bench_tokenizer.py) compare
`tokenizer.train` against.

Every merge recounts every adjacent pair of every pre-token from scratch and takes the max by
`(count, bytes_a, bytes_b)`. Nothing is incremental, cached, parallel or streamed; it shares only the split
regex strings with the product code (special-token splitting is done here with `re`, independently).
Use it on corpora of at most a few MB.
"""

from __future__ import annotations

import re
from collections import Counter

import regex

from tokenizer.pretokenize import PATTERNS


def reference_pretoken_counts(texts: list[str], special_tokens: list[str], pattern: str) -> Counter[bytes]:
    """Count the pre-tokens (as UTF-8 bytes) of `texts`, each text a separate document."""
    pattern = PATTERNS.get(pattern, pattern)
    counts: Counter[bytes] = Counter()
    for text in texts:
        if special_tokens:
            alternation = "|".join(re.escape(s) for s in sorted(special_tokens, key=len, reverse=True))
            pieces = re.split(alternation, text)  # no capture group: the specials themselves are dropped
        else:
            pieces = [text]
        for piece in pieces:
            for m in regex.finditer(pattern, piece):
                counts[m.group().encode("utf-8")] += 1
    return counts


def reference_train(texts: list[str], vocab_size: int, special_tokens: list[str] = (), pattern: str = "gpt2",
                    min_frequency: int = 1) -> list[tuple[bytes, bytes]]:
    """The merges, in order, that byte-level BPE learns from `texts` (see module docstring)."""
    special_tokens = list(special_tokens)
    counts = reference_pretoken_counts(texts, special_tokens, pattern)
    words = {tuple(bytes([b]) for b in w): n for w, n in counts.items()}  # word as a tuple of token bytes
    merges: list[tuple[bytes, bytes]] = []
    while 256 + len(special_tokens) + len(merges) < vocab_size:
        pair_counts: Counter[tuple[bytes, bytes]] = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pair_counts[pair] += n
        if not pair_counts:
            break
        best = max(pair_counts, key=lambda p: (pair_counts[p], p))
        if pair_counts[best] < max(1, min_frequency):
            break
        merges.append(best)
        merged = best[0] + best[1]
        new_words: dict[tuple[bytes, ...], int] = {}
        for word, n in words.items():
            out = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            key = tuple(out)
            new_words[key] = new_words.get(key, 0) + n
        words = new_words
    return merges
