"""What export and sample write, and what they never touch.

export --out: the run's own dirs are refused even with --force; as a property over random pre-existing files, an
earlier manifest (valid, garbage, none), every target and --force on or off, the exit status is the one the rules
give and every file that was there keeps its bytes unless export wrote it before; a full disk (a real tmpfs where
this machine lets us mount one, else the write call patched where export makes it) and a read-only --out are one
line naming --out and leave nothing behind. sample: stdout on a full disk or a read-only descriptor is one line
naming it; a closed pipe ends quietly."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.run.train import train
from experiments.use.export import NAMES, main
from experiments.use.export_dir import MANIFEST, WRITTEN_BY

from .conftest import PYTHON, REPO, TINY

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def run(tmp_path_factory, cache_dir) -> Path:
    from experiments.config.compose import compose_config

    run = tmp_path_factory.mktemp("outputs") / "run"
    train(compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run}"]))
    return run


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def snapshot(d: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("export: error: "), err
    return err[0]


# ---------------------------------------------------------------- a run's own files
@pytest.mark.parametrize("to", list(NAMES))
def test_out_in_the_runs_own_dirs_is_refused_even_with_force(run, capsys, to):
    before = snapshot(run)
    for out, words in ((run, "is the run dir"), (run / "checkpoints", "inside the run's checkpoints/"),
                       (run / "checkpoints" / "hf", "inside the run's checkpoints/")):
        assert main([str(run), "--to", to, "--out", str(out), "--force"]) == 2
        assert words in one_error_line(capsys)
    assert snapshot(run) == before


def test_a_directory_named_like_an_export_file_is_refused(run, tmp_path, capsys):
    (tmp_path / "tokenizer.json").mkdir()
    (tmp_path / MANIFEST).write_text(json.dumps({"written_by": WRITTEN_BY, "files": ["tokenizer.json"]}))
    assert main([str(run), "--to", "hf-tokenizer", "--out", str(tmp_path), "--force"]) == 2
    assert "already holds tokenizer.json" in one_error_line(capsys)


# ---------------------------------------------------------------- the rules as a property
FILE_NAMES = sorted({n for names in NAMES.values() for n in names} | {"notes.txt", "config.yaml", "summary.json"})


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(existing=st.lists(st.sampled_from(FILE_NAMES), unique=True, max_size=4),
       owned=st.lists(st.sampled_from(FILE_NAMES), unique=True, max_size=4),
       manifest=st.sampled_from(["none", "valid", "garbage", "another tool's"]),
       to=st.sampled_from(list(NAMES)), force=st.booleans())
def test_property_export_replaces_only_files_it_wrote(run, tmp_path_factory, capsys, existing, owned, manifest, to,
                                                      force):
    out = tmp_path_factory.mktemp("out")
    for name in existing:
        (out / name).write_bytes(f"precious {name}".encode())
    if manifest != "none":
        doc = {"valid": {"written_by": WRITTEN_BY, "files": owned},
               "another tool's": {"written_by": "x", "files": owned}}
        (out / MANIFEST).write_text(json.dumps(doc[manifest]) if manifest in doc else "{not json")
    before = snapshot(out)
    code = main([str(run), "--to", to, "--out", str(out), *(["--force"] if force else [])])
    capsys.readouterr()
    # the rules, written out independently of export_dir.py
    ours = set(owned) if manifest == "valid" else set()
    allowed = (force or not before) and manifest in ("none", "valid") and set(existing) & set(NAMES[to]) <= ours
    assert code == (0 if allowed else 2), (existing, owned, manifest, to, force)
    replaceable = (set(NAMES[to]) & ours) | {out / MANIFEST} if code == 0 else set()
    for path, content in before.items():
        if path.name not in {getattr(r, "name", r) for r in replaceable}:
            assert path.read_bytes() == content, path
    after = {p.name for p in out.iterdir()}
    assert after == ({p.name for p in before} | ({*NAMES[to], MANIFEST} if code == 0 else set())), after
    if code == 0:
        assert set(json.loads((out / MANIFEST).read_text())["files"]) == ours | set(NAMES[to])


@pytest.mark.parametrize("to", list(NAMES))
@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_exported_files_get_the_mode_the_umask_gives(run, tmp_path, to, umask, file_mode, dir_mode):
    """People share exports on clusters: every file export writes (safetensors' own writer makes 0600) gets what a
    plain open() gives under the umask, and a new --out what mkdir gives; no temp dir stays behind."""
    out = tmp_path / "shared" / "out"
    old = os.umask(umask)
    try:
        assert main([str(run), "--to", to, "--out", str(out)]) == 0
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {name: file_mode for name in [*NAMES[to], MANIFEST]}
    assert {stat.S_IMODE(d.stat().st_mode) for d in (out, out.parent)} == {dir_mode}


# ---------------------------------------------------------------- full disk, read-only --out
@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs with 8 KiB left (room for export's writability probe, not for an export); skipped where this
    process may not mount one (not root, no CAP_SYS_ADMIN)."""
    d = tmp_path / "disk"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=True)


def fill(d: Path, leave: int = 8192) -> None:
    """Leave `leave` bytes free on d's file system: the probe fits, the smallest export (11 KiB) does not."""
    s = os.statvfs(d)
    (d / "filler").write_bytes(b"\0" * (s.f_bavail * s.f_frsize - leave))


@pytest.fixture
def patched_full_disk(monkeypatch):
    """ENOSPC where export writes into its temp dir: save_pretrained's safetensors call and Path.write_text (the
    tokenizer files) write half their bytes, then fail as a full disk does. Returns a function: fail under this dir."""
    from safetensors import SafetensorError

    real_write_text = pathlib.Path.write_text
    where: list[Path] = []

    def inside(path) -> bool:
        return any(Path(path).resolve().is_relative_to(w.resolve()) for w in where)

    def write_text(self, data, *args, **kwargs):
        if not inside(self):
            return real_write_text(self, data, *args, **kwargs)
        real_write_text(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device", str(self))

    def save_file(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 100)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.setattr("transformers.modeling_utils.safe_save_file", save_file)
    return where.append


@pytest.mark.parametrize("to", list(NAMES))
@pytest.mark.parametrize("disk", ["tmpfs", "patched"])
@pytest.mark.parametrize("out_exists", [False, True])
def test_full_disk_is_one_line_and_leaves_nothing(run, tmp_path, capsys, request, to, disk, out_exists):
    base = request.getfixturevalue("small_disk") if disk == "tmpfs" else tmp_path / "patched"
    base.mkdir(exist_ok=True)
    out = base / "out"
    if out_exists:  # an earlier export's files and the user's: all keep their bytes
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        (out / MANIFEST).write_text(json.dumps({"written_by": WRITTEN_BY, "files": list(NAMES[to])}))
        for name in NAMES[to]:
            (out / name).write_text(f"earlier {name}")
    if disk == "tmpfs":
        fill(base)
    else:
        request.getfixturevalue("patched_full_disk")(base)  # from now on, writes under base fail
    before = snapshot(base)
    assert main([str(run), "--to", to, "--out", str(out), *(["--force"] if out_exists else [])]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"export: error: ") and str(out) in line and "No space left on device" in line, line
    assert ".export-" not in line and ".tmp" not in line
    assert snapshot(base) == before  # nothing replaced, nothing half-written, no temp dir
    assert {p for p in base.rglob("*") if p.is_dir()} == ({out} if out_exists else set())  # no --out, no temp dir


@pytest.mark.parametrize("out,words", [("/proc/self", "--out /proc/self is not writable"),
                                       ("/proc/self/archlab-export", "--out /proc/self/archlab-export cannot be "
                                                                     "created in /proc/self")])
def test_read_only_out_is_one_line(run, capsys, out, words):
    """/proc/self: a directory not even root can create files in."""
    assert main([str(run), "--to", "tiktoken", "--out", out, "--force"]) == 2
    assert words in one_error_line(capsys)


def test_read_only_mount_is_one_line(run, small_disk, capsys):
    (small_disk / "notes.txt").write_text("mine")
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    for out, words in ((small_disk, "is not writable: Read-only file system"),
                       (small_disk / "new", "cannot be created in")):
        assert main([str(run), "--to", "hf", "--out", str(out), "--force"]) == 2
        assert words in one_error_line(capsys)
    assert [p.name for p in small_disk.iterdir()] == ["notes.txt"]


# ---------------------------------------------------------------- sample: stdout
def _sample(run: Path, env: dict, **popen):
    return subprocess.Popen([PYTHON, "-m", "experiments.sample", str(run), "--prompt", "The", "--max-new-tokens", "5"],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.parametrize("stdout,reason", [("/dev/full", "No space left on device"),
                                           ("read-only", "Bad file descriptor")])
def test_sample_stdout_that_cannot_be_written_is_one_line(run, tmp_path, cli_env, stdout, reason):
    path = Path(stdout) if stdout.startswith("/") else tmp_path / "ro.txt"
    path.touch()
    with open(path, "rb" if stdout == "read-only" else "wb") as f:
        proc = _sample(run, cli_env, stdout=f)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [f"sample: error: cannot write stdout ({path}): {reason}"]


def test_sample_into_a_closed_pipe_ends_quietly(run, cli_env):
    proc = _sample(run, cli_env, stdout=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first token (`| head -c 0`)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and err == ""
