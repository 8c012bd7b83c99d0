"""Where and with what code a finding's runs trained: recorded by the findings command when the sweep starts (kept in
finding.json and in the finding's data), stated by the doc (doc_provenance.py).

    tree = tree_hashes()                 # {"arch/model.py": sha256, ...}: every git-tracked file under SETUP_DIRS
    combined_hash(tree)                  # one sha256 over them (the "setup hash")
    p = collect(own=[...], registered=record.get("tree"))   # at run time: the dict below
    changes(registered_files, tree, own) # [{"path", "change": "modified" | "added" | "removed"}]

collect() -> {"commit": HEAD's sha or None (not a git checkout), "dirty": whether a tracked file differed from it,
"dirty_files": those files (git status, untracked files not counted), "python", "torch" (the installed version, read
without importing torch), "cpu" (/proc/cpuinfo's model name, else platform.processor()), "gpu" (nvidia-smi's names,
None without one), "tree": {"sha256", "files": how many}, "since_registration": {"recorded": whether the
registration holds its own tree (registrations made before this existed do not), "changed": changes()}}.
The setup hash: the sha256 of each file's bytes as they are in the working tree (what trained the runs, committed or
not), then the sha256 of the lines `<sha256>  <path>\\n` sorted by path, which is what
`git ls-files -z arch tokenizer experiments conf | xargs -0 sha256sum | sha256sum` prints in a checkout (git lists
the files sorted). Outside a git checkout (an installed package) every file under those dirs but __pycache__ is
hashed instead. `own`: the finding's own files (its module, YAML, extra files, registration record), left out of
`changed` (the registration check covers them).
Not handled: files outside SETUP_DIRS (the data is checked by its own sha256: data.py), untracked files in a checkout,
a GPU that nvidia-smi does not list.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[2]  # the repo
SETUP_DIRS = ("arch", "tokenizer", "experiments", "conf")


def _git(*args: str, root: Path = ROOT) -> str | None:
    try:
        p = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.decode("utf-8", "surrogateescape") if p.returncode == 0 else None


def tracked_files(root: Path = ROOT, dirs: Sequence[str] = SETUP_DIRS) -> list[str]:
    """The git-tracked files under `dirs` (repo-relative, sorted), or every file there outside a checkout."""
    listed = _git("ls-files", "-z", "--", *dirs, root=root)
    if listed is not None:
        return sorted(p for p in listed.split("\0") if p)
    found = []
    for d in dirs:
        for top, subdirs, files in os.walk(root / d):
            subdirs[:] = sorted(s for s in subdirs if s != "__pycache__")
            found += [(Path(top) / f).relative_to(root).as_posix() for f in files if not f.endswith(".pyc")]
    return sorted(found)


def tree_hashes(root: Path = ROOT, dirs: Sequence[str] = SETUP_DIRS) -> dict[str, str]:
    """{path: sha256 of its bytes now} for tracked_files(); a tracked file missing from the working tree is left
    out (it did not train anything)."""
    out = {}
    for path in tracked_files(root, dirs):
        try:
            out[path] = hashlib.sha256((root / path).read_bytes()).hexdigest()
        except OSError:
            continue
    return out


def combined_hash(files: dict[str, str]) -> str:
    """sha256 of `<sha256>  <path>\\n` per file, sorted by path (sha256sum's own output format)."""
    text = "".join(f"{files[p]}  {p}\n" for p in sorted(files))
    return hashlib.sha256(text.encode()).hexdigest()


def tree_record(root: Path = ROOT) -> dict[str, Any]:
    """{"sha256": the combined hash, "files": {path: sha256}}: what a registration records (registration.py)."""
    files = tree_hashes(root)
    return {"sha256": combined_hash(files), "files": files}


def changes(before: dict[str, str], after: dict[str, str], own: Sequence[str] = ()) -> list[dict[str, str]]:
    """The files that differ between two trees, sorted by path, the finding's `own` files left out."""
    skip = {Path(p).as_posix() for p in own}
    out = []
    for path in sorted(set(before) | set(after)):
        if path in skip or before.get(path) == after.get(path):
            continue
        change = "added" if path not in before else "removed" if path not in after else "modified"
        out.append({"path": path, "change": change})
    return out


def git_state(root: Path = ROOT) -> dict[str, Any]:
    """{"commit", "dirty", "dirty_files"}; commit None outside a git checkout."""
    commit = _git("rev-parse", "HEAD", root=root)
    if commit is None:
        return {"commit": None, "dirty": None, "dirty_files": []}
    status = _git("status", "--porcelain=v1", "-z", "--untracked-files=no", root=root) or ""
    files = []
    entries = iter(status.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        files.append(entry[3:])
        if entry[0] in "RC":  # a rename or copy: the next entry is its source (a rename's is gone from the tree)
            source = next(entries, "")
            files += [source] if entry[0] == "R" and source else []
    return {"commit": commit.strip(), "dirty": bool(files), "dirty_files": sorted(set(files))}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")) and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_names() -> list[str] | None:
    """The GPUs nvidia-smi lists, None without nvidia-smi or a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    names = [n.strip() for n in p.stdout.splitlines() if n.strip()] if p.returncode == 0 else []
    return names or None


def torch_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def collect(own: Sequence[str] = (), registered: dict[str, Any] | None = None, root: Path = ROOT) -> dict[str, Any]:
    """The provenance of a sweep starting now (module docstring); `registered`: the registration's tree record
    (None: the registration recorded none)."""
    files = tree_hashes(root)
    since = ({"recorded": True, "sha256": registered.get("sha256"),
              "changed": changes(registered.get("files") or {}, files, own)}
             if isinstance(registered, dict) else {"recorded": False, "changed": []})
    return {**git_state(root), "python": platform.python_version(), "torch": torch_version(),
            "platform": f"{sys.platform} {platform.machine()}", "cpu": cpu_model(), "gpu": gpu_names(),
            "tree": {"sha256": combined_hash(files), "files": len(files), "dirs": list(SETUP_DIRS)},
            "since_registration": since}


def attempt(root: Path = ROOT) -> dict[str, Any]:
    """What a resumed attempt records: {"commit", "dirty", "tree_sha256"} (compared with the first attempt's)."""
    state = git_state(root)
    return {"commit": state["commit"], "dirty": state["dirty"], "tree_sha256": combined_hash(tree_hashes(root))}
