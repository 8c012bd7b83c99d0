"""The learning-rate transfer reading (finding mup_lr_transfer): where the loss-vs-lr basin bottoms out at each
width, and how far that optimum moves as the width grows.

    curve = basin(records, {"model.param": "mup", "model.d_model": 256}, grid, seed=0)   # [(lr, loss | inf | None)]
    opt = optimum(curve)          # Optimum: log2 lr refined by a parabola, its loss, edge / unrefined flags
    shift([opt_64, opt_128, ...]) # max − min of the optima's log2 lr: grid steps when the grid is x2 apart

**Curve.** Per declared grid lr, the final val/loss of the run of that seed (`seed=None`: the mean over the seeds
with a result, the seed-mean curve). A diverged run, or one whose final loss is not finite, counts as +inf (so a
seed-mean with a diverged seed is +inf); a point without a result (no run, failed, interrupted) is None.
**Optimum.** The grid argmin among the points with a value (ties go to the smaller lr; all +inf: no optimum).
When both grid neighbours have finite values, the optimum is the vertex of the parabola through the argmin and
its two neighbours in x = log2(lr) (with y₋, y₀, y₊ at x₀ − h, x₀, x₀ + h: x* = x₀ + h (y₋ − y₊) / (2 (y₋ − 2y₀ + y₊)),
which lies within half a step of x₀: ties go to the smaller lr, so y₋ > y₀ ≤ y₊). An argmin at the first or last lr
stays there and is flagged `edge` (the true optimum may lie beyond the grid); an interior argmin whose neighbour
is +inf or None stays at its grid lr and is flagged `unrefined`.
**Shift.** max − min of the optima's x over the widths, in log2 units (= grid steps of a x2 grid); None unless
every width has an optimum.
Not handled: which curves the rule compares and its verdict (mup_lr_transfer.py), drawing (mup_basin.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from experiments.findings.evidence import RunRecord, matches
from experiments.rundir.layout import RunStatus

LOSS = "final val/loss"
Curve = list[tuple[float, float | None]]  # [(lr, final val/loss; math.inf: diverged; None: no result)]


@dataclass(frozen=True)
class Optimum:
    log2_lr: float  # x* (refined) in log2(lr)
    loss: float  # the parabola's value at x* (the grid loss when not refined)
    index: int  # the grid argmin
    edge: str | None = None  # "low" | "high": the argmin is the grid's first / last lr
    unrefined: bool = False  # interior argmin without two finite neighbours: x* = its grid lr

    @property
    def lr(self) -> float:
        return 2.0 ** self.log2_lr

    @property
    def flag(self) -> str:
        """'' | 'edge (low)' | 'edge (high)' | 'unrefined'."""
        return f"edge ({self.edge})" if self.edge else "unrefined" if self.unrefined else ""


def run_loss(r: RunRecord, key: str = LOSS) -> float | None:
    """A run's final loss for the basin: +inf when it diverged (or its loss is not finite), None without a result."""
    v = r.values.get(key)
    if r.status == RunStatus.DIVERGED or (isinstance(v, (int, float)) and not math.isfinite(v)):
        return math.inf
    return r.get(key) if r.status == RunStatus.COMPLETED else None


def basin(records: Sequence[RunRecord], keys: dict[str, Any], grid: Sequence[float], seed: int | None = None,
          key: str = LOSS) -> Curve:
    """The curve of the runs matching `keys` over `grid`: one seed's losses, or (seed None) the seed means."""
    curve: Curve = []
    for lr in grid:
        losses = [run_loss(r, key) for r in records
                  if matches(r.keys, keys) and (seed is None or r.seed == seed)
                  and r.get("lr") is not None and math.isclose(r.get("lr"), lr, rel_tol=1e-9)]
        losses = [v for v in losses if v is not None]
        curve.append((lr, sum(losses) / len(losses) if losses else None))
    return curve


def optimum(curve: Curve) -> Optimum | None:
    """The refined optimum of a curve over an increasing grid (module docstring); None when no point is finite."""
    have = [(i, v) for i, (_, v) in enumerate(curve) if v is not None]
    if not have or all(v == math.inf for _, v in have):
        return None
    i = min(have, key=lambda iv: (iv[1], iv[0]))[0]
    x = [math.log2(lr) for lr, _ in curve]
    y0 = curve[i][1]
    if i in (0, len(curve) - 1):
        return Optimum(x[i], y0, i, edge="low" if i == 0 else "high")
    y_lo, y_hi = curve[i - 1][1], curve[i + 1][1]
    if y_lo is None or y_hi is None or not (math.isfinite(y_lo) and math.isfinite(y_hi)):
        return Optimum(x[i], y0, i, unrefined=True)
    return Optimum(*_vertex((x[i - 1], y_lo), (x[i], y0), (x[i + 1], y_hi)), i)


def _vertex(p: tuple[float, float], q: tuple[float, float], r: tuple[float, float]) -> tuple[float, float]:
    """(x, y) of the vertex of the parabola through three points with p.x < q.x < r.x and p.y > q.y <= r.y (so it
    opens upward)."""
    (x1, y1), (x2, y2), (x3, y3) = p, q, r
    d1, d3 = (y1 - y2) / (x1 - x2), (y3 - y2) / (x3 - x2)  # slopes from q: d1 < 0 <= d3
    a = (d3 - d1) / (x3 - x1)  # the x² coefficient, > 0
    b = d1 - a * (x1 - x2)  # slope at q: y = y2 + b (x - x2) + a (x - x2)²
    dx = -b / (2 * a)
    return x2 + dx, y2 + b * dx + a * dx * dx


def shift(optima: Sequence[Optimum | None]) -> float | None:
    """max − min of the optima's log2 lr (None when one is missing)."""
    if not optima or any(o is None for o in optima):
        return None
    xs = [o.log2_lr for o in optima]
    return max(xs) - min(xs)
