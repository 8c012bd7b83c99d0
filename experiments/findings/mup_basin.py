"""mup_basin.png, the figure of finding mup_lr_transfer: the loss-vs-lr basin of each width under SP and under μP.

    panels = basin_panels(records, params, widths, grid, seeds)   # plain data: what each panel draws
    plot_basins(path, panels)                                     # two panels (SP, μP), log2 lr axis
    draw_sweep(sweep_dir, out_dir, ...)                           # both, from a finished sweep's runs

One panel per parametrization, final val/loss against lr (log2 axis, the grid's lrs as ticks): per width a line
through the seed-mean losses, each seed's loss as a faint point, × at the top of the panel for an lr where a seed
diverged, and the seed-mean curve's refined optimum (lr_transfer.optimum) ringed, with a dotted vertical line at its
lr; an optimum at a grid edge is a red star labelled "edge". The panel title gives the seed-mean shift of the
optimum over the widths. Artists carry gids (`mean d64`, `seeds d64`, `diverged d64`, `optimum d64`) so tests read
the drawn data. Not handled: the verdict (mup_lr_transfer.py); which runs a sweep holds (experiments.compare).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from experiments.compare import group_runs, read_runs
from experiments.compare.grouping import PALETTE
from experiments.compare.plots import BAD_MARK, MARKERS, _save, plt
from experiments.findings.evidence import RunRecord, records_from_groups
from experiments.findings.lr_transfer import basin, optimum, shift

FIGURE = "mup_basin.png"
EDGE_COLOR = "#d62728"
TITLES = {"sp": "SP (standard parametrization)", "mup": "μP (base width 64)"}


def basin_panels(records: Sequence[RunRecord], params: Sequence[str], widths: Sequence[int],
                 grid: Sequence[float], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Per parametrization: {"param", "shift" (seed mean, log2 steps), "widths": [{"width", "mean": [(lr, loss)]
    (finite seed means), "seeds": [(lr, loss)] (finite), "diverged": [lr] (a seed +inf), "optimum": Optimum}]}."""
    panels = []
    for param in params:
        rows, optima = [], []
        for w in widths:
            keys = {"model.param": param, "model.d_model": w}
            mean = basin(records, keys, grid)
            per_seed = [basin(records, keys, grid, seed=s) for s in seeds]
            opt = optimum(mean)
            optima.append(opt)
            rows.append({"width": w, "mean": [(lr, v) for lr, v in mean if v is not None and math.isfinite(v)],
                         "seeds": [(lr, v) for c in per_seed for lr, v in c if v is not None and math.isfinite(v)],
                         "diverged": sorted({lr for c in per_seed for lr, v in c if v == math.inf}),
                         "optimum": opt})
        panels.append({"param": param, "shift": shift(optima), "widths": rows})
    return panels


def plot_basins(path: Path, panels: list[dict[str, Any]], grid: Sequence[float]) -> Path:
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 5.2), sharey=True, squeeze=False)
    finite = [v for p in panels for w in p["widths"] for _, v in w["mean"] + w["seeds"]]
    top = max(finite) if finite else 1.0
    span = (top - min(finite)) if len(finite) > 1 else 1.0
    for ax, panel in zip(axes[0], panels):
        labelled: set[float] = set()  # edge lrs already labelled in this panel
        for i, w in enumerate(panel["widths"]):
            color, marker, tag = PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)], f"d{w['width']}"
            if w["mean"]:
                xs, ys = zip(*w["mean"])
                ax.plot(xs, ys, color=color, marker=marker, lw=1.8, ms=5, zorder=3, label=f"d_model {w['width']}",
                        gid=f"mean {tag}")
            if w["seeds"]:
                xs, ys = zip(*w["seeds"])
                ax.scatter(xs, ys, color=color, s=14, alpha=0.35, zorder=2, gid=f"seeds {tag}")
            if w["diverged"]:
                ax.scatter(w["diverged"], [top + 0.08 * span] * len(w["diverged"]), color=color, gid=f"diverged {tag}",
                           **BAD_MARK)
            opt = w["optimum"]
            if opt is None:
                continue
            ax.axvline(opt.lr, color=color, ls=":", lw=1.0, zorder=1)
            if opt.edge:
                ax.scatter([opt.lr], [opt.loss], s=230, marker="*", color=EDGE_COLOR, edgecolors="black",
                           linewidths=0.8, zorder=6, gid=f"optimum {tag}")
                if opt.lr not in labelled:
                    labelled.add(opt.lr)
                    ax.annotate("edge", (opt.lr, opt.loss), textcoords="offset points", xytext=(7, -13),
                                color=EDGE_COLOR, fontsize=9, fontweight="bold")
            else:
                ax.scatter([opt.lr], [opt.loss], s=170, facecolors="none", edgecolors=color, linewidths=2.0,
                           zorder=5, gid=f"optimum {tag}")
        s = panel["shift"]
        ax.set_title(f"{TITLES.get(panel['param'], panel['param'])}\noptimum shift over widths: "
                     + ("—" if s is None else f"{s:.2f} grid steps"), fontsize=11)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(grid), [f"{lr:g}" for lr in grid], rotation=30)
        ax.minorticks_off()
        ax.set_xlabel("learning rate (log2 axis; grid ×2 apart)")
    axes[0][0].set_ylabel("final val/loss (seed mean; seeds faint)")
    axes[0][0].scatter([], [], s=170, facecolors="none", edgecolors="0.3", linewidths=2.0, label="refined optimum")
    if any(w["optimum"] and w["optimum"].edge for p in panels for w in p["widths"]):
        axes[0][0].scatter([], [], s=230, marker="*", color=EDGE_COLOR, edgecolors="black",
                           label="optimum at a grid edge")
    if any(w["diverged"] for p in panels for w in p["widths"]):
        axes[0][0].scatter([], [], color="grey", label="a seed diverged (+inf)", **BAD_MARK)
    return _save(fig, path)


def draw_sweep(sweep_dir: Path, out_dir: Path, by: Sequence[str], params: Sequence[str], widths: Sequence[int],
               grid: Sequence[float], seeds: Sequence[int]) -> dict[str, Any]:
    """mup_basin.png in out_dir from the runs of sweep_dir; {"figure": its name, "rows": the optima drawn}."""
    records = records_from_groups(group_runs(read_runs([str(sweep_dir)]), list(by)), list(by))
    panels = basin_panels(records, params, widths, grid, seeds)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_basins(out_dir / FIGURE, panels, grid)
    rows = [{"param": p["param"], "width": w["width"], "optimum_lr": w["optimum"].lr if w["optimum"] else None,
             "flag": w["optimum"].flag if w["optimum"] else "no optimum"} for p in panels for w in p["widths"]]
    return {"figure": FIGURE, "rows": rows}
