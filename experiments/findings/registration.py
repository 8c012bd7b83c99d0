"""A finding's registration: the text and sha256 of its module, of its sweep YAML and of the extra files the module
lists, fixed on a date and committed as experiments/findings/registered/<name>.json; and the check of the files as
they are now against it.

    register("rope_vs_learned", note="...")   # writes registered/rope_vs_learned.json; RegistrationError if present
    c = check("rope_vs_learned")              # SetupCheck: c.status "unchanged" | "changed" | "unregistered"
    c.diff()                                  # unified diff of the registered text against the files now
    SetupCheck.from_meta(c.to_meta())         # as recorded in a sweep's finding.json
    register("swiglu_vs_gelu_v2", extra=["conf/finding/ffn/*.yaml"])   # the module's EXTRA_FILES, hashed too

The files are the claim module `experiments/findings/claims/<name>.py`, `conf/experiment/finding_<name>.yaml` and the
module's EXTRA_FILES (repo-relative paths or glob patterns, expanded sorted: the config-group options its YAML
selects, a preset's file, measurement code), named relative to ROOT (the repo), so the record reads the same in every
clone; in an installed package conf/ is `experiments/conf/` (as experiments.config.compose.conf_dir finds it), and
the records are found only if the build ships `experiments/findings/registered/*.json` as package data. The sha256 is
of the text (newlines read as \n). A registration is never overwritten: a changed setup is a new version of the
finding (registry.next_version), with its own module, YAML and registration.
Moved claim modules: the records of 2026-11-26 name the claim modules where they were then,
experiments/findings/<x>.py (the "module" role, and extra files such as experiments/findings/protocol_v2.py); since
they moved to claims/ byte for byte, such a path is read at claims/<x>.py (`moved`), so the same text is still
"unchanged", a changed one is "changed" with its diff (registered path -> path now), and a file at neither place is
missing. A new registration records the paths where the files are.
Record (JSON): {"name", "registered": "YYYY-MM-DD", "note", "files": {"module" | "sweep" | "extra:<path>":
{"path", "sha256", "text"}}}. An extra file is checked like the other two: one that differs, is missing, or is
new (a pattern that matches a file it did not match at registration) makes the setup "changed", with its diff.
Not handled: what a change means for a run (cli.py refuses a full run, a smoke run reports it), rendering (doc.py),
anything not listed (evidence.py, the runner, the data loaders): only the module, the YAML and EXTRA_FILES are fixed.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tokenizer.outputs import atomic_write

ROOT = Path(__file__).resolve().parents[2]  # the repo: every path below is relative to it
REGISTERED = Path("experiments") / "findings" / "registered"
FINDINGS_DIR = Path("experiments") / "findings"
CLAIMS = FINDINGS_DIR / "claims"  # the claim modules (claims/__init__.py)


class RegistrationError(ValueError):
    """A registration that cannot be written or read; the message is one line."""


EXTRA = "extra:"  # the role of an extra file: "extra:<its path>"


def setup_paths(name: str, extra: Sequence[str] = ()) -> dict[str, Path]:
    """The files a registration fixes, relative to ROOT: {"module": ..., "sweep": ..., "extra:<path>": ...}; the
    `extra` patterns expanded (sorted, each pattern's matches in turn; a pattern that matches nothing is kept as a
    path, so that it reads as missing)."""
    paths = {"module": CLAIMS / f"{name}.py", "sweep": Path("conf") / "experiment" / f"finding_{name}.yaml"}
    for pattern in extra:
        for path in _expand(pattern):
            path = moved(path)
            paths.setdefault(f"{EXTRA}{path.as_posix()}", path)
    return paths


def moved(path: str | Path) -> Path:
    """Where a file registered at `path` is now: a claim module named at its path before claims/ existed,
    experiments/findings/<x>.py, is claims/<x>.py when that file is there (the module the old import name resolves
    to, experiments/findings/__init__.py); any other path is itself."""
    path = Path(path)
    if path.parent == FINDINGS_DIR and path.suffix == ".py" and _located(CLAIMS / path.name).is_file():
        return CLAIMS / path.name
    return path


def _now_role(role: str, reg: dict[str, Any]) -> str:
    """A registered role as check() names it today: an extra file's role follows its file to where it is now."""
    return f"{EXTRA}{moved(Path(reg['path'])).as_posix()}" if role.startswith(EXTRA) else role


def _expand(pattern: str) -> list[Path]:
    """A repo-relative pattern's matches, relative to ROOT (conf/ found where _located finds it)."""
    if not glob.has_magic(pattern):
        return [Path(pattern)]
    where = _located(Path(pattern))
    base = where.parents[len(Path(pattern).parts) - 1]  # the dir `pattern` is relative to
    found = sorted(Path(m).relative_to(base) for m in glob.glob(str(where)) if Path(m).is_file())
    return found or [Path(pattern)]


def record_path(name: str) -> Path:
    return ROOT / REGISTERED / f"{name}.json"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _located(path: Path) -> Path:
    """Where a file named relative to the repo is: ROOT/path, but conf/... inside an installed package's experiments/."""
    if path.parts[0] == "conf" and (ROOT / "experiments" / "conf" / "train.yaml").is_file():
        return ROOT / "experiments" / path
    return ROOT / path


def _read(path: Path) -> str | None:
    try:
        return _located(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def load(name: str) -> dict[str, Any] | None:
    """The registration record of `name`, or None when there is none; RegistrationError when it is unreadable."""
    path = record_path(name)
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
        assert {"registered", "files"} <= set(record) and {"module", "sweep"} <= set(record["files"])
        assert all(role in ("module", "sweep") or role.startswith(EXTRA) for role in record["files"])
        assert isinstance(record.get("tree", {}), dict)
        return record
    except (OSError, ValueError, AssertionError, TypeError):
        raise RegistrationError(f"{path.relative_to(ROOT)} is not a readable registration record") from None


def register(name: str, note: str = "", date: str | None = None, extra: Sequence[str] = ()) -> Path:
    """Write the registration of `name` (its module, sweep YAML and the `extra` files as they are now, today's
    date); RegistrationError when it is already registered or a file is missing. Returns the record's path.
    The record also gets "tree": {"sha256", "files": {path: sha256}} (provenance.tree_record: every git-tracked file
    under arch/, tokenizer/, experiments/, conf/ now), so that a run's doc can list what changed outside the
    finding's own files since; the field is optional (records made before it existed lack it; load() accepts both)."""
    if (old := load(name)) is not None:
        raise RegistrationError(f"{name} is already registered ({old['registered']}, "
                                f"{record_path(name).relative_to(ROOT)})")
    files = {}
    for role, path in setup_paths(name, extra).items():
        text = _read(path)
        if text is None:
            raise RegistrationError(f"cannot register {name}: {path} is missing")
        files[role] = {"path": str(path), "sha256": sha256(text), "text": text}
    from experiments.findings.provenance import tree_record  # the code outside the finding's files, too

    record = {"name": name, "registered": date or time.strftime("%Y-%m-%d"), "note": note, "files": files,
              "tree": tree_record(ROOT)}
    path = record_path(name)
    atomic_write(path, lambda f: f.write(json.dumps(record, indent=2, ensure_ascii=False) + "\n"), binary=False)
    return path


@dataclass(frozen=True)
class FileCheck:
    role: str  # "module" | "sweep" | "extra:<path>"
    path: str
    sha256: str | None  # now; None: the file is missing
    registered_sha256: str | None  # None: not registered
    diff: str = ""  # unified diff, registered text -> text now; "" when equal or not registered

    @property
    def unchanged(self) -> bool:
        return self.sha256 is not None and self.sha256 == self.registered_sha256


@dataclass(frozen=True)
class SetupCheck:
    """A finding's files against its registration, at one moment (run time, or when a doc is written)."""

    name: str
    registered: str | None  # the registration date; None: not registered
    note: str
    files: tuple[FileCheck, ...]

    @property
    def status(self) -> str:
        if self.registered is None:
            return "unregistered"
        return "unchanged" if all(f.unchanged for f in self.files) else "changed"

    def diff(self) -> str:
        return "".join(f.diff for f in self.files)

    def changed_paths(self) -> list[str]:
        return [f.path for f in self.files if not f.unchanged]

    def to_meta(self) -> dict[str, Any]:
        return {"name": self.name, "registered": self.registered, "note": self.note, "status": self.status,
                "files": [vars(f) for f in self.files]}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> SetupCheck:
        return cls(meta["name"], meta.get("registered"), meta.get("note", ""),
                   tuple(FileCheck(**f) for f in meta.get("files", [])))


def check(name: str, extra: Sequence[str] = ()) -> SetupCheck:
    """The files of `name` now (its module, sweep YAML and `extra` files, plus every file its registration
    recorded) against its registration (RegistrationError when the record is unreadable)."""
    record = load(name)
    registered = {_now_role(role, reg): reg for role, reg in (record or {}).get("files", {}).items()}
    paths = setup_paths(name, extra)
    for role, reg in registered.items():  # a registered extra file the module no longer lists is checked too
        paths.setdefault(role, moved(Path(reg["path"])))
    files = []
    for role, path in paths.items():
        text = _read(path)
        reg = registered.get(role)
        was = reg["path"] if reg is not None else path  # a moved file's diff names both paths
        diff = ""
        if reg is not None and text is not None and sha256(text) != reg["sha256"]:
            diff = "".join(difflib.unified_diff(reg["text"].splitlines(keepends=True), text.splitlines(keepends=True),
                                                f"{was} (registered)", f"{path} (now)"))
        elif reg is not None and text is None:
            diff = f"--- {was} (registered)\n+++ {path} (now)\n(the file is missing)\n"
        elif reg is None and record is not None:
            diff = f"--- {path} (not registered)\n+++ {path} (now)\n(a file the registration did not record)\n"
        files.append(FileCheck(role, str(path), None if text is None else sha256(text),
                               None if reg is None else reg["sha256"], diff))
    return SetupCheck(name, None if record is None else record["registered"], (record or {}).get("note", ""),
                      tuple(files))
