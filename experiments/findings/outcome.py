"""Protocol v3's outcome of one claimed difference: from the difference's confidence interval, the claim's direction
and the registered smallest effect of interest (SESOI, δ > 0), one of LABELS.

    outcome_of_values([-0.031, -0.024, -0.040, -0.029], "lower", sesoi=0.02)   # per-seed paired differences
    -> Outcome(label="reproduced", claim="lower", diff=-0.031, ci=(-0.0416, -0.0204), level=0.95, ...)
    outcome_of_difference(d, "equal", sesoi=0.02)          # d: experiments.compare.significance.Difference
    classify((-0.01, 0.015), "equal", 0.02)                # -> "reproduced" (the pure decision table)

**Which interval.** A directional claim ("lower": the arm's metric is below the baseline's; "higher": above) is read
on the two-sided 95% t-interval, the interval every v1/v2 doc shows: each statement the table makes about it
("entirely below 0", "upper bound below δ") is a one-sided test at 2.5%. An equivalence claim ("equal": the two arms
are within ±δ) is read on the two-sided 90% interval: inside ±δ exactly when both of Schuirmann's one-sided tests
(TOST) reject at 5%, the standard equivalence test, and the one power.py plans for. One interval per claim: a
directional claim never reads the 90% interval, so its `equivalent` is the stricter one (95% inside ±δ, the v2
readings.equivalence criterion).

**Decision table, directional claim.** Write the interval in the claimed direction, e = d for "higher" and e = −d
for "lower" (d = arm − baseline), so that the claimed effect is e > 0: [a, b] is the 95% interval of e. The first
row that holds gives the label:

    | row | interval of e        | label          | reads                                                        |
    |-----|----------------------|----------------|--------------------------------------------------------------|
    | 1   | a > 0                | reproduced     | entirely on the claimed side of 0 (b < δ: smaller than δ)    |
    | 2   | b < 0                | opposite       | entirely on the other side of 0                              |
    | 3   | −δ < a and b < δ     | equivalent     | inside ±δ (and so covering 0)                                |
    | 4   | b < δ                | not reproduced | covers 0 and −δ, excludes e ≥ δ                              |
    | 5   | otherwise (b ≥ δ)    | inconclusive   | covers 0 and +δ: neither 0 nor the claimed effect excluded   |

"Not reproduced" in the issue's sense (the interval excludes effects ≥ δ in the claimed direction, b < δ) is rows
2, 3 and 4 together: `opposite` and `equivalent` are its two stronger forms (the other arm is better; the arms are
within ±δ), and the label `not reproduced` is kept for the remainder, row 4, where the interval excludes the claimed
effect but establishes neither. Row 5 covers 0 and the bound +δ (and maybe −δ too): no information either way.
Row 1 with b < δ excludes effects ≥ δ too: the effect is resolved but smaller than the SESOI; it stays `reproduced`
(the claim is about the direction) and its reading says "smaller than the SESOI".
**Decision table, equivalence claim** ("equal"), on the 90% interval [a, b] of d:

    | row | interval of d        | label          | reads                                                        |
    |-----|----------------------|----------------|--------------------------------------------------------------|
    | 1   | −δ < a and b < δ     | reproduced     | equivalent: TOST rejects |d| ≥ δ at 5%                       |
    | 2   | a ≥ δ or b ≤ −δ      | not reproduced | excludes every |d| < δ: the arms differ by at least δ       |
    | 3   | otherwise            | inconclusive   | covers a bound ±δ                                            |

so an equivalence claim's success is labelled `reproduced` (never `equivalent`), and it has no `opposite` (it has no
direction). No interval (n < 2, or the differences have no spread): `inconclusive`.
A change of units (every number times c > 0: nats to bits) leaves the label unchanged; so does swapping the arms
with the claim's direction ("lower" of d is "higher" of −d).
Not handled: computing the differences (evidence.difference, paired by seed or Welch), several comparisons at once
(multiple.py's Holm across a rule's family: this module reads one interval at its own level), the per-size trend
(scale.py), choosing δ (registered with the finding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

LABELS = ("reproduced", "opposite", "equivalent", "not reproduced", "inconclusive")
CLAIMS = ("lower", "higher", "equal")
LEVELS = {"lower": 0.95, "higher": 0.95, "equal": 0.90}  # the interval each kind of claim is read on


@dataclass(frozen=True)
class Outcome:
    """One claimed difference, judged."""

    label: str  # one of LABELS
    claim: str  # one of CLAIMS
    sesoi: float  # δ, in the metric's units
    diff: float  # d = arm − baseline (the mean of the per-seed differences when paired)
    ci: tuple[float, float] | None  # the interval of d read, at `level`; None: no interval
    level: float  # LEVELS[claim]
    n: int  # pairs (paired) or the smaller group (Welch)
    reading: str  # the table's row in words: "95% CI entirely below 0"

    def text(self, digits: int = 3) -> str:
        """'-0.031 [-0.042, -0.020] (95% CI, n=4, SESOI ±0.02): reproduced: the 95% CI lies entirely below 0'."""
        ci = "[—]" if self.ci is None else f"[{self.ci[0]:.{digits}f}, {self.ci[1]:.{digits}f}]"
        return (f"{self.diff:+.{digits}f} {ci} ({self.level:.0%} CI, n={self.n}, SESOI ±{self.sesoi:g}): "
                f"{self.label}: {self.reading}")


def _check(claim: str, sesoi: float) -> None:
    if claim not in CLAIMS:
        raise ValueError(f"unknown claim {claim!r}; choose from {CLAIMS}")
    if not (isinstance(sesoi, (int, float)) and math.isfinite(sesoi) and sesoi > 0):
        raise ValueError(f"the SESOI must be a finite number > 0, got {sesoi!r}")


def _row(ci: tuple[float, float] | None, claim: str, sesoi: float) -> tuple[str, str]:
    """(label, reading) by the module docstring's tables."""
    if ci is None:
        return "inconclusive", "no interval (fewer than 2 values, or no spread)"
    lo, hi = float(ci[0]), float(ci[1])
    level = f"{LEVELS[claim]:.0%} CI"
    if claim == "equal":
        if -sesoi < lo and hi < sesoi:
            return "reproduced", f"the {level} lies inside ±{sesoi:g}: equivalent (TOST at 5%)"
        if lo >= sesoi or hi <= -sesoi:
            return "not reproduced", f"the {level} lies beyond {'+' if lo >= sesoi else '−'}{sesoi:g}: the arms differ"
        return "inconclusive", f"the {level} covers a bound ±{sesoi:g}"
    below, above = ("below", "above") if claim == "lower" else ("above", "below")
    a, b = (-hi, -lo) if claim == "lower" else (lo, hi)  # the interval of e, the effect in the claimed direction
    if a > 0:
        small = f", all of it smaller than the SESOI {sesoi:g}" if b < sesoi else ""
        return "reproduced", f"the {level} lies entirely {below} 0{small}"
    if b < 0:
        return "opposite", f"the {level} lies entirely {above} 0"
    if -sesoi < a and b < sesoi:
        return "equivalent", f"the {level} covers 0 and lies inside ±{sesoi:g}"
    if b < sesoi:
        return "not reproduced", (f"the {level} covers 0 and the SESOI on the other side, and excludes an effect of "
                                  f"{sesoi:g} {below} 0")
    return "inconclusive", f"the {level} covers 0 and an effect of {sesoi:g} {below} 0"


def classify(ci: Sequence[float] | None, claim: str, sesoi: float) -> str:
    """The label of interval `ci` of d = arm − baseline, read at LEVELS[claim] (module docstring's tables)."""
    _check(claim, sesoi)
    return _row(None if ci is None else (ci[0], ci[1]), claim, sesoi)[0]


def outcome(diff: float, ci: Sequence[float] | None, claim: str, sesoi: float, n: int) -> Outcome:
    """The Outcome of a difference whose interval `ci` is already at LEVELS[claim]."""
    _check(claim, sesoi)
    interval = None if ci is None else (float(ci[0]), float(ci[1]))
    label, reading = _row(interval, claim, sesoi)
    return Outcome(label, claim, float(sesoi), float(diff), interval, LEVELS[claim], n, reading)


def at_level(ci: Sequence[float], df: float, level: float) -> tuple[float, float]:
    """The t-interval of the same estimate at another level: centre ± t(0.5+level/2, df)·se, with se read off the
    95% interval `ci` (its half-width / t(0.975, df))."""
    from scipy import stats

    centre, half = (ci[0] + ci[1]) / 2, (ci[1] - ci[0]) / 2
    half *= float(stats.t.ppf(0.5 + level / 2, df) / stats.t.ppf(0.975, df))
    return centre - half, centre + half


def outcome_of_difference(d: Any, claim: str, sesoi: float) -> Outcome:
    """The Outcome of an experiments.compare.significance.Difference (its interval is at 95%; an equivalence claim
    reads the 90% interval of the same test, same df and standard error)."""
    _check(claim, sesoi)
    ci = d.ci
    if ci is not None and LEVELS[claim] != 0.95:
        ci = at_level(ci, d.df, LEVELS[claim])
    return outcome(d.diff, ci, claim, sesoi, d.n)


def outcome_of_values(differences: Sequence[float], claim: str, sesoi: float) -> Outcome:
    """The Outcome of per-seed paired differences arm − baseline (the t-interval of their mean at LEVELS[claim],
    experiments.compare.significance.mean_ci: no interval below 2 values or without spread)."""
    from experiments.compare.significance import mean_ci

    _check(claim, sesoi)
    v = [float(x) for x in differences if x is not None and math.isfinite(x)]
    if not v:
        raise ValueError("no finite difference to judge")
    return outcome(sum(v) / len(v), mean_ci(v, level=LEVELS[claim]), claim, sesoi, len(v))
