"""Protocol v3's power plan: how many seeds per arm a finding registers, from a noise estimate and its smallest effect
of interest (SESOI, δ > 0), so that its outcome (outcome.py) is likely to be decided.

    noise = noise_of([[-0.031, -0.004, -0.022, 0.010]], source="the tuning seeds' paired differences")
    p = plan("directional", sesoi=0.02, noise=noise, cap=32)   # p.n seeds per arm, p.power, p.capped
    plan("directional", 0.02, noise, cap=10, family=2)        # one of 2 tests read at Bonferroni's 97.5%
    plan_text(p)     # one sentence with the numbers, for the doc
    plan_record(p)   # plain data (JSON types), for the registration record

**Noise.** The sd σ̂ of the per-seed paired differences arm − baseline (each seed trains both arms), with its degrees
of freedom: n − 1 for one set of pairs; pooled over several sets (sizes, arms, a pilot and the tuning seeds),
σ̂² = Σ(n_i − 1)s_i² / Σ(n_i − 1) on df = Σ(n_i − 1). σ̂ is taken as the truth, as in every textbook plan; because a
pilot's σ̂ is itself noisy, the plan also states n at the one-sided 80% upper confidence bound of σ,
σ̂·√(df / χ²(0.2; df)) (Browne 1995), so a reader sees how much the plan rests on a few seeds.
**Power**, n pairs, d̄ the mean difference, s their sd, t_q the t quantile on n − 1 df:
* `directional`: the chance that the 95% interval lies entirely on the claimed side of 0 (outcome "reproduced")
  when the true effect is δ in the claimed direction: P(T > t_0.975), T noncentral t (scipy.stats.nct) on n − 1 df
  with noncentrality δ√n/σ. This is exact. (significance.power, the two-sided test's power, adds P(T < −t_0.975):
  a resolved effect of the wrong sign, which is not a reproduction.)
* `equivalence`: the chance that the 90% interval lies inside ±δ (TOST at 5%, outcome "reproduced" for an
  equivalence claim) when the true difference is 0: P(−δ + t_0.95·s/√n < d̄ < δ − t_0.95·s/√n). Exact, as the
  one-dimensional integral over s (s²(n−1)/σ² is χ² on n − 1 df, d̄ normal and independent of s; Owen's Q function,
  computed with scipy.integrate.quad). Not the textbook noncentral-t shortcut P(T₁ > t) + P(T₂ < −t) − 1: its two
  statistics share s, and the shortcut is only a lower bound (tight at high power).
**Family** (`family=k`, default 1): the test is one of k whose intervals a rule reads at Bonferroni's level, each
at 1 − 0.05/k (directional) or 1 − 0.10/k (equivalence), as experiments/findings/sized.py reads k sizes: the same
formulas with that interval's t quantile (t_{1−0.025/k}, t_{1−0.05/k}).
**Plan**: the smallest n ≥ 2 whose power reaches the target (80%), searched n = 2, 3, ... up to `cap`; when the cap
does not reach it the plan is `capped`: n is the cap and the plan states the power there. A scan, not a bisection:
TOST's power is not monotone in n while it is below its 5% size (δ = σ/2: 2.4% at n = 2, 1.8% at n = 4, 2.0% at
n = 5, the same in simulation), though it is from there on; the directional power grows with n throughout.
Not handled: unpaired (Welch) designs, a true effect other than δ (directional) or 0 (equivalence), a family
corrected otherwise than by Bonferroni (Holm's step-down has no fixed level per test), choosing δ (registered with
the finding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

TESTS = ("directional", "equivalence")
TARGET = 0.8  # the power a plan asks for
CAP = 32  # seeds per arm a plan stops at unless told otherwise
UPPER = 0.8  # the one-sided confidence of the noise's upper bound the plan also reports
LEVEL = {"directional": 0.95, "equivalence": 0.90}  # the two-sided interval each test reads (outcome.LEVELS)


@dataclass(frozen=True)
class Noise:
    """The sd of per-seed paired differences and its degrees of freedom."""

    sd: float
    df: int
    source: str = ""  # where it came from, in words: "the 4 tuning seeds' paired differences"

    def upper(self, confidence: float = UPPER) -> float:
        """The one-sided `confidence` upper bound of σ: σ̂·√(df / χ²(1 − confidence; df))."""
        from scipy import stats

        return self.sd * math.sqrt(self.df / float(stats.chi2.ppf(1 - confidence, self.df)))


def noise_of(groups: Sequence[Sequence[float]], source: str = "") -> Noise:
    """The pooled sd of several sets of per-seed paired differences (each set its own mean), df = Σ(n_i − 1); sets of
    fewer than 2 values add nothing."""
    ss, df = 0.0, 0
    for g in groups:
        v = [float(x) for x in g if x is not None and math.isfinite(x)]
        if len(v) >= 2:
            m = sum(v) / len(v)
            ss, df = ss + sum((x - m) ** 2 for x in v), df + len(v) - 1
    if df == 0:
        raise ValueError("a noise estimate needs a set of at least 2 paired differences")
    return Noise(math.sqrt(ss / df), df, source)


def _check(n: int, sesoi: float, sd: float, family: int = 1) -> None:
    if not (isinstance(n, int) and n >= 2):
        raise ValueError(f"power needs n >= 2 pairs, got {n!r}")
    if not (isinstance(family, int) and not isinstance(family, bool) and family >= 1):
        raise ValueError(f"the family must be an integer >= 1 tests, got {family!r}")
    for name, v in (("SESOI", sesoi), ("sd", sd)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"the {name} must be a finite number > 0, got {v!r}")


def power_directional(n: int, sesoi: float, sd: float, family: int = 1) -> float:
    """P(the 95% interval of the mean of n paired differences lies entirely on the claimed side of 0) when the true
    effect is `sesoi` in the claimed direction and the differences' sd is `sd` (module docstring); the interval at
    1 − 0.05/family for one test of a Bonferroni family."""
    from scipy import stats

    _check(n, sesoi, sd, family)
    df = n - 1
    return float(stats.nct.sf(stats.t.ppf(1 - 0.025 / family, df), df, sesoi * math.sqrt(n) / sd))


def power_equivalence(n: int, sesoi: float, sd: float, family: int = 1) -> float:
    """P(the 90% interval of the mean of n paired differences lies inside ±sesoi) when the true difference is 0 and
    the differences' sd is `sd` (module docstring): ∫ [Φ(a − c·u) − Φ(−a + c·u)]⁺ f(x) dx over x = χ² on n − 1 df,
    u = √(x/df), a = δ√n/σ, c = t_0.95 (t_{1−0.05/family}: the interval at 1 − 0.10/family)."""
    from scipy import integrate, stats

    _check(n, sesoi, sd, family)
    df = n - 1
    a, c = sesoi * math.sqrt(n) / sd, float(stats.t.ppf(1 - 0.05 / family, df))
    x_max = df * (a / c) ** 2  # beyond it the interval is wider than ±δ whatever d̄ is

    log_norm = -(df / 2) * math.log(2) - math.lgamma(df / 2)  # the χ² density's constant, in logs

    def inside(x: float) -> float:  # Φ(z) − Φ(−z) = erf(z/√2), times the χ² density at x (math: quad calls it often)
        if x <= 0:
            return 0.0 if df != 2 else math.erf(a / math.sqrt(2)) / 2
        z = a - c * math.sqrt(x / df)
        return math.erf(z / math.sqrt(2)) * math.exp(log_norm + (df / 2 - 1) * math.log(x) - x / 2)

    mass, _ = integrate.quad(inside, 0.0, x_max, points=[min(df, x_max / 2)], limit=200, epsabs=1e-10)
    return min(1.0, max(0.0, float(mass)))


POWER = {"directional": power_directional, "equivalence": power_equivalence}


@dataclass(frozen=True)
class PowerPlan:
    """Seeds per arm for `target` power against `sesoi` at `noise` (module docstring)."""

    test: str  # one of TESTS
    sesoi: float
    noise: Noise
    n: int  # seeds per arm (pairs): the smallest n reaching `target`; the cap when `capped`
    power: float  # the power at n
    capped: bool  # `target` is not reached at the cap
    cap: int
    target: float
    n_upper: int | None  # the plan's n at noise.upper(); None when the cap does not reach the target there
    sd_upper: float  # noise.upper()
    family: int = 1  # the test is one of `family` read at Bonferroni's level (module docstring)

    @property
    def level(self) -> float:
        """The two-sided interval the test reads: LEVEL[test], Bonferroni-corrected over the family."""
        return LEVEL[self.test] if self.family == 1 else 1 - (1 - LEVEL[self.test]) / self.family


def smallest_n(test: str, sesoi: float, sd: float, cap: int = CAP, target: float = TARGET,
               family: int = 1) -> tuple[int, float, bool]:
    """(n, power at n, capped): the smallest n in 2..cap with power >= target, else (cap, power at cap, True)."""
    if test not in TESTS:
        raise ValueError(f"unknown test {test!r}; choose from {TESTS}")
    if not (isinstance(cap, int) and cap >= 2):
        raise ValueError(f"the cap must be an integer >= 2 seeds per arm, got {cap!r}")
    if not 0 < target < 1:
        raise ValueError(f"the target power must be in (0, 1), got {target!r}")
    for n in range(2, cap + 1):
        p = POWER[test](n, sesoi, sd, family)
        if p >= target:
            return n, p, False
    return cap, p, True


def plan(test: str, sesoi: float, noise: Noise, cap: int = CAP, target: float = TARGET, family: int = 1) -> PowerPlan:
    """The plan for `test` ("directional" at true effect δ, "equivalence" at true difference 0), module docstring;
    `family`: the number of tests read at Bonferroni's level with it."""
    n, p, capped = smallest_n(test, sesoi, noise.sd, cap, target, family)
    sd_upper = noise.upper()
    n_up, _, capped_up = smallest_n(test, sesoi, sd_upper, cap, target, family)
    return PowerPlan(test, float(sesoi), noise, n, p, capped, cap, target, None if capped_up else n_up, sd_upper,
                     family)


def plan_text(p: PowerPlan, unit: str = "nats", digits: int = 3) -> str:
    """The plan in one sentence, for a doc."""
    ci = f"{100 * p.level:.4g}% CI" + (f" (Bonferroni over {p.family} tests)" if p.family > 1 else "")
    what = (f"to find the {ci} on the claimed side of 0 when the true effect is the SESOI {p.sesoi:g} {unit} "
            "(paired t)" if p.test == "directional" else
            f"to find the {ci} inside ±{p.sesoi:g} {unit} (TOST, equivalence) when the true difference is 0")
    noise = (f"the sd {p.noise.sd:.{digits}f} {unit} of the per-seed paired differences (df {p.noise.df}"
             + (f", {p.noise.source}" if p.noise.source else "") + ")")
    upper = (f"{p.n_upper} seeds" if p.n_upper is not None else f"more than the cap of {p.cap}")
    head = (f"The cap of {p.cap} seeds per arm gives {p.power:.1%} power ({p.target:.0%} is not reached) "
            if p.capped else f"{p.n} seeds per arm give {p.power:.0%} power (the fewest reaching {p.target:.0%}) ")
    return (f"{head}{what}, at {noise}; at its {UPPER:.0%} upper confidence bound {p.sd_upper:.{digits}f} {unit} the "
            f"plan would need {upper}.")


def plan_record(p: PowerPlan) -> dict[str, Any]:
    """The plan as plain data (str, int, float, bool, None), for a registration record."""
    return {"test": p.test, "level": p.level, "family": p.family, "sesoi": p.sesoi, "target": p.target, "cap": p.cap,
            "noise": {"sd": p.noise.sd, "df": p.noise.df, "source": p.noise.source},
            "n": p.n, "power": p.power, "capped": p.capped, "sd_upper": p.sd_upper, "upper_confidence": UPPER,
            "n_upper": p.n_upper}
