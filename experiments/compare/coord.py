"""coord.png: the coordinate check (Yang et al. 2022, "Tensor Programs V", arXiv:2203.03466, Fig. 5) of a sweep over
widths, read from what the runs logged (matplotlib; imported when a report is built, as figures.py is).

    figure, note = draw_coord(out_dir, runs)   # ({file, title, caption}, None), or (None, why it was skipped)
    panels, steps = coord_data(runs)           # the numbers behind it

Drawn when the runs differ in model.d_model and log `act_rms/layer_{i}` / `act_rms/logits` (experiments/run/eval_lm.py:
the RMS of each block's output and of the logits on the first eval batch). x: d_model (log2 axis); y: each run's
act_rms at its first evaluation (log axis), one line per layer through the mean over the runs of each width, its
least-squares slope of log RMS vs log d_model in the legend. One panel per combination of the other config keys
that differ (model.param sp / mup; an lr too, in an lr-transfer sweep); d_model, d_head and d_mlp grow with the
width and never make panels. Under μP the lines stay flat; under SP they climb with width.
The means take a panel's completed runs (its running ones when none has completed; stats.stat_runs); diverged,
interrupted and failed runs are × at their own values, never averaged in (a first eval may predate a divergence).
Not handled here: which runs are compared (report.py), the statistic itself (eval_lm.py), evaluations after the
first (the coordinate check is about the start of training; set train.eval_interval small).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import FuncFormatter

from experiments.compare import plots
from experiments.compare.grouping import differing_keys, group_runs
from experiments.compare.runs import EXCLUDED_STATUSES, Run
from experiments.compare.stats import stat_runs

COORD = "coord.png"
WIDTH = "model.d_model"
SCALED = {WIDTH, "model.d_head", "model.d_mlp"}  # grow with the width: never a panel key
ACT_RMS = re.compile(r"act_rms/(?:layer_(\d+)|logits)$")


def first_eval(run: Run) -> tuple[int | None, dict[str, float]]:
    """(step, {"layer {i}" | "logits": act_rms}) of the first metrics line holding act_rms values; (None, {})."""
    for line in run.metrics:
        values = {f"layer {m[1]}" if m[1] is not None else "logits": float(v) for k, v in line.items()
                  if (m := ACT_RMS.match(k)) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0}
        if values:
            return line.get("step"), values
    return None, {}


def _layer_order(name: str) -> tuple[int, int]:
    return (1, 0) if name == "logits" else (0, int(name.split()[1]))


def coord_data(runs: list[Run]) -> tuple[list[dict[str, Any]], list[int]]:
    """Per panel {label, lines: {layer: [(d_model, mean, n)]}, bad: {layer: [(d_model, value)]}}, the panels with a
    layer seen at two widths or more only; and the sorted steps of the first evaluations used."""
    keys = [k for k in differing_keys(runs) if k not in SCALED]
    panels, steps = [], set()
    for g in group_runs([r for r in runs if isinstance(r.flat.get(WIDTH), int)], keys):
        good: dict[str, dict[int, list[float]]] = {}
        bad: dict[str, list[tuple[int, float]]] = {}
        counted = {id(r) for r in stat_runs(g)}
        for r in g.runs:
            step, values = first_eval(r)
            if not values or (id(r) not in counted and r.status not in EXCLUDED_STATUSES):
                continue
            steps.add(step)
            for layer, v in values.items():
                if id(r) in counted:
                    good.setdefault(layer, {}).setdefault(r.flat[WIDTH], []).append(v)
                else:
                    bad.setdefault(layer, []).append((r.flat[WIDTH], v))
        lines = {layer: [(w, float(np.mean(vs)), len(vs)) for w, vs in sorted(by_width.items())]
                 for layer, by_width in sorted(good.items(), key=lambda kv: _layer_order(kv[0]))}
        if any(len(points) > 1 for points in lines.values()):
            panels.append({"label": g.label, "lines": lines, "bad": bad})
    return panels, sorted(s for s in steps if s is not None)


def slope(points: list[tuple[int, float, int]]) -> float:
    """Least-squares slope of log(mean) vs log(d_model). Example: slope([(64, 1.0, 1), (256, 4.0, 1)]) -> 1.0"""
    xs, ys = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(xs, ys, 1)[0])


def plot_coord(path: Path, panels: list[dict[str, Any]], title: str) -> Path:
    fig, axes = plots._panel_grid(len(panels), width=5.2, height=4.2)
    layers = sorted({layer for p in panels for layer in p["lines"] if layer != "logits"}, key=_layer_order)
    cmap = plots.plt.get_cmap("viridis")
    colors = {layer: cmap(0.85 * i / max(1, len(layers) - 1)) for i, layer in enumerate(layers)}
    colors["logits"] = "#D55E00"
    values = [v for p in panels for pts in p["lines"].values() for _, v, _ in pts]
    values += [v for p in panels for pts in p["bad"].values() for _, v in pts]
    for ax, p in zip(axes, panels):
        for layer, pts in p["lines"].items():
            ws, means = [w for w, _, _ in pts], [m for _, m, _ in pts]
            label = f"{layer}: slope {slope(pts):+.2f}" if len(pts) > 1 else layer
            ax.plot(ws, means, color=colors[layer], marker="o", ms=5, lw=1.8, label=label)
        for layer, pts in p["bad"].items():
            ax.scatter([w for w, _ in pts], [v for _, v in pts], color=colors.get(layer, "grey"), **plots.BAD_MARK)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        widths = sorted({w for pts in p["lines"].values() for w, _, _ in pts})
        ax.set_xticks(widths)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_ylim(min(values) / 1.5, max(values) * 1.5)  # the same y range in every panel
        plots._plain_log_ticks(ax.yaxis)
        ax.set_xlabel("d_model (log2 scale)")
        ax.set_title(p["label"], fontsize=11)
        if any(p["bad"].values()):
            ax.scatter([], [], color="grey", label="diverged / interrupted / failed run", **plots.BAD_MARK)
        ax.legend(loc="best", fontsize=8)
    axes[0].set_ylabel("activation RMS (log scale)")
    fig.suptitle(title, fontweight="bold")
    return plots._save(fig, path, legend=False)


def draw_coord(out: Path, runs: list[Run]) -> tuple[dict[str, str] | None, str | None]:
    """Draw coord.png when it applies: (figure, None); else (None, the skipped note)."""
    if WIDTH not in differing_keys(runs):
        return None, "coordinate check: skipped (the runs do not differ in model.d_model)"
    panels, steps = coord_data(runs)
    if not panels:
        return None, ("coordinate check: skipped (no two widths with act_rms/... logged at an evaluation; runs "
                      "log it from the first eval on)")
    at = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}–{steps[-1]}" if steps else "first eval"
    title = f"Coordinate check: activation RMS vs width at the first evaluation ({at})"
    plot_coord(out / COORD, panels, title)
    return {"file": COORD, "title": title,
            "caption": "The RMS of each block's output (act_rms/layer_{i}) and of the logits (act_rms/logits) on the "
                       "first eval batch of each run's first evaluation, against d_model; a line is the mean over "
                       "the runs of a width, its slope the least-squares slope of log RMS vs log d_model. Flat lines "
                       "(slope ~0) are μP's promise (Yang et al. 2022, Fig. 5); under SP they climb with width. "
                       "× marks diverged/interrupted/failed runs, not in the means."}, None
