"""The findings' data: the pre-registered file every full run trains on, where anyone can get it, the alternatives.

    full_run_data(data_file=None)   # the data overrides of a full run; DataError (one line) if it cannot run

The pre-registered data is one text file, the head of TinyStories V1's train split, lowercased (Eldan & Li 2023,
CDLA-Sharing-1.0; 4,192,330 bytes, about 5,500 stories). On this project's machines it sits at DATA_FILE, beside
the clone (../shared/data, provenance in ../shared/data/PROVENANCE.md); anywhere else, download the same bytes
from URL (a public GitHub repository, at a fixed commit) and pass `--data-file PATH`: the file is checked by its
sha256, so a run on it is the pre-registered run. `data=tinystories` (conf/data/tinystories.yaml: the hub's
roneneldan/TinyStories through the datasets loader, cased, first 100k stories) is the other documented source:
same sweep, same token budget (train.tokens comes from the finding's YAML), different text.
Not handled: downloading (this module never reaches the network), other files under the same name.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

DATA_FILE = "../shared/data/bench/tinystories_v1_train_head_lowercase.txt"  # relative to the cwd: the repo root
SIZE = 4_192_330
SHA256 = "30c6f2fac206d82e76b80dbbede28f6b5415c8d8571dde6bfd8226ab41744a2c"
URL = ("https://raw.githubusercontent.com/Arnoochka/Transformer-Parallelism/"
       "911b9e732fbe6d228ba0feacbd6735395f0d279e/tinystories.txt")
WHAT = "the head of TinyStories V1's train split, lowercased (4,192,330 bytes)"
# The full runs' data, as the docs' command passes it (the YAMLs keep the embedded corpus so they run anywhere).
DATA_DEFAULT = ["data=text", f"data.paths=[{DATA_FILE}]"]
DATA_HUB = ["data=tinystories"]


class DataError(ValueError):
    """The full run's data cannot be had; the message is one line saying what the file is and how to get it."""


def file_overrides(path: str | Path) -> list[str]:
    """`data=text data.paths=[path]` for a copy of the pre-registered file; DataError unless it is that file."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"--data-file {path}: no such file (the pre-registered data, {WHAT}: {URL})")
    digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.stat().st_size == SIZE else None
    if digest != SHA256:
        raise DataError(f"--data-file {path} is not the pre-registered data ({WHAT}, sha256 {SHA256[:16]}...; "
                        f"get it from {URL}); for other text pass data=text 'data.paths=[{path}]'")
    return ["data=text", f"data.paths=[{path}]"]


def full_run_data(data_file: str | Path | None = None) -> list[str]:
    """The data overrides of a full run without data overrides of the user's: the copy named by --data-file, else
    DATA_FILE; DataError naming the file, where to get it and the alternatives when it is not there."""
    if data_file is not None:
        return file_overrides(data_file)
    if not Path(DATA_FILE).is_file():
        raise DataError(f"the pre-registered data {DATA_FILE} is not here (cwd {Path.cwd()}): it is {WHAT}; "
                        f"download it from {URL} and pass --data-file <that file>, or run on the hub's TinyStories "
                        "with data=tinystories (same sweep and token budget; docs/findings/README.md#data)")
    return list(DATA_DEFAULT)
