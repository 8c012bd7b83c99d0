"""Protocol v3's trend across sizes: does a difference between two arms grow or shrink with the model's size?

    t = trend({50_000: [-0.01, -0.02, 0.00], 200_000: [-0.03, -0.02, -0.04], 800_000: [-0.05, -0.06, -0.04]},
              claim="lower")
    t.sizes        # per size: n, the mean difference arm − baseline and its 95% t-interval
    t.slope, t.ci  # the difference's change per doubling of size, with its 95% interval
    t.label        # "grows" | "shrinks" | "no trend detected"
    trend_text(t)  # one sentence for the doc

**Input**: per size (the non-embedding parameter count), the per-seed paired differences arm − baseline at that size
(each seed trains both arms at that size). **Per size**: the mean difference with its 95% t-interval
(experiments.compare.significance.mean_ci; none below 2 seeds or without spread).
**Model**: ordinary least squares on every per-seed difference, d_ij = α + β·log₂(N_i) + ε_ij, ε_ij independent
N(0, σ²) with one σ at every size; β is the change of the difference per doubling of N, with the 95% t-interval
β̂ ± t(0.975; m − 2)·SE(β̂), m the number of differences (scipy.stats.linregress's slope and standard error). It
assumes the seeds are independent across sizes: the runs of one seed number at two sizes are different models, so
their differences count as independent draws (if a seed fixes the same data order at every size, any correlation
this leaves is ignored); and a line in log N, not a curve. Needs at least 2 sizes and 3 differences in all; no
interval when the differences lie on a line up to rounding (significance.zero_spread of the residuals).
**Label**, read in the claim's direction (e = −d for "lower", e = d for "higher"; for "equal", or no claim, e is
the difference signed as its overall mean across sizes is): **grows** when the slope's 95% interval of e lies
entirely above 0 (the effect gets larger with size), **shrinks** when entirely below 0 (smaller, or turning to the
other side), else **no trend detected**.
Not handled: unequal noise across sizes (no weighting: a size with more seeds counts more), per-size verdicts
(outcome.py, called per size by the rule), checking the protocol's span (≥ 3 sizes over ≥ 16×: `span` and
`len(sizes)` report it, the rule decides), extrapolation beyond the sizes run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

LABELS = ("grows", "shrinks", "no trend detected")
CLAIMS = ("lower", "higher", "equal")


@dataclass(frozen=True)
class AtSize:
    """One size's paired differences, summarised."""

    size: float  # non-embedding parameters
    n: int  # seeds (pairs)
    mean: float
    ci: tuple[float, float] | None  # 95% t-interval of the mean; None below 2 seeds or without spread


@dataclass(frozen=True)
class Trend:
    sizes: list[AtSize]  # in increasing size
    slope: float | None  # change of the difference arm − baseline per doubling of size; None: too few points
    ci: tuple[float, float] | None  # 95% interval of the slope; None: too few points or no residual spread
    df: int  # m − 2
    p: float | None  # two-sided p of slope = 0
    label: str  # one of LABELS
    direction: str  # what "grows" means here: "lower" | "higher" (the claim's, or the overall mean's sign)

    @property
    def span(self) -> float:
        """Largest size / smallest."""
        return self.sizes[-1].size / self.sizes[0].size if self.sizes else math.nan


def _points(per_size: Mapping[float, Sequence[float]]) -> dict[float, list[float]]:
    out = {}
    for size, diffs in per_size.items():
        if not (isinstance(size, (int, float)) and math.isfinite(size) and size > 0):
            raise ValueError(f"a size must be a parameter count > 0, got {size!r}")
        v = [float(x) for x in diffs if x is not None and math.isfinite(x)]
        if v:
            out[float(size)] = v
    return dict(sorted(out.items()))


def trend(per_size: Mapping[float, Sequence[float]], claim: str | None = None) -> Trend:
    """The per-size differences and their slope against log₂ size (module docstring). `claim`: "lower", "higher",
    "equal" or None (the last two read "grows" in the direction of the overall mean difference)."""
    import numpy as np
    from scipy import stats

    from experiments.compare.significance import mean_ci, zero_spread

    if claim is not None and claim not in CLAIMS:
        raise ValueError(f"unknown claim {claim!r}; choose from {CLAIMS}")
    points = _points(per_size)
    sizes = [AtSize(s, len(v), sum(v) / len(v), mean_ci(v)) for s, v in points.items()]
    xs = [math.log2(s) for s, v in points.items() for _ in v]
    ys = [d for v in points.values() for d in v]
    overall = sum(ys) / len(ys) if ys else 0.0
    direction = claim if claim in ("lower", "higher") else ("lower" if overall < 0 else "higher")
    m = len(ys)
    if len(points) < 2 or m < 3:
        return Trend(sizes, None, None, max(m - 2, 0), None, "no trend detected", direction)
    fit = stats.linregress(xs, ys)
    slope, se = float(fit.slope), float(fit.stderr)
    resid = np.asarray(ys) - fit.intercept - fit.slope * np.asarray(xs)
    if zero_spread(resid, float(np.abs(ys).max())):  # on a line up to rounding: no spread to put an interval on
        return Trend(sizes, slope, None, m - 2, None, "no trend detected", direction)
    half = float(stats.t.ppf(0.975, m - 2)) * se
    ci = (slope - half, slope + half)
    e_lo, e_hi = (-ci[1], -ci[0]) if direction == "lower" else ci  # the slope of the effect in `direction`
    label = "grows" if e_lo > 0 else "shrinks" if e_hi < 0 else "no trend detected"
    return Trend(sizes, slope, ci, m - 2, float(fit.pvalue), label, direction)


def fmt_size(n: float) -> str:
    """In millions from 10k up, billions from 1e9: 50000 -> '0.05M', 800000 -> '0.8M', 1.2e9 -> '1.2B', 800 -> '800'."""
    if n >= 1e9:
        return f"{n / 1e9:.3g}B"
    return f"{n / 1e6:.3g}M" if n >= 1e4 else f"{n:g}"


def trend_text(t: Trend, unit: str = "nats", digits: int = 3) -> str:
    """One sentence: each size's mean difference with its CI, then the slope with its CI and the label."""
    per = "; ".join(f"{fmt_size(a.size)} {a.mean:+.{digits}f} "
                    + (f"[{a.ci[0]:+.{digits}f}, {a.ci[1]:+.{digits}f}]" if a.ci else "[—]") + f" (n={a.n})"
                    for a in t.sizes)
    if t.slope is None:
        return f"Difference per size: {per}. No slope: fewer than 2 sizes or 3 differences."
    ci = f"[{t.ci[0]:+.{digits}f}, {t.ci[1]:+.{digits}f}]" if t.ci else "[—]"
    return (f"Difference per size: {per}. Slope {t.slope:+.{digits}f} {ci} {unit} per doubling of non-embedding "
            f"parameters (OLS on {t.df + 2} per-seed differences, 95% CI): {t.label} "
            f"(the effect: the arm {t.direction} than the baseline).")
