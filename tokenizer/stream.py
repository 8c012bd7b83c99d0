"""Streaming encoding: `encode_chunks` (behind `Tokenizer.encode_iterable`) and `encode_file` (.bin + sidecar).

Text arrives in chunks of any size; the ids must equal encoding the whole text at once. Each round encodes
the buffered text up to a *safe cut* and holds the rest back for the next chunk:

* special tokens: with L the longest special token, a special match that starts at least L characters before
  the end of the buffer is final (no longer or earlier match can still appear), and nothing that starts later
  is emitted, so a special token split across chunks is still found (and still raises if disallowed);
* pre-tokens: the last ordinary segment is pre-tokenized and cut at the last pre-token boundary c whose
  preceding character is not whitespace and that lies before the special hold-back. For the gpt2 and gpt4
  patterns a match that ends in a non-space character is decided by the next character alone (only whitespace
  runs are scanned ahead, e.g. gpt4's `\\s*[\\r\\n]`), so the pre-tokens before c are those of the full text.

Memory is bounded by `min_chars` + the chunk size + the held-back tail (a few pre-tokens), whatever the input
size. Not handled: custom split patterns with lookbehind, anchors or lookahead past whitespace (chunking may
then change the ids); a single whitespace run of unbounded length is held back whole (it is one pre-token).
"""

from __future__ import annotations

import codecs
import json
import os
import sys
import tempfile
import warnings
from array import array
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import regex

from tokenizer.pretoken_counts import REPLACEMENT_ERRORS, replaced_count
from tokenizer.pretokenize import special_splitter
from tokenizer.serialize import default_mode

if TYPE_CHECKING:
    from tokenizer.tokenizer import Tokenizer

MIN_CHARS = 1 << 16  # buffer at least this many characters before encoding a round
READ_BYTES = 1 << 20  # encode_file read size

_SPACE = regex.compile(r"\s")


def _is_space(ch: str) -> bool:
    # either definition of whitespace counts: treating too much as space only makes cuts rarer
    return ch.isspace() or _SPACE.match(ch) is not None


def encode_chunks(
    tok: Tokenizer, texts: Iterable[str], allowed_special=frozenset(), disallowed_special="all", min_chars: int = MIN_CHARS
) -> Iterator[list[int]]:
    """Yield lists of ids whose concatenation equals `tok.encode("".join(texts), ...)`."""
    allowed, disallowed = tok._special_sets(allowed_special, disallowed_special)
    hold = max((len(s) for s in set(allowed) | set(disallowed)), default=1) - 1  # chars a special may still need
    pending: list[str] = []
    n_pending = 0
    tail = ""
    for chunk in texts:
        if not isinstance(chunk, str):
            raise ValueError(f"encode_iterable needs str chunks, got {type(chunk).__name__}")
        pending.append(chunk)
        n_pending += len(chunk)
        if n_pending < min_chars:
            continue
        buf = tail + "".join(pending)
        pending.clear()
        n_pending = 0
        ids, cut = _encode_round(tok, buf, allowed, disallowed, hold, final=False)
        tail = buf[cut:]
        if ids:
            yield ids
    buf = tail + "".join(pending)
    ids, _ = _encode_round(tok, buf, allowed, disallowed, hold, final=True)
    if ids:
        yield ids


def _encode_round(
    tok: Tokenizer, buf: str, allowed: tuple[str, ...], disallowed: tuple[str, ...], hold: int, final: bool
) -> tuple[list[int], int]:
    """Encode buf up to a safe cut; returns (ids, cut). With final=True the cut is len(buf)."""
    if disallowed:
        tok._check_disallowed(buf, disallowed)
    safe = len(buf) if final else max(0, len(buf) - hold)  # no special may start at or after `safe` yet
    ids: list[int] = []
    pos = 0  # start of the current ordinary segment
    seg_end = len(buf)
    splitter = special_splitter(allowed)
    if splitter is not None:
        for m in splitter.finditer(buf):
            if m.start() >= safe:
                seg_end = m.start()  # a special may still grow or start earlier: hold it back
                break
            ids += tok.encode_ordinary(buf[pos : m.start()])
            ids.append(tok._specials[m.group()])
            pos = m.end()
    seg = buf[pos:seg_end]
    if final:
        return ids + tok.encode_ordinary(seg), len(buf)
    pieces = tok._findall(seg)
    if sum(map(len, pieces)) != len(seg):  # a custom pattern that skips characters: no boundary positions
        pieces = []
    limit = safe - pos  # a cut must lie before the special hold-back
    cut_k, cut = 0, 0
    p = len(seg)
    for k in range(len(pieces) - 1, 0, -1):
        p -= len(pieces[k])
        if p < limit and not _is_space(seg[p - 1]):
            cut_k, cut = k, p
            break
    cache = tok._cache
    ids.extend(chain.from_iterable(map(cache.__getitem__, pieces[:cut_k])))
    return ids, pos + cut


def token_dtype(vocab_size: int) -> str:
    """The smallest unsigned dtype that holds every id 0..vocab_size-1.

    >>> token_dtype(50257), token_dtype(65536), token_dtype(65537)
    ('uint16', 'uint16', 'uint32')
    """
    if vocab_size <= 1 << 16:
        return "uint16"
    if vocab_size <= 1 << 32:
        return "uint32"
    raise ValueError(f"vocab_size {vocab_size} does not fit in uint32 ids")


_TYPECODES = {"uint16": "H", "uint32": "I"}


def sidecar_path(out: str | os.PathLike) -> Path:
    """`train.bin` -> `train.bin.json`."""
    return Path(os.fspath(out) + ".json")


def iter_binary_text(f: BinaryIO, read_bytes: int = READ_BYTES) -> Iterator[str]:
    """A binary stream's UTF-8 text in chunks; newlines kept exactly (\\r\\n stays), invalid UTF-8 -> U+FFFD
    (counted by the trainer's error handler, see `pretoken_counts.replaced_count`); a multi-byte character cut
    between two reads is decoded whole."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors=REPLACEMENT_ERRORS)
    while raw := f.read(read_bytes):
        if text := decoder.decode(raw):
            yield text
    if text := decoder.decode(b"", final=True):
        yield text


def iter_file_text(path: str | os.PathLike, read_bytes: int = READ_BYTES) -> Iterator[str]:
    """`iter_binary_text` over a file opened by path."""
    with open(path, "rb") as f:
        yield from iter_binary_text(f, read_bytes)


def write_token_file(
    tok: Tokenizer,
    texts: Iterable[str],
    out: str | os.PathLike,
    *,
    source: str = "",
    allowed_special="all",
    disallowed_special=(),
) -> dict:
    """Stream text chunks into `out` (raw little-endian ids) and `out.json`; both written atomically (temp file +
    rename), so a failure leaves no partial output. Returns the sidecar dict."""
    out = Path(out)
    dtype = token_dtype(tok.vocab_size)
    typecode = _TYPECODES[dtype]
    count = 0
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    side = sidecar_path(out)
    side_tmp = side.with_name(f".{side.name}.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for ids in encode_chunks(tok, texts, allowed_special, disallowed_special):
                arr = array(typecode, ids)
                if sys.byteorder == "big":
                    arr.byteswap()
                arr.tofile(f)
                count += len(ids)
        meta = {
            "dtype": dtype,
            "count": count,
            "byteorder": "little",
            "vocab_size": tok.vocab_size,
            "tokenizer_fingerprint": tok.fingerprint(),
            "source": source,
        }
        side_tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, default_mode())
        os.replace(tmp, out)
        os.replace(side_tmp, side)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        side_tmp.unlink(missing_ok=True)
        raise
    return meta


def encode_file(
    tok: Tokenizer,
    path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    allowed_special="all",
    disallowed_special=(),
    read_bytes: int = READ_BYTES,
) -> dict:
    """Stream the UTF-8 file `path` into `out` + `out.json` (see `write_token_file`); warns once if invalid UTF-8
    was replaced by U+FFFD (the trainer's policy)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, not a text file")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    before = replaced_count()
    meta = write_token_file(
        tok, iter_file_text(path, read_bytes), out, source=os.fspath(path),
        allowed_special=allowed_special, disallowed_special=disallowed_special,
    )
    replaced = replaced_count() - before
    if replaced:
        warnings.warn(f"{replaced} invalid UTF-8 sequence(s) in {path} were replaced by U+FFFD", stacklevel=3)
    return meta


def read_token_file(out: str | os.PathLike):
    """np.memmap of a `.bin` written by encode_file, checked against its sidecar (needs numpy)."""
    import numpy as np

    side = sidecar_path(out)
    meta = json.loads(side.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or meta.get("dtype") not in ("uint16", "uint32") or not isinstance(meta.get("count"), int):
        raise ValueError(f"{side}: not a token-file sidecar (needs dtype uint16|uint32 and an integer count)")
    arr = np.memmap(out, dtype=np.dtype(meta["dtype"]).newbyteorder("<"), mode="r")
    if len(arr) != meta["count"]:
        raise ValueError(f"{out}: holds {len(arr)} ids but its sidecar says {meta['count']} (truncated?)")
    return arr
