"""The report's out dir: checked before any run is read, and a manifest so a rebuild deletes only its own files.

    <out>/report.html, report.md, comparison.json, curve_*.png, analysis_*.png, ...   what the report wrote
    <out>/report_manifest.json   {"written_by": "experiments.compare", "files": ["report.html", ...]}

`ReportDir.check(names)` (before any run is read) refuses, as one-line RunsError: an out path that is a file; a
dir where writing fails, or one that cannot be created, whatever the OSError (no permission, a read-only file
system, no space left, a parent that is a file, /proc where not even root can create files: it tries, in a scratch
dir it deletes, rather than asking os.access, which says yes to root); a corrupt manifest; and any of `names`
(every file this build may write) that already exists there but is not listed in the previous manifest (the
user's own file, or a report from before manifests): it is never overwritten. An OSError while the report is
written (the disk fills up) is a one-line RunsError too (`writing`).
`begin` lists the previous files plus `names` in the manifest before anything is written (so a build killed
half-way still owns what it wrote); `finish(written)` deletes the previous build's files that this build did not
rewrite, then lists exactly `written`. Only plain file names of the report's own forms (OWN_NAME) are ever
deleted, whatever a manifest says; anything else in the dir keeps its bytes.
Not handled: two builds writing one out dir at the same time.
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from experiments.compare.runs import RunsError
from experiments.rundir.layout import atomic_write_json
from tokenizer.cli_args import UsageError, check_writable

MANIFEST = "report_manifest.json"
WRITTEN_BY = "experiments.compare"
COMPARISON = "comparison.json"  # comparison.py's document
REPORT_FILES = ("report.html", "report.md", COMPARISON)  # written by every build
# The only names a manifest entry may have to be deleted on a rebuild.
OWN_NAME = re.compile(r"report\.(html|md)|comparison\.json|(curve|final)_[A-Za-z0-9_]+\.png|extrapolation\.png|"
                      r"exact_match_vs_length\.png|grad_norm_per_layer\.png|aspect_ratio\.png|analysis_[a-z_]+\.png|"
                      r"basin\.png|coord\.png")


def try_writing(d: Path, what: str) -> None:
    """tokenizer.cli_args.check_writable, failing as RunsError. Example: try_writing(Path("/proc"), "--out /proc is
    not writable") -> RunsError("--out /proc is not writable: No such file or directory")"""
    try:
        check_writable(d, what)
    except UsageError as e:
        raise RunsError(str(e)) from None


def is_own_name(name: object) -> bool:
    """A plain file name of a form the report writes. Example: 'curve_val_loss.png' -> True, '../x.png' -> False"""
    return isinstance(name, str) and OWN_NAME.fullmatch(name) is not None


class ReportDir:
    """The out dir of one report build; `what` names it in messages ('--out x' or 'report dir x')."""

    def __init__(self, path: str | os.PathLike, what: str | None = None) -> None:
        self.path = Path(path)
        self.what = what or f"report dir {self.path}"
        self.previous: list[str] = []  # files the previous build wrote (from its manifest)

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    def read_manifest(self) -> list[str]:
        """The previous build's files ([] without a manifest); RunsError for a manifest that is not one."""
        if not os.path.lexists(self.manifest_path):
            return []
        try:
            data = json.loads(self.manifest_path.read_text())
        except (OSError, ValueError) as e:
            raise RunsError(f"{self.what}: cannot read {MANIFEST} ({type(e).__name__}); "
                            "delete it or choose another --out") from None
        if not isinstance(data, dict) or data.get("written_by") != WRITTEN_BY or not isinstance(data.get("files"), list):
            raise RunsError(f"{self.what}: {MANIFEST} was not written by compare; move it or choose another --out")
        return [f for f in data["files"] if is_own_name(f)]

    def check(self, names: Iterable[str]) -> None:
        """Everything that can be said about the out dir before any run is read (see the module docstring)."""
        p = self.path
        if os.path.lexists(p) and not p.is_dir():
            raise RunsError(f"{self.what} exists and is not a directory")
        if not p.is_dir():
            parent = next(a for a in p.parents if os.path.lexists(a))  # "." or "/" at the latest
            try_writing(parent, f"{self.what} cannot be created in {parent}")
            return
        try_writing(p, f"{self.what} is not writable")
        self.previous = self.read_manifest()
        taken = [n for n in dict.fromkeys(names)
                 if os.path.lexists(p / n) and (n not in self.previous or (p / n).is_dir())]
        if taken:
            raise RunsError(f"{self.what} already holds {', '.join(taken)}, which no earlier report there wrote "
                            f"(not in {MANIFEST}); move them away or choose another --out")

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around everything the build writes: an OSError (disk full, quota, I/O error) becomes one-line RunsError
        "`what`: cannot write the report: <reason> (<file>)" (a failed write() names no file)."""
        try:
            yield
        except OSError as e:
            where = f" ({e.filename})" if e.filename else ""
            raise RunsError(f"{self.what}: cannot write the report: {e.strerror or e}{where}") from None

    def _write_manifest(self, files: Iterable[str]) -> None:
        atomic_write_json(self.manifest_path, {"written_by": WRITTEN_BY, "files": sorted(set(files))})

    def begin(self, names: Iterable[str]) -> None:
        """Create the dir and list the previous files plus every name this build may write."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_manifest([*self.previous, *names])

    def finish(self, written: Iterable[str]) -> None:
        """Delete the previous build's files that this build did not rewrite; the manifest lists `written`."""
        written = set(written)
        for name in self.previous:
            f = self.path / name
            if name not in written and is_own_name(name) and (f.is_symlink() or f.is_file()):
                f.unlink()
        self._write_manifest(written)
