"""Corpus sources and batching: documents in, train/val document lists out; token arrays in, (x, y) windows out.

Sources (`data.source`, one `conf/data/*.yaml` each):
  * `embedded`: tokenizer.corpus, Python's help topics (no download, no files outside the Python install);
  * `text`: local UTF-8 files or glob patterns, one document per file;
  * `hf`: a Hugging Face `datasets` dataset, by hub name or local path (save_to_disk folder, data files or a
    folder of them), loaded by tokenizer.datasets_source (the loader `bpe train --dataset` uses too); its
    DatasetError (missing column, a column that is not text, hub off/unreachable) becomes a one-line ConfigError;
  * `tokens`: token files from `bpe encode` (no documents: only the fast sidecar checks live here; the ids are
    read by experiments.data.cache.prepare_data, against the loaded tokenizer's fingerprint).
The train/val split is deterministic: `split_by=documents` sends an evenly spread `val_fraction` of the documents
to validation; `split_by=stream` cuts the concatenated text at `1 - val_fraction` (the token stream's tail is
held out, and the tokenizer never sees it). `data.test_fraction` (split_by=documents) holds out whole documents
for a test split beside validation, `data.doc_separator` (data=text) cuts a file into documents at separator
lines: experiments.data.documents. `Corpus.key` is a sha256 of the split content, the cache key for tokenizers and
token arrays (a corpus without a test split hashes as it did before test splits existed). Windows are drawn uniformly at random from a token array with a seeded
torch.Generator (one per rank), like nanoGPT's get_batch.
Not handled: corpora that do not fit in memory as Python strings, streaming datasets, document-aware windows
(windows cross document boundaries, which the <|endoftext|> token marks).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.config.data_schema import DataConfig, HFData, TextData, TokensData, data_config
from experiments.config.errors import ConfigError
from experiments.data.documents import (assign_documents, check_fractions, held_out_indices, split_on_separator,
                                        split_record, stream_record)
from tokenizer.corpus import EMBEDDED_NAME, embedded_documents
from tokenizer.datasets_source import DatasetError, check_dataset, load_texts
from tokenizer.tokenfile import TokenFileError, read_sidecar

SPLITS = ("documents", "stream")


@dataclass
class Corpus:
    """A split corpus: documents for training (and tokenizer training), for validation and (optional) for test."""

    name: str
    train_docs: list[str]
    val_docs: list[str]
    identity: dict[str, Any] = field(default_factory=dict)  # what the source and split were (for the cache)
    test_docs: list[str] = field(default_factory=list)  # data.test_fraction's whole documents; [] without one
    record: dict[str, Any] = field(default_factory=dict)  # documents.split_record: counts, bytes, indices ({}: none)

    @property
    def splits(self) -> dict[str, list[str]]:
        """{"train": docs, "val": docs} and "test" when the corpus has a test split."""
        return {"train": self.train_docs, "val": self.val_docs, **({"test": self.test_docs} if self.test_docs else {})}

    @property
    def key(self) -> str:
        """sha256 over the split's content (length-prefixed documents), the cache key of this corpus."""
        h = hashlib.sha256()
        for split, docs in self.splits.items():
            h.update(f"{split}:{len(docs)}\n".encode())
            for doc in docs:
                b = doc.encode("utf-8", errors="surrogatepass")
                h.update(len(b).to_bytes(8, "little"))
                h.update(b)
        return h.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# splitting


def split_documents(docs: list[str], val_fraction: float, split_by: str) -> tuple[list[str], list[str]]:
    """Deterministic train/val split.

    documents: document i goes to val when floor((i+1)·f) > floor(i·f), i.e. every ~1/f-th document.
    stream: the concatenation is cut at character (1-f)·total; the cut document is split in two.

    >>> split_documents(["a", "b", "c", "d"], 0.25, "documents")
    (['a', 'b', 'c'], ['d'])
    >>> split_documents(["aaaa", "bbbb"], 0.25, "stream")
    (['aaaa', 'bb'], ['bb'])
    """
    if split_by == "documents":
        if len(docs) < 2:
            raise ConfigError(
                f"data.split_by=documents needs at least 2 documents, got {len(docs)}; use data.split_by=stream"
            )
        val_idx = set(held_out_indices(len(docs), val_fraction))
        if len(val_idx) == len(docs):
            val_idx = {len(docs) - 1}
        train = [d for i, d in enumerate(docs) if i not in val_idx]
        val = [d for i, d in enumerate(docs) if i in val_idx]
        return train, val
    if split_by == "stream":
        total = sum(len(d) for d in docs)
        cut = int(round(total * (1.0 - val_fraction)))
        train, val, seen = [], [], 0
        for d in docs:
            if seen + len(d) <= cut:
                train.append(d)
            elif seen >= cut:
                val.append(d)
            else:
                train.append(d[: cut - seen])
                val.append(d[cut - seen :])
            seen += len(d)
        return [d for d in train if d], [d for d in val if d]
    raise ConfigError(f"unknown data.split_by {split_by!r}; choose from {list(SPLITS)}")


# ---------------------------------------------------------------------------------------------------------------
# sources


def _embedded(cfg: DataConfig) -> tuple[str, list[str], list[str] | None, dict[str, Any]]:
    return EMBEDDED_NAME, embedded_documents(), None, {"source": "embedded", "name": EMBEDDED_NAME}


def expand_paths(patterns: list[str]) -> list[Path]:
    """Files named by `patterns` (globs expanded, `~` too), sorted within each pattern; a miss raises ConfigError."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    if not patterns:
        raise ConfigError("data.paths is empty; pass data.paths=[file.txt,'dir/*.txt']")
    files: list[Path] = []
    for pattern in patterns:
        pattern = os.path.expanduser(str(pattern))
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if Path(m).is_file()]
        if not matches:
            raise ConfigError(f"data.paths: no file matches {pattern!r} (cwd {os.getcwd()})")
        files.extend(Path(m) for m in matches)
    return files


def _text(cfg: TextData) -> tuple[str, list[str], list[str] | None, dict[str, Any]]:
    files = expand_paths(cfg.paths)
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    name = files[0].stem if len(files) == 1 else f"{files[0].stem}+{len(files) - 1}"
    identity: dict[str, Any] = {"source": "text", "paths": [str(f) for f in files]}
    if cfg.doc_separator is None:
        return name, texts, None, identity
    docs = [doc for text in texts for doc in split_on_separator(text, cfg.doc_separator)]
    return name, docs, None, {**identity, "doc_separator": cfg.doc_separator}


def _dataset_error(cfg: HFData, e: Exception) -> ConfigError:
    """tokenizer.datasets_source.DatasetError -> one-line ConfigError, with the runner's local-files advice."""
    local = Path(os.path.expanduser(cfg.name)).exists()
    hint = "" if local else "; or, for local files: data=text data.paths=[file.txt,...]"
    return ConfigError(f"data.name: {e}{hint}")


def check_hf_source(cfg: HFData | dict[str, Any]) -> None:
    """Fail fast (seconds, no rows read): a local path must be a dataset; a hub name needs a reachable hub."""
    cfg = data_config(cfg, HFData)
    try:
        check_dataset(cfg.name, cfg.split)
    except DatasetError as e:
        raise _dataset_error(cfg, e) from None


def _hf(cfg: HFData) -> tuple[str, list[str], list[str] | None, dict[str, Any]]:
    check_hf_source(cfg)

    def take(split: str, limit: int | None) -> list[str]:
        """The non-empty texts of the first `limit` rows of `split` (a non-text column: one-line ConfigError)."""
        try:
            texts = load_texts(cfg.name, column=cfg.text_column, split=split, limit=limit, streaming=False,
                               config=cfg.config_name)
            return [t for t in texts if t]
        except DatasetError as e:
            raise _dataset_error(cfg, e) from None

    train = take(cfg.split, cfg.max_documents)
    val = take(cfg.val_split, cfg.max_val_documents) if cfg.val_split else None
    identity = {k: getattr(cfg, k) for k in ("name", "config_name", "split", "val_split", "text_column", "max_documents", "max_val_documents")}
    return Path(cfg.name).name, train, val, {"source": "hf", **identity}


SOURCES = {
    "embedded": _embedded,
    "text": _text,
    "hf": _hf,
}
TOKEN_SOURCE = "tokens"  # token files, not documents: no corpus to load (experiments.data.cache reads them)


def token_file_paths(cfg: TokensData | dict[str, Any]) -> dict[str, Path]:
    """`data=tokens`: {"train": path, "val": path} ("val" absent without data.val_path), `~` expanded."""
    cfg = data_config(cfg, TokensData)
    paths = {"train": cfg.train_path, "val": cfg.val_path}
    return {split: Path(os.path.expanduser(str(p))) for split, p in paths.items() if p not in (None, "")}


def check_token_files(cfg: TokensData | dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`data=tokens` fast checks (sidecars only, no ids read): the files exist, their sidecars are valid and
    name one tokenizer. Returns {split: sidecar}; ConfigError with one line otherwise."""
    cfg = data_config(cfg, TokensData)
    if not cfg.train_path:
        raise ConfigError("data.train_path: is required for data=tokens; pass data.train_path=train.bin (from 'bpe encode')")
    metas = {}
    for split, path in token_file_paths(cfg).items():
        try:
            metas[split] = read_sidecar(path)
        except TokenFileError as e:
            raise ConfigError(f"data.{split}_path: {e}") from None
    fps = {m.get("tokenizer_fingerprint") for m in metas.values()}
    if len(fps) > 1:
        raise ConfigError(f"data.val_path: {cfg.val_path} and data.train_path {cfg.train_path} were encoded with "
                          f"different tokenizers; encode both with the one in tokenizer.path")
    return metas


def check_source(cfg: DataConfig | dict[str, Any]) -> None:
    """Cheap checks of a data config that need no loading: known source, split settings, paths, hub reachability."""
    cfg = data_config(cfg)
    source = cfg.source
    if source not in SOURCES and source != TOKEN_SOURCE:
        raise ConfigError(f"unknown data.source {source!r}; choose from {sorted([*SOURCES, TOKEN_SOURCE])}")
    if getattr(cfg, "split_by", "documents") not in SPLITS:
        raise ConfigError(f"unknown data.split_by {cfg.split_by!r}; choose from {list(SPLITS)}")
    f = cfg.val_fraction
    if not 0.0 < f < 1.0:
        raise ConfigError(f"data.val_fraction must be in (0, 1), got {f!r}")
    check_held_out(cfg)
    if source == "text":
        expand_paths(cfg.paths)
    elif source == "hf":
        check_hf_source(cfg)
    elif source == TOKEN_SOURCE:
        check_token_files(cfg)


# a file name -> what it is and where to get it, added to the line refusing a missing data.extra_eval file
KNOWN_EVAL_FILES = {
    "wikitext2_raw_test.txt": "WikiText-2's raw test split (datasets: wikitext, wikitext-2-raw-v1, split test; "
                              "sha256 4f3e427e...; docs/experiments.md#held-out-evaluation says how to get it)",
}
EVAL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def extra_eval_paths(cfg: DataConfig | dict[str, Any]) -> dict[str, Path]:
    """data.extra_eval as {name: path} (`~` expanded), checked: a name the metrics can carry (test/<name>/loss), a
    file that exists. ConfigError (one line naming the key) otherwise; reads no file."""
    cfg = data_config(cfg)
    out = {}
    for name, path in (getattr(cfg, "extra_eval", None) or {}).items():
        if not EVAL_NAME.fullmatch(str(name)):
            raise ConfigError(f"data.extra_eval: name {name!r} must be letters, digits, '_', '.' or '-' (it names the "
                              f"metrics test/<name>/loss and test/<name>/bpb)")
        if not isinstance(path, str) or not path:
            raise ConfigError(f"data.extra_eval.{name}: must be the path of a text file, got {path!r}")
        p = Path(os.path.expanduser(path))
        if not p.is_file():
            known = KNOWN_EVAL_FILES.get(p.name)
            raise ConfigError(f"data.extra_eval.{name}: no file {path!r} (cwd {os.getcwd()})"
                              + (f"; it is {known}" if known else ""))
        out[str(name)] = p
    return out


def check_held_out(cfg: DataConfig | dict[str, Any]) -> None:
    """data.test_fraction, data.test_max_tokens, data.doc_separator and data.extra_eval (names, files): one
    ConfigError naming the key, before any data is read."""
    cfg = data_config(cfg)
    g = getattr(cfg, "test_fraction", 0.0)
    if not 0.0 <= g < 1.0:
        raise ConfigError(f"data.test_fraction: must be a number in [0, 1), got {g!r}")
    if g > 0 and getattr(cfg, "split_by", "documents") != "documents":
        raise ConfigError("data.test_fraction: a test split holds out whole documents; set data.split_by=documents "
                          "(and data.doc_separator to cut one file into documents)")
    if g > 0 and getattr(cfg, "val_split", None):
        raise ConfigError(f"data.test_fraction: the test documents come from data.split; with "
                          f"data.val_split={cfg.val_split} set it to null (or data.test_fraction=0)")
    check_fractions(cfg.val_fraction, g)
    n = getattr(cfg, "test_max_tokens", None)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"data.test_max_tokens: must be an integer >= 1 or null, got {n!r}")
    sep = getattr(cfg, "doc_separator", None)
    if sep is not None and (not isinstance(sep, str) or not sep or "\n" in sep or "\r" in sep):
        raise ConfigError(f"data.doc_separator: must be one line of text (non-empty, no line break) or null, got {sep!r}")
    extra_eval_paths(cfg)


def load_corpus(cfg: DataConfig | dict[str, Any]) -> Corpus:
    """Read the configured source and split it into train/val(/test) documents (deterministically)."""
    cfg = data_config(cfg)
    check_source(cfg)
    if cfg.source == TOKEN_SOURCE:
        raise ConfigError("data=tokens holds token ids, not documents; read it with experiments.data.cache.prepare_data")
    name, docs, val_docs, identity = SOURCES[cfg.source](cfg)
    test_docs: list[str] = []
    record: dict[str, Any] = {}
    g, sep = getattr(cfg, "test_fraction", 0.0), getattr(cfg, "doc_separator", None)
    if val_docs is None and g > 0:  # split_by=documents (check_held_out)
        train_i, val_i, test_i = assign_documents(len(docs), cfg.val_fraction, g)
        train_docs, val_docs, test_docs = ([docs[i] for i in idx] for idx in (train_i, val_i, test_i))
        identity = {**identity, "val_fraction": cfg.val_fraction, "split_by": cfg.split_by, "test_fraction": g}
        record = split_record(docs, train_i, val_i, test_i, split_by="documents", val_fraction=cfg.val_fraction,
                              test_fraction=g, separator=sep)
    elif val_docs is None:
        train_docs, val_docs = split_documents(docs, cfg.val_fraction, cfg.split_by)
        identity = {**identity, "val_fraction": cfg.val_fraction, "split_by": cfg.split_by}
        if train_docs and val_docs and cfg.split_by == "documents":
            record = split_record(docs, *assign_documents(len(docs), cfg.val_fraction), split_by="documents",
                                  val_fraction=cfg.val_fraction, test_fraction=0.0, separator=sep)
        elif train_docs and val_docs:
            record = stream_record(docs, train_docs, val_docs, val_fraction=cfg.val_fraction, separator=sep)
    else:
        train_docs = docs
    if not train_docs or not val_docs:
        raise ConfigError(f"corpus {name!r} has {len(train_docs)} train / {len(val_docs)} val documents; both must be non-empty")
    return Corpus(name=name, train_docs=train_docs, val_docs=val_docs, identity=identity, test_docs=test_docs,
                  record=record)


# ---------------------------------------------------------------------------------------------------------------
# batching


class WindowSampler:
    """Random (x, y) windows of `n_ctx` tokens from a 1-D token array; y is x shifted by one.

    With N tokens t and T = n_ctx, a start s is uniform over [0, N-T-1] (every start whose target window fits):
    x = t[s : s+T], y = t[s+1 : s+T+1], so the last token t[N-1] is a target (s = N-T-1). Starts are drawn from
    `generator` (seeded per rank), so the sequence of batches is a function of the seed alone and resumes
    exactly from `generator.get_state()`.
    """

    def __init__(self, tokens: np.ndarray, n_ctx: int, batch_size: int, generator: torch.Generator):
        if len(tokens) < n_ctx + 1:
            raise ConfigError(f"the training split has {len(tokens)} tokens, fewer than n_ctx + 1 = {n_ctx + 1}; lower train.n_ctx")
        self.tokens, self.n_ctx, self.batch_size, self.generator = tokens, n_ctx, batch_size, generator

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """x, y: (B, T) int64 on the CPU."""
        T = self.n_ctx
        # randint's high is exclusive: starts 0..N-T-1 (N-T of them)
        starts = torch.randint(0, len(self.tokens) - T, (self.batch_size,), generator=self.generator).tolist()
        chunk = np.stack([np.asarray(self.tokens[s : s + T + 1], dtype=np.int64) for s in starts])  # (B, T+1)
        chunk = torch.from_numpy(chunk)
        return chunk[:, :-1], chunk[:, 1:]


def rank_seed(seed: int, rank: int) -> int:
    """The data generator's seed for a rank: distinct streams per (seed, rank), stable across runs."""
    return int(np.random.SeedSequence([int(seed), int(rank)]).generate_state(1)[0])
