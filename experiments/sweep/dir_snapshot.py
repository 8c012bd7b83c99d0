"""What a sweep dir held before a command, to put back when the command is refused before any job ran.

    before = DirSnapshot.take(sweep_dir)     names of everything under it, bytes of its top-level files
    ...                                      the sweeper writes multirun.yaml, the launcher its submission files
    before.restore()                         every path that is new is removed, every top-level file that changed
                                             or went holds its old bytes again; a sweep dir (and the parents of it)
                                             that did not exist is removed

Used by hydra/launcher=slurm when sbatch refuses the job array (experiments/sweep/slurm.py): nothing was submitted,
so the dir must read as if the command had not run (no multirun.yaml of a sweep that never ran, no job pickles).
What is restored: the names under the dir and the bytes of its top-level files (multirun.yaml, tuning.json: what a
sweeper writes before its jobs start). Not handled: files below the top level that were rewritten in between (no
writer of a sweep touches them before a job starts), modes and times.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


def _tree(root: Path) -> set[str]:
    names: set[str] = set()
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        names.update(str(rel / n) for n in [*dirs, *files])
    return names


@dataclass
class DirSnapshot:
    root: Path
    created_from: Path | None         # the first of root and its parents that did not exist (removed on restore)
    names: set[str]                   # every path under root, relative
    top: dict[str, bytes]             # root's own files, their bytes

    @classmethod
    def take(cls, root: Path) -> DirSnapshot:
        root = Path(root).absolute()
        missing = None
        for p in [root, *root.parents]:
            if p.exists():
                break
            missing = p
        if missing is not None:
            return cls(root, missing, set(), {})
        top = {p.name: p.read_bytes() for p in root.iterdir() if p.is_file() and not p.is_symlink()}
        return cls(root, None, _tree(root), top)

    def restore(self) -> None:
        if self.created_from is not None:
            shutil.rmtree(self.created_from, ignore_errors=True)
            return
        if not self.root.is_dir():
            return
        for name in sorted(_tree(self.root) - self.names, key=lambda n: -n.count(os.sep)):
            path = self.root / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        for name, data in self.top.items():
            path = self.root / name
            if not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
