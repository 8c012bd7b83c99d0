"""The findings' data: the pre-registered file every full run trains on, where anyone can get it, the alternatives.

    full_run_data(data_file=None)   # the data overrides of a full run; DataError (one line) if it cannot run
    yaml_data(ELTEC, data_file=None)   # the same for data a finding's YAML selects (finding/data=eltec)
    run_data("eltec", user_overrides, data_file, smoke)   # a run's data overrides, and whether the smoke picks one
    used = used_data(flat_config)   # what a sweep's runs trained on: source, files and their sha256
    used_text(used)                 # that, as the doc's sentence

The pre-registered data is one text file, the head of TinyStories V1's train split, lowercased (Eldan & Li 2023,
CDLA-Sharing-1.0; 4,192,330 bytes, about 5,500 stories). On this project's machines it sits at DATA_FILE, beside
the clone (../shared/data, provenance in ../shared/data/PROVENANCE.md); anywhere else, download the same bytes
from URL (a public GitHub repository, at a fixed commit) and pass `--data-file PATH`: the file is checked by its
sha256, so a run on it is the pre-registered run. `data=tinystories` (conf/data/tinystories.yaml: the hub's
roneneldan/TinyStories through the datasets loader, cased, first 100k stories) is the other documented source:
same sweep, same token budget (train.tokens comes from the finding's YAML), different text.
The v2 findings (PLAN_v2.md) train on ELTEC, 99 English novels (../shared/data/bench/eltec_eng_novels.txt), selected
by their YAML (`finding/data: eltec`, conf/finding/data/eltec.yaml: data=text on that file, 1% held out as the
stream's tail); The v3 findings (PLAN_v3.md) read the same file as one document per novel, with whole novels held out
(`finding/data: eltec_v3`) and WikiText-2's test split as a second corpus; `finding/data=embedded` is the smoke's corpus and `finding/data=tinystories` the hub's alternative.
No public copy of ELTEC's exact bytes exists (it was derived from the ELTeC-eng TEI files, ../shared/data/
PROVENANCE.md), so elsewhere a full run takes a copy with `--data-file` (checked by its sha256) or other data.
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
import re
from dataclasses import dataclass
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



@dataclass(frozen=True)
class DataFile:
    """A pre-registered data file its finding's YAML selects (`finding/data: <key>`, conf/finding/data/<key>.yaml)."""

    key: str
    path: str  # relative to the cwd (the repo root), as the option names it
    size: int
    sha256: str
    what: str
    where: str  # where its bytes come from, and whether anyone can download them


ELTEC = DataFile(
    "eltec", "../shared/data/bench/eltec_eng_novels.txt", 64_039_738,
    "8a481cb1350ddb082135810de064f9648ae54488324f44f447bdebda373d9ffa",
    "99 English novels 1840–1920 (ELTeC-eng, public domain texts; 64,039,738 bytes, the novels joined by lines "
    "holding `<|endoftext|>`)",
    "derived from COST-ELTeC/ELTeC-eng at commit 3db3b67 (level1 TEI files, markup CC BY 4.0) as "
    "../shared/data/PROVENANCE.md describes; no public copy of these exact bytes exists")
ELTEC_V3 = DataFile(
    "eltec_v3", ELTEC.path, ELTEC.size, ELTEC.sha256,
    ELTEC.what + ", read as one document per novel: 4 novels held out for validation and 4 for test, the other 91 "
    "trained on; WikiText-2's raw test split (../shared/data/bench/wikitext2_raw_test.txt, 1,290,547 bytes, sha256 "
    "4f3e427e4aff23acff917a8a51aeae21bf12832256e26914c8fc250dcef4103c; the hub's `wikitext`, `wikitext-2-raw-v1`, "
    "split test) scored as a second corpus",
    ELTEC.where)
DATA_FILES = {"eltec": ELTEC, "eltec_v3": ELTEC_V3}  # by Finding.data; "tinystories" (the v1 default) is the command's own DATA_FILE
HUB_OPTION = ["finding/data=tinystories"]  # the hub alternative of a finding whose YAML selects its data
DATA_OVERRIDE = re.compile(r"^[+~]*data(=|\.|/)")  # data=..., data.paths=..., +data.x=...
DATA_GROUP = re.compile(r"^[+~]*data(=|/)")  # a choice of the data group: data=text, data/x=...
FINDING_DATA = re.compile(r"^[+~]*(data\.|finding/data=)")  # data a finding whose YAML selects its data is given


class DataError(ValueError):
    """The full run's data cannot be had; the message is one line saying what the file is and how to get it."""


def _check_copy(path: str | Path, size: int, sha256: str, what: str, get: str, label: str = "--data-file") -> None:
    """DataError (one line, naming the file as `label` PATH) unless `path` is a file of `size` bytes with `sha256`."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{label} {path}: no such file (the pre-registered data, {what}: {get})")
    digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.stat().st_size == size else None
    if digest != sha256:
        raise DataError(f"{label} {path} is not the pre-registered data ({what}, sha256 {sha256[:16]}...; "
                        f"{get}); for other text pass data=text 'data.paths=[{path}]'")


def file_overrides(path: str | Path) -> list[str]:
    """`data=text data.paths=[path]` for a copy of the pre-registered file; DataError unless it is that file."""
    _check_copy(path, SIZE, SHA256, WHAT, f"get it from {URL}")
    return ["data=text", f"data.paths=[{path}]"]


def yaml_data(data: DataFile, data_file: str | Path | None = None) -> list[str]:
    """The overrides of a full run of a finding whose YAML selects `data`: none when data.path is here (checked by
    its sha256), `data.paths=[<copy>]` for a checked --data-file copy; DataError (one line) otherwise."""
    if data_file is not None:
        _check_copy(data_file, data.size, data.sha256, data.what, data.where)
        return [f"data.paths=[{data_file}]"]
    if not Path(data.path).is_file():
        raise DataError(f"the pre-registered data {data.path} is not here (cwd {Path.cwd()}): it is {data.what}, "
                        f"{data.where}; pass --data-file <a copy>, or run on the hub's TinyStories with "
                        f"{HUB_OPTION[0]} (same sweep and token budgets; docs/findings/README.md#data)")
    _check_copy(data.path, data.size, data.sha256, data.what, data.where, label="the data file")
    return []


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


def run_data(finding_data: str, user: list[str], data_file: str | Path | None, smoke: bool) -> tuple[list[str], bool]:
    """(the data overrides the findings command adds, whether a smoke run should pick the embedded corpus) for a
    finding whose pre-registered data is `finding_data` (a DATA_FILES key: its YAML selects it; else the command
    passes DATA_FILE) given the user's overrides and --data-file. DataError (one line) for data it cannot run on."""
    if finding_data not in DATA_FILES:  # the v1 findings: the YAML keeps the embedded corpus
        given = any(DATA_OVERRIDE.match(o) for o in user)
        if given and data_file is not None:
            raise DataError("--data-file and data overrides exclude each other (--data-file is data=text on that file)")
        return (full_run_data(data_file) if data_file is not None or (not smoke and not given) else []), False
    if group := next((o for o in user if DATA_GROUP.match(o)), None):
        raise DataError(f"{group}: this finding's YAML selects its data (finding/data={finding_data}); pick another "
                        "with finding/data=embedded or finding/data=tinystories, or other text with "
                        "'data.paths=[FILE]'")
    given = any(FINDING_DATA.match(o) for o in user)
    if given and data_file is not None:
        raise DataError("--data-file and data overrides exclude each other (--data-file is data.paths=[that file])")
    if data_file is not None or (not smoke and not given):
        return yaml_data(DATA_FILES[finding_data], data_file), False
    return [], smoke and not given


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
        known = {SHA256, *(d.sha256 for d in DATA_FILES.values())}
        registered = " (the pre-registered file)" if any(f.get("sha256") in known for f in used["files"]) else ""
        return f"local text (`data=text`): {files}{registered}{held}"
    if src == "hf":
        return (f"the hub's `{used.get('name')}` (`data=hf`/`tinystories`, the datasets loader), split "
                f"`{used.get('split')}`, {used.get('max_documents') or 'all'} documents at most (no file: the hub "
                "revision is not recorded)")
    if src == "tokens":
        return f"token files (`data=tokens`): {files}"
    return f"`data.source={src}`"
