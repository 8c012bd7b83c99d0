"""Picking an arm's best learning rate from its tuning runs, and widening a grid whose best point is at an edge.
Pure functions over numbers (no Hydra, no files): the tuned sweep (tune.py) and its tests call them.

    losses = point_losses(runs)             # lr -> mean final val loss over the arm's tuning seeds
    best, edge = pick_best(losses)          # (0.003, None): interior;  (0.01, "high"): at the grid's high edge
    next_point([1e-3, 3e-3, 1e-2], "high")  # 0.03333: one more log step beyond the edge, same ratio

Rules: a diverged run, or one whose final val loss is NaN/inf, counts as +inf (its lr is too high, not missing);
a failed, interrupted or never-started run has no result and is left out (a point whose runs all lack a result is
no point). The best lr is the lowest mean (ties: the smaller lr, the safer one). The edges are those of the measured
points. An arm whose every measured point diverged has no best lr; its edge is "low" (widen downwards).
Not handled: noise-aware picking (one seed per point is the declared cost; say so where the result is shown).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable

from experiments.rundir.layout import RunStatus
from experiments.sweep.tuning_record import TuningRun

SIG_DIGITS = 4  # a widened point is rounded to this many significant digits (0.03333, not 0.033333333333333)


def run_loss(run: TuningRun) -> float | None:
    """The value a tuning run contributes: its final val loss, +inf when it diverged or its loss is not finite,
    None when it has no result (failed, interrupted, not started)."""
    status = RunStatus.of(run.status)
    if status is None or not status.has_result:
        return None
    if status == RunStatus.DIVERGED or run.final_val_loss is None or not math.isfinite(run.final_val_loss):
        return math.inf
    return float(run.final_val_loss)


def point_losses(runs: Iterable[TuningRun]) -> dict[float, float]:
    """lr -> mean of run_loss over the runs with a result at that lr (+inf if any of them diverged); ascending lr.
    Example: runs at lr 1e-3 with losses 3.0 and 3.2, at 1e-2 one diverged -> {0.001: 3.1, 0.01: inf}"""
    by_lr: dict[float, list[float]] = defaultdict(list)
    for run in runs:
        loss = run_loss(run)
        if loss is not None:
            by_lr[run.lr].append(loss)
    return {lr: math.fsum(v) / len(v) if all(map(math.isfinite, v)) else math.inf for lr, v in sorted(by_lr.items())}


def pick_best(losses: dict[float, float]) -> tuple[float | None, str | None]:
    """(best lr, edge): the lr of the lowest mean loss, and "low" / "high" when it is the smallest / largest
    measured lr (None: interior). No measured point: (None, None). Every point +inf: (None, "low").
    Example: pick_best({1e-3: 3.2, 3e-3: 3.0, 1e-2: 3.1}) -> (0.003, None)"""
    if not losses:
        return None, None
    lrs = sorted(losses)
    finite = [lr for lr in lrs if math.isfinite(losses[lr])]
    if not finite:
        return None, "low"
    best = min(finite, key=lambda lr: (losses[lr], lr))
    if len(lrs) == 1:
        return best, "low"  # one point is both edges; below is the safe direction
    return best, "low" if best == lrs[0] else "high" if best == lrs[-1] else None


def next_point(grid: list[float], side: str) -> float:
    """One more point beyond `side` of the ascending `grid`, a log step of the ratio between the edge point and its
    neighbour, rounded to SIG_DIGITS significant digits.
    Example: next_point([3e-4, 1e-3, 3e-3, 1e-2], "high") -> 0.03333; (..., "low") -> 9e-05"""
    lo, hi = (grid[0], grid[1]) if side == "low" else (grid[-2], grid[-1])
    value = lo * lo / hi if side == "low" else hi * hi / lo
    return float(f"{value:.{SIG_DIGITS}g}")


def loss_spread(losses: dict[float, float]) -> float | None:
    """max - min of the finite mean losses (how much the lr matters over the grid); None with fewer than 2."""
    finite = [v for v in losses.values() if math.isfinite(v)]
    return max(finite) - min(finite) if len(finite) >= 2 else None
