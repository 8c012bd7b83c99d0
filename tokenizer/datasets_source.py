"""The one loader of Hugging Face `datasets` text: `bpe train --dataset` and the runner's `data=hf` source use it.

A NAME is, in this order:
  * a saved dataset dir (`Dataset.save_to_disk` / `DatasetDict.save_to_disk`: holds dataset_info.json or
    dataset_dict.json) -> `datasets.load_from_disk`; a DatasetDict is indexed by `split`;
  * a local data file, .txt/.json/.jsonl/.csv/.parquet -> the matching `datasets` builder (`text`, `json`, ...);
  * a local dir of such data files (all with one suffix) -> the same builder over all of them, sorted;
  * anything else that does not exist locally -> a hub name (`datasets.load_dataset(name, config, split=...)`).

    check_dataset("data/docs.jsonl")                 # fast, reads no rows; raises DatasetError
    for text in load_texts("data/saved", column="text", limit=100): ...
    for src, tgt in load_rows("pairs.jsonl", columns=("src", "tgt")): ...     # several columns (seq2seq)

Handled: a missing column (the message lists the columns), a column that is not text (int, list, ... ->
refused up front from the features when the dataset has them, else at the first non-str value while
streaming), None values (SKIPPED, neither counted nor yielded), a hub name while HF_HUB_OFFLINE /
HF_DATASETS_OFFLINE is set or the hub is unreachable (`check_dataset` fails fast, within `timeout` seconds).
Every failure is a `DatasetError` whose one-line message names the user's name/path and says what to do.
Not handled: several datasets at once, data_dir / revision / other `load_dataset` options beyond `config`,
mixed-suffix data dirs.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

_OFFLINE_VALUES = ("1", "true", "yes", "on")
DATA_FILE_BUILDERS = {".txt": "text", ".json": "json", ".jsonl": "json", ".csv": "csv", ".parquet": "parquet"}


class DatasetError(ValueError):
    """A user error loading a dataset; the message is one line naming the user's name/path and what to do."""


def offline() -> bool:
    """HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set to a true value."""
    return any(os.environ.get(k, "").lower() in _OFFLINE_VALUES for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_reachable(timeout: float = 3.0) -> bool:
    """A TCP connect to the Hugging Face hub within `timeout` seconds (HF_ENDPOINT respected)."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _hub_help(name: str, why: str) -> str:
    return (
        f"dataset {name!r} is not a local path and the Hugging Face hub is {why}; use a local dataset instead "
        f"(a save_to_disk folder, or a file/folder of {'/'.join(sorted(DATA_FILE_BUILDERS))}), or download it "
        f"once with network access and save it locally (datasets.load_dataset(...).save_to_disk(DIR), then pass DIR)"
    )


def _one_line(e: BaseException) -> str:
    return " ".join((str(e) or type(e).__name__).split())


def _kind(name: str) -> str:
    """'saved' | 'file' | 'files' | 'hub'; raises DatasetError for a local path that cannot be a dataset."""
    path = Path(os.path.expanduser(name))
    if path.is_dir():
        if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists():
            return "saved"
        if _data_files(path):
            return "files"
        raise DatasetError(
            f"{name} is a directory but neither a saved dataset (no dataset_info.json / dataset_dict.json) nor a "
            f"folder of {'/'.join(sorted(DATA_FILE_BUILDERS))} files"
        )
    if path.is_file():
        if path.suffix.lower() not in DATA_FILE_BUILDERS:
            raise DatasetError(f"cannot tell the format of {name}; use a file ending in one of {sorted(DATA_FILE_BUILDERS)}")
        if not os.access(path, os.R_OK):
            raise DatasetError(f"cannot read {name}: permission denied")
        return "file"
    if path.exists():
        raise DatasetError(f"{name} is neither a file nor a directory")
    if name.startswith(("/", "./", "../", "~")) or name.endswith(tuple(DATA_FILE_BUILDERS)):
        raise DatasetError(f"no such dataset file or directory: {name}")
    return "hub"


def _data_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in DATA_FILE_BUILDERS)


def check_dataset(name: str, split: str = "train") -> None:
    """Fast checks that read no rows: a local path is a dataset kind we load; a hub name needs the hub.

    A hub name while offline (or with the hub unreachable) raises DatasetError: we fail fast rather than let
    `datasets` retry for minutes. (With the offline flags set, only a cached copy could work; we do not probe the
    cache, so pass the local path of a saved copy instead.)
    """
    if _kind(name) != "hub":
        return
    if offline():
        raise DatasetError(_hub_help(name, "off (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set)"))
    if not hub_reachable():
        raise DatasetError(_hub_help(name, "unreachable (no network?)"))


def _open(name: str, split: str, config: str | None, streaming: bool):
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"loading dataset {name!r} needs the `datasets` package (pip install datasets)") from None
    kind = _kind(name)
    path = Path(os.path.expanduser(name))
    if kind == "hub":
        check_dataset(name, split)
    try:
        if kind == "saved":
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise DatasetError(f"dataset {name!r} has no split {split!r}; splits: {sorted(ds)} (pass one of them)")
                ds = ds[split]
            return ds
        if kind in ("file", "files"):
            files = [path] if kind == "file" else _data_files(path)
            suffixes = {DATA_FILE_BUILDERS[f.suffix.lower()] for f in files}
            if len(suffixes) != 1:
                raise DatasetError(f"{name} mixes data file formats ({sorted(suffixes)}); keep one format per folder")
            return datasets.load_dataset(suffixes.pop(), data_files={split: [str(f) for f in files]}, split=split, streaming=streaming)
        return datasets.load_dataset(name, config, split=split, streaming=streaming)
    except DatasetError:
        raise
    except (ConnectionError, TimeoutError) as e:
        raise DatasetError(_hub_help(name, f"not usable ({_one_line(e)})")) from None
    except Exception as e:  # datasets raises many types (DatasetNotFoundError, ArrowInvalid, ValueError, ...)
        if kind == "hub" and (offline() or "offline" in str(e).lower() or "connect" in str(e).lower()):
            raise DatasetError(_hub_help(name, f"not usable ({_one_line(e)})")) from None
        raise DatasetError(f"cannot load dataset {name!r}: {_one_line(e)}") from None


def _not_text(name: str, column: str, held: str) -> DatasetError:
    return DatasetError(f"dataset {name!r} column {column!r} holds {held}, not text; pass --text-column (data.text_column) naming a text column")


def _check_features(ds, name: str, column: str) -> None:
    columns = getattr(ds, "column_names", None)
    if columns is not None and column not in columns:
        raise DatasetError(f"dataset {name!r} has no column {column!r}; columns: {list(columns)}")
    features = getattr(ds, "features", None)
    if not features or column not in features:
        return
    feature = features[column]
    dtype = getattr(feature, "dtype", None)
    if type(feature).__name__ != "Value":  # Sequence, List, ClassLabel, Image, ...
        held = f"{type(feature).__name__.lower()}" + (f" of {dtype}" if dtype and dtype != "list" else "")
        raise _not_text(name, column, held)
    if dtype not in ("string", "large_string"):
        raise _not_text(name, column, str(dtype))


def load_texts(
    name: str,
    *,
    column: str = "text",
    split: str = "train",
    limit: int | None = None,
    streaming: bool = True,
    config: str | None = None,
) -> Iterator[str]:
    """The str values of one column, in order; None values skipped; at most `limit` rows read (None: all).

    Opening the dataset and checking the column happen HERE (eagerly), so errors surface before iteration.
    `streaming` applies to data files and hub names (a saved dataset dir is memory-mapped either way).
    """
    rows = load_rows(name, columns=(column,), split=split, limit=limit, streaming=streaming, config=config)
    return (values[0] for values in rows)


def load_rows(
    name: str,
    *,
    columns: tuple[str, ...],
    split: str = "train",
    limit: int | None = None,
    streaming: bool = True,
    config: str | None = None,
) -> Iterator[tuple[str, ...]]:
    """Tuples of the str values of `columns` (e.g. a seq2seq source and target), in order; a row with a None in
    any of them is skipped; every column must hold text (checked like load_texts)."""
    if limit is not None and limit < 0:
        raise DatasetError(f"limit must be >= 0, got {limit}")
    ds = _open(name, split, config, streaming)
    for column in columns:
        _check_features(ds, name, column)
    return _values(ds, name, columns, limit)


def _values(ds, name: str, columns: tuple[str, ...], limit: int | None) -> Iterator[tuple[str, ...]]:
    if limit == 0:
        return
    try:
        for i, row in enumerate(ds):
            if limit is not None and i >= limit:
                return
            values = []
            for column in columns:
                if column not in row:
                    raise DatasetError(f"dataset {name!r} has no column {column!r}; columns: {list(row)}")
                value = row[column]
                if value is not None and not isinstance(value, str):
                    raise _not_text(name, column, type(value).__name__)
                values.append(value)
            if None not in values:
                yield tuple(values)
    except DatasetError:
        raise
    except (ConnectionError, TimeoutError) as e:
        raise DatasetError(_hub_help(name, f"not usable ({_one_line(e)})")) from None
    except Exception as e:  # a malformed row in a json/csv file surfaces while streaming
        raise DatasetError(f"cannot read dataset {name!r}: {_one_line(e)}") from None
