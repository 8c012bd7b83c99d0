"""Content-addressed cache of trained tokenizers and token arrays, shared by every run on a machine.

    <cache_dir>/tokenizers/<key>.json         key = sha256(corpus content key + tokenizer settings)
    <cache_dir>/tokens/<key>/{train,val}.bin  key = sha256(corpus content key + tokenizer fingerprint)
    <cache_dir>/tokens/<key>/meta.json        dtype, token and byte counts (bytes/token for val/bpb)

The corpus key hashes the split documents themselves (experiments.data.Corpus.key), so editing a file or
changing the split gives a new entry, and a sweep's 18 runs train one tokenizer and encode the corpus once.
Entries are written to a temp name and renamed into place under a file lock, so parallel jobs (joblib, DDP ranks)
never read a half-written entry and do the work once. Token arrays are raw little-endian uint16 (vocab <= 65536)
or uint32, read back as read-only np.memmap. Each document is followed by <|endoftext|> when the tokenizer has it.
Not handled: eviction (delete the directory to reclaim space), cache sharing across machines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.data import Corpus
from experiments.errors import ConfigError

EOT = "<|endoftext|>"
CACHE_VERSION = 1


@dataclass
class TokenData:
    """Token ids of both splits (read-only memmaps) and the counts behind bytes/token."""

    train: np.ndarray
    val: np.ndarray
    meta: dict[str, Any]
    path: Path

    @property
    def bytes_per_token(self) -> float:
        """UTF-8 bytes per token on the validation split (the val/bpb conversion factor)."""
        return self.meta["val_bytes"] / max(1, self.meta["val_tokens"])


def cache_root(cache_dir: str | os.PathLike) -> Path:
    return Path(os.path.expanduser(str(cache_dir)))


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:24]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock (fcntl) on `path`; a no-op where fcntl is missing (Windows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def tokenizer_settings(cfg: dict[str, Any]) -> dict[str, Any]:
    """The tokenizer settings that change the trained result (the rest, e.g. workers, do not)."""
    return {k: cfg.get(k) for k in ("vocab_size", "pattern", "special_tokens", "min_frequency", "max_train_bytes")}


def _training_texts(docs: list[str], max_bytes: int | None) -> Iterator[str]:
    """The training documents, stopping once `max_bytes` UTF-8 bytes have been yielded (None: all)."""
    seen = 0
    for doc in docs:
        if max_bytes is not None and seen >= max_bytes:
            return
        seen += len(doc.encode("utf-8", errors="surrogatepass"))
        yield doc


def get_tokenizer(corpus: Corpus, cfg: dict[str, Any], cache_dir: str | os.PathLike, *, progress: bool = False):
    """(tokenizer, info): `tokenizer=load` reads cfg["path"]; `tokenizer=train` trains on corpus.train_docs once
    per (corpus, settings) and reuses the cached file afterwards. info: path, cached (bool), train_seconds."""
    from tokenizer import Tokenizer, train_bpe_from_iterator

    if cfg.get("mode") == "load":
        path = Path(os.path.expanduser(str(cfg["path"])))
        try:
            return Tokenizer.load(path), {"path": str(path), "cached": True, "train_seconds": 0.0}
        except (OSError, ValueError) as e:
            raise ConfigError(f"tokenizer.path={str(path)!r} could not be loaded: {e}") from None

    settings = tokenizer_settings(cfg)
    key = _key({"v": CACHE_VERSION, "corpus": corpus.key, **settings})
    root = cache_root(cache_dir) / "tokenizers"
    path, meta_path = root / f"{key}.json", root / f"{key}.meta.json"
    with file_lock(root / f".{key}.lock"):
        if path.exists():
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            return Tokenizer.load(path), {"path": str(path), "cached": True, "train_seconds": meta.get("train_seconds", 0.0)}
        t0 = time.perf_counter()
        tok = train_bpe_from_iterator(
            _training_texts(corpus.train_docs, settings["max_train_bytes"]),
            vocab_size=int(settings["vocab_size"]),
            special_tokens=list(settings["special_tokens"] or ()),
            pattern=settings["pattern"],
            workers=cfg.get("workers"),
            min_frequency=int(settings["min_frequency"] or 1),
            progress=progress,
        )
        seconds = time.perf_counter() - t0
        fd, tmp = tempfile.mkstemp(dir=root, suffix=".json.tmp")
        os.close(fd)
        tok.save(tmp)
        meta = {"corpus": corpus.name, "corpus_key": corpus.key, "identity": corpus.identity, **settings,
                "train_seconds": seconds, "fingerprint": tok.fingerprint()}
        meta_path.write_text(json.dumps(meta, indent=2, default=str))
        os.replace(tmp, path)
    return tok, {"path": str(path), "cached": False, "train_seconds": seconds}


def _encode_split(tok, docs: list[str], out: Path, dtype: np.dtype, eot_id: int | None) -> tuple[int, int]:
    """Encode `docs` (special-token text is ordinary text), append eot after each, write raw ids to `out`."""
    n_tokens = n_bytes = 0
    with open(out, "wb") as f:
        batch = 256  # documents per encode_batch call: bounded memory, parallel for large batches
        for i in range(0, len(docs), batch):
            chunk = docs[i : i + batch]
            for doc, ids in zip(chunk, tok.encode_batch(chunk, allowed_special=(), disallowed_special=())):
                if eot_id is not None:
                    ids.append(eot_id)
                np.asarray(ids, dtype=dtype).tofile(f)
                n_tokens += len(ids)
                n_bytes += len(doc.encode("utf-8", errors="surrogatepass"))
    return n_tokens, n_bytes


def get_token_data(corpus: Corpus, tok, cache_dir: str | os.PathLike) -> TokenData:
    """Token memmaps of both splits, encoded once per (corpus content, tokenizer fingerprint)."""
    key = _key({"v": CACHE_VERSION, "corpus": corpus.key, "tokenizer": tok.fingerprint()})
    root = cache_root(cache_dir) / "tokens"
    final = root / key
    with file_lock(root / f".{key}.lock"):
        if not (final / "meta.json").exists():
            dtype = np.dtype("<u2") if tok.vocab_size <= 1 << 16 else np.dtype("<u4")
            eot_id = tok.special_tokens.get(EOT)
            tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{key}."))
            try:
                t0 = time.perf_counter()
                n_train, b_train = _encode_split(tok, corpus.train_docs, tmp / "train.bin", dtype, eot_id)
                n_val, b_val = _encode_split(tok, corpus.val_docs, tmp / "val.bin", dtype, eot_id)
                meta = {"dtype": dtype.str, "train_tokens": n_train, "val_tokens": n_val, "train_bytes": b_train,
                        "val_bytes": b_val, "eot_id": eot_id, "tokenizer_fingerprint": tok.fingerprint(),
                        "vocab_size": tok.vocab_size, "corpus": corpus.name, "corpus_key": corpus.key,
                        "encode_seconds": time.perf_counter() - t0}
                (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
                if final.exists():  # a stale partial entry (no meta.json): replace it
                    shutil.rmtree(final)
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    meta = json.loads((final / "meta.json").read_text())

    def load(split: str) -> np.ndarray:
        if meta[f"{split}_tokens"] == 0:
            return np.zeros(0, dtype=meta["dtype"])
        return np.memmap(final / f"{split}.bin", dtype=np.dtype(meta["dtype"]), mode="r")

    return TokenData(train=load("train"), val=load("val"), meta=meta, path=final)
