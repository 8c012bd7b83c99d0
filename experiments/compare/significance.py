"""Is a group's metric different from another's? t-intervals on the difference of means, a verdict, Holm's
correction across many such differences, and how many seeds would resolve a difference the user cares about.

    difference(values=[3.11, 3.14, 3.15], base=[3.30, 3.32, 3.34], seeds=[0, 1, 2], base_seeds=[0, 1, 2],
               higher_better=False)
    -> Difference(test="paired", diff=-0.187, ci=(-0.201, -0.172), p=0.0003, verdict="better", ...)

Handled (the intervals and p-values are scipy.stats'; the formulas are in docs/compare.md):
* paired by seed: when both groups ran the same set of distinct seeds (n >= 2), `ttest_rel` on the pairs, i.e. a
  t-interval on the per-seed differences d_i = x_i - y_i: d̄ ± t(0.975, n-1) · s_d / √n;
* otherwise Welch's `ttest_ind(equal_var=False)`: x̄ - ȳ ± t(0.975, ν) · √(s_x²/n_x + s_y²/n_y), ν from
  Welch–Satterthwaite;
* the two-sided p-value of the same test, and a verdict: `better` / `worse` when the 95% interval
  (`.confidence_interval`) excludes 0 (the sign read through the metric's direction), else `not distinguishable`;
* n < 2 in either group: no interval (there is no spread to estimate), verdict `not distinguishable`;
* zero spread (identical per-seed differences; unpaired, identical values within each group), up to rounding
  (REL_TOL): no interval either, never p = 0 or a zero-width interval (note `zero spread: no interval`);
* seeds needed, only for a smallest effect of interest `sesoi` the user states (never the observed difference: that
  post-hoc power says nothing the p-value does not): the smallest n per group at which the same test, two-sided at
  95%, has 80% power against a true difference of `sesoi`, with the observed spread taken as the truth. Exact
  power from the noncentral t (scipy.stats.nct), not the normal approximation: paired, df = n-1 and noncentrality
  |sesoi|·√n/s_d; unpaired, the equal-n two-sample t-test with the pooled variance
  s_p² = ((n_x-1)s_x² + (n_y-1)s_y²)/(n_x+n_y-2), df = 2n-2 and noncentrality |sesoi|/(s_p·√(2/n)) (Welch's
  test at equal n is within a seed of it);
* `holm`: Holm's step-down adjusted p-values of a family of tests (pairwise.py applies it to every pair of groups).
Not handled: correction inside `difference` (each call is one test at 95%), non-normal small samples (the
t-interval assumes roughly normal values), which runs count (comparison.py).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import stats as sps

LEVEL = 0.95  # confidence level of every interval, and 1 - alpha of every test
POWER = 0.8  # the power `seeds_needed` asks for
MAX_SEEDS = 10_000  # seeds_needed gives up (None) beyond this
VERDICTS = ("better", "worse", "not distinguishable")
REL_TOL = 1e-12  # a spread below this fraction of the values' magnitude is rounding, not spread


@dataclass(frozen=True)
class Difference:
    """mean(group) - mean(baseline), in the metric's units, with what the test made of it."""

    test: str | None  # "paired" | "welch" | None (n < 2: no test)
    n: int  # values in the group (pairs, when paired)
    n_base: int  # values in the baseline
    diff: float  # x̄ - ȳ (paired: mean of the per-seed differences, the same number)
    ci: tuple[float, float] | None  # LEVEL interval of diff; None when n < 2 or zero spread
    df: float | None  # degrees of freedom of the t distribution used; None without an interval
    p: float | None  # two-sided p-value of diff = 0
    verdict: str  # one of VERDICTS
    seeds_needed: int | None  # seeds per group for POWER at LEVEL against `sesoi`; None: no sesoi / no spread / > MAX_SEEDS
    note: str = ""  # why there is no interval or no seeds_needed ("n=1: no interval", "zero spread: no interval")
    sd: float | None = None  # the spread seeds_needed takes as the truth: s_d (paired) or the pooled sd; None: no test


def _finite(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def zero_spread(v: np.ndarray, scale: float) -> bool:
    """All of v equal up to rounding: max - min <= REL_TOL · scale, `scale` the magnitude of the numbers v came from.
    Example: the differences [1.1, 1.2, 1.3] - [1.0, 1.1, 1.2] = 0.1 ± 1e-16, scale 1.3 -> True"""
    return float(np.ptp(v)) <= REL_TOL * scale


def _interval(result: Any, level: float) -> tuple[float, float]:
    ci = result.confidence_interval(level)
    return float(ci.low), float(ci.high)


def mean_ci(values: Sequence[float | None], level: float = LEVEL) -> tuple[float, float] | None:
    """t-interval of a mean, x̄ ± t(1-α/2, n-1)·s/√n, over the finite values; None when n < 2 or zero spread.
    Example: [1, 2, 3] -> (2 - 4.303·0.577, 2 + 4.303·0.577) = (-0.484, 4.484)"""
    v = _finite(values)
    if len(v) < 2 or zero_spread(v, float(np.abs(v).max())):
        return None
    return _interval(sps.ttest_1samp(v, 0.0), level)


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
               level: float = LEVEL, sesoi: float | None = None) -> Difference:
    """Group `values` against baseline `base` (finite numbers, one per run; `seeds[i]` ran `values[i]`).
    Paired by seed when `pairable(seeds, base_seeds)`, else Welch; see the module docstring. `sesoi`: the smallest
    difference of interest, in the metric's units; seeds_needed is computed for it (None without one)."""
    x, y = np.asarray(values, dtype=float), np.asarray(base, dtype=float)
    diff = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    if min(len(x), len(y)) < 2:
        return _no_interval(None, x, y, diff, f"n={min(len(x), len(y))}: no interval")
    scale = float(max(np.abs(x).max(), np.abs(y).max()))
    if pairable(seeds, base_seeds):
        by_seed = dict(zip(base_seeds, y))
        y = np.asarray([by_seed[s] for s in seeds])  # the baseline in the group's seed order
        d = x - y  # (n,) per-seed differences, group - baseline
        test, diff, sd, flat = "paired", float(d.mean()), float(d.std(ddof=1)), zero_spread(d, scale)
    else:
        test, sd, flat = "welch", pooled_sd(x, y), zero_spread(x, scale) and zero_spread(y, scale)
    if flat:
        return _no_interval(test, x, y, diff, "zero spread: no interval")
    with warnings.catch_warnings():  # scipy warns of "precision loss" when one Welch group alone has no spread
        warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
        result = sps.ttest_rel(x, y) if test == "paired" else sps.ttest_ind(x, y, equal_var=False)
    ci = _interval(result, level)
    need = seeds_needed(sesoi, sd, paired=test == "paired", level=level) if sesoi else None
    note = f"more than {MAX_SEEDS} seeds" if sesoi and need is None else ""
    return Difference(test, len(x), len(y), diff, ci, float(result.df), float(result.pvalue),
                      verdict(ci, higher_better), need, note, sd)


def _no_interval(test: str | None, x: np.ndarray, y: np.ndarray, diff: float, note: str) -> Difference:
    return Difference(test, len(x), len(y), diff, None, None, None, "not distinguishable", None, note)


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values, in the order given: with the m p-values sorted p_(1) <= ... <= p_(m),
    adj_(i) = max over j <= i of min(1, (m - j + 1) · p_(j)). Rejecting where adj < α keeps the chance of any false
    "distinguishable" in the family at most α. None (no test) stays None and does not count in m.
    Example: holm([0.01, 0.04, 0.03]) -> [0.03, 0.06, 0.06]"""
    tested = {i: float(p) for i, p in enumerate(ps) if p is not None}
    order = sorted(tested, key=tested.__getitem__)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - j) * tested[i]))
        out[i] = running
    return out
