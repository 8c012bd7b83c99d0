"""coord.png, the coordinate check of a width sweep (experiments/compare/coord.py), from hand-made run dirs: SP and
μP runs at d_model 64 / 128 / 256 x 2 seeds whose act_rms values are written here as c x (d_model/64)^a (a = 1.7
and 0.8 for SP's blocks and logits, -0.05 for μP's), with a later eval of other values and a diverged run. The
figure is read from the matplotlib artists (not pixels): one panel per model.param, one line per layer through the
seeds' mean of the FIRST eval's values, the slope in the legend equal to a, the diverged run a × outside the mean,
the step in the title; the report lists it and its manifest owns it. Not drawn when the runs share one d_model or
logged no act_rms."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.compare import build_report
from tests.experiments.synthetic_runs import GROUPS, make_config, write_run, write_sweep
from tests.experiments.test_compare_plots import drawn  # noqa: F401  (the fixture: {PNG name: figure} drawn)

WIDTHS = (64, 128, 256)
SEEDS = (0, 1)
EXPONENT = {("sp", "layer"): 1.7, ("sp", "logits"): 0.8, ("mup", "layer"): -0.05, ("mup", "logits"): -0.05}
FIRST_EVAL, LATER_EVAL = 10, 20


def act_rms(param: str, width: int, seed: int, layer: str, step: int = FIRST_EVAL) -> float:
    """What the hand-made runs log: c x (width/64)^a, c per layer and seed; the later eval logs 3x as much."""
    c = {"layer_0": 0.3, "layer_1": 0.5, "logits": 1.1}[layer] * (1 + 0.2 * seed)
    a = EXPONENT[param, "logits" if layer == "logits" else "layer"]
    return c * (width / 64) ** a * (3.0 if step == LATER_EVAL else 1.0)


def config(param: str, width: int, seed: int) -> dict:
    cfg = make_config({**GROUPS[1], "d_model": width, "n_layers": 2}, seed, experiment="coord")
    cfg["model"].update(param=param, base_width=64 if param == "mup" else None)
    return cfg


def metrics(param: str, width: int, seed: int) -> list[dict]:
    rows = [{"step": 0, "tokens": 0, "train/loss": 5.0}]
    for step in (FIRST_EVAL, LATER_EVAL):
        row = {"step": step, "tokens": step * 1024, "val/loss": 4.0}
        row.update({f"act_rms/{layer}": act_rms(param, width, seed, layer, step)
                    for layer in ("layer_0", "layer_1", "logits")})
        rows += [{"step": step, "tokens": step * 1024, "train/loss": 4.5}, row]
    return rows


def write_width_sweep(root: Path, params=("sp", "mup"), widths=WIDTHS) -> Path:
    job = 0
    for param in params:
        for width in widths:
            for seed in SEEDS:
                write_run(root / str(job), config(param, width, seed), metrics(param, width, seed),
                          {"status": "completed", "seed": seed})
                job += 1
    return root


def test_coord_png_plots_the_first_evals_mean_per_width_and_layer(tmp_path, drawn):
    root = write_width_sweep(tmp_path / "sweep")
    # a diverged SP run at 256 whose first eval is 10x the others': a ×, never in the mean
    bad = [{**r, **{k: 10 * v for k, v in r.items() if k.startswith("act_rms/")}} for r in metrics("sp", 256, 2)]
    write_run(root / "99", config("sp", 256, 2), bad, {"status": "diverged", "seed": 2})
    out = tmp_path / "report"
    build_report([root], out)

    md = (out / "report.md").read_text()
    title = f"Coordinate check: activation RMS vs width at the first evaluation (step {FIRST_EVAL})"
    assert f"![{title}](coord.png)" in md
    assert "coord.png" in json.loads((out / "report_manifest.json").read_text())["files"]
    assert (out / "coord.png").stat().st_size > 0

    fig = drawn["coord.png"]
    assert fig._suptitle.get_text() == title
    axes = [ax for ax in fig.axes if ax.get_visible()]
    panels = {("mup" if "param=mup" in ax.get_title() else "sp"): ax for ax in axes}
    assert len(axes) == 2 and set(panels) == {"sp", "mup"}
    for param, ax in panels.items():
        lines = {line.get_label().split(":")[0]: line for line in ax.get_lines() if not line.get_label().startswith("_")}
        assert set(lines) == {"layer 0", "layer 1", "logits"}
        for name, layer in (("layer 0", "layer_0"), ("layer 1", "layer_1"), ("logits", "logits")):
            line = lines[name]
            assert list(line.get_xdata()) == list(WIDTHS)
            want = [np.mean([act_rms(param, w, s, layer) for s in SEEDS]) for w in WIDTHS]  # first eval, seeds' mean
            assert np.asarray(line.get_ydata()) == pytest.approx(want, rel=1e-12)
            a = EXPONENT[param, "logits" if layer == "logits" else "layer"]
            assert line.get_label() == f"{name}: slope {a:+.2f}"
        crosses = [c.get_offsets() for c in ax.collections if len(c.get_offsets())]
        if param == "sp":  # the diverged run: its three values at d_model 256
            got = np.array(sorted(map(tuple, np.concatenate(crosses))))
            want = sorted((256, 10 * act_rms("sp", 256, 2, layer)) for layer in ("layer_0", "layer_1", "logits"))
            assert got == pytest.approx(np.array(want))
        else:
            assert crosses == []


def test_one_param_is_one_panel_and_no_width_sweep_no_figure(tmp_path, drawn):
    build_report([write_width_sweep(tmp_path / "mup", params=("mup",))], tmp_path / "r1")
    axes = [ax for ax in drawn["coord.png"].axes if ax.get_visible()]
    assert len(axes) == 1 and len([ln for ln in axes[0].get_lines() if not ln.get_label().startswith("_")]) == 3
    drawn.clear()

    build_report([write_width_sweep(tmp_path / "one", widths=(128,))], tmp_path / "r2")  # sp vs mup at one width
    md = (tmp_path / "r2" / "report.md").read_text()
    assert "coord.png" not in md and not (tmp_path / "r2" / "coord.png").exists() and "coord.png" not in drawn
    assert "coordinate check: skipped (the runs do not differ in model.d_model)" in md

    write_sweep(tmp_path / "arch", diverged=None)  # differs in d_model, but logged no act_rms
    build_report([tmp_path / "arch"], tmp_path / "r3")
    md = (tmp_path / "r3" / "report.md").read_text()
    assert "coord.png" not in md and "coordinate check: skipped (no two widths with act_rms" in md
