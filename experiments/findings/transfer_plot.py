"""mup_transfer.png, the figure of finding mup_lr_transfer_v2: each width's basin under SP and under μP, and where
its optimum sits, with the seed bootstrap's interval.

    data = transfer_data(records, params, widths, grid, seeds, key)   # plain data: what the figure draws
    plot_transfer(path, data, grid)                                     # three panels
    draw_sweep(sweep_dir, out_dir, ...)                                 # both, from a finished sweep's runs

Panels 1–2 (SP, μP): the metric (`key`, e.g. final test/loss) against lr on a log2 axis, one line per width through
the seed-mean values (lr_bootstrap.mean_curve of lr_transfer.basin per seed), its refined optimum ringed (a red
star at a grid edge). Panel 3: the optimum's log2 lr against d_model (log2 axis) per parametrization, with its 95%
bootstrap interval as an error bar and the OLS line whose slope the rule reads. Artists carry gids (`mean sp d64`,
`optimum sp d64`, `optima sp`, `fit sp`) so tests read the drawn data. Not handled: the verdict
(claims/mup_lr_transfer_v2.py); which runs a sweep holds (experiments.compare).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from experiments.compare import group_runs, read_runs
from experiments.compare.grouping import PALETTE
from experiments.compare.plots import MARKERS, _save, plt
from experiments.findings.evidence import RunRecord, records_from_groups
from experiments.findings.lr_bootstrap import mean_curve, seed_curves, transfer
from experiments.findings.lr_transfer import optimum

FIGURE = "mup_transfer.png"
EDGE_COLOR = "#d62728"
TITLES = {"sp": "SP (standard parametrization)", "mup": "μP (base width 64)"}


def transfer_data(records: Sequence[RunRecord], params: Sequence[str], widths: Sequence[int], grid: Sequence[float],
                  seeds: Sequence[int], key: str, n_boot: int = 2000, rng_seed: int = 0) -> dict[str, Any]:
    """{"key", "params": [{"param", "slope": Interval, "widths": [{"width", "mean": [(lr, value)] (finite),
    "optimum": Optimum | None, "interval": Interval}]}]}."""
    out = []
    for p in params:
        curves = {w: seed_curves(records, {"model.param": p, "model.d_model": w}, grid, seeds, key) for w in widths}
        t = transfer(curves, n_boot=n_boot, level=0.95, rng_seed=rng_seed)
        rows = []
        for w, cs in curves.items():
            mean = mean_curve(cs)
            rows.append({"width": w, "mean": [(lr, v) for lr, v in mean if v is not None and math.isfinite(v)],
                         "optimum": optimum(mean), "interval": t.optima[w]})
        out.append({"param": p, "slope": t.slope, "widths": rows})
    return {"key": key, "params": out}


def plot_transfer(path: Path, data: dict[str, Any], grid: Sequence[float]) -> Path:
    panels = data["params"]
    fig, axes = plt.subplots(1, len(panels) + 1, figsize=(5.6 * (len(panels) + 1), 5.0), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        p = panel["param"]
        for i, w in enumerate(panel["widths"]):
            color, tag = PALETTE[i % len(PALETTE)], f"{p} d{w['width']}"
            if w["mean"]:
                xs, ys = zip(*w["mean"])
                ax.plot(xs, ys, color=color, marker=MARKERS[i % len(MARKERS)], lw=1.6, ms=4,
                        label=f"d_model {w['width']}", gid=f"mean {tag}")
            o = w["optimum"]
            if o is not None:
                style = (dict(s=200, marker="*", color=EDGE_COLOR, edgecolors="black") if o.edge else
                         dict(s=150, facecolors="none", edgecolors=color, linewidths=2.0))
                ax.scatter([o.lr], [o.loss], zorder=5, gid=f"optimum {tag}", **style)
        ax.set_title(TITLES.get(p, p), fontsize=11)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(grid), [f"{lr:g}" for lr in grid], rotation=40)
        ax.minorticks_off()
        ax.set_xlabel("learning rate (log2 axis)")
        ax.set_ylabel(f"{data['key']} (seed mean)")
    ax = axes[0][-1]
    for i, panel in enumerate(panels):
        p, color = panel["param"], PALETTE[i % len(PALETTE)]
        pts = [(w["width"], w["interval"]) for w in panel["widths"] if w["interval"].point is not None]
        if not pts:
            continue
        xs = [w for w, _ in pts]
        ys = [iv.point for _, iv in pts]
        err = [[iv.point - iv.low if iv.low is not None else 0 for _, iv in pts],
               [iv.high - iv.point if iv.high is not None else 0 for _, iv in pts]]
        bars = ax.errorbar(xs, ys, yerr=err, color=color, marker="o", capsize=4, ls="none",
                           label=f"{p}: slope {panel['slope'].text()}/doubling")
        bars.lines[0].set_gid(f"optima {p}")  # the points (not their caps and bars)
        s = panel["slope"].point
        if s is not None:
            mx = sum(math.log2(x) for x in xs) / len(xs)
            my = sum(ys) / len(ys)
            ax.plot(xs, [my + s * (math.log2(x) - mx) for x in xs], color=color, ls="--", lw=1.2, gid=f"fit {p}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_model (log2 axis)")
    ax.set_ylabel("optimal log2 lr [95% bootstrap interval]")
    ax.set_title("Optimum against width (OLS fit dashed)", fontsize=11)
    return _save(fig, path)  # one legend below the panels (the widths once, then each slope)


def draw_sweep(sweep_dir: Path, out_dir: Path, by: Sequence[str], params: Sequence[str], widths: Sequence[int],
               grid: Sequence[float], seeds: Sequence[int], key: str, n_boot: int = 2000,
               rng_seed: int = 0) -> dict[str, Any]:
    """mup_transfer.png in out_dir from the runs of sweep_dir; {"figure": its name, "rows": the optima drawn}."""
    records = records_from_groups(group_runs(read_runs([str(sweep_dir)]), list(by)), list(by))
    data = transfer_data(records, params, widths, grid, seeds, key, n_boot, rng_seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot_transfer(out_dir / FIGURE, data, grid)
    rows = [{"param": p["param"], "width": w["width"], "log2_lr": w["interval"].point, "low": w["interval"].low,
             "high": w["interval"].high} for p in data["params"] for w in p["widths"]]
    return {"figure": FIGURE, "rows": rows}
