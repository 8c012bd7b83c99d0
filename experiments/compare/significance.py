"""Is a group's metric different from the baseline's? t-intervals on the difference of means, a verdict, and how
many seeds would settle it.

    difference(values=[3.11, 3.13, 3.15], base=[3.30, 3.32, 3.34], seeds=[0, 1, 2], base_seeds=[0, 1, 2],
               higher_better=False)
    -> Difference(test="paired", diff=-0.19, ci=(-0.19, -0.19), verdict="better", ...)

Handled:
* paired by seed: when both groups ran the same set of distinct seeds (n >= 2), a t-interval on the per-seed
  differences d_i = x_i - y_i: d̄ ± t(0.975, n-1) · s_d / √n;
* otherwise Welch's t-interval: x̄ - ȳ ± t(0.975, ν) · √(s_x²/n_x + s_y²/n_y), ν from Welch–Satterthwaite;
* the two-sided p-value of the same t statistic, and a verdict: `better` / `worse` when the 95% interval excludes
  0 (the sign read through the metric's direction), else `not distinguishable`;
* n < 2 in either group: no interval (there is no spread to estimate), verdict `not distinguishable`;
* zero spread (identical values, or identical per-seed differences): the interval is the point d̄;
* seeds needed: the smallest n per group at which the same test, two-sided at 95%, has 80% power against a true
  difference of the observed size, with the observed spread taken as the truth. Exact power from the noncentral t
  (scipy.stats.nct), not the normal approximation: paired, df = n-1 and noncentrality |d̄|·√n/s_d; unpaired, the
  equal-n two-sample t-test with the pooled variance s_p² = ((n_x-1)s_x² + (n_y-1)s_y²)/(n_x+n_y-2), df = 2n-2 and
  noncentrality |x̄-ȳ|/(s_p·√(2/n)) (Welch's test at equal n is within a seed of it).
Not handled: multiple-comparison correction (each group is one test against the baseline, each at 95%),
non-normal small samples (the t-interval assumes roughly normal values), which runs count (comparison.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats as sps

LEVEL = 0.95  # confidence level of every interval, and 1 - alpha of every test
POWER = 0.8  # the power `seeds_needed` asks for
MAX_SEEDS = 10_000  # seeds_needed gives up (None) beyond this
VERDICTS = ("better", "worse", "not distinguishable")


@dataclass(frozen=True)
class Difference:
    """mean(group) - mean(baseline), in the metric's units, with what the test made of it."""

    test: str | None  # "paired" | "welch" | None (n < 2: no test)
    n: int  # values in the group (pairs, when paired)
    n_base: int  # values in the baseline
    diff: float  # x̄ - ȳ (paired: mean of the per-seed differences, the same number)
    ci: tuple[float, float] | None  # LEVEL interval of diff; None when n < 2
    df: float | None  # degrees of freedom of the t distribution used
    p: float | None  # two-sided p-value of diff = 0
    verdict: str  # one of VERDICTS
    seeds_needed: int | None  # seeds per group for POWER at LEVEL; None: no spread to estimate / no difference / > MAX_SEEDS
    note: str = ""  # why there is no interval or no seeds_needed ("n=1: no interval")


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def mean_ci(values: Sequence[float | None], level: float = LEVEL) -> tuple[float, float] | None:
    """t-interval of a mean: x̄ ± t(1-α/2, n-1)·s/√n over the finite values; None when n < 2.
    Example: [1, 2, 3] -> (2 - 4.303·0.577, 2 + 4.303·0.577) = (-0.484, 4.484)"""
    v = _finite(values)
    if len(v) < 2:
        return None
    half = sps.t.ppf(0.5 + level / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))
    return float(v.mean() - half), float(v.mean() + half)


def t_interval(diff: float, se: float, df: float, level: float = LEVEL) -> tuple[tuple[float, float], float]:
    """(diff ± t(1-α/2, df)·se, two-sided p of diff = 0). se = 0: the point interval, p 0 (diff != 0) or 1."""
    if se == 0:
        return (diff, diff), (0.0 if diff != 0 else 1.0)
    half = sps.t.ppf(0.5 + level / 2, df) * se
    return (float(diff - half), float(diff + half)), float(2 * sps.t.sf(abs(diff / se), df))


def welch(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(x̄ - ȳ, its standard error √(s_x²/n_x + s_y²/n_y), Welch–Satterthwaite df); needs n >= 2 in both."""
    a, b = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)  # squared standard errors of the two means
    se = math.sqrt(a + b)
    df = (a + b) ** 2 / (a**2 / (len(x) - 1) + b**2 / (len(y) - 1)) if se > 0 else float(len(x) + len(y) - 2)
    return float(x.mean() - y.mean()), se, float(df)


def pooled_sd(x: np.ndarray, y: np.ndarray) -> float:
    """√(((n_x-1)s_x² + (n_y-1)s_y²) / (n_x+n_y-2))"""
    return math.sqrt(((len(x) - 1) * x.var(ddof=1) + (len(y) - 1) * y.var(ddof=1)) / (len(x) + len(y) - 2))


def power(n: int, effect: float, sd: float, paired: bool, level: float = LEVEL) -> float:
    """Power of the two-sided t-test at `level` with n seeds per group (n pairs when paired) against a true
    difference `effect` when the values (paired: the differences) have standard deviation `sd`."""
    df = n - 1 if paired else 2 * n - 2
    ncp = abs(effect) / (sd / math.sqrt(n) if paired else sd * math.sqrt(2 / n))
    crit = sps.t.ppf(0.5 + level / 2, df)
    return float(sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp))


def seeds_needed(effect: float, sd: float, paired: bool, level: float = LEVEL, target: float = POWER) -> int | None:
    """Smallest n >= 2 seeds per group with power(n) >= target; None when effect is 0 or it takes > MAX_SEEDS.
    Example: seeds_needed(1.0, 1.0, paired=False) -> 17, seeds_needed(0.5, 1.0, paired=True) -> 34"""
    if effect == 0:
        return None
    if sd == 0:
        return 2  # no spread: the smallest sample already resolves it
    if power(MAX_SEEDS, effect, sd, paired, level) < target:
        return None
    lo, hi = 1, 2  # power(lo) < target <= power(hi), by doubling then bisection (power grows with n)
    while power(hi, effect, sd, paired, level) < target:
        lo, hi = hi, min(2 * hi, MAX_SEEDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(mid, effect, sd, paired, level) < target else (lo, mid)
    return hi


def verdict(ci: tuple[float, float] | None, higher_better: bool) -> str:
    """'better' / 'worse' when the interval of group - baseline excludes 0, else 'not distinguishable'.
    Example: ci=(-0.05, -0.01) for a loss -> 'better'; for accuracy -> 'worse'; (-0.05, 0.01) -> 'not distinguishable'"""
    if ci is None or ci[0] <= 0 <= ci[1]:
        return "not distinguishable"
    return "better" if (ci[0] > 0) == higher_better else "worse"


def pairable(seeds: Sequence[Any] | None, base_seeds: Sequence[Any] | None) -> bool:
    """Both groups ran the same set of distinct, known seeds, at least two."""
    if seeds is None or base_seeds is None or None in seeds or None in base_seeds:
        return False
    return len(set(seeds)) == len(seeds) == len(base_seeds) >= 2 and set(seeds) == set(base_seeds)


def difference(values: Sequence[float], base: Sequence[float], higher_better: bool,
               seeds: Sequence[Any] | None = None, base_seeds: Sequence[Any] | None = None,
               level: float = LEVEL) -> Difference:
    """Group `values` against baseline `base` (finite numbers, one per run; `seeds[i]` ran `values[i]`).
    Paired by seed when `pairable(seeds, base_seeds)`, else Welch; see the module docstring."""
    x, y = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    if min(len(x), len(y)) < 2:
        return Difference(None, len(x), len(y), diff, None, None, None, "not distinguishable", None,
                          f"n={min(len(x), len(y))}: no interval")
    if pairable(seeds, base_seeds):
        by_seed = dict(zip(base_seeds, y))
        d = x - np.asarray([by_seed[s] for s in seeds])  # (n,) per-seed differences, group - baseline
        sd = float(d.std(ddof=1))
        test, diff, se, df = "paired", float(d.mean()), sd / math.sqrt(len(d)), float(len(d) - 1)
    else:
        test, (diff, se, df), sd = "welch", welch(x, y), pooled_sd(x, y)
    ci, p = t_interval(diff, se, df, level)
    need = seeds_needed(diff, sd, paired=test == "paired", level=level)
    note = "" if need is not None else ("no difference observed" if diff == 0 else f"more than {MAX_SEEDS} seeds")
    return Difference(test, len(x), len(y), diff, ci, df, p, verdict(ci, higher_better), need, note)
