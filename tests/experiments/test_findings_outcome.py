"""Protocol v3's outcomes (experiments/findings/outcome.py): every row of both decision tables on hand-placed
intervals, the interval each claim reads (95% for a direction, 90% for equivalence) against intervals computed by
hand from t-table quantiles, agreement with readings.equivalence's TOST p-values, and the invariances (units,
swapping the arms) as properties.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.compare.significance import difference
from experiments.findings.evidence import OUTCOMES, Verdict
from experiments.findings.outcome import (CLAIMS, LABELS, LEVELS, classify, outcome, outcome_of_difference,
                                          outcome_of_values)
from experiments.findings.readings import equivalence

D = 0.02  # the SESOI of the hand-placed intervals
# t quantiles from a printed table (df 3): two-sided 95% and 90%
T975_3, T95_3 = 3.1824, 2.3534


@pytest.mark.parametrize("ci, label", [
    ((-0.05, -0.01), "reproduced"),  # row 1: entirely below 0
    ((-0.01, -0.001), "reproduced"),  # row 1, all of it smaller than the SESOI
    ((-0.05, -0.03), "reproduced"),
    ((0.001, 0.05), "opposite"),  # row 2: entirely above 0
    ((0.03, 0.05), "opposite"),
    ((-0.015, 0.01), "equivalent"),  # row 3: covers 0, inside ±δ
    ((0.0, 0.019), "equivalent"),  # touching 0 is covering it
    ((-0.019, 0.03), "not reproduced"),  # row 4: covers 0 and +δ (the other side), excludes d <= -δ
    ((-0.01, 0.02), "not reproduced"),  # the bound on the other side reached: not inside ±δ
    ((-0.03, 0.01), "inconclusive"),  # row 5: covers 0 and -δ (the claimed effect)
    ((-0.02, 0.0), "inconclusive"),  # the claimed effect δ is in the (closed) interval: not excluded
    ((-0.03, 0.03), "inconclusive"),  # covers both bounds
    (None, "inconclusive"),  # no interval
])
def test_lower_claim_table(ci, label):
    assert classify(ci, "lower", D) == label
    flipped = None if ci is None else (-ci[1], -ci[0])  # the same comparison with the arms swapped
    assert classify(flipped, "higher", D) == label


@pytest.mark.parametrize("ci, label", [
    ((-0.01, 0.015), "reproduced"),  # row 1: inside ±δ
    ((0.001, 0.019), "reproduced"),  # inside ±δ though resolved from 0: still equivalent
    ((0.02, 0.05), "not reproduced"),  # row 2: at least +δ
    ((-0.05, -0.021), "not reproduced"),  # at least -δ
    ((0.01, 0.03), "inconclusive"),  # row 3: covers +δ
    ((-0.02, 0.01), "inconclusive"),  # reaches -δ: not inside the open band
    ((-0.03, 0.03), "inconclusive"),
    (None, "inconclusive"),
])
def test_equal_claim_table(ci, label):
    assert classify(ci, "equal", D) == label


def test_labels_are_verdict_outcomes():
    """Every label is a Verdict outcome (the v1/v2 ones stay valid), and the v2 labels are still there."""
    assert set(LABELS) <= set(OUTCOMES)
    assert {"reproduced", "partly", "not reproduced", "undecided"} <= set(OUTCOMES)
    for label in LABELS:
        assert Verdict(label, "x", "y").outcome == label


def _hand_ci(values, t):
    n = len(values)
    m = sum(values) / n
    s = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    return m - t * s / math.sqrt(n), m + t * s / math.sqrt(n)


# four paired differences: mean 0.002, s = 0.010954, se = 0.005477; 95% [-0.01543, 0.01943], 90% [-0.01089, 0.01489]
WIDE = [0.002 - 0.012, 0.002 - 0.006, 0.002 + 0.006, 0.002 + 0.012]


@pytest.mark.parametrize("claim, sesoi, label, t", [
    ("equal", 0.019, "reproduced", T95_3),  # the 90% interval is inside ±0.019 (the 95% one is not)
    ("lower", 0.019, "not reproduced", T975_3),  # 95%: covers 0 and +0.019, excludes -0.019
    ("higher", 0.019, "inconclusive", T975_3),  # 95%: covers 0 and the claimed +0.019
    ("lower", 0.02, "equivalent", T975_3),  # 95% inside ±0.02
    ("equal", 0.013, "inconclusive", T95_3),  # 90% covers +0.013
])
def test_each_claim_reads_its_own_interval(claim, sesoi, label, t):
    o = outcome_of_values(WIDE, claim, sesoi)
    lo, hi = _hand_ci(WIDE, t)
    assert o.label == label and o.level == LEVELS[claim] == (0.90 if claim == "equal" else 0.95)
    assert o.ci == pytest.approx((lo, hi), abs=2e-5)  # the table's quantiles have 4 decimals
    assert o.diff == pytest.approx(0.002) and o.n == 4
    assert f"n=4" in o.text() and label in o.text()


@pytest.mark.parametrize("values, claim, label", [
    ([-0.031, -0.024, -0.040, -0.029], "lower", "reproduced"),  # 95% [-0.0416, -0.0204]
    ([-0.031, -0.024, -0.040, -0.029], "higher", "opposite"),
    ([0.031, 0.024, 0.040, 0.029], "equal", "not reproduced"),  # 90% [0.0231, 0.0389]: beyond +0.02
])
def test_hand_computed_intervals(values, claim, label):
    o = outcome_of_values(values, claim, D)
    assert o.label == label
    assert o.ci == pytest.approx(_hand_ci(values, T95_3 if claim == "equal" else T975_3), abs=2e-5)


def test_from_a_difference_the_same_as_from_the_values():
    """A significance.Difference (paired by seed) gives the outcome of its per-seed differences, the equivalence
    claim's 90% interval rescaled from the Difference's 95% one."""
    base = [3.30, 3.32, 3.34, 3.31]
    arm = [b + d for b, d in zip(base, WIDE)]
    d = difference(arm, base, higher_better=False, seeds=[0, 1, 2, 3], base_seeds=[0, 1, 2, 3])
    assert d.test == "paired"
    for claim in CLAIMS:
        a, b = outcome_of_difference(d, claim, 0.019), outcome_of_values(WIDE, claim, 0.019)
        assert a.label == b.label and a.ci == pytest.approx(b.ci, abs=1e-12)
        assert a.ci == pytest.approx(_hand_ci(WIDE, T95_3 if claim == "equal" else T975_3), abs=2e-5)


def test_no_interval():
    assert outcome_of_values([-0.05], "lower", D).label == "inconclusive"  # n = 1
    assert outcome_of_values([0.01, 0.01, 0.01], "equal", D).label == "inconclusive"  # no spread
    assert outcome(0.0, None, "equal", D, 0).ci is None


@pytest.mark.parametrize("bad", [
    dict(claim="smaller"), dict(sesoi=0.0), dict(sesoi=-0.02), dict(sesoi=math.nan), dict(sesoi=math.inf)])
def test_bad_values_raise(bad):
    args = {"claim": "lower", "sesoi": D, **bad}
    with pytest.raises(ValueError):
        classify((-0.1, 0.1), **args)
    with pytest.raises(ValueError):
        outcome_of_values([0.1, 0.2], **args)


def test_no_values_raise():
    with pytest.raises(ValueError):
        outcome_of_values([math.nan, None], "lower", D)


ints = st.integers(-1000, 1000)


@settings(max_examples=300, deadline=None)
@given(a=ints, b=ints, sesoi=st.integers(1, 500), claim=st.sampled_from(CLAIMS), c=st.floats(1e-3, 1e3))
def test_units_do_not_change_the_label(a, b, sesoi, claim, c):
    """Every number times c > 0 (nats to bits, nats to millinats): the same label. Integers keep the order exact."""
    lo, hi = min(a, b), max(a, b)
    assert classify((lo * c, hi * c), claim, sesoi * c) == classify((lo, hi), claim, sesoi)


@settings(max_examples=300, deadline=None)
@given(a=ints, b=ints, sesoi=st.integers(1, 500))
def test_swapping_the_arms(a, b, sesoi):
    """d = arm − baseline claimed lower is −d claimed higher; an equivalence claim does not care which arm is which.
    Apart from a reproduction smaller than δ, the labels that exclude the claimed effect (e >= δ) are exactly those
    whose interval of e = −d ends below δ."""
    lo, hi = min(a, b), max(a, b)
    label = classify((lo, hi), "lower", sesoi)
    assert classify((-hi, -lo), "higher", sesoi) == label
    assert classify((-hi, -lo), "equal", sesoi) == classify((lo, hi), "equal", sesoi)
    excludes_claimed = -lo < sesoi  # e = -d: its upper bound is -lo
    if label != "reproduced":
        assert excludes_claimed == (label in ("opposite", "equivalent", "not reproduced"))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=8), sesoi=st.floats(0.01, 1.0),
       claim=st.sampled_from(CLAIMS), c=st.sampled_from([1 / math.log(2), 1000.0, 0.125, 7.3]))
def test_units_end_to_end(values, sesoi, claim, c):
    """From the per-seed differences: scaling them and the SESOI by c scales the interval by c and keeps the label
    (cases within rounding of a boundary are skipped)."""
    o = outcome_of_values(values, claim, sesoi)
    scaled = outcome_of_values([v * c for v in values], claim, sesoi * c)
    if o.ci is None:
        assert scaled.ci is None or scaled.label == "inconclusive"
        return
    if scaled.ci is None or min(abs(x - y) for x in o.ci for y in (0.0, sesoi, -sesoi)) < 1e-9:
        return
    assert scaled.ci == pytest.approx((o.ci[0] * c, o.ci[1] * c), rel=1e-9, abs=1e-12)
    assert scaled.label == o.label


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-0.1, 0.1), min_size=3, max_size=8), sesoi=st.floats(0.005, 0.1))
def test_agrees_with_the_tost_p_values(values, sesoi):
    """readings.equivalence's one-sided p-values (an independent implementation, on t.sf): an equivalence claim is
    reproduced exactly when both are below 5%, and a directional claim's `equivalent` needs both below 2.5% (95%
    interval inside ±δ)."""
    n = len(values)
    d = difference(values, [0.0] * n, higher_better=False, seeds=list(range(n)), base_seeds=list(range(n)))
    if d.ci is None or d.ci[1] - d.ci[0] < 1e-12:  # no interval, or one too narrow for a standard error
        return
    e = equivalence(d, sesoi)
    if e.p_low is None or min(abs(p - q) for p in (e.p_low, e.p_high) for q in (0.05, 0.025)) < 1e-9:
        return
    assert (outcome_of_difference(d, "equal", sesoi).label == "reproduced") == (max(e.p_low, e.p_high) < 0.05)
    if outcome_of_difference(d, "lower", sesoi).label == "equivalent":
        assert max(e.p_low, e.p_high) < 0.025 and e.inside
