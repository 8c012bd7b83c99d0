"""Streaming encoding: `encode_chunks` (behind `Tokenizer.encode_iterable`) and `encode_file` (a token file, see
tokenizer/tokenfile.py).

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
size. Custom split patterns: the text between their matches is a pre-token too (`pretokenize.splitter`), so
chunked encoding is always lossless (it only ever emits ids for pre-tokens of the buffered text); for patterns
with lookbehind, anchors or lookahead past whitespace the ids may differ from encoding the whole text at once.
Not handled: a single whitespace run of unbounded length is held back whole (it is one pre-token).

The functions take a tokenizer and use only its public members (`StreamEncoder`), so this module never imports
tokenizer/tokenizer.py, which imports it.
"""

from __future__ import annotations

import codecs
import os
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

import regex

from tokenizer.pretoken_counts import REPLACEMENT_ERRORS, replaced_count
from tokenizer.pretokenize import special_splitter, splitter
from tokenizer.specials import check_disallowed, special_sets
from tokenizer.stop import check as check_stop
from tokenizer.tokenfile import write_tokens

MIN_CHARS = 1 << 16  # buffer at least this many characters before encoding a round
READ_BYTES = 1 << 20  # encode_file read size

_SPACE = regex.compile(r"\s")


class StreamEncoder(Protocol):
    """What streaming uses of a `tokenizer.Tokenizer`."""

    @property
    def special_tokens(self) -> dict[str, int]: ...
    @property
    def pattern(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    def encode_ordinary(self, text: str) -> list[int]: ...
    def encode_pretokens(self, pretokens: Iterable[str]) -> list[int]: ...
    def fingerprint(self) -> str: ...


def _is_space(ch: str) -> bool:
    # either definition of whitespace counts: treating too much as space only makes cuts rarer
    return ch.isspace() or _SPACE.match(ch) is not None


def encode_chunks(
    tok: StreamEncoder, texts: Iterable[str], allowed_special=frozenset(), disallowed_special="all", min_chars: int = MIN_CHARS
) -> Iterator[list[int]]:
    """Yield lists of ids whose concatenation equals `tok.encode("".join(texts), ...)`."""
    allowed, disallowed = special_sets(tok.special_tokens, allowed_special, disallowed_special)
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
        check_stop()  # the rounds are the encoder's long loop (tokenizer/stop.py)
        ids, cut = _encode_round(tok, buf, allowed, disallowed, hold, final=False)
        tail = buf[cut:]
        if ids:
            yield ids
    buf = tail + "".join(pending)
    ids, _ = _encode_round(tok, buf, allowed, disallowed, hold, final=True)
    if ids:
        yield ids


def _encode_round(
    tok: StreamEncoder, buf: str, allowed: tuple[str, ...], disallowed: tuple[str, ...], hold: int, final: bool
) -> tuple[list[int], int]:
    """Encode buf up to a safe cut; returns (ids, cut). With final=True the cut is len(buf)."""
    if disallowed:
        check_disallowed(buf, disallowed)
    safe = len(buf) if final else max(0, len(buf) - hold)  # no special may start at or after `safe` yet
    ids: list[int] = []
    pos = 0  # start of the current ordinary segment
    seg_end = len(buf)
    special_re = special_splitter(allowed)
    if special_re is not None:
        special_ids = tok.special_tokens
        for m in special_re.finditer(buf):
            if m.start() >= safe:
                seg_end = m.start()  # a special may still grow or start earlier: hold it back
                break
            ids += tok.encode_ordinary(buf[pos : m.start()])
            ids.append(special_ids[m.group()])
            pos = m.end()
    seg = buf[pos:seg_end]
    if final:
        return ids + tok.encode_ordinary(seg), len(buf)
    pieces = splitter(tok.pattern)(seg)  # they join back to seg, whatever the pattern
    limit = safe - pos  # a cut must lie before the special hold-back
    cut_k, cut = 0, 0
    p = len(seg)
    for k in range(len(pieces) - 1, 0, -1):
        p -= len(pieces[k])
        if p < limit and not _is_space(seg[p - 1]):
            cut_k, cut = k, p
            break
    ids += tok.encode_pretokens(pieces[:cut_k])
    return ids, pos + cut


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


def encode_to_token_file(
    tok: StreamEncoder,
    texts: Iterable[str],
    out: str | os.PathLike,
    *,
    source: str = "",
    allowed_special="all",
    disallowed_special=(),
) -> dict:
    """Stream text chunks into the token file `out` (+ `out.json`) through `tokenfile.write_tokens` (the one
    format and atomic writer), with n_bytes = the UTF-8 bytes of the text encoded. Returns the sidecar dict."""
    n_bytes = 0

    def counted() -> Iterator[str]:
        nonlocal n_bytes
        for text in texts:
            n_bytes += len(text.encode("utf-8", errors="surrogatepass"))
            yield text

    return write_tokens(
        out, encode_chunks(tok, counted(), allowed_special, disallowed_special), vocab_size=tok.vocab_size,
        fingerprint=tok.fingerprint(), source=source, count_bytes=lambda: n_bytes,
    )


def encode_file(
    tok: StreamEncoder,
    path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    allowed_special="all",
    disallowed_special=(),
    read_bytes: int = READ_BYTES,
) -> dict:
    """Stream the UTF-8 file `path` into `out` + `out.json` (see `encode_to_token_file`); warns once if invalid UTF-8
    was replaced by U+FFFD (the trainer's policy)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, not a text file")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    before = replaced_count()
    meta = encode_to_token_file(
        tok, iter_file_text(path, read_bytes), out, source=os.fspath(path),
        allowed_special=allowed_special, disallowed_special=disallowed_special,
    )
    replaced = replaced_count() - before
    if replaced:
        warnings.warn(f"{replaced} invalid UTF-8 sequence(s) in {path} were replaced by U+FFFD", stacklevel=3)
    return meta
