"""tokenizer/outputs.py's atomic writers, the repo's only ones: a file or a directory appears whole or not at all,
a failure leaves what was there, and what is written gets the mode a plain open() / mkdir() gives under the umask."""

from __future__ import annotations

import os
import stat

import pytest

from tokenizer.outputs import atomic_directory, atomic_write


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_atomic_write_creates_parents_and_respects_the_umask(tmp_path, umask_027):
    out = tmp_path / "a" / "b" / "summary.json"
    atomic_write(out, lambda f: f.write("{}"), binary=False)
    assert out.read_text() == "{}" and mode(out) == 0o640
    (tmp_path / "plain").write_text("x")
    assert mode(out) == mode(tmp_path / "plain")  # what open() gives


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    out = tmp_path / "f.bin"
    out.write_bytes(b"old")

    def fail(f):
        f.write(b"new, half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        atomic_write(out, fail, binary=True)
    assert out.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["f.bin"]


def test_atomic_directory_replaces_whole_and_respects_the_umask(tmp_path, umask_027):
    out = tmp_path / "step_00000003"
    out.mkdir()
    (out / "stale.txt").write_text("a partial copy")
    with atomic_directory(out) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".step_00000003.") and not out.joinpath("new").exists()
        (tmp / "new").write_text("x")
    assert sorted(p.name for p in out.iterdir()) == ["new"] and mode(out) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003"]


def test_a_failed_directory_write_leaves_the_old_one(tmp_path):
    out = tmp_path / "entry"
    out.mkdir()
    (out / "train.bin").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(out) as tmp:
            (tmp / "train.bin").write_text("new")
            raise RuntimeError("killed")
    assert (out / "train.bin").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def _write_private(path, text: str) -> None:
    """Write a file the way mkstemp or safetensors' writer does: mode 0600, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def test_atomic_directory_gives_the_files_inside_the_umask_mode(tmp_path, umask_027):
    out = tmp_path / "entry"
    with atomic_directory(out) as tmp:
        _write_private(tmp / "weights", "x")
        (tmp / "sub").mkdir(mode=0o700)
        _write_private(tmp / "sub" / "more", "y")
    assert {p.name: mode(p) for p in out.rglob("*")} == {"weights": 0o640, "sub": 0o750, "more": 0o640}


def test_atomic_directory_into_an_existing_dir_keeps_its_other_files(tmp_path, umask_027):
    out = tmp_path / "exported"
    out.mkdir()
    (out / "mine.txt").write_text("the user's")
    (out / "model.bin").write_text("old")
    os.chmod(out, 0o755)  # the user's choice for the dir itself stays
    with atomic_directory(out, into=True) as tmp:
        assert tmp.parent == out and tmp.name.startswith(".exported.") and tmp.name.endswith(".tmp")
        _write_private(tmp / "model.bin", "new")
        _write_private(tmp / "config.json", "{}")
        assert (out / "model.bin").read_text() == "old"  # nothing moves before the block ends
    assert {p.name: (p.read_text(), mode(p)) for p in out.iterdir()} == {
        "mine.txt": ("the user's", 0o640), "model.bin": ("new", 0o640), "config.json": ("{}", 0o640)}
    assert mode(out) == 0o755


def test_a_failed_write_into_a_dir_leaves_it_as_it_was(tmp_path):
    out = tmp_path / "exported"
    out.mkdir()
    (out / "model.bin").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(out, into=True) as tmp:
            (tmp / "model.bin").write_text("new, half")
            raise RuntimeError("disk full")
    assert sorted(p.name for p in out.iterdir()) == ["model.bin"] and (out / "model.bin").read_text() == "old"
