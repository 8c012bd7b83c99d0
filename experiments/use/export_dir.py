"""The --out dir of `python -m experiments.export`: checked before the run is loaded, and written so that export never
replaces a file it did not write and a failed export leaves nothing behind.

    out = ExportDir(Path("exported"), run_dir, force=False)
    out.check(["config.json", "model.safetensors", ...])    # every refusal below, one line (ExportError)
    written = out.write(lambda tmp: ...)                     # fill a temp dir inside --out; the files move into place

Refused, with or without --force: an --out that is a file; the run dir itself or a dir inside its checkpoints/ (a
run's own files are never replaced); an --out where nothing can be written (read-only, no permission, no space, a
parent that is a file, /proc: tokenizer.cli_args.check_writable tries); an existing file of a name export writes
that `export_manifest.json` there does not list (the user's own tokenizer.json, another run's files), or a
directory of such a name; a manifest export did not write. Without --force any non-empty --out is refused.
The files are written into a temp dir inside --out (tokenizer.outputs.atomic_directory(into=True): hidden,
`.<--out's name>.*.tmp`) and then move into place, one os.replace each, with the mode a plain open() gives under the
umask (safetensors alone writes 0600). The manifest, {"written_by": "experiments.export", "files": [...]}, lists
every file export has written in --out; it is updated before the files move, so a killed export still owns what
it wrote. A write that fails (a full disk, an I/O error) is one line naming --out: the temp dir is removed, every
file that was in --out keeps its bytes, and the dirs this export created are removed again.
Not handled: two exports into one --out at the same time; a kill while the files move (some new, some old).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from safetensors import SafetensorError

from experiments.rundir.layout import RunDir, atomic_write_json
from tokenizer.cli_args import UsageError, check_writable
from tokenizer.outputs import atomic_directory

MANIFEST = "export_manifest.json"
WRITTEN_BY = "experiments.export"


class ExportError(ValueError):
    """An export that cannot be done; printed as one line, exit 2."""


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _reason(e: OSError | SafetensorError) -> str:
    """The OS's words for a failed write. Example: SafetensorError("Error while serializing: I/O error: No space
    left on device (os error 28)") -> "No space left on device"."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    io = re.search(r"I/O error: (.+?) \(os error \d+\)", str(e))
    return io.group(1) if io else " ".join(str(e).split())


class ExportDir:
    """The --out dir of one export of the run in `run_dir`; `force` lets it replace files an earlier export wrote."""

    def __init__(self, path: Path, run_dir: Path, force: bool) -> None:
        self.path, self.run_dir, self.force = path, run_dir, force
        self.owned: list[str] = []  # files earlier exports wrote here (their manifest)

    def read_manifest(self) -> list[str]:
        """The files earlier exports wrote here ([] without a manifest); ExportError for one export did not write."""
        path = self.path / MANIFEST
        if not os.path.lexists(path):
            return []
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ExportError(f"--out {self.path}: cannot read {MANIFEST} ({type(e).__name__}); move it away or "
                              "choose another --out") from None
        if not (isinstance(data, dict) and data.get("written_by") == WRITTEN_BY and isinstance(data.get("files"), list)):
            raise ExportError(f"--out {self.path}: {MANIFEST} was not written by export; move it away or choose "
                              "another --out")
        return [f for f in data["files"] if isinstance(f, str)]

    def check(self, names: Iterable[str]) -> None:
        """Every refusal of the module docstring for an export that writes `names`, before anything is read."""
        p = self.path
        if os.path.lexists(p) and not p.is_dir():
            raise ExportError(f"--out {p} is a file; give a directory")
        if p.is_dir() and os.path.samefile(p, self.run_dir):
            raise ExportError(f"--out {p} is the run dir; write the export to another directory (e.g. {p}/hf)")
        if _inside(p, RunDir(self.run_dir).checkpoint_dir):
            raise ExportError(f"--out {p} is inside the run's checkpoints/; write the export to another directory")
        try:
            if not p.is_dir():
                parent = next(a for a in p.parents if os.path.lexists(a))  # "." or "/" at the latest
                check_writable(parent, f"--out {p} cannot be created in {parent}")
                return
            check_writable(p, f"--out {p} is not writable")
        except UsageError as e:
            raise ExportError(str(e)) from None
        if any(p.iterdir()) and not self.force:
            raise ExportError(f"--out {p} exists and is not empty; pass --force to replace the files export wrote")
        self.owned = self.read_manifest()
        self.check_names(names)

    def check_names(self, names: Iterable[str]) -> None:
        """Refuse any of `names` that exists in --out and no earlier export wrote (or that is a directory)."""
        taken = [n for n in dict.fromkeys([*names, MANIFEST])
                 if os.path.lexists(self.path / n) and (n not in [*self.owned, MANIFEST] or (self.path / n).is_dir())]
        if taken:
            raise ExportError(f"--out {self.path} already holds {', '.join(taken)}, which export did not write (not "
                              f"in {MANIFEST}); move them away or choose another --out")

    def write(self, write: Callable[[Path], None]) -> list[Path]:
        """Run `write(tmp)` on a temp dir inside --out, then move its files into --out; returns their paths."""
        created = [d for d in (self.path, *self.path.parents) if not os.path.lexists(d)]
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with atomic_directory(self.path, into=True) as tmp:  # the files move in when the block ends
                write(tmp)
                names = sorted(f.name for f in tmp.iterdir())
                self.check_names(names)  # what was written, in case it is more than check() was told
                atomic_write_json(self.path / MANIFEST, {"written_by": WRITTEN_BY,
                                                         "files": sorted({*self.owned, *names})})
        except BaseException as e:
            if self.path in created:
                (self.path / MANIFEST).unlink(missing_ok=True)
            for d in created:  # innermost first; only while empty
                try:
                    d.rmdir()
                except OSError:
                    break
            if isinstance(e, (OSError, SafetensorError)):  # a full disk, an I/O error
                raise ExportError(f"cannot write {self.path}: {_reason(e)}") from None
            raise
        return [self.path / name for name in names]
