"""How far the optimal learning rate moves with width, with an interval: the seed bootstrap of the lr-transfer
reading (finding mup_lr_transfer_v2; the point reading is lr_transfer.py's, reused as it is).

    per_seed = seed_curves(records, {"model.param": "sp", "model.d_model": 256}, grid, seeds, "final test/loss")
    t = transfer({w: seed_curves(...) for w in widths}, n_boot=2000, rng_seed=0)
    t.optima[256]            # Interval of the optimum's log2 lr at d256: point, low, high, edge flags
    t.slope                  # Interval of the OLS slope of the optimum's log2 lr against log2 width

**Point estimates.** Per width, the seed-mean curve (the mean over the seeds with a result at each lr; +inf if one
of them diverged) and its refined optimum (lr_transfer.optimum: the parabola's vertex through the grid argmin and
its neighbours, an argmin at a grid end stays there flagged as an edge). The **slope** is the ordinary
least-squares slope of the optima's log2 lr against log2 width: grid steps per doubling of the width for a ×2 grid
(Adam under the standard parametrization predicts −1, μP 0).
**Interval.** The seeds are the unit that is resampled: `n_boot` times, draw len(seeds) seed indices with
replacement (one draw for all widths: a seed index names the same position in every width's list), rebuild every
width's seed-mean curve from the drawn seeds (a seed drawn twice counts twice), and read the optima and the slope
again; a percentile interval at `level` (numpy's linear interpolation between order statistics). A resample in which
some width has no optimum (every drawn seed diverged everywhere) gives no slope: it is left out and counted
(`dropped`). An optimum at a grid edge enters at the edge, a bound: `edges` counts the resamples with one.
Deterministic: numpy's PCG64 seeded with `rng_seed`.
Not handled: which widths and parametrizations a finding compares, or what an interval means for its claim
(claims/mup_lr_transfer_v2.py); with k seeds there are at most C(2k−1, k) distinct resamples (126 at k = 5), so the
percentiles are coarse at few seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from experiments.findings.evidence import RunRecord
from experiments.findings.lr_transfer import Curve, basin, optimum

SeedCurves = list[Curve]  # one curve per seed, over the same grid, in the order of the seeds


@dataclass(frozen=True)
class Interval:
    point: float | None  # the reading on the seed-mean curve(s); None when it cannot be read
    low: float | None  # the percentile interval's ends; None without a resample that gives a value
    high: float | None
    edge: bool = False  # the point optimum sits at a grid end (a bound)

    def text(self, digits: int = 2) -> str:
        """'-0.93 [-1.20, -0.61]' (a trailing ' edge' when the point is a bound)."""
        if self.point is None:
            return "—"
        ci = "[—]" if self.low is None else f"[{self.low:+.{digits}f}, {self.high:+.{digits}f}]"
        return f"{self.point:+.{digits}f} {ci}" + (" edge" if self.edge else "")


@dataclass(frozen=True)
class Transfer:
    optima: dict[int, Interval]  # width -> the optimum's log2 lr
    slope: Interval  # log2 lr per doubling of the width
    n_boot: int
    dropped: int  # resamples without a slope
    edges: int  # resamples with an optimum at a grid edge
    level: float


def seed_curves(records: Sequence[RunRecord], keys: dict[str, Any], grid: Sequence[float], seeds: Sequence[int],
                key: str) -> SeedCurves:
    """Each seed's curve of the runs matching `keys` (lr_transfer.basin with that seed)."""
    return [basin(records, keys, grid, seed=s, key=key) for s in seeds]


def mean_curve(curves: Sequence[Curve]) -> Curve:
    """Per lr, the mean of the curves' values that exist (+inf if one is +inf; None if none exists)."""
    out: Curve = []
    for i, (lr, _) in enumerate(curves[0]):
        vals = [c[i][1] for c in curves if c[i][1] is not None]
        out.append((lr, (math.inf if math.inf in vals else sum(vals) / len(vals)) if vals else None))
    return out


def ols_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ys on xs (at least two distinct xs)."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _read(by_width: Mapping[int, SeedCurves], pick: Sequence[int]) -> tuple[dict[int, Any], float | None]:
    """The optimum per width of the seed-mean curves of the seeds at indices `pick`, and the slope."""
    opts = {w: optimum(mean_curve([curves[i] for i in pick])) for w, curves in by_width.items()}
    if any(o is None for o in opts.values()):
        return opts, None
    return opts, ols_slope([math.log2(w) for w in opts], [o.log2_lr for o in opts.values()])


def transfer(by_width: Mapping[int, SeedCurves], *, n_boot: int = 2000, level: float = 0.95,
             rng_seed: int = 0) -> Transfer:
    """The optima and the slope over the widths of `by_width` (width -> per-seed curves), with seed-bootstrap
    percentile intervals at `level` (module docstring)."""
    k = len(next(iter(by_width.values())))
    point_opts, point_slope = _read(by_width, range(k))
    rng = np.random.Generator(np.random.PCG64(rng_seed))
    draws = {w: [] for w in by_width}
    slopes, dropped, edges = [], 0, 0
    for _ in range(n_boot):
        opts, s = _read(by_width, rng.integers(0, k, size=k).tolist())
        for w, o in opts.items():
            if o is not None:
                draws[w].append(o.log2_lr)
        edges += any(o is not None and o.edge for o in opts.values())
        if s is None:
            dropped += 1
        else:
            slopes.append(s)

    def interval(point: float | None, values: list[float], edge: bool = False) -> Interval:
        if not values:
            return Interval(point, None, None, edge)
        lo, hi = np.percentile(values, [50 * (1 - level), 50 * (1 + level)])
        return Interval(point, float(lo), float(hi), edge)

    optima = {w: interval(None if o is None else o.log2_lr, draws[w], bool(o and o.edge))
              for w, o in point_opts.items()}
    return Transfer(optima, interval(point_slope, slopes), n_boot, dropped, edges, level)
