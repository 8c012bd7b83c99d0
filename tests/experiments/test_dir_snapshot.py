"""DirSnapshot (experiments/rundir/snapshot.py) puts a dir back as it was: every file's bytes, mode and mtime, every
dir's mtime, nothing added, whatever was written in between (a property over random trees and random writes), and
removes a dir that did not exist with the dirs made above it. The reference is an independent reading of the tree
(os.walk + read_bytes + lstat), not the snapshot's own."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.rundir import snapshot as snapshot_mod
from experiments.rundir.snapshot import DirSnapshot


def tree(root: Path) -> dict[str, tuple]:
    """Every path below root: (kind, bytes or link target, permission bits, mtime_ns), read independently."""
    out = {}
    for here, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            p = Path(here) / name
            st_ = p.lstat()
            if p.is_symlink():
                out[p.relative_to(root).as_posix()] = ("link", os.readlink(p), None, st_.st_mtime_ns)
            elif p.is_dir():
                out[p.relative_to(root).as_posix()] = ("dir", None, st_.st_mode & 0o7777, st_.st_mtime_ns)
            else:
                out[p.relative_to(root).as_posix()] = ("file", p.read_bytes(), st_.st_mode & 0o7777, st_.st_mtime_ns)
    out["."] = ("dir", None, root.stat().st_mode & 0o7777, root.stat().st_mtime_ns)
    return out


NAMES = st.sampled_from(["a", "b", "c.yaml", ".hydra", "train.log", "sub"])
CONTENT = st.binary(max_size=64)


def _build(root: Path, spec: list[tuple[list[str], bytes]]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, (parts, data) in enumerate(spec):
        path = root.joinpath(*parts[:-1], f"{parts[-1]}{i}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(1_000_000_000 * (i + 1), 1_000_000_000 * (i + 7)))
    for here, _dirs, _files in sorted(os.walk(root), reverse=True):
        os.utime(here, ns=(5_000_000_000, 9_000_000_000))


def _mutate(root: Path, ops: list[tuple[int, int, bytes]]) -> None:
    """Writes of every kind a process does: rewrite, append, truncate, delete, chmod, touch, new file, new dir,
    a file replaced by a dir, a link."""
    for n, (kind, pick, data) in enumerate(ops):
        paths = sorted(p for p in root.rglob("*"))
        files = [p for p in paths if p.is_file() and not p.is_symlink()]
        target = files[pick % len(files)] if files else None
        if kind == 0 and target:
            target.write_bytes(data)
        elif kind == 1 and target:
            with open(target, "ab") as f:
                f.write(data + b"x")
        elif kind == 2 and target:
            os.truncate(target, 0)
        elif kind == 3 and target:
            target.unlink()
        elif kind == 4 and target:
            os.chmod(target, 0o600 if target.stat().st_mode & 0o077 else 0o644)
        elif kind == 5 and target:
            os.utime(target, ns=(1, 123_456_789))
        elif kind == 6:
            (root / f"new{n}.yaml").write_bytes(data)
        elif kind == 7:
            (root / f"newdir{n}" / "deep").mkdir(parents=True)
            (root / f"newdir{n}" / "deep" / "f").write_bytes(data)
        elif kind == 8 and target:
            target.unlink()
            target.mkdir()
            (target / "inside").write_bytes(data)
        elif kind == 9:
            (root / f"link{n}").symlink_to("nowhere")


SPEC = st.lists(st.tuples(st.lists(NAMES, min_size=1, max_size=3), CONTENT), max_size=8)
OPS = st.lists(st.tuples(st.integers(0, 9), st.integers(0, 50), CONTENT), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=SPEC, ops=OPS)
def test_restore_puts_back_every_byte_mode_and_mtime(tmp_path, spec, ops):
    root = tmp_path / "run"
    shutil.rmtree(root, ignore_errors=True)
    _build(root, spec)
    before = tree(root)
    snap = DirSnapshot.take(root)
    _mutate(root, ops)
    assert snap.restore() == []
    assert tree(root) == before
    assert snap.changed() == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=SPEC, ops=OPS)
def test_a_dir_that_did_not_exist_is_removed_with_the_dirs_made_above_it(tmp_path, spec, ops):
    base = tmp_path / "outputs"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir()
    (base / "other_run").mkdir()  # made by someone else: stays
    root = base / "default" / "2026-01-01_00-00-00"
    snap = DirSnapshot.take(root)
    _build(root / ".hydra", spec)  # what Hydra makes
    _mutate(root, ops)
    assert snap.restore() == []
    assert sorted(p.name for p in base.iterdir()) == ["other_run"]


def test_appended_big_files_are_cut_back_and_rewritten_ones_are_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot_mod, "BYTES_LIMIT", 8)  # bytes of files over 8 bytes are not kept
    root = tmp_path / "run"
    root.mkdir()
    (root / "train.log").write_bytes(b"line 1\nline 2\n")
    (root / "big.bin").write_bytes(b"0123456789abcdef")
    os.utime(root / "train.log", ns=(10, 20))
    os.utime(root / "big.bin", ns=(10, 20))
    before = tree(root)
    snap = DirSnapshot.take(root)
    assert all(e.data is None for e in snap.entries.values())
    with open(root / "train.log", "ab") as f:
        f.write(b"line 3: a refused resume\n")
    assert snap.restore() == []
    assert tree(root) == before
    (root / "big.bin").write_bytes(b"fedcba9876543210")  # same size, other bytes: cannot be put back
    os.utime(root / "big.bin", ns=(10, 30))
    assert snap.restore() == ["big.bin"]


def test_stat_only_names_are_compared_not_read(tmp_path):
    root = tmp_path / "run"
    (root / "checkpoints" / "step_00000003").mkdir(parents=True)
    (root / "checkpoints" / "step_00000003" / "state.pt").write_bytes(b"state")
    (root / "summary.json").write_text("{}")
    (root / ".hydra").mkdir()
    (root / ".hydra" / "config.yaml").write_text("a: 1\n")
    snap = DirSnapshot.take(root, stat_only=("checkpoints", "summary.json"))
    kept = {rel: e.data for rel, e in snap.entries.items() if e.kind == "file"}
    assert kept == {"checkpoints/step_00000003/state.pt": None, "summary.json": None, ".hydra/config.yaml": b"a: 1\n"}
    (root / ".hydra" / "config.yaml").write_text("a: 2\n")
    assert snap.changed(("checkpoints", "summary.json")) == []
    os.utime(root / "summary.json", ns=(1, 1))
    assert snap.changed(("checkpoints", "summary.json")) == ["summary.json"]
    assert snap.changed() == [".hydra/config.yaml", "summary.json"]


@pytest.mark.parametrize("link", [False, True])
def test_a_symlinked_root_is_the_dir_it_names(tmp_path, link):
    real = tmp_path / "real"
    real.mkdir()
    (real / "a").write_text("x")
    root = tmp_path / "link" if link else real
    if link:
        root.symlink_to(real)
    before = tree(real)
    snap = DirSnapshot.take(root)
    (real / "a").write_text("changed")
    (real / "new").write_text("y")
    assert snap.restore() == []
    assert tree(real) == before


def test_a_dir_too_large_is_refused_and_kept_bytes_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshot_mod, "BYTES_TOTAL", 10)
    root = tmp_path / "run"
    root.mkdir()
    for i in range(3):
        (root / f"f{i}").write_bytes(b"abcd")
    snap = DirSnapshot.take(root, max_entries=5)
    assert sum(e.data is not None for e in snap.entries.values()) == 2  # 8 of the 10 bytes; the third is compared
    for i in range(3, 6):
        (root / f"f{i}").write_bytes(b"x")
    with pytest.raises(snapshot_mod.TooLarge):
        DirSnapshot.take(root, max_entries=5)
    assert len(DirSnapshot.take(root).entries) == 7  # unbounded by default (a sweep dir: experiments/sweep/slurm.py)
    assert snap.changed() == ["."] and snap.restore() == ["."]  # grown past the bound: nothing touched
    assert len(list(root.iterdir())) == 6
