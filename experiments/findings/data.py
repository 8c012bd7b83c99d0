"""The findings' data: the pre-registered file every full run trains on, where anyone can get it, the alternatives.

    full_run_data(data_file=None)   # the data overrides of a full run; DataError (one line) if it cannot run
    used = used_data(flat_config)   # what a sweep's runs trained on: source, files and their sha256
    used_text(used)                 # that, as the doc's sentence

The pre-registered data is one text file, the head of TinyStories V1's train split, lowercased (Eldan & Li 2023,
CDLA-Sharing-1.0; 4,192,330 bytes, about 5,500 stories). On this project's machines it sits at DATA_FILE, beside
the clone (../shared/data, provenance in ../shared/data/PROVENANCE.md); anywhere else, download the same bytes
from URL (a public GitHub repository, at a fixed commit) and pass `--data-file PATH`: the file is checked by its
sha256, so a run on it is the pre-registered run. `data=tinystories` (conf/data/tinystories.yaml: the hub's
roneneldan/TinyStories through the datasets loader, cased, first 100k stories) is the other documented source:
same sweep, same token budget (train.tokens comes from the finding's YAML), different text.
`used_data` names the data a sweep actually trained on, from its first run's config (smoke runs included, which
use the embedded corpus unless told otherwise): the source, and for files their path, size and sha256.
Not handled: downloading (this module never reaches the network), other files under the same name, the hub's
revision of a `data=hf` dataset (not recorded by the runner, so not named).
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform
from pathlib import Path
from typing import Any

from tokenizer.corpus import EMBEDDED_NAME, embedded_text

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


def _file_entry(path: str) -> dict[str, Any]:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError:
        return {"path": path, "sha256": None, "bytes": None}
    return {"path": path, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


def _files(patterns: Any) -> list[dict[str, Any]]:
    """One entry per file a data.paths value names (a path, a glob, or a list of them), as the loader expands it."""
    patterns = [patterns] if isinstance(patterns, str) else list(patterns or [])
    paths = [m for pat in patterns for m in (sorted(glob.glob(os.path.expanduser(str(pat)))) or [str(pat)])]
    return [_file_entry(p) for p in paths]


def used_data(cfg: dict[str, Any]) -> dict[str, Any]:
    """What a run with the flat config `cfg` ({"data.source": ..., "data.paths": ...}) trained on: {"source",
    "name", "files": [{"path", "sha256", "bytes"}], ...}; files are hashed now (run this right after the sweep)."""
    src = cfg.get("data.source")
    used: dict[str, Any] = {"source": src, "files": []}
    if src == "embedded":
        text = embedded_text()
        used.update(name=EMBEDDED_NAME, python=platform.python_version(), text_sha256=hashlib.sha256(text.encode()).hexdigest())
    elif src == "text":
        used["files"] = _files(cfg.get("data.paths"))
    elif src == "hf":
        used.update(name=cfg.get("data.name"), split=cfg.get("data.split"), max_documents=cfg.get("data.max_documents"))
    elif src == "tokens":
        used["files"] = [_file_entry(str(p)) for p in (cfg.get("data.train_path"), cfg.get("data.val_path")) if p]
    if src in ("embedded", "text"):
        used["val_fraction"] = cfg.get("data.val_fraction", 0.1)
    return used


def used_text(used: dict[str, Any]) -> str:
    """The doc's sentence for used_data's record."""
    src = used.get("source")
    files = "; ".join(f"`{f['path']}` ({f['bytes']:,} bytes, sha256 `{f['sha256']}`)" if f.get("sha256") else
                      f"`{f['path']}` (not readable when the doc was written: no sha256)" for f in used.get("files", []))
    held = f", last {used.get('val_fraction', 0.1):g} held out" if "val_fraction" in used else ""
    if src == "embedded":
        return (f"the embedded corpus `{used.get('name')}` (Python {used.get('python')}'s help topics, "
                f"`tokenizer/corpus.py`; not a file: sha256 of its text `{used.get('text_sha256')}`){held}")
    if src == "text":
        registered = " (the pre-registered file)" if any(f.get("sha256") == SHA256 for f in used["files"]) else ""
        return f"local text (`data=text`): {files}{registered}{held}"
    if src == "hf":
        return (f"the hub's `{used.get('name')}` (`data=hf`/`tinystories`, the datasets loader), split "
                f"`{used.get('split')}`, {used.get('max_documents') or 'all'} documents at most (no file: the hub "
                "revision is not recorded)")
    if src == "tokens":
        return f"token files (`data=tokens`): {files}"
    return f"`data.source={src}`"
