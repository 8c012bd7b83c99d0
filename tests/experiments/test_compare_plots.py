"""The report's line charts, read from the matplotlib artists the plotting functions create (not from pixels): a
group's line shows even when each run has a single eval point, and in its own dash and marker where it lies
exactly on another group's."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from experiments.compare import build_report, plots
from tests.experiments.synthetic_runs import GROUPS, make_config, write_run, write_sweep

from .conftest import keep_figures


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Figure]:
    """{PNG name: figure} of every figure drawn during the test (plots._save still writes them)."""
    return keep_figures(monkeypatch, plots)


def group_lines(fig: Figure, labels: list[str]) -> dict[tuple[int, str], Line2D]:
    """{(panel, group label): the group's line}: plot() lines labelled '<label> (n=...)' and errorbar data lines."""
    out = {}
    for i, ax in enumerate(fig.axes):
        for line in ax.get_lines():
            name = line.get_label().split(" (n=")[0]
            if name in labels:
                out[i, name] = line
        for c in ax.containers:
            if c.get_label() in labels:
                out[i, c.get_label()] = c.lines[0]
    return out


def marked(line: Line2D) -> list[tuple[float, float]]:
    """The points of `line` that carry a marker."""
    if line.get_marker() in (None, "None", "", " "):
        return []
    xs, ys = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    every = line.get_markevery()
    idx = (range(len(xs)) if every is None else range(every[0], len(xs), every[1]) if isinstance(every, tuple)
           else range(0, len(xs), every))
    return [(xs[i], ys[i]) for i in idx]


def test_runs_with_a_single_eval_point_are_drawn_as_points_with_error_bars(tmp_path: Path,
                                                                           drawn: dict[str, Figure]) -> None:
    root = tmp_path / "sweep"
    for j, (g, seed) in enumerate((g, s) for g in GROUPS[:2] for s in (0, 1)):
        write_run(root / str(j), make_config(g, seed), [
            {"step": 0, "tokens": 0, "train/loss": 6.0}, {"step": 100, "tokens": 102_400, "train/loss": 4.0},
            {"step": 100, "tokens": 102_400, "val/loss": g["floor"] + 0.01 * seed},  # the only eval
        ], {"status": "completed", "seed": seed})
    report = build_report([root], tmp_path / "out", by=["model.pos.kind"])
    ax = drawn["curve_val_loss.png"].axes[0]
    bars = {c.get_label().split(" (n=")[0]: c for c in ax.containers}
    assert set(bars) == {"pos=learned", "pos=rope"}
    xs = []
    for label, c in bars.items():
        floor = GROUPS[0 if label == "pos=learned" else 1]["floor"]
        point, caps, (bar,) = c.lines[0], c.lines[1], c.lines[2]
        (x,), (y,) = point.get_xdata(), point.get_ydata()
        assert y == pytest.approx(floor + 0.005) and point.get_marker() not in (None, "None", "")  # the mean
        half = statistics.stdev([floor, floor + 0.01])
        (seg,) = bar.get_segments()
        assert seg[:, 1] == pytest.approx([floor + 0.005 - half, floor + 0.005 + half])  # ± 1 std of the 2 seeds
        assert abs(x - 102_400) <= 0.01 * 102_400
        xs.append(x)
    assert xs[0] != xs[1]  # side by side, not on top of each other
    assert not [line for line in ax.get_lines() if len(line.get_xdata()) > 1]  # no line drawn through them
    page = report.read_text()
    assert "val/loss was evaluated once per run, so there is no curve: each point is a group&#x27;s mean" in page
    assert "line ± band" not in page


def test_coinciding_groups_differ_in_dash_and_marker(tmp_path: Path, drawn: dict[str, Figure]) -> None:
    # three groups with the same synthetic curves: only pos differs, and the curves are functions of the floor
    same = [{**g, "floor": 3.2, "norm": "pre"} for g in GROUPS[:3]]
    write_sweep(tmp_path / "sweep", groups=same, diverged=None)
    build_report([tmp_path / "sweep"], tmp_path / "out", by=["model.pos.kind"])
    labels = ["pos=learned", "pos=rope", "pos=alibi"]
    styles: dict[str, set[tuple[str, str]]] = {label: set() for label in labels}
    for name in ("curve_train_loss.png", "curve_val_loss.png", "extrapolation.png", "grad_norm_per_layer.png"):
        lines = group_lines(drawn[name], labels)
        for panel in {p for p, _ in lines}:
            here = [lines[panel, label] for label in labels if (panel, label) in lines]
            assert len({(line.get_linestyle(), line.get_marker()) for line in here}) == len(here), name
            assert len({line.get_linestyle() for line in here}) == len(here), name  # dash alone tells them apart
        for (_, label), line in lines.items():
            styles[label].add((line.get_linestyle(), line.get_marker()))
    assert all(len(s) == 1 for s in styles.values()), styles  # a group keeps its style in every figure
    # the premise: the val/loss curves do lie on each other, and their markers sit on different points
    val = group_lines(drawn["curve_val_loss.png"], labels)
    ys = [np.asarray(val[0, label].get_ydata()) for label in labels]
    assert all(np.array_equal(ys[0], y) for y in ys[1:]) and len(ys[0]) > 100
    spots = [set(marked(val[0, label])) for label in labels]
    assert all(spots) and not (spots[0] & spots[1]) and not (spots[1] & spots[2]) and not (spots[0] & spots[2])
