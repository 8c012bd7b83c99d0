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

Handled: a missing, corrupt or truncated file, a wrong format or version, malformed merges or ids, each with a
ValueError that names the file. Not handled: reading other tools' files (see `tokenizer.formats`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizer.formats import token_to_unicode, unicode_to_bytes
from tokenizer.outputs import atomic_output

if TYPE_CHECKING:
    from tokenizer.tokenizer import Tokenizer

FORMAT_NAME = "archlab-bpe"
FORMAT_VERSION = 1
FILE_NAME = "tokenizer.json"  # what a directory path resolves to


def tokenizer_to_dict(tok: Tokenizer) -> dict:
    """The canonical JSON-able dict of a tokenizer."""
    vocab = None
    if not tok._default_layout:
        vocab = {str(i): token_to_unicode(b) for i, b in sorted(tok._base.items())}
    return {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "pattern": tok.pattern,
        "special_tokens": dict(sorted(tok.special_tokens.items(), key=lambda kv: kv[1])),
        "vocab": vocab,
        "merges": [f"{token_to_unicode(a)} {token_to_unicode(b)}" for a, b in tok._merges],
    }


def canonical_json(tok: Tokenizer) -> str:
    return json.dumps(tokenizer_to_dict(tok), sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def tokenizer_from_dict(d: object, source: str = "tokenizer dict") -> Tokenizer:
    """Validate and build; every problem is a ValueError that starts with `source`."""
    from tokenizer.tokenizer import Tokenizer

    def bad(msg: str) -> ValueError:
        return ValueError(f"{source}: {msg}")

    if not isinstance(d, dict):
        raise bad(f"expected a JSON object, got {type(d).__name__}")
    if d.get("format") != FORMAT_NAME:
        if "model" in d and "added_tokens" in d:
            raise bad("this is a Hugging Face tokenizer.json, not an archlab tokenizer file; load it with tokenizers.Tokenizer.from_file")
        raise bad(f"not an archlab tokenizer file (format {d.get('format')!r}, expected {FORMAT_NAME!r})")
    version = d.get("version")
    if version != FORMAT_VERSION:
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
            if not (k.isascii() and k.isdigit()):  # str.isdigit() alone accepts "²", which int() refuses
                raise bad(f"vocab id {k!r} is not a non-negative integer")
            vocab[int(k)] = to_bytes(v, f"vocab entry {k}")
    specials = {}
    for s, i in d["special_tokens"].items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise bad(f"special token {s!r} has invalid id {i!r}")
        specials[s] = i
    try:
        return Tokenizer(merges, vocab=vocab, special_tokens=specials, pattern=d["pattern"])
    except ValueError as e:
        raise bad(str(e)) from None


def resolve_path(path: str | os.PathLike) -> Path:
    """A directory means the `tokenizer.json` inside it."""
    p = Path(path)
    return p / FILE_NAME if p.is_dir() else p


def save(tok: Tokenizer, path: str | os.PathLike) -> Path:
    """Write atomically (temp file + rename), one merge per line. Returns the file written."""
    p = resolve_path(path)
    text = json.dumps(tokenizer_to_dict(tok), indent=1, ensure_ascii=False) + "\n"
    with atomic_output(p) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="\n")
    return p


def load(path: str | os.PathLike) -> Tokenizer:
    p = resolve_path(path)
    if not p.exists():
        raise ValueError(f"{p}: no such tokenizer file")
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{p}: not a valid tokenizer file (not UTF-8 text: {e.reason} at byte {e.start})") from None
    try:
        d = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not a valid tokenizer file (corrupt or truncated JSON: {e})") from None
    return tokenizer_from_dict(d, source=str(p))
