"""archlab's own tokenizer file: one versioned JSON file, no pickle.

    {
     "format": "archlab-bpe",
     "version": 1,
     "pattern": "<split regex>",
     "special_tokens": {"<|endoftext|>": 50256},
     "vocab": null,                  # null = the trained layout (bytes 0..255, then merges); else {"id": "token"}
     "merges": ["Ġ t", "Ġ a", ...]   # merge order; "left right" in GPT-2's byte-to-unicode form
    }

Tokens are written in GPT-2's byte-to-unicode form (`tokenizer.formats.bytes_to_unicode`): every byte is one
printable character and space is "Ġ", so a merge is two space-separated strings and the file is readable.
`canonical_json` (sorted keys, no whitespace) is what `Tokenizer.fingerprint()` hashes.

This module deals in the plain data of `Tokenizer(merges, vocab, special_tokens, pattern)` and never builds a
Tokenizer: `to_dict` takes those four, `from_dict` returns them, and `Tokenizer.save` / `Tokenizer.load` /
`Tokenizer.to_dict` (tokenizer/tokenizer.py) connect them to the class.

Handled: a missing, unreadable, corrupt, truncated or absurdly nested file, a wrong format or version, malformed
merges, ids that are not plain non-negative integers (`"01"`, `true`, `3.0`) or that token files cannot hold
(>= 2**32, tokenizer.tokenfile.MAX_VOCAB_SIZE): each a `TokenizerFileError` (a ValueError) whose one line names the
file; `Tokenizer.load` raises it for the constructor's refusals too (a merge of unknown tokens, clashing ids).
Not handled: reading other tools' files (see `tokenizer.formats`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from tokenizer.formats import token_to_unicode, unicode_to_bytes
from tokenizer.outputs import atomic_output
from tokenizer.tokenfile import MAX_VOCAB_SIZE

FORMAT_NAME = "archlab-bpe"
FORMAT_VERSION = 1
FILE_NAME = "tokenizer.json"  # what a directory path resolves to

# Tokenizer's constructor arguments: merges, vocab (None = the trained layout), special token -> id, split regex
TokenizerData = tuple[list[tuple[bytes, bytes]], dict[int, bytes] | None, dict[str, int], str]


class TokenizerFileError(ValueError):
    """A tokenizer file that cannot be used: missing, unreadable, corrupt, or holding invalid merges or ids. The
    message is one line that starts with the file's path."""


def to_dict(
    merges: Sequence[tuple[bytes, bytes]],
    vocab: Mapping[int, bytes] | None,
    special_tokens: Mapping[str, int],
    pattern: str,
) -> dict:
    """The canonical JSON-able dict. `vocab` is the non-special tokens (id -> bytes), None for the trained layout."""
    vocab_json = None if vocab is None else {str(i): token_to_unicode(b) for i, b in sorted(vocab.items())}
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "pattern": pattern,
        "special_tokens": dict(sorted(special_tokens.items(), key=lambda kv: kv[1])),
        "vocab": vocab_json,
        "merges": [f"{token_to_unicode(a)} {token_to_unicode(b)}" for a, b in merges],
    }


def canonical_json(d: dict) -> str:
    """`d` (a `to_dict` result) as sorted, whitespace-free JSON: one text per tokenizer."""
    return json.dumps(d, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def from_dict(d: object, source: str = "tokenizer dict") -> TokenizerData:
    """Validate the file's structure: (merges, vocab, special_tokens, pattern), or a TokenizerFileError that starts
    with `source`. What only the constructor checks (merges that use unknown tokens, clashing ids) is not checked here."""

    def bad(msg: str) -> TokenizerFileError:
        return TokenizerFileError(f"{source}: {msg}")

    if not isinstance(d, dict):
        raise bad(f"expected a JSON object, got {type(d).__name__}")
    if d.get("format") != FORMAT_NAME:
        if "model" in d and "added_tokens" in d:
            raise bad("this is a Hugging Face tokenizer.json, not an archlab tokenizer file; load it with tokenizers.Tokenizer.from_file")
        raise bad(f"not an archlab tokenizer file (format {d.get('format')!r}, expected {FORMAT_NAME!r})")
    version = d.get("version")
    if type(version) is not int or version != FORMAT_VERSION:  # not True or 1.0, which equal 1
        raise bad(f"unsupported tokenizer file version {version!r}; this archlab reads version {FORMAT_VERSION}")
    for key, kind in (("pattern", str), ("special_tokens", dict), ("merges", list)):
        if not isinstance(d.get(key), kind):
            raise bad(f"field {key!r} is missing or not a {kind.__name__}")
    if d.get("vocab") is not None and not isinstance(d["vocab"], dict):
        raise bad("field 'vocab' must be null or an object")
    inverse = unicode_to_bytes()

    def to_bytes(s: object, what: str) -> bytes:
        if not isinstance(s, str) or not s or any(c not in inverse for c in s):
            raise bad(f"{what} {s!r} is not a token in byte-to-unicode form")
        return bytes(inverse[c] for c in s)

    merges = []
    for i, m in enumerate(d["merges"]):
        parts = m.split(" ") if isinstance(m, str) else []
        if len(parts) != 2:
            raise bad(f"merge {i} {m!r} is not two tokens separated by one space")
        merges.append((to_bytes(parts[0], f"merge {i}"), to_bytes(parts[1], f"merge {i}")))
    vocab = None
    if d.get("vocab") is not None:
        vocab = {}
        for k, v in d["vocab"].items():
            # str.isdigit() alone accepts "²", which int() refuses; "01" would silently share id 1 with "1"
            if not (k.isascii() and k.isdigit()) or (k != "0" and k.startswith("0")):
                raise bad(f"vocab id {k!r} is not a non-negative integer")
            big = len(k) > len(str(MAX_VOCAB_SIZE))  # past any uint32 id (and int()'s digit limit, for some)
            shown = k if len(k) <= 20 else f"{k[:20]}... ({len(k)} digits)"
            vocab[_id(MAX_VOCAB_SIZE if big else int(k), f"vocab id {shown}", bad)] = to_bytes(v, f"vocab entry {k}")
    specials = {}
    for s, i in d["special_tokens"].items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise bad(f"special token {s!r} has invalid id {i!r}")
        specials[s] = _id(i, f"special token {s!r} has id {i}", bad)
    return merges, vocab, specials, d["pattern"]


def _id(i: int, what: str, bad) -> int:
    """An id a token file can hold (uint32: 0 .. MAX_VOCAB_SIZE - 1), else the file is refused."""
    if i >= MAX_VOCAB_SIZE:
        raise bad(f"{what}: token ids must be below 2**32 = {MAX_VOCAB_SIZE} (token files hold uint32 ids)")
    return i


def resolve_path(path: str | os.PathLike) -> Path:
    """A directory means the `tokenizer.json` inside it."""
    p = Path(path)
    return p / FILE_NAME if p.is_dir() else p


def save(d: dict, path: str | os.PathLike) -> Path:
    """Write `d` (a `to_dict` result) atomically (temp file + rename), one merge per line. Returns the file written."""
    p = resolve_path(path)
    text = json.dumps(d, indent=1, ensure_ascii=False) + "\n"
    with atomic_output(p) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="\n")
    return p


def load(path: str | os.PathLike) -> object:
    """The JSON value in a tokenizer file (check it with `from_dict`); TokenizerFileError naming the file if it is
    missing, unreadable, not UTF-8 or not JSON."""
    p = resolve_path(path)
    if not p.exists():
        raise TokenizerFileError(f"{p}: no such tokenizer file")
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerFileError(f"{p}: not a valid tokenizer file (not UTF-8 text: {e.reason} at byte {e.start})") from None
    except OSError as e:
        raise TokenizerFileError(f"{p}: cannot read the tokenizer file ({e.strerror or type(e).__name__})") from None
    try:
        return json.loads(raw)
    except ValueError as e:  # JSONDecodeError; an integer of more digits than int() converts
        raise TokenizerFileError(f"{p}: not a valid tokenizer file (corrupt or truncated JSON: {e})") from None
    except RecursionError:  # json's C decoder gives up on arrays/objects nested thousands deep
        raise TokenizerFileError(f"{p}: not a valid tokenizer file (JSON nested too deep)") from None
