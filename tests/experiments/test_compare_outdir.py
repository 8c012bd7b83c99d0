"""`compare --out`: checked before any run is read, and a rebuild deletes only the files its previous build wrote.

Before report_manifest.json, a rebuild deleted every curve_*.png / final_*.png in the out dir (the user's own
too) and overwrote any file named like a report file; an --out that was a file or sat under a file failed with a
traceback after all runs were read.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.compare import RunsError, build_report, main, plots
from experiments.compare.outdir import MANIFEST
from tests.experiments.synthetic_runs import GROUPS, write_sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # small and quick: 2 groups x 1 seed, no extrapolation / per-layer keys (3 figures per build)
    root = tmp_path_factory.mktemp("outdir") / "sweep"
    write_sweep(root, groups=GROUPS[:2], seeds=(0,), diverged=None, extrap=False, grad_layers=False)
    return root


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and not p.is_symlink()}


def _manifest(d: Path) -> set[str]:
    return set(json.loads((d / MANIFEST).read_text())["files"])


def _err(capsys, argv: list[str]) -> str:
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    assert lines[0].startswith("compare: error: ")
    return lines[0]


# ---------------------------------------------------------------- the manifest


def test_manifest_lists_exactly_the_files_the_build_wrote(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = set(os.listdir(out))
    build_report([sweep], out)
    new = set(os.listdir(out)) - before - {MANIFEST}
    assert new == {"report.html", "report.md", "comparison.json", "curve_train_loss.png", "curve_val_loss.png",
                   "final_val_loss.png"}
    assert _manifest(out) == new


def test_users_own_figures_survive_builds_and_rebuilds(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    mine = {"curve_mine.png": b"\x89PNG mine", "final_accuracy.png": b"also mine", "grad_norm_old.png": b"x",
            "report.txt": b"notes"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    assert main([str(sweep), "--out", str(out)]) == 0
    assert main([str(sweep), "--out", str(out), "--metric", "val/bpb", "--x", "step"]) == 0
    assert {n: (out / n).read_bytes() for n in mine} == mine
    # the first build's own val/loss figures are gone, this build's are there
    assert not (out / "curve_val_loss.png").exists() and not (out / "final_val_loss.png").exists()
    assert (out / "curve_val_bpb.png").is_file() and "curve_val_loss.png" not in _manifest(out)


def test_a_report_named_file_the_report_did_not_write_is_refused_not_overwritten(sweep: Path, tmp_path: Path,
                                                                                  capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("my own page")
    (out / "curve_val_loss.png").write_bytes(b"my own curve")
    msg = _err(capsys, [str(sweep), "--out", str(out)])
    assert "report.html, curve_val_loss.png" in msg and MANIFEST in msg
    assert (out / "report.html").read_text() == "my own page"
    assert (out / "curve_val_loss.png").read_bytes() == b"my own curve"
    assert sorted(os.listdir(out)) == ["curve_val_loss.png", "report.html"]  # nothing written


def test_a_tampered_manifest_never_deletes_other_files(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep" / "out"
    build_report([sweep], out)
    (tmp_path / "rep" / "outside.png").write_bytes(b"outside")
    (out / "data.csv").write_text("1,2")
    listed = [*_manifest(out), "../outside.png", "data.csv", str(tmp_path / "rep" / "outside.png"), 7, None]
    (out / MANIFEST).write_text(json.dumps({"written_by": "experiments.compare", "files": listed}))
    build_report([sweep], out, metric="val/bpb")
    assert (tmp_path / "rep" / "outside.png").read_bytes() == b"outside"
    assert (out / "data.csv").read_text() == "1,2"


def test_a_symlink_in_place_of_a_report_file_is_replaced_not_written_through(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_report([sweep], out)
    target = tmp_path / "precious.html"
    target.write_text("precious")
    (out / "report.html").unlink()
    (out / "report.html").symlink_to(target)  # listed in the manifest, so the report may replace the name
    build_report([sweep], out)
    assert target.read_text() == "precious"
    assert not (out / "report.html").is_symlink() and "<html" in (out / "report.html").read_text()


def test_a_manifest_compare_did_not_write_is_an_error(sweep: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text('{"files": ["report.html"]}')
    assert "was not written by compare" in _err(capsys, [str(sweep), "--out", str(out)])
    (out / MANIFEST).write_text("{torn")
    assert f"cannot read {MANIFEST}" in _err(capsys, [str(sweep), "--out", str(out)])


NAMES = st.sampled_from(["report.html", "report.md", "curve_train_loss.png", "curve_val_loss.png", "curve_mine.png",
                         "final_val_loss.png", "final_val_bpb.png", "final_x.png", "extrapolation.png",
                         "aspect_ratio.png", "notes.txt", "run.log", "curve_val_bpb.png", "report.html.bak"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.sampled_from([None, "val/loss", "val/bpb"]), second=st.sampled_from(["val/loss", "val/bpb", "train/loss"]),
       user=st.dictionaries(NAMES, st.binary(min_size=0, max_size=16), max_size=5),
       replace=st.booleans())
def test_rebuild_keeps_every_file_the_previous_build_did_not_write(sweep: Path, tmp_path_factory, first, second,
                                                                   user, replace) -> None:
    """Invariant: a file that was in the out dir before a rebuild and is not in the previous manifest holds the same
    bytes after it (the rebuild either succeeds or refuses), and every manifest file exists."""
    out = tmp_path_factory.mktemp("prop") / "out"
    out.mkdir()
    if first is not None:
        build_report([sweep], out, metric=first)
    previous = _manifest(out) if (out / MANIFEST).exists() else set()
    for name, data in user.items():  # the user adds files, or replaces the report's own (then they are its again)
        if name not in previous or replace:
            (out / name).write_bytes(data)
    before = _snapshot(out)
    try:
        build_report([sweep], out, metric=second)
    except RunsError as e:
        assert "which no earlier report there wrote" in str(e)
        assert _snapshot(out) == before  # refused: nothing at all changed
        return
    after = _snapshot(out)
    for name, data in before.items():
        if name not in previous and name != MANIFEST:
            assert after.get(name) == data, name
    assert all((out / f).is_file() for f in _manifest(out))
    assert not (previous - _manifest(out)) & set(os.listdir(out))  # the previous build's leftovers are gone


# ---------------------------------------------------------------- --out checked before any run is read


def test_out_that_is_a_file_is_one_line_before_any_run_is_read(tmp_path: Path, capsys) -> None:
    f = tmp_path / "report.html"
    f.write_text("not a dir")
    # the run path does not exist: reading runs first would say "path not found"
    msg = _err(capsys, [str(tmp_path / "no_such_sweep"), "--out", str(f)])
    assert msg == f"compare: error: --out {f} exists and is not a directory"
    assert f.read_text() == "not a dir"


def test_out_under_a_file_cannot_be_created(tmp_path: Path, capsys) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    msg = _err(capsys, [str(tmp_path / "no_such_sweep"), "--out", str(f / "sub" / "report")])
    assert msg == f"compare: error: --out {f / 'sub' / 'report'} cannot be created in {f}: Not a directory"


def test_out_is_checked_before_pulling_wandb(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")  # pulling would fail with "cannot pull wandb group"
    f = tmp_path / "f"
    f.write_text("x")
    assert "is not a directory" in _err(capsys, ["--wandb-group", "g", "--wandb-project", "me/p", "--out", str(f)])


# /proc takes no new file or dir, not even from root (CI runs as root, where a chmod-ed dir is still writable)
@pytest.mark.parametrize("out, message", [
    ("/proc", "--out /proc is not writable: "),
    ("/proc/compare-report", "--out /proc/compare-report cannot be created in /proc: "),
    ("/proc/compare-report/a/b", "--out /proc/compare-report/a/b cannot be created in /proc: "),
])
def test_out_in_a_read_only_dir(tmp_path: Path, capsys, out: str, message: str) -> None:
    # the run path does not exist: reading runs first would say "path not found"
    assert _err(capsys, [str(tmp_path / "no_such_sweep"), "--out", out]).startswith(f"compare: error: {message}")


def test_out_in_a_chmod_read_only_dir(tmp_path: Path, capsys) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("root writes into any dir, so a chmod-ed dir is writable (the /proc test covers root)")
        assert _err(capsys, [str(tmp_path / "no_such_sweep"), "--out", str(ro)]) == \
            f"compare: error: --out {ro} is not writable: Permission denied"
        assert _err(capsys, [str(tmp_path / "no_such_sweep"), "--out", str(ro / "new")]) == \
            f"compare: error: --out {ro / 'new'} cannot be created in {ro}: Permission denied"
    finally:
        ro.chmod(0o700)


MOUNTS = {  # sh commands making `$1` a read-only file system, a full one, or one with room for little more than a byte
    "read-only": 'mount -t tmpfs -o ro,size=1m tmpfs "$1"',
    "full": 'mount -t tmpfs -o size=64k tmpfs "$1" && { head -c 1048576 /dev/zero > "$1/fill" 2>/dev/null; true; }',
    "tiny": 'mount -t tmpfs -o size=32k tmpfs "$1"',
}


def _compare_on_a_mount(kind: str, mnt: Path, *argv: str) -> subprocess.CompletedProcess:
    """`python -m experiments.compare argv` in a private mount namespace where MOUNTS[kind] is mounted at `mnt`
    (gone when the process exits); skips where mounting is not allowed (not root, or no CAP_SYS_ADMIN)."""
    mnt.mkdir()
    mount = ["unshare", "--mount", "sh", "-c", MOUNTS[kind], "sh", str(mnt)]
    if shutil.which("unshare") is None or subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("cannot mount a file system here (needs root with CAP_SYS_ADMIN)")
    script = MOUNTS[kind] + ' && shift && exec "$@"'
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)}
    return subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", str(mnt), sys.executable, "-m",
                           "experiments.compare", *argv], capture_output=True, text=True, env=env, cwd=REPO, timeout=300)


@pytest.mark.parametrize("kind, out, message", [
    ("read-only", ".", "--out {mnt} is not writable: Read-only file system"),
    ("read-only", "new/report", "--out {mnt}/new/report cannot be created in {mnt}: Read-only file system"),
    ("full", ".", "--out {mnt} is not writable: No space left on device"),
    ("full", "report", "--out {mnt}/report cannot be created in {mnt}: No space left on device"),
])
def test_out_on_a_read_only_or_full_file_system(tmp_path: Path, kind: str, out: str, message: str) -> None:
    mnt = tmp_path / "mnt"
    p = _compare_on_a_mount(kind, mnt, str(tmp_path / "no_such_sweep"), "--out", str(mnt / out).rstrip("/."))
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"compare: error: {message.format(mnt=mnt)}\n"  # before any run is read: not "path not found"


def test_disk_full_while_the_report_is_written(sweep: Path, tmp_path: Path) -> None:
    # 32k: the check's one byte fits, the figures do not
    mnt = tmp_path / "mnt"
    p = _compare_on_a_mount("tiny", mnt, str(sweep), "--out", str(mnt / "report"))
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"compare: error: --out {mnt / 'report'}: cannot write the report: "
                               "No space left on device")


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO])
def test_an_os_error_while_the_report_is_written_is_one_line(sweep: Path, tmp_path: Path, capsys, monkeypatch,
                                                             err: int) -> None:
    # the same as the tiny mount above, for any user: the figures' writes fail (a write() error names no file)
    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(plots, "atomic_write", fail)
    out = tmp_path / "out"
    assert _err(capsys, [str(sweep), "--out", str(out)]) == \
        f"compare: error: --out {out}: cannot write the report: {os.strerror(err)}"


def test_bad_out_subprocess_has_no_traceback(sweep: Path, tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("x")
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "experiments.compare", str(sweep), "--out", str(f)], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == f"compare: error: --out {f} exists and is not a directory\n"
