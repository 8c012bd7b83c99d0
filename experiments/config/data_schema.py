"""The `data` node of a run config: one schema per data source, picked by the conf/data/<option>.yaml file.

Each conf/data option names its schema first in its defaults list (`- /schema/data/text@_here_`), so the keys a
source takes are exactly its schema's fields, typed: `data=text data.path=x` is refused with `did you mean
data.paths?`, `data.val_fraction=abc` with `must be a number`. DATA_SCHEMAS maps `data.source` to the class
(`data_config(d)` builds one from a plain dict, as config.yaml holds it).

Defaults are the values a loader assumes when a plain dict leaves a key out (tests and tools call the loaders
with partial dicts); the YAML options set every key they document. Value checks that need the files, the hub or
the other keys (a path that exists, a reachable dataset, min <= max lengths) stay with the loaders
(experiments.data.corpus / pairs check_source), which run before any data is read.
Not handled: sources added by plugins; a new source needs a class here and a line in DATA_SCHEMAS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from experiments.config.rules import FRACTION, POS_INT, POS_INT_OR_NULL, STR, Checked, Rule, choice, ruled

SPLITS = ("documents", "stream")  # how a corpus is split into train / val (experiments.data.corpus.split_documents)
SYNTHETIC_TASKS = ("copy", "reverse", "sort", "addition")  # experiments.data.seq2seq_tasks.TASKS' keys
LENGTHS = Rule("ints", lo=1, length=2)  # [min, max] lengths, inclusive


@dataclass
class DataConfig(Checked):
    """What every source has: its name and where tokenizers / token arrays are cached."""

    source: str = MISSING  # embedded | text | hf | tokens | seq2seq_pairs | seq2seq_synthetic
    cache_dir: str = "${oc.env:ARCHLAB_CACHE,'~/.cache/archlab'}"  # cached by content hash, reused across runs


@dataclass
class EmbeddedData(DataConfig):
    """data=embedded: Python's help topics (tokenizer.corpus), no download."""

    val_fraction: float = ruled(0.1, FRACTION)  # share held out for validation
    split_by: str = ruled("documents", choice(SPLITS))


@dataclass
class TextData(DataConfig):
    """data=text: local UTF-8 files, one document each."""

    paths: Any = ruled(MISSING, Rule("paths"))  # a file or glob pattern, or a list of them
    val_fraction: float = ruled(0.1, FRACTION)
    split_by: str = ruled("documents", choice(SPLITS))


@dataclass
class HFData(DataConfig):
    """data=hf (and data=tinystories): a Hugging Face `datasets` dataset by hub name or local path."""

    name: str = ruled(MISSING, STR)
    config_name: str | None = None
    split: str = ruled("train", STR)
    val_split: str | None = None  # null: hold out val_fraction of `split`
    text_column: str = ruled("text", STR)
    max_documents: int | None = ruled(None, POS_INT_OR_NULL)
    max_val_documents: int | None = ruled(None, POS_INT_OR_NULL)
    val_fraction: float = ruled(0.1, FRACTION)
    split_by: str = ruled("documents", choice(SPLITS))


@dataclass
class TokensData(DataConfig):
    """data=tokens: token files written by `bpe encode` (with their .json sidecars)."""

    train_path: str | None = MISSING  # required; null is refused by the loader with its own advice
    val_path: str | None = None  # null: hold out val_fraction of train_path's ids
    val_fraction: float = ruled(0.1, FRACTION)


@dataclass
class Seq2SeqPairsData(DataConfig):
    """data=seq2seq_pairs: (source, target) pairs from a .tsv / .jsonl / datasets name."""

    path: str | None = MISSING
    src_column: str = ruled("src", STR)
    tgt_column: str = ruled("tgt", STR)
    split: str = ruled("train", STR)
    config_name: str | None = None
    max_pairs: int | None = ruled(None, POS_INT_OR_NULL)
    val_fraction: float = ruled(0.1, FRACTION)


@dataclass
class Seq2SeqSyntheticData(DataConfig):
    """data=seq2seq_synthetic: copy / reverse / sort / addition pairs made on the fly."""

    task: str = ruled(MISSING, choice(SYNTHETIC_TASKS))
    train_lengths: list[int] = ruled(MISSING, LENGTHS)
    test_lengths: list[int] = ruled(MISSING, LENGTHS)
    n_train: int = ruled(MISSING, POS_INT)
    n_test_per_length: int = ruled(MISSING, POS_INT)
    seed: int = ruled(0, Rule("int", lo=0))  # the data's own seed (every run of a sweep sees the same pairs)


# data.source -> its schema; the key is also the ConfigStore name under schema/data
DATA_SCHEMAS: dict[str, type[DataConfig]] = {
    "embedded": EmbeddedData,
    "text": TextData,
    "hf": HFData,
    "tokens": TokensData,
    "seq2seq_pairs": Seq2SeqPairsData,
    "seq2seq_synthetic": Seq2SeqSyntheticData,
}
