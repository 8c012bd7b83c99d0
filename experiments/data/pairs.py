"""Sequence-to-sequence data: (source, target) text pairs in, padded id batches out.

Sources (`data.source`):
  * `seq2seq_synthetic` (conf/data/seq2seq_synthetic.yaml): copy / reverse / sort / addition pairs made on the
    fly (experiments/data/seq2seq_tasks.py), with a test split by length: no download;
  * `seq2seq_pairs` (conf/data/seq2seq_pairs.yaml): pairs from a local .tsv (source TAB target per line), a
    .jsonl / .json / .csv / .parquet file or a `datasets` name or saved dir (tokenizer.datasets_source, the one
    `datasets` loader) with `src_column` / `tgt_column`; `val_fraction` of the pairs (an evenly spread share) is
    held out and is also the test split.

Encoding (`encode_pair`): source ids = enc(src) + [eos]; decoder input = [bos] + enc(tgt); decoder target =
enc(tgt) + [eos], so the decoder learns to end its output. Specials `<|pad|>`, `<|bos|>`, `<|eos|>` are the
tokenizer's (conf/tokenizer/seq2seq.yaml adds them; special-token strings inside the text are plain text).
`PairBatcher` draws batches uniformly at random with a seeded torch.Generator (resumable from its state) and pads
each batch to its longest row: sources and decoder inputs with pad_id, decoder targets with -100 (ignored).
Not handled: length-bucketed batching, packing several pairs into one row, sources longer than the model accepts
(a learned-position model refuses them; the error names the length).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from experiments.config.data_schema import DataConfig, Seq2SeqPairsData, data_config
from experiments.config.errors import ConfigError
from experiments.data.cache import get_tokenizer
from experiments.data.corpus import Corpus
from experiments.data.seq2seq_tasks import TASKS, PairSplit, _lengths, make_split
from tokenizer.datasets_source import DatasetError, check_dataset, load_rows

PAD, BOS, EOS = "<|pad|>", "<|bos|>", "<|eos|>"
SPECIALS = (PAD, BOS, EOS)
IGNORE = -100


def _split_pairs(pairs: list[tuple[str, str]], val_fraction: float, name: str) -> PairSplit:
    """Every round(1/val_fraction)-th pair to the test split (deterministic, spread over the file)."""
    if not 0 < val_fraction < 1:
        raise ConfigError(f"data.val_fraction: must be in (0, 1), got {val_fraction!r}")
    every = max(2, round(1 / val_fraction))
    test = [p for i, p in enumerate(pairs) if i % every == every - 1]
    train = [p for i, p in enumerate(pairs) if i % every != every - 1]
    if not train or not test:
        raise ConfigError(f"data: {name} has {len(pairs)} pairs, too few for a train and a test split")
    return PairSplit(train=train, test=test, test_lengths=[len(s) for s, _ in test], name=name)


def _read_tsv(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise ConfigError(f"data.path: {path}:{n} has {len(parts)} tab-separated fields, expected 2 (source, target)")
        pairs.append((parts[0], parts[1]))
    return pairs


def _read_columns(name: str, cfg: Seq2SeqPairsData) -> list[tuple[str, str]]:
    try:
        rows = load_rows(name, columns=(cfg.src_column, cfg.tgt_column), split=cfg.split, limit=cfg.max_pairs,
                         config=cfg.config_name)
        return [(str(s), str(t)) for s, t in rows]
    except DatasetError as e:
        raise ConfigError(f"data.path: {e}") from None


SOURCES = ("seq2seq_synthetic", "seq2seq_pairs")


def check_source(cfg: DataConfig | dict[str, Any]) -> None:
    """Cheap checks of a seq2seq data config before anything is generated or read (one-line ConfigError)."""
    cfg = data_config(cfg)
    source = cfg.source
    if source not in SOURCES:
        raise ConfigError(f"data.source: {source!r} is not a seq2seq source; choose from {', '.join(SOURCES)} "
                          f"(task=seq2seq sets data=seq2seq_synthetic)")
    if source == "seq2seq_synthetic":
        if cfg.task not in TASKS:
            raise ConfigError(f"data.task: unknown task {cfg.task!r}; choose from {', '.join(TASKS)}")
        _lengths(cfg, "train_lengths")
        _lengths(cfg, "test_lengths")
        for key in ("n_train", "n_test_per_length"):
            if getattr(cfg, key) < 1:
                raise ConfigError(f"data.{key}: must be an integer >= 1, got {getattr(cfg, key)!r}")
        return
    raw = str(cfg.path or "")
    if not raw:
        raise ConfigError("data.path: required for data=seq2seq_pairs (a .tsv/.jsonl file or a datasets name)")
    path = Path(raw).expanduser()
    if path.suffix == ".tsv" and not path.is_file():
        raise ConfigError(f"data.path: {raw} does not exist")
    if path.suffix != ".tsv":
        try:
            check_dataset(str(path) if path.exists() else raw, cfg.split)
        except DatasetError as e:
            raise ConfigError(f"data.path: {e}") from None


def load_pairs(cfg: DataConfig | dict[str, Any]) -> PairSplit:
    """The train/test pairs of a seq2seq data config."""
    cfg = data_config(cfg)
    source = cfg.source
    if source == "seq2seq_synthetic":
        return make_split(cfg)
    if source != "seq2seq_pairs":
        raise ConfigError(f"data.source: {source!r} is not a seq2seq source; use data=seq2seq_synthetic or data=seq2seq_pairs")
    raw = str(cfg.path or "")
    if not raw:
        raise ConfigError("data.path: required for data=seq2seq_pairs (a .tsv/.jsonl file or a datasets name)")
    path = Path(raw).expanduser()
    pairs = _read_tsv(path) if path.suffix == ".tsv" and path.is_file() else _read_columns(str(path) if path.exists() else raw, cfg)
    return _split_pairs(pairs, cfg.val_fraction, raw)


@dataclass
class EncodedPairs:
    """Token ids of a list of pairs: src[i] (with eos), tgt_in[i] (bos + target), tgt_out[i] (target + eos)."""

    src: list[list[int]]
    tgt_in: list[list[int]]
    tgt_out: list[list[int]]
    lengths: list[int]  # the task length of each pair (for exact match vs length)
    texts: list[tuple[str, str]]


def special_ids(tok) -> tuple[int, int, int]:
    missing = [s for s in SPECIALS if s not in tok.special_tokens]
    if missing:
        raise ConfigError(f"tokenizer: a seq2seq run needs the special tokens {', '.join(SPECIALS)}; missing "
                          f"{', '.join(missing)} (tokenizer=seq2seq adds them)")
    return tuple(tok.special_tokens[s] for s in SPECIALS)  # type: ignore[return-value]


def encode_pairs(tok, pairs: list[tuple[str, str]], lengths: list[int] | None = None) -> EncodedPairs:
    _, bos, eos = special_ids(tok)
    enc = [(tok.encode(s, allowed_special=set(), disallowed_special=()),
            tok.encode(t, allowed_special=set(), disallowed_special=())) for s, t in pairs]
    return EncodedPairs(src=[s + [eos] for s, _ in enc], tgt_in=[[bos] + t for _, t in enc],
                        tgt_out=[t + [eos] for _, t in enc], lengths=list(lengths or [len(s) for s, _ in pairs]),
                        texts=list(pairs))


def pad(rows: list[list[int]], value: int) -> torch.Tensor:
    """(B, max len) int64, each row right-padded with `value`."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], dtype=torch.long)


def collate(data: EncodedPairs, index: list[int], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(src (B, S), tgt_in (B, T), tgt_out (B, T)) for the pairs at `index`, padded (targets with -100)."""
    return (pad([data.src[i] for i in index], pad_id), pad([data.tgt_in[i] for i in index], pad_id),
            pad([data.tgt_out[i] for i in index], IGNORE))


class PairBatcher:
    """Random batches of `batch_size` pairs (with replacement across batches), drawn from `generator`."""

    def __init__(self, data: EncodedPairs, batch_size: int, pad_id: int, generator: torch.Generator) -> None:
        if not data.src:
            raise ConfigError("data: the seq2seq training split is empty")
        self.data, self.batch_size, self.pad_id, self.generator = data, batch_size, pad_id, generator

    def next(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = torch.randint(0, len(self.data.src), (self.batch_size,), generator=self.generator).tolist()
        return collate(self.data, index, self.pad_id)


def identity(cfg: DataConfig | dict[str, Any]) -> str:
    """A stable description of a seq2seq data config (for logs and run names)."""
    d = dataclasses.asdict(data_config(cfg))
    return json.dumps({k: d[k] for k in sorted(d) if k != "cache_dir"}, sort_keys=True, default=str)


@dataclass
class PreparedPairs:
    """The data side of a seq2seq run: tokenizer, encoded train and test pairs, the special ids."""

    tokenizer: Any
    tokenizer_info: dict[str, Any]
    train: EncodedPairs
    test: EncodedPairs
    pad_id: int
    bos_id: int
    eos_id: int
    name: str
    data_fingerprint: str = ""  # sha256 of the train and test pairs (text), whatever the tokenizer

    @property
    def inputs(self) -> dict[str, str]:
        """What a run trains on, as fingerprints: a resume must find the same (experiments.rundir.checkpoint)."""
        return {"tokenizer": self.tokenizer.fingerprint(), "data": self.data_fingerprint}

    @property
    def mean_target_tokens(self) -> float:
        """Mean decoder tokens per training pair (target + eos): the run's `tokens` count decoder tokens."""
        return sum(map(len, self.train.tgt_out)) / len(self.train.tgt_out)

    @property
    def mean_source_tokens(self) -> float:
        return sum(map(len, self.train.src)) / len(self.train.src)


def prepare_pairs(data_cfg: DataConfig | dict[str, Any], tokenizer_cfg: dict[str, Any], cache_dir: str, *,
                  progress: bool = False) -> PreparedPairs:
    """Pairs -> tokenizer (trained on the training sources and targets, cached by content; or loaded) -> ids."""
    data_cfg = data_config(data_cfg)
    split = load_pairs(data_cfg)
    corpus = Corpus(name=split.name, train_docs=[s for s, _ in split.train] + [t for _, t in split.train],
                    val_docs=[], identity={"seq2seq": identity(data_cfg)})
    tok, info = get_tokenizer(corpus, tokenizer_cfg, cache_dir, progress=progress)
    pad_id, bos_id, eos_id = special_ids(tok)
    return PreparedPairs(tokenizer=tok, tokenizer_info=info, train=encode_pairs(tok, split.train),
                         test=encode_pairs(tok, split.test, split.test_lengths), pad_id=pad_id, bos_id=bos_id,
                         eos_id=eos_id, name=split.name,
                         data_fingerprint=hashlib.sha256(json.dumps([split.train, split.test]).encode()).hexdigest())
