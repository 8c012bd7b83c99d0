"""Other tools' file formats: GPT-2's vocab.json + merges.txt (import), HF `tokenizer.json` and tiktoken
`.tiktoken` ranks (export), and GPT-2's byte-to-unicode table they share.

* `read_gpt2_files(vocab_json, merges_txt)` -> (merges, vocab, special_tokens) for `Tokenizer(...)`; behind
  `Tokenizer.from_gpt2_files`, whose ids equal tiktoken's "gpt2" encoding.
* `export_hf(tok, path)`: a `tokenizer.json` for `tokenizers.Tokenizer.from_file` (Split(pattern) + ByteLevel
  pre-tokenizer, BPE model, ByteLevel decoder, specials as added tokens with special=True).
* `export_tiktoken(tok, path)`: `base64(token) rank` per line, read by `tiktoken.load.load_tiktoken_bpe`.
  tiktoken has no merge list: it merges whichever adjacent pair's concatenation has the lowest rank, and the rank
  is also the id. That equals our merges only if ids are unique byte strings that increase in merge order and
  every token re-encodes to itself under both rules; `tiktoken_incompatibility` checks this and export raises
  a ValueError otherwise. Special tokens are not in the file: pass them to `tiktoken.Encoding(special_tokens=...)`.

The exporters take a tokenizer and use only its public members (`Exportable`); the importer returns plain
data. So this module never imports tokenizer/tokenizer.py, which imports it.

Not handled: importing HF or tiktoken files, HF normalizers/post-processors/byte-fallback, sentencepiece.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol


class Exportable(Protocol):
    """What the exporters read of a `tokenizer.Tokenizer`."""

    @property
    def merges(self) -> list[tuple[bytes, bytes]]: ...
    @property
    def vocab(self) -> dict[int, bytes]: ...
    @property
    def special_tokens(self) -> dict[str, int]: ...
    @property
    def pattern(self) -> str: ...
    def encode_bytes_piece(self, data: bytes) -> list[int]: ...


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table (openai/gpt-2 encoder.py).

    Printable Latin-1 bytes map to themselves; the other 68 (controls, space, ...) map to chr(256 + k).
    >>> bytes_to_unicode()[ord(" ")], bytes_to_unicode()[ord("a")]
    ('Ġ', 'a')
    """
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """The inverse of `bytes_to_unicode`."""
    return {c: b for b, c in bytes_to_unicode().items()}


def token_to_unicode(token: bytes) -> str:
    """b" the" -> "Ġthe"."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def unicode_to_token(text: str) -> bytes:
    """"Ġthe" -> b" the"; ValueError on a character outside the table."""
    inverse = unicode_to_bytes()
    try:
        return bytes(inverse[c] for c in text)
    except KeyError as e:
        raise ValueError(f"{text!r} is not in byte-to-unicode form (character {e.args[0]!r})") from None


# ---------------------------------------------------------------------- GPT-2 files
def read_gpt2_files(
    vocab_json: str | os.PathLike, merges_txt: str | os.PathLike, special_tokens: Sequence[str] = ("<|endoftext|>",)
) -> tuple[list[tuple[bytes, bytes]], dict[int, bytes], dict[str, int]]:
    """GPT-2's `encoder.json`/`vocab.json` (token -> id) and `vocab.bpe`/`merges.txt` ("a b" per line, an
    optional "#version" header) -> (merges, vocab without specials, special token -> id). Special tokens found in
    vocab.json keep their id there; others get new ids after the largest."""
    if isinstance(special_tokens, str):  # `text in "<|endoftext|>"` would match substrings such as "<"
        raise ValueError(f"special_tokens must be a list of strings, not the string {special_tokens!r}")
    try:
        encoder = json.loads(Path(vocab_json).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{vocab_json}: not a valid vocab JSON ({e})") from None
    if not isinstance(encoder, dict):
        raise ValueError(f"{vocab_json}: expected a JSON object token -> id")
    specials: dict[str, int] = {}
    vocab: dict[int, bytes] = {}
    for text, i in encoder.items():
        if text in special_tokens:
            specials[text] = i
        else:
            vocab[i] = unicode_to_token(text)
    next_id = max(encoder.values()) + 1
    for s in special_tokens:
        if s not in specials:
            specials[s] = next_id
            next_id += 1
    merges = []
    for n, line in enumerate(Path(merges_txt).read_text(encoding="utf-8").splitlines(), 1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise ValueError(f"{merges_txt}:{n}: expected two tokens separated by a space, got {line!r}")
        merges.append((unicode_to_token(parts[0]), unicode_to_token(parts[1])))
    return merges, vocab, specials


# ---------------------------------------------------------------------- Hugging Face tokenizers
def hf_tokenizer_dict(tok: Exportable) -> dict:
    """The `tokenizer.json` content (tokenizers >= 0.20 schema, merges as [left, right] pairs)."""
    base = {i: b for i, b in tok.vocab.items() if i not in set(tok.special_tokens.values())}
    strings = {i: token_to_unicode(b) for i, b in base.items()}
    if len(set(strings.values())) < len(strings):
        raise ValueError("cannot export to HF: the vocab holds the same byte string under two ids (HF's vocab is string -> id)")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
            for s, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": tok.pattern}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {s: i for i, s in sorted(strings.items())},
            "merges": [[token_to_unicode(a), token_to_unicode(b)] for a, b in tok.merges],
        },
    }


def export_hf(tok: Exportable, path: str | os.PathLike) -> Path:
    """Write `tokenizer.json` (a directory path gets `tokenizer.json` inside it). Returns the file written."""
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.json"
    p.write_text(json.dumps(hf_tokenizer_dict(tok), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return p


# ---------------------------------------------------------------------- tiktoken
def tiktoken_incompatibility(tok: Exportable) -> str | None:
    """Why tiktoken's rank-based merging would give other ids than our merges, or None if it would not.

    Checks: unique byte strings; merged ids increase in merge order; every merged token re-encodes to its own id
    under both rules (the rank rule is simulated here, no tiktoken import).
    """
    specials = set(tok.special_tokens.values())
    base = {i: b for i, b in tok.vocab.items() if i not in specials}
    ranks = {}
    for i, b in base.items():
        if b in ranks:
            return f"ids {ranks[b]} and {i} are the same byte string {b!r}"
        ranks[b] = i
    ids = [ranks[a + b] for a, b in tok.merges]
    for r in range(1, len(ids)):
        if ids[r] <= ids[r - 1]:
            return f"merge {r} has id {ids[r]}, not above merge {r - 1}'s id {ids[r - 1]}: ranks are not ordered like merges"
    for a, b in tok.merges:
        token = a + b
        ours = tok.encode_bytes_piece(token)
        theirs = rank_bpe(token, ranks)
        if ours != [ranks[token]] or theirs != ours:
            return f"token {token!r} encodes to {ours} under our merges but {theirs} under tiktoken's rank rule"
    return None


def rank_bpe(piece: bytes, ranks: dict[bytes, int]) -> list[int]:
    """tiktoken's rule: repeatedly merge the adjacent pair whose concatenation has the lowest rank (leftmost)."""
    parts = [piece[i : i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, best_rank = None, None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return [ranks[p] for p in parts]


def export_tiktoken(tok: Exportable, path: str | os.PathLike) -> Path:
    """Write `base64(token_bytes) rank` lines sorted by rank; ValueError if tiktoken would encode differently."""
    why = tiktoken_incompatibility(tok)
    if why:
        raise ValueError(f"cannot export to tiktoken: {why}")
    p = Path(path)
    if p.is_dir():
        p = p / "tokenizer.tiktoken"
    specials = set(tok.special_tokens.values())
    lines = [
        f"{base64.b64encode(b).decode('ascii')} {i}\n" for i, b in sorted(tok.vocab.items()) if i not in specials
    ]
    p.write_text("".join(lines), encoding="ascii")
    return p
