"""basin.png: the learning-rate sensitivity of each arm of a tuned sweep (matplotlib; imported only when a report
is built, as figures.py is).

    figure = draw_basin(out_dir, tuned)   # {file, title, caption}, or None when no tuning run has a finite loss

One line per arm through the mean final val/loss of each lr (log x axis), one faint dot per tuning run, × at the top
for an lr where a run diverged, the chosen best lr ringed; a best lr still at an edge of the grid is drawn as a red
star labelled "edge" (the true optimum may lie beyond it). The declared grid is shaded, so widened points stand
outside it. A sweep with a confirm phase adds, per arm, a dashed line through the confirm runs' mean losses (full
budget, so lower than the tuning runs'), the full-horizon best as a filled diamond (a red one labelled "confirm
edge" at an end of the lrs confirmed). Data: compare/tuning.py's basin_data (from tuning.json). Not handled here:
which runs are compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from experiments.compare.grouping import PALETTE
from experiments.compare.plots import BAD_MARK, MARKERS, _plain_log_ticks, _save, plt
from experiments.compare.tuning import BASIN, Tuned, basin_data

EDGE_COLOR = "#d62728"


def plot_basin(path: Path, arms: list[dict[str, Any]], title: str) -> Path:
    fig, ax = plt.subplots(figsize=(9.5, 5.4))
    finite = [v for a in arms for _, v in [*a["points"], *a["seeds"], *a.get("confirm", [])]]
    top = max(finite) if finite else 1.0
    span = (top - min(finite)) if len(finite) > 1 else 1.0
    lo, hi = min(a["grid"][0] for a in arms), max(a["grid"][1] for a in arms)
    ax.axvspan(lo, hi, color="0.93", zorder=0, label="declared grid")
    edge_seen = interior_seen = False
    for a in arms:
        color, marker = PALETTE[a["index"] % len(PALETTE)], MARKERS[a["index"] % len(MARKERS)]
        if a["points"]:
            xs, ys = zip(*a["points"])
            ax.plot(xs, ys, color=color, marker=marker, lw=1.8, ms=6, zorder=3, label=a["label"])
        if a["seeds"]:
            xs, ys = zip(*a["seeds"])
            ax.scatter(xs, ys, color=color, s=14, alpha=0.45, zorder=2)
        for lr in [*a["diverged"], *a.get("confirm_diverged", [])]:
            ax.scatter([lr], [top + 0.08 * span], color=color, **BAD_MARK)
        _confirm(ax, a, color)
        best = dict(a["points"]).get(a["best"]) if a["best"] is not None else None
        if best is None:
            continue
        if a["edge"] is None:
            interior_seen = True
            ax.scatter([a["best"]], [best], s=190, facecolors="none", edgecolors=color, linewidths=2.2, zorder=5)
        else:
            edge_seen = True
            ax.scatter([a["best"]], [best], s=260, marker="*", color=EDGE_COLOR, edgecolors="black", linewidths=0.8,
                       zorder=6)
            ax.annotate(f"edge ({a['edge']})", (a["best"], best), textcoords="offset points", xytext=(8, -14),
                        color=EDGE_COLOR, fontsize=9, fontweight="bold")
    if interior_seen:
        ax.scatter([], [], s=190, facecolors="none", edgecolors="0.3", linewidths=2.2, label="best lr (interior)")
    if edge_seen:
        ax.scatter([], [], s=260, marker="*", color=EDGE_COLOR, edgecolors="black", label="best lr at a grid edge")
    confirmed = any(a.get("confirm") for a in arms)
    if confirmed:
        ax.plot([], [], color="0.3", ls="--", marker="D", mfc="white", label="confirm runs (full budget)")
        ax.scatter([], [], s=110, marker="D", color="0.3", edgecolors="black", label="full-horizon best")
    if any(a["diverged"] or a.get("confirm_diverged") for a in arms):
        ax.scatter([], [], color="grey", label="diverged (+inf)", **BAD_MARK)
    ax.set_xscale("log")
    ax.margins(x=0.08, y=0.12)
    _plain_log_ticks(ax.xaxis)
    ax.set_xlabel(f"{arms[0]['key']} (log scale)")
    ax.set_ylabel("final val/loss of the tuning and confirm runs" if confirmed else "final val/loss of the tuning runs")
    ax.set_title(title)
    return _save(fig, path)


def _confirm(ax: Any, a: dict[str, Any], color: str) -> None:
    """The arm's confirm runs (basin_data's confirm keys): a dashed line, the full-horizon best a filled diamond, red
    and labelled at a confirm edge."""
    if not a.get("confirm"):
        return
    xs, ys = zip(*a["confirm"])
    ax.plot(xs, ys, color=color, ls="--", marker="D", ms=5, mfc="white", lw=1.4, zorder=3)
    best = dict(a["confirm"]).get(a["confirmed"]) if a.get("confirmed") is not None else None
    if best is None:
        return
    edge = a.get("confirm_edge")
    ax.scatter([a["confirmed"]], [best], s=110, marker="D", color=EDGE_COLOR if edge else color,
               edgecolors="black", linewidths=0.8, zorder=6)
    if edge:
        ax.annotate(f"confirm edge ({edge})", (a["confirmed"], best), textcoords="offset points", xytext=(8, 6),
                    color=EDGE_COLOR, fontsize=9, fontweight="bold")


def draw_basin(out: Path, tuned: list[Tuned]) -> dict[str, str] | None:
    arms = basin_data(tuned)
    if not any(a["points"] or a["diverged"] for a in arms):
        return None
    title = "Learning-rate sensitivity (the basin)"
    plot_basin(out / BASIN, arms, title)
    confirm = (" Dashed, diamonds: the confirm runs (the best lr, x2 and /2 of it, at the full budget on the tuning "
               "seeds); filled diamond = the full-horizon best, the lr the final runs used (red: at an end of the "
               "lrs confirmed)." if any("confirm" in a for a in arms) else "")
    used = "the best lr at the tuning horizon" if confirm else "the best lr the final runs used"
    return {"file": BASIN, "title": title,
            "caption": "Final val/loss of each arm's tuning runs against the learning rate (log scale): line = mean "
                       f"over the tuning seeds, dots = single runs, × = diverged, ring = {used}; a red star marks "
                       "a best lr still at an edge of the grid after widening (the optimum may lie beyond it). Grey "
                       "band: the declared grid; points outside it were widened. Tuning runs train a fraction of the "
                       f"budget, so the basin is that horizon's.{confirm}"}
