"""Protocol v3's trend across sizes (experiments/findings/scale.py): the slope and its interval against
scipy.stats.linregress and against the OLS formulas written out, a hand-made dataset with a known slope and
hand-computed intervals, the label in each claim's direction, and the invariances (units of the difference, units of
the size) as properties.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from experiments.findings.scale import LABELS, fmt_size, trend, trend_text

# t quantiles from a printed table (two-sided 95%)
T975_2, T975_7 = 4.3027, 2.3646

R = 0.002  # the residual of the known-slope dataset


def known(slope: float = -0.005, r: float = R) -> dict[float, list[float]]:
    """Three sizes 4x apart (log2: 0, 2, 4 above 1e5), three seeds each: 0.01 + slope·log2(N/1e5) ± r and + 0: the
    residuals sum to 0 at each size, so OLS recovers `slope` exactly."""
    return {1e5 * 4 ** i: [0.01 + slope * 2 * i + e for e in (-r, 0.0, r)] for i in range(3)}


def test_known_slope_by_hand():
    """Sxx = 3·(2² + 0 + 2²) = 24, RSS = 3·2r², s² = RSS / 7, se = √(s²/Sxx) = r/√28."""
    t = trend(known(), claim="lower")
    assert t.slope == pytest.approx(-0.005, abs=1e-12) and t.df == 7
    half = T975_7 * R / math.sqrt(28)
    assert t.ci == pytest.approx((-0.005 - half, -0.005 + half), abs=1e-6)
    assert t.label == "grows"  # the difference gets more negative: the claimed "lower" effect grows
    assert [a.size for a in t.sizes] == [1e5, 4e5, 1.6e6] and t.span == pytest.approx(16.0)
    for i, a in enumerate(t.sizes):  # per size: s = r, se = r/√3
        m = 0.01 - 0.005 * 2 * i
        assert a.n == 3 and a.mean == pytest.approx(m, abs=1e-12)
        assert a.ci == pytest.approx((m - T975_2 * R / math.sqrt(3), m + T975_2 * R / math.sqrt(3)), abs=1e-6)


@pytest.mark.parametrize("slope, claim, label", [
    (-0.005, "lower", "grows"), (-0.005, "higher", "shrinks"), (0.005, "higher", "grows"), (0.005, "lower", "shrinks"),
    (0.0, "lower", "no trend detected"), (0.0, "higher", "no trend detected"),
    (-0.0001, "lower", "no trend detected"),  # within the slope's interval of 0
])
def test_label_in_the_claims_direction(slope, claim, label):
    assert trend(known(slope), claim=claim).label == label


def test_equal_claim_reads_the_overall_sign():
    """No direction claimed: "grows" is away from 0 on the side of the overall mean difference."""
    growing = {k: [x - 0.02 for x in v] for k, v in known(-0.005).items()}  # -0.01, -0.02, -0.03
    assert trend(growing, claim="equal").direction == "lower" and trend(growing, claim="equal").label == "grows"
    assert trend(growing, claim=None).label == "grows"
    mirrored = trend({k: [-x for x in v] for k, v in growing.items()})
    assert (mirrored.direction, mirrored.label) == ("higher", "grows")
    shrinking = {k: [x - 0.04 for x in v] for k, v in known(0.005).items()}  # negative, moving toward 0
    assert trend(shrinking).label == "shrinks" and trend(shrinking).direction == "lower"


def _ols(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """slope and its standard error, the textbook formulas: Sxy/Sxx and √(RSS/(m−2)/Sxx)."""
    xc = x - x.mean()
    slope = float((xc * (y - y.mean())).sum() / (xc ** 2).sum())
    resid = y - y.mean() - slope * xc
    return slope, math.sqrt((resid ** 2).sum() / (len(x) - 2) / (xc ** 2).sum())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_against_linregress_and_the_formulas(seed):
    rng = np.random.default_rng(seed)
    sizes = [5e4, 2e5, 8e5, 3.2e6][: 3 + seed % 2]
    per_size = {s: list(rng.normal(-0.02 - 0.004 * math.log2(s / 5e4), 0.01, size=rng.integers(2, 7)))
                for s in sizes}
    x = np.array([math.log2(s) for s, v in per_size.items() for _ in v])
    y = np.array([d for v in per_size.values() for d in v])
    ref = stats.linregress(x, y)
    slope, se = _ols(x, y)
    t = trend(per_size, claim="lower")
    q = stats.t.ppf(0.975, len(y) - 2)
    assert t.slope == pytest.approx(ref.slope, abs=1e-12) == pytest.approx(slope, abs=1e-12)
    assert t.ci == pytest.approx((slope - q * se, slope + q * se), abs=1e-10)
    assert t.ci == pytest.approx((ref.slope - q * ref.stderr, ref.slope + q * ref.stderr), abs=1e-12)
    assert t.p == pytest.approx(ref.pvalue, rel=1e-9) and t.df == len(y) - 2


def test_too_few_points():
    assert trend({1e5: [0.01, 0.02, 0.03]}).slope is None  # one size
    assert trend({1e5: [0.01], 4e5: [0.02]}).slope is None  # two differences
    one = trend({1e5: [0.01], 4e5: [0.02, math.nan]})
    assert one.label == "no trend detected" and [a.ci for a in one.sizes] == [None, None]
    exact = trend({1e5: [0.01, 0.01], 4e5: [0.03, 0.03]})  # on a line: a slope, no interval
    assert exact.slope == pytest.approx(0.01) and exact.ci is None and exact.label == "no trend detected"


@pytest.mark.parametrize("bad", [{0: [0.1, 0.2]}, {-5e4: [0.1]}, {math.inf: [0.1]}])
def test_bad_size_raises(bad):
    with pytest.raises(ValueError):
        trend({1e5: [0.0, 0.1], **bad})


def test_bad_claim_raises():
    with pytest.raises(ValueError):
        trend(known(), claim="smaller")


@settings(max_examples=40, deadline=None)
@given(data=st.lists(st.tuples(st.sampled_from([5e4, 2e5, 8e5]), st.floats(-0.5, 0.5)), min_size=4, max_size=20),
       c=st.sampled_from([1 / math.log(2), 1000.0, 0.25]), k=st.sampled_from([1e-6, 3.0, 1024.0]),
       claim=st.sampled_from(["lower", "higher", None]))
def test_units_do_not_change_the_label(data, c, k, claim):
    """The difference in other units (times c) scales the slope and its interval by c; the size in other units
    (times k: millions of parameters) leaves them as they are. The label stays (boundary cases skipped)."""
    per_size: dict[float, list[float]] = {}
    for size, d in data:
        per_size.setdefault(size, []).append(d)
    t = trend(per_size, claim)
    scaled = trend({s: [d * c for d in v] for s, v in per_size.items()}, claim)
    resized = trend({s * k: v for s, v in per_size.items()}, claim)
    assert resized.slope == pytest.approx(t.slope, abs=1e-9) if t.slope is not None else resized.slope is None
    if t.ci is None or min(abs(b) for b in t.ci) < 1e-9:
        return
    assert scaled.ci == pytest.approx((t.ci[0] * c, t.ci[1] * c), rel=1e-6, abs=1e-12)
    assert resized.ci == pytest.approx(t.ci, rel=1e-6, abs=1e-12)
    assert scaled.label == resized.label == t.label in LABELS


def test_text():
    text = trend_text(trend(known(), claim="lower"))
    for part in ("0.1M +0.010", "0.4M +0.000", "1.6M -0.010", "(n=3)", "Slope -0.005", "per doubling", "grows",
                 "9 per-seed differences"):
        assert part in text, part
    assert "No slope" in trend_text(trend({1e5: [0.01, 0.02]}))
    assert [fmt_size(x) for x in (5e4, 8e5, 1.2e9, 800)] == ["0.05M", "0.8M", "1.2B", "800"]
