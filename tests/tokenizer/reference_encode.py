"""A slow, obviously correct BPE encoder: the oracle for differential tests of `tokenizer.Tokenizer`.

It shares no code with the package except the split regex string: special tokens are found by a plain
left-to-right scan (longest first), and each pre-token is a list of byte strings in which the adjacent pair
with the lowest merge rank (leftmost on ties) is merged, one pair at a time, until no pair is a merge.
Not handled: speed (O(n^2) per pre-token), streaming.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import regex


class ReferenceEncoder:
    def __init__(self, merges: Sequence[tuple[bytes, bytes]], vocab: Mapping[int, bytes], specials: Mapping[str, int], pattern: str):
        self.rank: dict[tuple[bytes, bytes], int] = {}  # (left bytes, right bytes) -> merge rank
        for r, pair in enumerate(merges):
            self.rank.setdefault(pair, r)
        self.token_id: dict[bytes, int] = {}  # bytes -> lowest id
        for i in sorted(vocab):  # vocab: the regular tokens only
            self.token_id.setdefault(vocab[i], i)
        self.specials = dict(specials)
        self.pattern = regex.compile(pattern)

    def encode_piece(self, piece: bytes) -> list[int]:
        parts = [piece[i : i + 1] for i in range(len(piece))]
        while True:
            best = None  # (rank, position)
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return [self.token_id[p] for p in parts]

    def encode_ordinary(self, text: str) -> list[int]:
        out = []
        for piece in self.pattern.findall(text):
            out += self.encode_piece(piece.encode("utf-8"))
        return out

    def encode(self, text: str, allowed: Sequence[str] = ()) -> list[int]:
        """Allowed special tokens become their ids; all other text is ordinary."""
        by_length = sorted(allowed, key=len, reverse=True)
        out: list[int] = []
        start = i = 0
        while i < len(text):
            hit = next((s for s in by_length if text.startswith(s, i)), None)
            if hit is None:
                i += 1
                continue
            out += self.encode_ordinary(text[start:i])
            out.append(self.specials[hit])
            i = start = i + len(hit)
        return out + self.encode_ordinary(text[start:])


def reference_for(tok) -> ReferenceEncoder:
    """The reference encoder for a `Tokenizer`, from its public merges/vocab/special_tokens/pattern."""
    vocab = {i: b for i, b in tok.vocab.items() if i not in set(tok.special_tokens.values())}
    return ReferenceEncoder(tok.merges, vocab, tok.special_tokens, tok.pattern)
