"""Protocol v3's power plan (experiments/findings/power.py) against independent references: a seeded Monte-Carlo
simulation of the very decision outcome.py makes (numpy, 4,000 draws a point, tolerance 4 standard errors), the
normal-approximation closed forms (n and power), the noncentral-t shortcut for TOST (a lower bound), and t/χ² table
values; the plan's n as the smallest reaching 80%, power monotone in n and in SESOI/sd (properties); the plan's
sentence and record.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from experiments.compare.significance import power as two_sided_power
from experiments.findings.power import (CAP, TESTS, Noise, noise_of, plan, plan_record, plan_text, power_directional,
                                        power_equivalence, smallest_n)

POWER = {"directional": power_directional, "equivalence": power_equivalence}
DRAWS = 4000


def simulated(test: str, n: int, ratio: float, seed: int) -> float:
    """The fraction of DRAWS simulated experiments (n paired differences, sd 1) whose interval decides the claim:
    directional, true effect = ratio, 95% interval entirely above 0; equivalence, true difference 0, 90% interval
    inside ±ratio."""
    rng = np.random.default_rng(seed)
    d = rng.normal(ratio if test == "directional" else 0.0, 1.0, size=(DRAWS, n))
    m, se = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)
    if test == "directional":
        return float(np.mean(m - stats.t.ppf(0.975, n - 1) * se > 0))
    half = stats.t.ppf(0.95, n - 1) * se
    return float(np.mean((m - half > -ratio) & (m + half < ratio)))


@pytest.mark.parametrize("test, n, ratio", [
    ("directional", 3, 1.0), ("directional", 6, 0.8), ("directional", 10, 1.0), ("directional", 20, 0.5),
    ("equivalence", 3, 1.0), ("equivalence", 6, 1.2), ("equivalence", 12, 0.9), ("equivalence", 20, 0.7),
])
def test_power_against_monte_carlo(test, n, ratio):
    exact = POWER[test](n, ratio * 0.02, 0.02)  # in nats: δ = ratio · sd
    sim = simulated(test, n, ratio, seed=n * 100 + int(ratio * 10))
    tol = 4 * math.sqrt(max(exact * (1 - exact), 0.01) / DRAWS)  # 4 standard errors of the simulated fraction
    assert abs(exact - sim) < tol, (exact, sim, tol)


@pytest.mark.parametrize("ratio", [0.3, 0.4, 0.6, 0.8, 1.0, 1.5])
@pytest.mark.parametrize("test", TESTS)
def test_n_against_the_normal_approximation(test, ratio):
    """n_normal = ((z_a + z_b)·σ/δ)², z_a = z_0.975 and z_b = z_0.8 (directional), z_0.95 and z_0.9 (TOST at true
    difference 0: each side must fail with chance ≤ 10%). The t-test needs a few seeds more, never fewer."""
    z = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8) if test == "directional"
         else stats.norm.ppf(0.95) + stats.norm.ppf(0.9))
    n_normal = (z / ratio) ** 2
    n, p, capped = smallest_n(test, ratio, 1.0, cap=500)
    assert not capped and p >= 0.8
    assert n_normal < n <= n_normal + 3


@pytest.mark.parametrize("test", TESTS)
def test_power_at_large_n_is_the_normal_one(test):
    n, ratio = 400, 0.15
    x = ratio * math.sqrt(n)
    normal = (stats.norm.cdf(x - stats.norm.ppf(0.975)) if test == "directional"
              else 2 * stats.norm.cdf(x - stats.norm.ppf(0.95)) - 1)
    assert POWER[test](n, ratio, 1.0) == pytest.approx(normal, abs=0.005)


@pytest.mark.parametrize("n, ratio", [(3, 1.0), (8, 1.0), (15, 0.8), (30, 0.6), (40, 0.9)])
def test_equivalence_above_the_noncentral_t_shortcut(n, ratio):
    """P(T1 > t) + P(T2 < −t) − 1 (T1, T2 noncentral t at ±δ√n/σ) counts the draws where both tests fail twice; it is
    a lower bound, tight at high power."""
    df, t = n - 1, stats.t.ppf(0.95, n - 1)
    ncp = ratio * math.sqrt(n)
    shortcut = stats.nct.sf(t, df, ncp) + stats.nct.cdf(-t, df, -ncp) - 1
    exact = power_equivalence(n, ratio, 1.0)
    assert exact >= shortcut - 1e-9
    if shortcut > 0.9:
        assert exact == pytest.approx(shortcut, abs=0.005)


@pytest.mark.parametrize("n", [2, 5, 20])
def test_directional_is_the_two_sided_power_less_the_wrong_tail(n):
    df, ncp = n - 1, 0.7 * math.sqrt(n)
    wrong = stats.nct.cdf(-stats.t.ppf(0.975, df), df, ncp)
    assert power_directional(n, 0.7, 1.0) == pytest.approx(two_sided_power(n, 0.7, 1.0, paired=True) - wrong,
                                                           abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(ratio=st.floats(0.25, 3.0), test=st.sampled_from(TESTS))
def test_plan_is_the_smallest_n(ratio, test):
    p = plan(test, ratio * 0.02, Noise(0.02, 5), cap=200)
    assert not p.capped and p.power >= 0.8
    assert p.power == pytest.approx(POWER[test](p.n, ratio * 0.02, 0.02), abs=1e-12)
    assert p.n == 2 or POWER[test](p.n - 1, ratio * 0.02, 0.02) < 0.8


@settings(max_examples=25, deadline=None)
@given(ratio=st.floats(0.1, 3.0), test=st.sampled_from(TESTS))
def test_power_grows_with_n(ratio, test):
    """Throughout for the directional test; for TOST from where it reaches its 5% size (below it, at n = 2..10,
    its power can dip: test_tost_dips_below_its_size)."""
    powers = [POWER[test](n, ratio, 1.0) for n in range(2, 41)]
    start = 0 if test == "directional" else next((i for i, p in enumerate(powers) if p >= 0.05), len(powers))
    assert all(b >= a - 1e-9 for a, b in zip(powers[start:], powers[start + 1:]))


def test_tost_dips_below_its_size():
    """At δ = σ/2 TOST's power falls from n = 2 to n = 4 (a heavy-tailed s at 1-3 df): the simulation agrees, so the
    plan scans n upward instead of bisecting."""
    exact = [power_equivalence(n, 0.5, 1.0) for n in (2, 4)]
    assert exact[1] < exact[0] < 0.05
    assert [simulated("equivalence", n, 0.5, seed=7) for n in (2, 4)] == pytest.approx(exact, abs=0.01)


@settings(max_examples=25, deadline=None)
@given(r1=st.floats(0.05, 3.0), r2=st.floats(0.05, 3.0), n=st.integers(2, 40), test=st.sampled_from(TESTS))
def test_power_grows_with_sesoi_over_sd(r1, r2, n, test):
    lo, hi = sorted((r1, r2))
    assert POWER[test](n, hi, 1.0) >= POWER[test](n, lo, 1.0) - 1e-9
    assert POWER[test](n, 0.02 * lo, 0.02) == pytest.approx(POWER[test](n, lo, 1.0), abs=1e-9)  # units do not count


def test_capped_plan_states_the_power_at_the_cap():
    p = plan("equivalence", 0.02, Noise(0.1, 3), cap=12)
    assert p.capped and p.n == 12 and p.power == pytest.approx(power_equivalence(12, 0.02, 0.1))
    assert p.power < 0.8 and p.n_upper is None
    text = plan_text(p)
    assert "cap of 12" in text and f"{p.power:.0%}" in text and "more than the cap" in text


def test_noise_pooled_by_hand():
    assert noise_of([[1.0, 2.0, 3.0], [2.0, 4.0]]) == Noise(math.sqrt(4 / 3), 3)  # ss 2 + 2 on 2 + 1 df
    assert noise_of([[1.0, 2.0, 3.0], [7.0]], "x") == Noise(1.0, 2, "x")  # a single value adds nothing
    # the 80% upper bound: χ²(0.2; 4) = 1.6488 in a printed table
    assert Noise(1.0, 4).upper() == pytest.approx(math.sqrt(4 / 1.6488), rel=1e-4)
    with pytest.raises(ValueError):
        noise_of([[1.0], [math.nan, 2.0]])


def test_plan_text_and_record():
    noise = noise_of([[0.01, -0.02, 0.03, 0.0, -0.01]], source="the pilot's 5 seeds")
    p = plan("directional", 0.02, noise)
    assert p.cap == CAP and not p.capped and p.level == 0.95
    assert p.n_upper >= p.n and p.sd_upper > noise.sd
    text = plan_text(p)
    for part in (f"{p.n} seeds per arm", f"{p.power:.0%} power", "0.02 nats", f"{noise.sd:.3f}", "df 4",
                 "the pilot's 5 seeds", f"{p.sd_upper:.3f}", f"{p.n_upper} seeds"):
        assert part in text, part
    assert text.count(".") >= 1 and "\n" not in text
    record = plan_record(p)
    assert json.loads(json.dumps(record)) == record
    assert (record["n"], record["power"], record["capped"], record["noise"]["df"], record["level"]) == \
        (p.n, p.power, False, 4, 0.95)
    assert plan_record(plan("equivalence", 0.02, noise))["level"] == 0.90


@pytest.mark.parametrize("call", [
    lambda: power_directional(1, 0.02, 0.02), lambda: power_equivalence(5, 0.0, 0.02),
    lambda: power_equivalence(5, 0.02, -1.0), lambda: power_directional(5, math.inf, 0.02),
    lambda: smallest_n("one-sided", 0.02, 0.02), lambda: smallest_n("directional", 0.02, 0.02, cap=1),
    lambda: smallest_n("directional", 0.02, 0.02, target=1.0),
])
def test_bad_values_raise(call):
    with pytest.raises(ValueError):
        call()
