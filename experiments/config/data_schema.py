"""The `data` node of a run config: one schema per data source, picked by the conf/data/<option>.yaml file.

Each conf/data option names its schema first in its defaults list (`- /schema/data/text@_here_`), so the keys a
source takes are exactly its schema's fields, typed: `data=text data.path=x` is refused with `did you mean
data.paths?`, `data.val_fraction=abc` with `must be a number`. DATA_SCHEMAS maps `data.source` to the class;
`data_config(d)` builds one from a plain dict (the loaders in experiments.data take either).

Defaults are the values a loader assumes when a plain dict leaves a key out (tests and tools call the loaders
with partial dicts); the YAML options set every key they document. The values themselves (a fraction in (0, 1),
a known split or task, lengths min <= max, a path that exists, a reachable dataset) are checked once, by the
loaders' check_source (experiments.data.corpus / pairs), which validate() runs before any data is read.
Not handled: sources added by plugins; a new source needs a class here and a line in DATA_SCHEMAS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments.config.errors import ConfigError
from experiments.config.rules import omegaconf_error


@dataclass
class DataConfig:
    """What every source has: its name and where tokenizers / token arrays are cached."""

    source: str = MISSING  # embedded | text | hf | tokens | seq2seq_pairs | seq2seq_synthetic
    cache_dir: str = "${oc.env:ARCHLAB_CACHE,'~/.cache/archlab'}"  # cached by content hash, reused across runs


@dataclass
class EmbeddedData(DataConfig):
    """data=embedded: Python's help topics (tokenizer.corpus), no download."""

    source: str = "embedded"

    val_fraction: float = 0.1  # share held out for validation
    split_by: str = "documents"  # documents | stream (experiments.data.corpus.split_documents)
    test_fraction: float = 0.0  # share of whole documents held out for test/* (split_by=documents); 0: none
    test_max_tokens: int | None = None  # tokens scored per test set; null: every full window
    extra_eval: dict[str, str] = field(default_factory=dict)  # name -> text file scored at the end: test/<name>/*


@dataclass
class TextData(DataConfig):
    """data=text: local UTF-8 files, one document each."""

    source: str = "text"

    paths: Any = MISSING  # a file or glob pattern, or a list of them
    val_fraction: float = 0.1
    split_by: str = "documents"
    doc_separator: str | None = None  # a line holding exactly this text ends a document; null: a file is one
    test_fraction: float = 0.0
    test_max_tokens: int | None = None
    extra_eval: dict[str, str] = field(default_factory=dict)


@dataclass
class HFData(DataConfig):
    """data=hf (and data=tinystories): a Hugging Face `datasets` dataset by hub name or local path."""

    source: str = "hf"

    name: str = MISSING
    config_name: str | None = None
    split: str = "train"
    val_split: str | None = None  # null: hold out val_fraction of `split`
    text_column: str = "text"
    max_documents: int | None = None
    max_val_documents: int | None = None
    val_fraction: float = 0.1
    split_by: str = "documents"
    test_fraction: float = 0.0  # needs val_split=null (the test documents come from `split`)
    test_max_tokens: int | None = None
    extra_eval: dict[str, str] = field(default_factory=dict)


@dataclass
class TokensData(DataConfig):
    """data=tokens: token files written by `bpe encode` (with their .json sidecars)."""

    source: str = "tokens"

    train_path: str | None = MISSING  # required; null is refused by the loader with its own advice
    val_path: str | None = None  # null: hold out val_fraction of train_path's ids
    val_fraction: float = 0.1
    test_max_tokens: int | None = None  # no test split (token ids have no documents); extra_eval only
    extra_eval: dict[str, str] = field(default_factory=dict)


@dataclass
class Seq2SeqPairsData(DataConfig):
    """data=seq2seq_pairs: (source, target) pairs from a .tsv / .jsonl / datasets name."""

    source: str = "seq2seq_pairs"

    path: str | None = MISSING
    src_column: str = "src"
    tgt_column: str = "tgt"
    split: str = "train"
    config_name: str | None = None
    max_pairs: int | None = None
    val_fraction: float = 0.1


@dataclass
class Seq2SeqSyntheticData(DataConfig):
    """data=seq2seq_synthetic: copy / reverse / sort / addition pairs made on the fly."""

    source: str = "seq2seq_synthetic"

    task: str = MISSING  # copy | reverse | sort | addition (experiments.data.seq2seq_tasks)
    train_lengths: list[int] = MISSING  # [min, max], inclusive
    test_lengths: list[int] = MISSING
    n_train: int = MISSING
    n_test_per_length: int = MISSING
    seed: int = 0  # the data's own seed (every run of a sweep sees the same pairs)


# data.source -> its schema; the key is also the ConfigStore name under schema/data
DATA_SCHEMAS: dict[str, type[DataConfig]] = {
    "embedded": EmbeddedData,
    "text": TextData,
    "hf": HFData,
    "tokens": TokensData,
    "seq2seq_pairs": Seq2SeqPairsData,
    "seq2seq_synthetic": Seq2SeqSyntheticData,
}


def data_config(cfg: DataConfig | Mapping[str, Any], schema: type[DataConfig] | None = None) -> DataConfig:
    """cfg as its typed schema (DATA_SCHEMAS[cfg["source"]], or `schema`): a DataConfig is returned as it is; a
    plain dict is converted (missing keys take the defaults above), its mistakes one ConfigError naming the key."""
    if isinstance(cfg, DataConfig):
        return cfg
    cls = schema or DATA_SCHEMAS.get(cfg.get("source"))  # type: ignore[arg-type]
    if cls is None:
        raise ConfigError(f"unknown data.source {cfg.get('source')!r}; choose from {sorted(DATA_SCHEMAS)}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), dict(cfg)))  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise omegaconf_error(e, prefix="data") from None
