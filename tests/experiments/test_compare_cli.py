"""`python -m experiments.compare` end to end on synthetic sweeps: outputs, figures, and every bad-input error."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import matplotlib.image as mpimg
import numpy as np
import pytest

from experiments.compare import RunsError, build_report, main
from experiments.compare.headline import read_headline
from experiments.compare.wandb_pull import run_from_wandb
from tests.experiments.synthetic_runs import GROUPS, write_sweep

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "multirun" / "arch_sweep" / "2026-01-01_00-00-00"
    write_sweep(root)
    return root


@pytest.fixture(scope="module")
def report(sweep: Path) -> Path:
    return build_report([sweep], None)


def test_default_out_dir_is_the_sweep_report_dir(sweep: Path, report: Path) -> None:
    assert report == sweep.resolve() / "report" / "report.html"
    names = {p.name for p in report.parent.iterdir()}
    assert {"report.html", "report.md", "curve_train_loss.png", "curve_val_loss.png", "final_val_loss.png",
            "extrapolation.png", "grad_norm_per_layer.png", "aspect_ratio.png"} <= names


def test_pngs_open_and_are_not_blank(report: Path) -> None:
    pngs = sorted(report.parent.glob("*.png"))
    assert len(pngs) == 6
    for p in pngs:
        img = mpimg.imread(p)
        assert img.shape[0] > 300 and img.shape[1] > 500, p.name
        rgb = img[..., :3]
        assert rgb.std() > 0.05, p.name  # not a flat image
        assert (rgb.min(axis=2) < 0.9).mean() > 0.02, p.name  # enough ink
        packed = (rgb * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
        assert len(np.unique(packed)) > 50, p.name  # distinct colours: lines, bands, text antialiasing


def test_html_is_self_contained(report: Path) -> None:
    html = report.read_text()
    assert html.count('src="data:image/png;base64,') == 6
    assert not re.search(r'(src|href)="(https?:)?//', html)  # no CDN, nothing fetched
    assert "<script>" in html and "sortable" in html
    assert 'class="st st-diverged"' in html
    assert html.count('<tr class="bad">') == 1


def test_markdown_lists_groups_runs_and_diverged(report: Path) -> None:
    md = (report.parent / "report.md").read_text()
    assert "| pos=alibi norm=post d_model=128 n_layers=4 | 2 (+1 diverged) |" in md
    run_lines = [l for l in md.splitlines() if l.startswith("| pos=")]
    assert sum("| diverged |" in l for l in run_lines) == 1
    assert sum("| completed |" in l for l in run_lines) == 14
    assert "![Length extrapolation](extrapolation.png)" in md
    assert "N/A at 2×, 4×, 8×" in md  # learned positions past n_ctx
    assert "Also differ per run, ignored for grouping: `seed`, `train.out_dir`, `logger.name`" in md


def test_cli_prints_report_path_and_honours_by_metric_x(sweep: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "rep"
    rc = main([str(sweep), "--by", "model.pos.kind", "--metric", "val/bpb", "--x", "step", "--out", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == str(out / "report.html")  # the path last, after the headline
    assert printed[0].startswith("final val/bpb (lower is better): ") and printed[:-1] == read_headline(out)
    md = (out / "report.md").read_text()
    assert "| group | runs | final val/bpb | best val/bpb | params |" in md  # val/bpb's column once
    assert "| pos=rope | 9 |" in md
    assert (out / "curve_val_bpb.png").is_file()


def test_inapplicable_plots_are_skipped_with_a_note(tmp_path: Path) -> None:
    root = tmp_path / "sw"
    write_sweep(root, groups=GROUPS[:2], seeds=(0,), diverged=None, extrap=False, grad_layers=False)
    report = build_report([root], tmp_path / "out")
    md = (report.parent / "report.md").read_text()
    assert "length extrapolation: skipped" in md
    assert "per-layer gradient norms: skipped" in md
    assert "depth vs width (aspect ratio): skipped" in md
    assert not (report.parent / "extrapolation.png").exists()


def _err(capsys, argv: list[str]) -> str:
    rc = main(argv)
    cap = capsys.readouterr()
    assert rc == 2
    assert cap.out == ""
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in cap.err, cap.err
    return lines[0]


def test_error_path_missing(capsys, tmp_path: Path) -> None:
    assert "path not found" in _err(capsys, [str(tmp_path / "missing")])


def test_error_no_runs(capsys, tmp_path: Path) -> None:
    assert "no runs found under" in _err(capsys, [str(tmp_path)])


def test_error_no_paths(capsys) -> None:
    assert "give at least one run dir" in _err(capsys, [])


def test_error_mixed_experiments_unless_allowed(capsys, tmp_path: Path) -> None:
    write_sweep(tmp_path / "a", groups=GROUPS[:1], seeds=(0,), diverged=None, experiment="pos_encodings")
    write_sweep(tmp_path / "b", groups=GROUPS[:1], seeds=(0,), diverged=None, experiment="norms")
    msg = _err(capsys, [str(tmp_path / "a"), str(tmp_path / "b")])
    assert "different experiments (norms, pos_encodings)" in msg and "--allow-mixed" in msg
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--allow-mixed", "--out", str(tmp_path / "r")]) == 0
    assert "| experiment_name |" in (tmp_path / "r" / "report.md").read_text()


def test_error_missing_metric_lists_available(capsys, sweep: Path) -> None:
    msg = _err(capsys, [str(sweep), "--metric", "val/foo"])
    assert "'val/foo' is not in any run" in msg
    assert "val/loss" in msg and "grad_norm/layer_{i}" in msg and "layer_3" not in msg


def test_error_unknown_by_key_lists_close_matches(capsys, sweep: Path) -> None:
    msg = _err(capsys, [str(sweep), "--by", "model.pos.knd"])
    assert "'model.pos.knd' is not in the run configs" in msg and "model.pos.kind" in msg


def test_error_bad_x_is_one_line(capsys, sweep: Path) -> None:
    assert "--x" in _err(capsys, [str(sweep), "--x", "epochs"])


def test_error_wandb_offline(capsys, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "disabled")
    msg = _err(capsys, ["--wandb-group", "g", "--wandb-project", "me/archlab"])
    assert "cannot pull wandb group 'g'" in msg and "WANDB_MODE=disabled" in msg
    assert "--wandb-project" in _err(capsys, ["--wandb-group", "g"])


def test_build_report_raises_runs_error(tmp_path: Path) -> None:
    with pytest.raises(RunsError):
        build_report([tmp_path], tmp_path / "out")


def test_subprocess_error_has_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)}
    p = subprocess.run([sys.executable, "-m", "experiments.compare", str(tmp_path / "nope")], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    assert p.stderr.strip() == f"compare: error: path not found: {tmp_path / 'nope'}"


def test_python_m_runs_the_package_cli() -> None:
    p = subprocess.run([sys.executable, "-m", "experiments.compare", "--help"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: python -m experiments.compare")


def test_importing_the_package_imports_neither_matplotlib_nor_scipy() -> None:
    code = "import sys, experiments.compare; print('matplotlib' in sys.modules, 'scipy' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.stdout.strip() == "False False", p.stderr


def test_wandb_run_conversion_matches_local_format() -> None:
    fake = SimpleNamespace(
        name="pos=rope,seed=0", state="finished", path=["me", "archlab", "abc123"],
        config={"experiment_name": "x", "seed": 0, "model.pos.kind": "rope", "_wandb": {"v": 1}},
        summary=SimpleNamespace(_json_dict={"status": "diverged", "final_val_loss": 3.2, "extrap/sliding/loss@2x": 3.5,
                                            "_runtime": 4}),
    )
    history = [{"_step": 0, "tokens": 0, "train/loss": 6.0}, {"_step": 10, "tokens": 1024, "val/loss": 4.0}]
    r = run_from_wandb(fake, history)
    assert r.flat == {"experiment_name": "x", "seed": 0, "model.pos.kind": "rope"}
    assert r.status == "diverged" and r.summary["extrap"] == {"extrap/sliding/loss@2x": 3.5}
    assert [m["step"] for m in r.metrics] == [0, 10] and r.source == "wandb:me/archlab/abc123"
    fake.summary = SimpleNamespace(_json_dict={})
    assert run_from_wandb(fake, []).status == "completed"  # from the wandb run state


def test_rebuild_removes_stale_figures_and_mixed_shape_groups_skip_aspect(sweep: Path, tmp_path: Path) -> None:
    out = tmp_path / "same_out"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert (out / "aspect_ratio.png").is_file()
    assert main([str(sweep), "--by", "seed", "--out", str(out), "--metric", "val/bpb"]) == 0  # every group mixes shapes
    assert not (out / "aspect_ratio.png").exists() and not (out / "final_val_loss.png").exists()
    assert "depth vs width (aspect ratio): skipped" in (out / "report.md").read_text()
