"""Content-addressed cache of trained tokenizers and token arrays, shared by every run on a machine.

    <cache_dir>/tokenizers/<key>.json         key = sha256(corpus content key + tokenizer settings)
    <cache_dir>/tokens/<key>/{train,val}.bin  key = sha256(corpus content key + tokenizer fingerprint); test.bin too
                                              when the corpus has a test split (data.test_fraction)
    <cache_dir>/tokens/<key>/{train,val}.bin.json   their sidecars (tokenizer.tokenfile, the format `bpe encode`
                                              writes): dtype, count, tokenizer fingerprint, n_bytes (for val/bpb)

The corpus key hashes the split documents themselves (experiments.data.corpus.Corpus.key), so editing a file or
changing the split gives a new entry, and a sweep's 18 runs train one tokenizer and encode the corpus once.
Entries are written to a temp name and renamed into place under a file lock (filelock), so parallel jobs (joblib,
DDP ranks) never read a half-written entry and do the work once; an entry found damaged anyway (a tokenizer file
left empty or truncated by a crash, a token file shorter than its sidecar says) is rebuilt, temp files a killed
writer left are deleted. A cache that cannot be written (full disk, read-only dir or HOME) is one ConfigError naming
the entry (`cannot_write`), unless it already holds the entry whole: a read-only cache is read. Token arrays are token files (tokenizer/tokenfile.py: raw
little-endian uint16 when vocab <= 65536, else uint32), read back as read-only np.memmap after their sidecar is
checked against the tokenizer's fingerprint. Each document is followed by <|endoftext|> when the tokenizer has it.
`prepare_data` is a run's whole data step: corpus -> tokenizer -> token arrays, or for `data=tokens` the user's
token files (bpe encode) read against the loaded tokenizer's fingerprint, nothing cached.
Not handled: eviction (delete the directory to reclaim space), cache sharing across machines.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from experiments.config.data_schema import DataConfig, TokensData, data_config
from experiments.config.errors import ConfigError
from experiments.data import corpus as data_lib  # via the module: tests patch data_lib.load_corpus
from experiments.data.corpus import Corpus
from tokenizer import Tokenizer, train_bpe_from_iterator
from tokenizer.outputs import atomic_directory, atomic_output
from tokenizer.tokenfile import TokenFileError, check_fingerprint, read_sidecar, read_tokens, write_tokens

log = logging.getLogger(__name__)

EOT = "<|endoftext|>"
CACHE_VERSION = 2  # 2: token files with tokenizer.tokenfile sidecars (1: one meta.json per entry)


@dataclass
class TokenData:
    """Token ids of both splits (read-only memmaps) and their token-file sidecars (count, n_bytes, fingerprint)."""

    train: np.ndarray
    val: np.ndarray
    train_meta: dict[str, Any]  # the train ids' sidecar (tokenizer.tokenfile); count matches len(train)
    val_meta: dict[str, Any]  # the val ids' sidecar; n_bytes = exact UTF-8 bytes the val ids encode
    path: Path  # the cache entry, or the folder of data.train_path
    fingerprint: str = ""  # what the ids are, whatever the tokenizer: the corpus content key, or the token files'
    test: np.ndarray | None = None  # the test split's ids (data.test_fraction); None without one
    test_meta: dict[str, Any] | None = None  # its sidecar

    @property
    def bytes_per_token(self) -> float:
        """UTF-8 bytes per token on the validation split (the val/bpb conversion factor): n_bytes / count."""
        return self.val_meta["n_bytes"] / max(1, self.val_meta["count"])

    @property
    def meta(self) -> dict[str, Any]:
        """Token and byte counts of both splits (None: unknown), for summaries."""
        return {"train_tokens": self.train_meta["count"], "val_tokens": self.val_meta["count"],
                "train_bytes": self.train_meta.get("n_bytes"), "val_bytes": self.val_meta["n_bytes"],
                "tokenizer_fingerprint": self.val_meta.get("tokenizer_fingerprint")}


def cache_root(cache_dir: str | os.PathLike) -> Path:
    return Path(os.path.expanduser(str(cache_dir)))


def cache_key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:24]


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` for the block, waiting while another process holds it (filelock: flock on
    POSIX, msvcrt on Windows, a lock file where neither exists). An OS lock dies with its process, so a job
    killed while holding it blocks no one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path):
        yield


def cannot_write(path: Path, e: OSError) -> ConfigError:
    """The one line for a cache write that failed: a full disk, a read-only cache dir (or HOME, its default)."""
    return ConfigError(f"data.cache_dir: cannot write {path} ({e.strerror or type(e).__name__}); free space there or "
                       f"set data.cache_dir to a writable directory")


def remove_stale_temps(root: Path, key: str) -> None:
    """Delete the temp files / dirs of entry `key` (`.{key}.*` but its lock) that a killed writer left behind;
    call it holding the entry's lock, so no live writer owns them."""
    for stale in root.glob(f".{key}.*"):
        if stale.name == f".{key}.lock":
            continue
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def _cached_tokenizer(path: Path, meta_path: Path) -> tuple[Tokenizer, dict[str, Any]] | None:
    """(tokenizer, its meta) of a cache entry, or None when it is absent or damaged (empty, truncated, not the
    tokenizer its meta names: a crash before the file reached the disk); a damaged one is logged."""
    if not path.exists():
        return None
    try:
        tok = Tokenizer.load(path)
    except (OSError, ValueError) as e:
        log.warning("cached tokenizer %s is damaged (%s); rebuilding it", path, " ".join(str(e).split())[:200])
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = {}
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("fingerprint", tok.fingerprint()) != tok.fingerprint():
        log.warning("cached tokenizer %s is not the one its meta names; rebuilding it", path)
        return None
    return tok, meta


def token_entry_ok(entry: Path, tok, splits: tuple[str, ...] = ("train", "val")) -> bool:
    """True when every token file (`splits`) of a cache entry is whole: a valid sidecar, a file size that matches its
    count, `tok`'s fingerprint. A damaged entry is logged (the caller rebuilds it)."""
    if not entry.exists():
        return False
    try:
        for split in splits:
            path = entry / f"{split}.bin"
            check_fingerprint(path, read_sidecar(path), tok.fingerprint())
    except TokenFileError as e:
        log.warning("token cache entry %s is damaged (%s); rebuilding it", entry, e)
        return False
    return True


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


def load_tokenizer(cfg: dict[str, Any]):
    """(tokenizer, info) for `tokenizer=load`: reads cfg["path"] (a tokenizer .json or a `bpe train` dir)."""
    path = Path(os.path.expanduser(str(cfg["path"])))
    try:
        return Tokenizer.load(path), {"path": str(path), "cached": True, "train_seconds": 0.0}
    except (OSError, ValueError) as e:
        raise ConfigError(f"tokenizer.path={str(path)!r} could not be loaded: {e}") from None


def get_tokenizer(corpus: Corpus, cfg: dict[str, Any], cache_dir: str | os.PathLike, *, progress: bool = False):
    """(tokenizer, info): `tokenizer=load` reads cfg["path"]; `tokenizer=train` trains on corpus.train_docs once
    per (corpus, settings) and reuses the cached file afterwards. info: path, cached (bool), train_seconds.

    A cached file that is empty, truncated or not this entry's tokenizer (a crash before it reached the disk) is
    rebuilt. A cache dir that cannot be written (full disk, read-only) is one ConfigError naming the entry, unless
    it already holds the entry whole (a read-only cache is read)."""
    if cfg.get("mode") == "load":
        return load_tokenizer(cfg)

    settings = tokenizer_settings(cfg)
    key = cache_key({"v": CACHE_VERSION, "corpus": corpus.key, **settings})
    root = cache_root(cache_dir) / "tokenizers"
    path, meta_path = root / f"{key}.json", root / f"{key}.meta.json"
    try:
        with file_lock(root / f".{key}.lock"):
            cached = _cached_tokenizer(path, meta_path)
            if cached is None:
                remove_stale_temps(root, key)
                tok, seconds = _train_tokenizer(corpus, cfg, settings, progress)
                meta = {"corpus": corpus.name, "corpus_key": corpus.key, "identity": corpus.identity, **settings,
                        "train_seconds": seconds, "fingerprint": tok.fingerprint()}
                with atomic_output(meta_path) as tmp:  # the meta first: the tokenizer file marks a whole entry
                    tmp.write_text(json.dumps(meta, indent=2, default=str))
                tok.save(path)  # atomic (tokenizer.outputs.atomic_output)
                return tok, {"path": str(path), "cached": False, "train_seconds": seconds}
    except OSError as e:
        cached = _cached_tokenizer(path, meta_path)
        if cached is None:
            raise cannot_write(path, e) from None
    tok, meta = cached
    return tok, {"path": str(path), "cached": True, "train_seconds": meta.get("train_seconds", 0.0)}


def _train_tokenizer(corpus: Corpus, cfg: dict[str, Any], settings: dict[str, Any], progress: bool) -> tuple[Tokenizer, float]:
    """(tokenizer trained on corpus.train_docs, seconds it took)."""
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
    return tok, time.perf_counter() - t0


def _encode_split(tok, docs: list[str], out: Path, eot_id: int | None, source: str) -> dict[str, Any]:
    """Encode `docs` (special-token text is ordinary text), append eot after each, write the token file `out`
    (+ sidecar, tokenizer.tokenfile); n_bytes counts the documents' UTF-8 bytes (not the appended eot)."""
    n_bytes = 0

    def chunks() -> Iterator[list[int]]:
        nonlocal n_bytes
        batch = 256  # documents per encode_batch call: bounded memory, parallel for large batches
        for i in range(0, len(docs), batch):
            chunk = docs[i : i + batch]
            for doc, ids in zip(chunk, tok.encode_batch(chunk, allowed_special=(), disallowed_special=())):
                if eot_id is not None:
                    ids.append(eot_id)
                n_bytes += len(doc.encode("utf-8", errors="surrogatepass"))
                yield ids

    return write_tokens(out, chunks(), vocab_size=tok.vocab_size, fingerprint=tok.fingerprint(), source=source,
                        count_bytes=lambda: n_bytes)


def _read_token_file(path: Path, tok, what: str) -> tuple[np.ndarray, dict[str, Any]]:
    """(memmap, sidecar) of a token file encoded by `tok`; TokenFileError -> one-line ConfigError naming `what`."""
    try:
        return read_tokens(path, expect_fingerprint=tok.fingerprint(), tokenizer_name="the run's tokenizer",
                           vocab_size=tok.vocab_size)
    except TokenFileError as e:
        raise ConfigError(f"{what}: {e}") from None


def cached_token_files(key: str, splits: dict[str, list[str]], tok, cache_dir: str | os.PathLike,
                       source: Callable[[str], str]) -> tuple[Path, dict[str, tuple[np.ndarray, dict[str, Any]]]]:
    """(entry, {split: (memmap, sidecar)}): `<cache_dir>/tokens/<key>/<split>.bin` for each of `splits` (name ->
    documents), encoded once under the entry's lock (`source(split)`: its sidecar's source) and read against `tok`.

    An entry whose files are damaged (truncated, empty, a garbage sidecar: `token_entry_ok`) is rebuilt. A cache
    dir that cannot be written is one ConfigError naming the entry, unless it already holds the entry whole."""
    root = cache_root(cache_dir) / "tokens"
    final = root / key
    try:
        with file_lock(root / f".{key}.lock"):
            if not token_entry_ok(final, tok, tuple(splits)):
                remove_stale_temps(root, key)
                eot_id = tok.special_tokens.get(EOT)
                with atomic_directory(final) as tmp:  # replaces a stale partial entry (a sidecar missing)
                    for split, docs in splits.items():
                        _encode_split(tok, docs, tmp / f"{split}.bin", eot_id, source(split))
    except OSError as e:
        if not token_entry_ok(final, tok, tuple(splits)):
            raise cannot_write(final, e) from None
    return final, {s: _read_token_file(final / f"{s}.bin", tok, "token cache") for s in splits}


def get_token_data(corpus: Corpus, tok, cache_dir: str | os.PathLike) -> TokenData:
    """Token files of the splits (train, val and a test split if any), encoded once per (corpus content, tokenizer
    fingerprint), as memmaps (`cached_token_files`)."""
    key = cache_key({"v": CACHE_VERSION, "corpus": corpus.key, "tokenizer": tok.fingerprint()})
    final, read = cached_token_files(key, corpus.splits, tok, cache_dir,
                                     lambda split: f"{corpus.name} {split} split ({corpus.key[:16]})")
    test, test_meta = read.get("test", (None, None))
    return TokenData(train=read["train"][0], val=read["val"][0], train_meta=read["train"][1], val_meta=read["val"][1],
                     path=final, fingerprint=corpus.key, test=test, test_meta=test_meta)


def _decoded_bytes(tok, ids: np.ndarray, chunk: int = 1 << 20) -> int:
    """Exact UTF-8 byte count of the text `ids` encode (len of tok.decode_bytes), in bounded memory."""
    return sum(len(tok.decode_bytes(ids[i : i + chunk].tolist())) for i in range(0, len(ids), chunk))


def token_file_data(cfg: TokensData | dict[str, Any], tok) -> TokenData:
    """`data=tokens`: the token files of cfg["train_path"] / cfg["val_path"] as memmaps, refused (ConfigError naming
    the file) unless their sidecars name `tok`'s fingerprint.

    Without val_path the last val_fraction of the train ids is held out: train = ids[:cut], val = ids[cut:] with
    cut = round(count * (1 - val_fraction)). The held-out ids' n_bytes is computed exactly by decoding them once
    (a proportional share of the file's n_bytes would not be exact); so is a val file's when its sidecar lacks it.
    """
    cfg = data_config(cfg, TokensData)
    paths = data_lib.token_file_paths(cfg)
    train, train_meta = _read_token_file(paths["train"], tok, "data.train_path")
    if "val" in paths:
        val, val_meta = _read_token_file(paths["val"], tok, "data.val_path")
        if val_meta.get("n_bytes") is None:  # a sidecar from before n_bytes existed
            val_meta = {**val_meta, "n_bytes": _decoded_bytes(tok, val)}
    else:
        f = cfg.val_fraction
        cut = int(round(len(train) * (1.0 - f)))
        train, val = train[:cut], train[cut:]
        val_bytes = _decoded_bytes(tok, val)
        total = train_meta.get("n_bytes")
        val_meta = {**train_meta, "count": len(val), "n_bytes": val_bytes, "source": f"{paths['train']}[{cut}:]"}
        train_meta = {**train_meta, "count": len(train), "n_bytes": None if total is None else total - val_bytes,
                      "source": f"{paths['train']}[:{cut}]"}
    return TokenData(train=train, val=val, train_meta=train_meta, val_meta=val_meta, path=paths["train"].parent,
                     fingerprint=cache_key([{k: v for k, v in m.items() if k != "tokenizer_fingerprint"}
                                       for m in (train_meta, val_meta)]))  # counts, bytes, sources, the cut


@dataclass
class PreparedData:
    """Everything the training step needs from the data side: the tokenizer, where it came from, the token arrays."""

    tokenizer: Any
    tokenizer_info: dict[str, Any]  # path, cached (bool), train_seconds
    data: TokenData
    name: str  # the corpus name (for logs)
    record: dict[str, Any] = field(default_factory=dict)  # the corpus's split record (experiments.data.documents)

    @property
    def inputs(self) -> dict[str, str]:
        """What a run trains on, as fingerprints: a resume must find the same (experiments.rundir.checkpoint)."""
        return {"tokenizer": self.tokenizer.fingerprint(), "data": self.data.fingerprint}


def prepare_data(data_cfg: DataConfig | dict[str, Any], tokenizer_cfg: dict[str, Any], cache_dir: str | os.PathLike, *,
                 progress: bool = False) -> PreparedData:
    """The data step of a run: read the corpus, get its tokenizer (trained once, cached) and its token arrays."""
    data_cfg = data_config(data_cfg)
    if data_cfg.source == data_lib.TOKEN_SOURCE:
        if tokenizer_cfg.get("mode") != "load":
            raise ConfigError("tokenizer: data=tokens needs the tokenizer that encoded the files; pass tokenizer=load "
                              "tokenizer.path=DIR (the 'bpe train --out DIR' folder), not tokenizer=train")
        data_lib.check_source(data_cfg)  # sidecars first: a missing file fails before the tokenizer loads
        tok, info = load_tokenizer(tokenizer_cfg)
        data = token_file_data(data_cfg, tok)
        return PreparedData(tokenizer=tok, tokenizer_info=info, data=data, name=data_lib.token_file_paths(data_cfg)["train"].stem)
    corpus = data_lib.load_corpus(data_cfg)
    tok, info = get_tokenizer(corpus, tokenizer_cfg, cache_dir, progress=progress)
    return PreparedData(tokenizer=tok, tokenizer_info=info, data=get_token_data(corpus, tok, cache_dir),
                        name=corpus.name, record=corpus.record)
