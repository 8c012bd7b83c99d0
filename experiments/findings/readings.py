"""The readings the v2 rules add to evidence.py's: equivalence against a smallest effect of interest, the spread of
the loss across shapes at one size (and its trend between sizes), and a learning rate's sensitivity from the tuning
runs.

    e = equivalence(difference(group, base, "final val/loss"), sesoi=0.02)   # e.inside: the 95% CI within ±0.02
    s = shape_spread(records_at_one_size, "model.shape.n_layers")            # per-seed (worst - best) / best
    p_below(s.per_seed, 0.03)                                                # < 0.05 iff the CI is below 3%
    t = spread_trend(s_small, s_large)                                       # Welch: large - small spread
    lr_sensitivity(tuning_records_of_one_arm, grid=[1e-3, ...], cap=7.6)     # mean excess loss over the grid

**Equivalence** (two one-sided tests, TOST): the difference d with its t-interval (paired by seed or Welch, from
experiments.compare.significance) is *equivalent* to 0 within the SESOI δ when the 95% interval lies inside
(−δ, +δ). Its p-value is p = min(1, 2 · max(p₋, p₊)), p₋ the one-sided p of H0: d ≤ −δ and p₊ of H0: d ≥ +δ, on the
same t distribution (df, standard error from the interval), so p < 0.05 exactly when the 95% interval is inside
±δ: Holm's correction (multiple.py) then reads equivalence tests like the others.
**Shape spread** at one size: the shapes' best and worst by mean final val/loss; per seed s both ran,
g_s = (loss_worst,s − loss_best,s) / loss_best,s; its mean with the 95% t-interval over seeds. **Trend**: the spread
at the larger size minus at the smaller, Welch's interval (different models: the seeds are not paired).
**Sensitivity** of one arm: per declared grid point, the mean final val/loss over its tuning seeds (a diverged run
or a non-finite loss counts as +inf), capped at `cap` (the loss at init: a run worse than untrained counts as
untrained); sensitivity = the mean over the grid points of (capped loss − the best capped loss). Points added by
widening are left out, so both arms are read over the same grid; a point without a result is left out and counted.
Not handled: the rules' decisions (the finding modules), rendering (doc.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from experiments.findings.evidence import RunRecord, difference, mean_ci
from experiments.rundir.layout import RunStatus

LOSS = "final val/loss"


@dataclass(frozen=True)
class Equivalence:
    diff: float
    ci: tuple[float, float] | None
    sesoi: float
    p: float | None  # min(1, 2 max(p_low, p_high)); None without an interval
    p_low: float | None  # one-sided p of H0: diff <= -sesoi
    p_high: float | None  # one-sided p of H0: diff >= +sesoi
    n: int
    test: str | None  # "paired" | "welch" | None

    @property
    def inside(self) -> bool:
        """The 95% interval lies inside (-sesoi, +sesoi) (uncorrected)."""
        return bool(self.ci) and -self.sesoi < self.ci[0] and self.ci[1] < self.sesoi


def equivalence(d: Any, sesoi: float) -> Equivalence | None:
    """The TOST reading of a significance.Difference `d` (None: None) against ±sesoi (module docstring)."""
    from scipy import stats

    if d is None:
        return None
    if d.ci is None or not d.df:
        return Equivalence(d.diff, None, sesoi, None, None, None, d.n, d.test)
    se = (d.ci[1] - d.ci[0]) / (2 * stats.t.ppf(0.975, d.df))
    p_low = float(stats.t.sf((d.diff + sesoi) / se, d.df))
    p_high = float(stats.t.cdf((d.diff - sesoi) / se, d.df))
    return Equivalence(d.diff, tuple(d.ci), sesoi, min(1.0, 2 * max(p_low, p_high)), p_low, p_high, d.n, d.test)


def equivalence_of(group: Sequence[RunRecord], base: Sequence[RunRecord], sesoi: float,
                   key: str = LOSS) -> Equivalence | None:
    """equivalence() of group − base in `key` (paired by seed when the seeds allow, else Welch)."""
    return equivalence(difference(group, base, key, higher_better=False), sesoi)


@dataclass(frozen=True)
class Spread:
    """The relative spread of the loss across shapes at one size."""

    best: Any  # the best shape's key value (lowest mean loss)
    worst: Any  # the worst shape's
    means: dict[Any, float]  # shape -> mean final val/loss
    per_seed: list[float]  # g_s, one per seed both the best and the worst shape ran
    mean: float | None
    ci: tuple[float, float] | None


def shape_spread(records: Sequence[RunRecord], shape_key: str, key: str = LOSS) -> Spread | None:
    """Spread of `key` across the shapes (values of `shape_key`) of `records` (completed runs); None with < 2
    shapes."""
    by_shape: dict[Any, dict[Any, float]] = {}
    for r in records:
        v = r.get(key)
        if r.status == RunStatus.COMPLETED and v is not None and shape_key in r.keys:
            by_shape.setdefault(r.keys[shape_key], {})[r.seed] = v
    means = {s: sum(v.values()) / len(v) for s, v in by_shape.items() if v}
    if len(means) < 2:
        return None
    best, worst = min(means, key=means.get), max(means, key=means.get)
    seeds = sorted(set(by_shape[best]) & set(by_shape[worst]), key=str)
    per_seed = [(by_shape[worst][s] - by_shape[best][s]) / by_shape[best][s] for s in seeds]
    mean, ci, _ = mean_ci(per_seed)
    return Spread(best, worst, means, per_seed, mean, ci)


def p_below(values: Sequence[float], bound: float) -> float | None:
    """min(1, 2 × the one-sided p of H0: mean >= bound) (t-test), so that p < 0.05 exactly when the 95% t-interval's
    upper bound is below `bound`; None with fewer than 2 values or no spread."""
    from scipy import stats

    v = [x for x in values if x is not None and math.isfinite(x)]
    if mean_ci(v)[1] is None:
        return None
    return min(1.0, 2 * float(stats.ttest_1samp(v, bound, alternative="less").pvalue))


def spread_trend(small: Spread | None, large: Spread | None):
    """Welch's difference large − small of the per-seed spreads (significance.Difference), None without values."""
    from experiments.compare.significance import difference as diff

    if small is None or large is None or not small.per_seed or not large.per_seed:
        return None
    return diff(large.per_seed, small.per_seed, higher_better=False)


@dataclass(frozen=True)
class Sensitivity:
    value: float | None  # mean over the grid of (capped loss - best capped loss); None without a point
    best: float | None  # the best capped loss over the grid
    cap: float
    points: list[tuple[float, float | None]]  # (lr, mean loss over the tune seeds: inf = diverged; None = no result)


def lr_sensitivity(tuning: Sequence[RunRecord], grid: Sequence[float], cap: float, key: str = LOSS) -> Sensitivity:
    """The sensitivity of one arm from its tuning runs (records with values "lr" and `key`), module docstring."""
    points: list[tuple[float, float | None]] = []
    for lr in grid:
        losses = []
        for r in tuning:
            if r.get("lr") is None or not math.isclose(r.get("lr"), lr, rel_tol=1e-9):
                continue
            v = r.values.get(key)
            if r.status == RunStatus.DIVERGED or (isinstance(v, (int, float)) and not math.isfinite(v)):
                losses.append(math.inf)
            elif r.status == RunStatus.COMPLETED and r.get(key) is not None:
                losses.append(r.get(key))
        points.append((lr, sum(losses) / len(losses) if losses else None))
    capped = [min(v, cap) for _, v in points if v is not None]
    if not capped:
        return Sensitivity(None, None, cap, points)
    best = min(capped)
    return Sensitivity(sum(v - best for v in capped) / len(capped), best, cap, points)


def init_cap(tuning: Sequence[RunRecord], vocab: float | None) -> tuple[float, str]:
    """(the loss at init, how it was had): the mean first-step train/loss of `tuning`'s runs (the model before its
    first update), else ln(vocab)."""
    firsts = [r.get("init_loss") for r in tuning if r.get("init_loss") is not None]
    if firsts:
        return sum(firsts) / len(firsts), f"the mean first-step train/loss of its {len(firsts)} tuning runs"
    if vocab:
        return math.log(vocab), f"ln V = ln {int(vocab)} (no run logged its first step)"
    return math.inf, "no cap (no first-step loss and no vocab size)"
