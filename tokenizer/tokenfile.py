"""Token files: the one format for token ids passed between stages (`bpe encode` -> the runner's `data=tokens`,
and the runner's own token cache).

    X.bin        raw little-endian ids, uint16 when vocab_size <= 65536 else uint32, nothing else
    X.bin.json   the sidecar: {"format": "archlab-tokens", "version": 1, "dtype": "uint16", "count": N,
                 "byteorder": "little", "vocab_size": V, "tokenizer_fingerprint": "<sha256>",
                 "n_bytes": B, "source": "<where the text came from>"}

`n_bytes` is the number of UTF-8 bytes of the text the ids encode (None when unknown), so bits per byte can be
computed from the file alone. Both files are written to temp names, flushed to the disk (fsync) and renamed into
place, the .bin first, so a failed or killed write leaves no partial output, a crash of the machine leaves no
named file with a hole in it, and a reader never sees a sidecar without its ids.

`read_tokens(path, expect_fingerprint=..., vocab_size=...)` checks everything the sidecar promises (dtype, count =
file size, byte order, vocab_size covering the ids' dtype, and the tokenizer fingerprint when one is expected) and,
given the reading tokenizer's vocab_size, that its ids fit the file's dtype and every id in the file is one of its
ids; it raises `TokenFileError` with one line naming the user's path and what to do. `write_tokens` refuses an id
outside 0..vocab_size-1 the same way (nothing is written). Sidecars written before the `format` key
existed (same keys otherwise) are read too.
Not handled: big-endian ids on disk, ids >= 2**32, memory-mapping on platforms without mmap.
"""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizer.outputs import atomic_output

FORMAT = "archlab-tokens"
VERSION = 1
DTYPES = ("uint16", "uint32")
MAX_VOCAB_SIZE = 1 << 32  # ids 0 .. 2**32 - 1 (uint32); a tokenizer file with a larger id is refused when loaded
_TYPECODES = {"uint16": "H", "uint32": "I"}
_ITEMSIZE = {"uint16": 2, "uint32": 4}


class TokenFileError(ValueError):
    """A token file that cannot be used (missing, truncated, corrupt sidecar, another tokenizer's ids)."""


def token_dtype(vocab_size: int) -> str:
    """The smallest unsigned dtype that holds every id 0..vocab_size-1.

    >>> token_dtype(50257), token_dtype(65536), token_dtype(65537)
    ('uint16', 'uint16', 'uint32')
    """
    if vocab_size <= 1 << 16:
        return "uint16"
    if vocab_size <= MAX_VOCAB_SIZE:
        return "uint32"
    raise ValueError(f"vocab_size {vocab_size} does not fit in uint32 ids")


def sidecar_path(path: str | os.PathLike) -> Path:
    """`train.bin` -> `train.bin.json`."""
    return Path(os.fspath(path) + ".json")


def write_tokens(
    out: str | os.PathLike,
    id_chunks: Iterable[Sequence[int]],
    *,
    vocab_size: int,
    fingerprint: str,
    n_bytes: int | None = None,
    source: str = "",
    count_bytes=None,
) -> dict[str, Any]:
    """Stream chunks of ids into `out` + `out.json` atomically; returns the sidecar dict.

    `count_bytes`, if given, is called after the chunks are exhausted and returns n_bytes (for writers that learn
    the byte count while the ids stream, e.g. `Tokenizer`-driven encoders). Existing files at `out` are replaced:
    refusing to overwrite is the caller's decision (`bpe encode` refuses without --force).
    """
    out = Path(out)
    dtype = token_dtype(vocab_size)
    typecode = _TYPECODES[dtype]
    count = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    # exit order: the ids replace `out` first, then the sidecar (a complete sidecar marks a complete pair)
    with atomic_output(sidecar_path(out)) as side_tmp, atomic_output(out) as tmp:
        with open(tmp, "wb") as f:
            for ids in id_chunks:
                arr = _id_array(out, typecode, ids, vocab_size)
                if sys.byteorder == "big":
                    arr.byteswap()
                arr.tofile(f)
                count += len(arr)
            f.flush()
            os.fsync(f.fileno())  # the ids are on the disk before their name is: a crash never leaves a hole
        if count_bytes is not None:
            n_bytes = count_bytes()
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "dtype": dtype,
            "count": count,
            "byteorder": "little",
            "vocab_size": int(vocab_size),
            "tokenizer_fingerprint": fingerprint,
            "n_bytes": None if n_bytes is None else int(n_bytes),
            "source": source,
        }
        with open(side_tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, indent=1) + "\n")
            f.flush()
            os.fsync(f.fileno())
    return meta


def _id_array(out: Path, typecode: str, ids: Sequence[int], vocab_size: int) -> array:
    """`ids` as an array of `typecode`; TokenFileError (one line, naming `out`) for an id outside 0..vocab_size-1:
    a tokenizer whose ids do not fit the vocab_size it declares (or the dtype that vocab_size picked)."""
    try:
        arr = array(typecode, ids)
    except OverflowError:
        arr = None
    if arr is None or (len(arr) and max(arr) >= vocab_size):
        bad = next(i for i in ids if not 0 <= i < vocab_size)
        raise TokenFileError(f"{out}: id {bad} does not fit this token file (ids 0..{vocab_size - 1}, vocab_size "
                             f"{vocab_size}, {token_dtype(vocab_size)}); nothing was written")
    return arr


def read_sidecar(path: str | os.PathLike) -> dict[str, Any]:
    """The validated sidecar of token file `path` (TokenFileError with one line otherwise)."""
    path = Path(path)
    side = sidecar_path(path)
    if not path.is_file():
        raise TokenFileError(f"{path}: no such token file (write one with 'bpe encode --tokenizer DIR TEXT --out {path}')")
    if not side.is_file():
        raise TokenFileError(f"{path}: its sidecar {side} is missing (re-encode with 'bpe encode ... --out {path}')")
    try:
        meta = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenFileError(f"{side}: not a token-file sidecar ({type(e).__name__}); re-encode {path}") from None
    if (
        not isinstance(meta, dict)
        or meta.get("format", FORMAT) != FORMAT
        or meta.get("dtype") not in DTYPES
        or not isinstance(meta.get("count"), int)
        or isinstance(meta.get("count"), bool)
        or meta["count"] < 0
        or meta.get("byteorder", "little") != "little"
    ):
        raise TokenFileError(f"{side}: not a token-file sidecar (needs dtype uint16|uint32 and a count); re-encode {path}")
    vocab = meta.get("vocab_size")
    if vocab is not None and (not isinstance(vocab, int) or vocab < 1 or (meta["dtype"] == "uint16" and vocab > 1 << 16)):
        raise TokenFileError(f"{side}: vocab_size {vocab!r} does not fit dtype {meta['dtype']}; re-encode {path}")
    size = path.stat().st_size
    expected = meta["count"] * _ITEMSIZE[meta["dtype"]]
    if size != expected:
        raise TokenFileError(
            f"{path}: holds {size} bytes but its sidecar promises {meta['count']} {meta['dtype']} ids ({expected} bytes); "
            f"truncated or replaced? re-encode it"
        )
    return meta


def check_fingerprint(path: str | os.PathLike, meta: dict[str, Any], fingerprint: str, tokenizer_name: str = "the tokenizer") -> None:
    """TokenFileError unless the sidecar names the tokenizer with `fingerprint`."""
    have = meta.get("tokenizer_fingerprint")
    if have != fingerprint:
        raise TokenFileError(
            f"{path} was encoded with another tokenizer (fingerprint {str(have)[:16]}, {tokenizer_name} is "
            f"{fingerprint[:16]}); re-encode it with this tokenizer or pass the tokenizer it was encoded with"
        )


def check_ids(path: str | os.PathLike, ids, meta: dict[str, Any], vocab_size: int, tokenizer_name: str = "the tokenizer",
              chunk: int = 1 << 24) -> None:
    """TokenFileError (one line) unless every id of `ids` (the file's memmap) is in 0..vocab_size-1 and the file's
    dtype can hold every id of a tokenizer with `vocab_size` ids. Reads `ids` (an np.ndarray / memmap) in chunks of
    `chunk` ids, so memory stays bounded (0.13 s per 1e9 ids in memory; a cold file costs its disk read).
    """
    capacity = 1 << (8 * _ITEMSIZE[meta["dtype"]])
    if vocab_size > capacity:
        raise TokenFileError(f"{path}: {tokenizer_name} has {vocab_size} ids, which do not fit the file's {meta['dtype']} "
                             f"ids (0..{capacity - 1}); re-encode it with this tokenizer ('bpe encode' picks the dtype)")
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        if int(part.max()) >= vocab_size:
            pos = start + int((part >= vocab_size).argmax())
            raise TokenFileError(f"{path}: id {int(ids[pos])} at position {pos} is outside the vocabulary of "
                                 f"{tokenizer_name} (0..{vocab_size - 1}); the file is damaged or was not written by "
                                 f"it: re-encode it")


def read_tokens(path: str | os.PathLike, *, expect_fingerprint: str | None = None, tokenizer_name: str = "the tokenizer",
                vocab_size: int | None = None):
    """(read-only np.memmap of the ids, sidecar dict), validated; see the module docstring. With `vocab_size`,
    every id is also checked against it (`check_ids`: one pass over the file). Needs numpy."""
    import numpy as np  # reading only: tokenizer/ itself needs no more than regex

    meta = read_sidecar(path)
    if expect_fingerprint is not None:
        check_fingerprint(path, meta, expect_fingerprint, tokenizer_name)
    dtype = np.dtype(meta["dtype"]).newbyteorder("<")
    ids = np.zeros(0, dtype=dtype) if meta["count"] == 0 else np.memmap(path, dtype=dtype, mode="r")
    if vocab_size is not None:
        check_ids(path, ids, meta, vocab_size, tokenizer_name)
    return ids, meta
