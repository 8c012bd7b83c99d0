"""Differences vs a baseline group: t-intervals (paired / Welch) checked against textbook formulas written out here,
verdicts, seeds needed for 80% power, comparison.json, --baseline, the budget sentence, and EMA smoothing."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from experiments.compare import build_report, main
from experiments.compare import cli as compare_cli
from experiments.compare import report as compare_report
from experiments.compare.outdir import MANIFEST
from experiments.compare.significance import difference, mean_ci, power, seeds_needed
from experiments.compare.stats import ema, higher_is_better
from tests.experiments.synthetic_runs import GROUPS, write_sweep

T_975 = {2: 4.302652729911275, 3: 3.182446305284263, 4: 2.7764451051977987}  # t(0.975, df) from a t table


# ---------------------------------------------------------------- the intervals, against the textbook
# Closed forms written out here, independent of significance.py (which calls scipy.stats.ttest_rel / ttest_ind).

PAIRED = [  # (group, baseline), seeds 0..n-1 in both
    ([3.10, 3.16, 3.12, 3.20, 3.14], [3.15, 3.18, 3.19, 3.22, 3.20]),  # d = -0.05, -0.02, -0.07, -0.02, -0.06
    ([1.0, 2.0, 4.0], [0.5, 1.0, 2.0]),  # d = 0.5, 1, 2
    ([10.0, 12.0, 11.0, 15.0], [9.0, 13.0, 10.0, 11.0]),  # d = 1, -1, 1, 4
]


@pytest.mark.parametrize("x, y", PAIRED)
def test_paired_interval_is_the_textbook_one_on_per_seed_differences(x, y) -> None:
    n = len(x)
    d = [a - b for a, b in zip(x, y)]
    mean, se = statistics.fmean(d), statistics.stdev(d) / math.sqrt(n)
    t = mean / se
    got = difference(x, y, higher_better=False, seeds=list(range(n)), base_seeds=list(range(n)))
    assert got.test == "paired" and got.df == n - 1 and got.n == n
    assert got.diff == pytest.approx(mean)
    assert got.ci == pytest.approx((mean - T_975[n - 1] * se, mean + T_975[n - 1] * se))
    assert got.p == pytest.approx(2 * sps.t.sf(abs(t), n - 1))


def test_paired_interval_worked_by_hand() -> None:
    got = difference(*PAIRED[0], higher_better=False, seeds=[0, 1, 2, 3, 4], base_seeds=[0, 1, 2, 3, 4])
    # d̄ = -0.044, s_d = √0.00053, half-width 2.776 · s_d / √5 = 0.028585
    assert got.ci == pytest.approx((-0.072585, -0.015415), abs=1e-6)
    assert got.verdict == "better"  # a loss went down, and the interval excludes 0


def test_pairs_are_matched_by_seed_not_by_position() -> None:
    x, y = [3.10, 3.16, 3.12, 3.20, 3.14], [3.15, 3.18, 3.19, 3.22, 3.20]
    ref = difference(x, y, False, seeds=[0, 1, 2, 3, 4], base_seeds=[0, 1, 2, 3, 4])
    order = [3, 0, 4, 2, 1]
    shuffled = difference([x[i] for i in order], y, False, seeds=order, base_seeds=[0, 1, 2, 3, 4])
    assert shuffled.ci == pytest.approx(ref.ci) and shuffled.test == "paired"


WELCH = [  # (group, baseline) with different seeds, so unpaired
    ([3.10, 3.16, 3.12], [3.15, 3.18, 3.19, 3.22]),
    ([1.0, 2.0, 4.0, 8.0], [3.0, 3.5]),
    ([5.0, 5.0, 5.0], [4.0, 4.5, 6.0, 5.5]),  # no spread in the group: all of it is the baseline's, df = n_y - 1
]


@pytest.mark.parametrize("x, y", WELCH)
def test_welch_interval_is_the_textbook_one(x, y) -> None:
    a, b = statistics.variance(x) / len(x), statistics.variance(y) / len(y)
    df = (a + b) ** 2 / (a**2 / (len(x) - 1) + b**2 / (len(y) - 1))  # Welch–Satterthwaite
    diff = statistics.fmean(x) - statistics.fmean(y)
    half = sps.t.ppf(0.975, df) * math.sqrt(a + b)
    got = difference(x, y, higher_better=False, seeds=list(range(len(x))), base_seeds=list(range(1, len(y) + 1)))
    assert got.test == "welch" and got.df == pytest.approx(df)
    assert got.ci == pytest.approx((diff - half, diff + half))
    assert got.p == pytest.approx(2 * sps.t.sf(abs(diff) / math.sqrt(a + b), df))
    if a == 0:
        assert got.df == pytest.approx(len(y) - 1) and half == pytest.approx(T_975[len(y) - 1] * math.sqrt(b))


@pytest.mark.parametrize("seeds, base_seeds, test", [
    ([0, 1, 2], [2, 0, 1], "paired"),  # same set, any order
    ([0, 1, 2], [0, 1, 3], "welch"),  # different seeds
    ([0, 0, 1], [0, 1, 1], "welch"),  # repeated seeds cannot be paired
    ([0, None, 2], [0, None, 2], "welch"),  # unknown seeds
    (None, None, "welch"),
])
def test_paired_only_when_both_groups_ran_the_same_seeds(seeds, base_seeds, test) -> None:
    assert difference([1.0, 1.2, 1.1], [1.3, 1.1, 1.4], False, seeds=seeds, base_seeds=base_seeds).test == test


def test_verdict_follows_the_metric_direction() -> None:
    lower, higher = [3.00, 3.02, 3.01], [3.20, 3.23, 3.21]  # clearly apart
    assert not higher_is_better("val/loss") and higher_is_better("val/acc")
    assert difference(lower, higher, higher_is_better("val/loss")).verdict == "better"  # lower loss
    assert difference(lower, higher, higher_is_better("val/acc")).verdict == "worse"  # lower accuracy
    assert difference(higher, lower, higher_is_better("val/loss")).verdict == "worse"
    assert difference(higher, lower, higher_is_better("val/acc")).verdict == "better"


def test_an_interval_covering_zero_is_not_distinguishable() -> None:
    got = difference([3.0, 3.2, 3.1], [3.1, 3.0, 3.2], False, seeds=[0, 1, 2], base_seeds=[0, 1, 2])
    assert got.ci[0] < 0 < got.ci[1]
    assert got.verdict == "not distinguishable" and got.p > 0.05


def test_n_1_has_no_interval() -> None:
    got = difference([3.0], [3.1, 3.2, 3.3], False, seeds=[0], base_seeds=[0, 1, 2])
    assert got.ci is None and got.p is None and got.test is None and got.seeds_needed is None
    assert got.verdict == "not distinguishable" and got.note == "n=1: no interval"
    assert got.diff == pytest.approx(-0.2)


@pytest.mark.parametrize("x, y, seeds, test", [
    ([3.0, 3.0, 3.0], [3.25, 3.25, 3.25], None, "welch"),  # identical values in each group
    ([3.0, 3.5, 4.0], [3.25, 3.75, 4.25], [0, 1, 2], "paired"),  # identical per-seed differences, -0.25
    ([1.1, 1.2, 1.3], [1.0, 1.1, 1.2], [0, 1, 2], "paired"),  # the same up to rounding: 0.1 ± 1e-16
    ([3.1, 3.1, 3.1], [3.1, 3.1, 3.1], [0, 1, 2], "paired"),  # no difference either
])
def test_zero_spread_has_no_interval(x, y, seeds, test) -> None:
    # no spread to estimate: never a zero-width interval or p = 0 (both would claim certainty from 3 seeds)
    got = difference(x, y, False, seeds=seeds, base_seeds=seeds)
    assert got.test == test and got.ci is None and got.p is None and got.df is None
    assert got.verdict == "not distinguishable" and got.note == "zero spread: no interval"
    assert got.seeds_needed is None and got.diff == pytest.approx(statistics.fmean(x) - statistics.fmean(y))


def test_mean_ci_is_the_textbook_one_and_none_without_spread() -> None:
    assert mean_ci([1.0, 2.0, 3.0]) == pytest.approx((2 - T_975[2] / math.sqrt(3), 2 + T_975[2] / math.sqrt(3)))
    assert mean_ci([1.0, None, 3.0, math.nan]) == pytest.approx((2 - 12.706204736174707, 2 + 12.706204736174707))
    assert mean_ci([3.0]) is None and mean_ci([0.1 * 3, 0.3, 0.1 + 0.2]) is None  # n = 1; zero spread


# ---------------------------------------------------------------- seeds needed for 80% power


def test_seeds_needed_matches_the_published_sample_sizes() -> None:
    # two-sided alpha 0.05, power 0.8 (Cohen's tables / G*Power): two-sample d = 1 -> 17 per group, d = 0.5 -> 64;
    # paired (one-sample on differences) d = 0.5 -> 34, d = 1 -> 10
    assert seeds_needed(1.0, 1.0, paired=False) == 17
    assert seeds_needed(0.5, 1.0, paired=False) == 64
    assert seeds_needed(0.5, 1.0, paired=True) == 34
    assert seeds_needed(1.0, 1.0, paired=True) == 10
    # the smallest such n: one fewer seed falls short; the normal approximation 2·(1.96 + 0.8416)² = 15.7 is a floor
    assert power(17, 1.0, 1.0, paired=False) >= 0.8 > power(16, 1.0, 1.0, paired=False)
    assert 2 * (1.959964 + 0.841621) ** 2 < 17


def test_seeds_needed_is_monotonic() -> None:
    by_effect = [seeds_needed(e, 1.0, paired=False) for e in (0.2, 0.4, 0.8, 1.6, 3.2)]
    assert by_effect == sorted(by_effect, reverse=True) and by_effect[0] > by_effect[-1]
    by_sd = [seeds_needed(1.0, s, paired=True) for s in (0.25, 0.5, 1.0, 2.0)]
    assert by_sd == sorted(by_sd) and by_sd[0] < by_sd[-1]
    assert seeds_needed(0.0, 1.0, paired=False) is None  # no difference to resolve
    assert seeds_needed(1e-4, 1.0, paired=False) is None  # beyond the cap


def test_seeds_needed_uses_the_spread_of_the_paired_differences() -> None:
    # big seed-to-seed spread shared by both groups: pairing removes it, Welch cannot
    x, y = [3.0, 3.5, 4.0, 4.5], [3.05, 3.56, 4.04, 4.55]
    paired = difference(x, y, False, seeds=[0, 1, 2, 3], base_seeds=[0, 1, 2, 3], sesoi=0.1)
    welch = difference(x, y, False, sesoi=0.1)
    d = np.subtract(x, y)
    assert paired.seeds_needed == seeds_needed(0.1, d.std(ddof=1), paired=True) < welch.seeds_needed
    assert paired.verdict == "better" and welch.verdict == "not distinguishable"


@pytest.mark.parametrize("shift", [0.0, -0.3, 0.5])
def test_seeds_needed_comes_from_the_sesoi_never_the_observed_difference(shift: float) -> None:
    # post-hoc power of the observed effect is gone: without a sesoi there is no number; with one, the observed
    # difference does not matter (the same spread, any shift of the group, the same seeds)
    y = [3.0, 3.1, 3.05, 2.95, 3.02]
    x = [b + d + shift for b, d in zip(y, [-0.01, 0.02, -0.03, 0.015, 0.0])]
    seeds = list(range(5))
    assert difference(x, y, False, seeds=seeds, base_seeds=seeds).seeds_needed is None
    got = difference(x, y, False, seeds=seeds, base_seeds=seeds, sesoi=0.02)
    sd = statistics.stdev(np.subtract(x, y))
    crit = lambda n: sps.t.ppf(0.975, n - 1)  # noqa: E731
    power = lambda n: sps.nct.sf(crit(n), n - 1, 0.02 * math.sqrt(n) / sd) + sps.nct.cdf(-crit(n), n - 1, 0.02 * math.sqrt(n) / sd)  # noqa: E731
    assert power(got.seeds_needed) >= 0.8 > power(got.seeds_needed - 1)
    assert got.sd == pytest.approx(sd)


# ---------------------------------------------------------------- the report: comparison.json, --baseline


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 3 groups x 3 seeds; group 2 (post-LN) has seed 2 diverged, so it has seeds {0, 1} against {0, 1, 2}: Welch
    root = tmp_path_factory.mktemp("comparison") / "sweep"
    write_sweep(root, groups=GROUPS[:3], extrap=False, grad_layers=False)
    return root


@pytest.fixture(scope="module")
def report(sweep: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_report([sweep], tmp_path_factory.mktemp("rep") / "out", by=["model.pos.kind"], smooth=0.6)


def _strict_load(path: Path) -> dict:
    def no_constants(name: str) -> None:
        raise AssertionError(f"non-strict JSON token {name}")

    return json.loads(path.read_text(), parse_constant=no_constants)


def _finals(run_dirs: list[Path]) -> dict[int, float]:
    """{seed: last val/loss} read straight from metrics.jsonl (completed runs only)."""
    out = {}
    for d in run_dirs:
        summary = json.loads((d / "summary.json").read_text())
        if summary["status"] == "completed":
            lines = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
            out[summary["seed"]] = [l["val/loss"] for l in lines if "val/loss" in l][-1]
    return out


def test_comparison_json_schema_and_strictness(report: Path) -> None:
    doc = _strict_load(report.parent / "comparison.json")
    assert doc["version"] == 2 and doc["baseline"] == {"label": "pos=learned", "index": 0}
    assert doc["sesoi"] is None and doc["headline"]["lines"]
    assert doc["pairwise"]["correction"] == "holm" and len(doc["pairwise"]["pairs"]) == 3
    # the synthetic curves only go down, so every run's best val/loss is its final one: those rows would repeat
    assert doc["omitted"] == ["best val/loss"]
    assert [m["name"] for m in doc["metrics"]] == ["final val/loss", "final val/bpb"]
    for m in doc["metrics"]:
        assert m["direction"] == "lower_is_better"
        assert [g["label"] for g in m["groups"]] == ["pos=learned", "pos=rope", "pos=alibi"]
        for g in m["groups"]:
            assert set(g) == {"label", "index", "keys", "n", "seeds", "mean", "std", "ci", "baseline", "vs_baseline"}
            assert g["keys"] == {"model.pos.kind": g["label"].split("=")[1]}
            assert g["n"] == len(g["seeds"]) and g["baseline"] == (g["index"] == 0)
            d = g["vs_baseline"]
            if g["baseline"]:
                assert d is None
                continue
            assert set(d) == {"test", "n", "n_baseline", "diff", "ci", "df", "p", "verdict", "seeds_needed", "note"}
            assert d["verdict"] in ("better", "worse", "not distinguishable")
    alibi = doc["metrics"][0]["groups"][2]
    assert alibi["seeds"] == [0, 1] and alibi["vs_baseline"]["test"] == "welch"
    assert doc["metrics"][0]["groups"][1]["vs_baseline"]["test"] == "paired"
    assert "comparison.json" in json.loads((report.parent / MANIFEST).read_text())["files"]


def test_report_interval_matches_the_runs_own_numbers(sweep: Path, report: Path) -> None:
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir()), key=lambda p: int(p.name))
    base, alibi = _finals(jobs[0:3]), _finals(jobs[6:9])  # job order: 3 seeds per group
    x, y = list(alibi.values()), list(base.values())
    a, b = statistics.variance(x) / len(x), statistics.variance(y) / len(y)
    df = (a + b) ** 2 / (a**2 / (len(x) - 1) + b**2 / (len(y) - 1))
    diff = statistics.fmean(x) - statistics.fmean(y)
    half = sps.t.ppf(0.975, df) * math.sqrt(a + b)
    got = _strict_load(report.parent / "comparison.json")["metrics"][0]["groups"][2]["vs_baseline"]
    assert got["diff"] == pytest.approx(diff) and got["ci"] == pytest.approx([diff - half, diff + half])
    assert got["verdict"] == "better"  # synthetic floor 3.20 against 3.30


def test_report_md_and_html_have_the_section(report: Path) -> None:
    md = (report.parent / "report.md").read_text()
    assert "## Differences vs baseline pos=learned" in md
    assert "| final val/loss | pos=alibi | 2 |" in md and "| welch |" in md and "| paired |" in md
    assert "Budget held equal across the 8 runs in the means: tokens 205k, train FLOPs 966G, steps 200." in md
    assert "--smooth 0.6" in md  # the train-loss caption says it is smoothed
    html = report.read_text()
    assert "Differences vs baseline pos=learned</h2>" in html and 'id="baseline-table"' in html
    assert 'class="st st-better"' in html and "Budget held equal" in html


def test_n_1_groups_have_null_intervals_in_the_json(tmp_path: Path) -> None:
    root = tmp_path / "sw"
    write_sweep(root, groups=GROUPS[:2], seeds=(0,), diverged=None, extrap=False, grad_layers=False)
    doc = _strict_load(build_report([root], tmp_path / "out").parent / "comparison.json")
    g = doc["metrics"][0]["groups"][1]
    assert g["std"] is None and g["ci"] is None
    assert g["vs_baseline"]["ci"] is None and g["vs_baseline"]["p"] is None
    assert g["vs_baseline"]["verdict"] == "not distinguishable" and g["vs_baseline"]["note"] == "n=1: no interval"


@pytest.mark.parametrize("baseline", ["pos=rope", "1"])
def test_baseline_by_label_or_index(sweep: Path, tmp_path: Path, baseline: str) -> None:
    out = tmp_path / "out"
    assert main([str(sweep), "--by", "model.pos.kind", "--baseline", baseline, "--out", str(out)]) == 0
    doc = _strict_load(out / "comparison.json")
    assert doc["baseline"] == {"label": "pos=rope", "index": 1}
    learned = doc["metrics"][0]["groups"][0]["vs_baseline"]
    assert learned["verdict"] == "worse"  # learned (floor 3.30) against rope (3.10)
    assert "## Differences vs baseline pos=rope" in (out / "report.md").read_text()


@pytest.mark.parametrize("baseline, message", [
    ("pos=nope", "--baseline 'pos=nope' is neither a group label nor a group index; groups: 0 = 'pos=learned'"),
    ("3", "--baseline 3: there are 3 groups, indexed 0 to 2"),
    ("-1", "--baseline '-1' is neither a group label nor a group index"),
])
def test_bad_baseline_is_one_line_exit_2(sweep: Path, tmp_path: Path, capsys, baseline: str, message: str) -> None:
    out = tmp_path / "out"
    rc = main([str(sweep), "--by", "model.pos.kind", "--baseline", baseline, "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and "Traceback" not in cap.err
    assert len(cap.err.strip().splitlines()) == 1
    assert cap.err.startswith(f"compare: error: {message}")
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("smooth", ["1", "-0.1", "nan", "inf"])
def test_bad_smooth_is_refused_by_the_parser_before_any_run_is_read(sweep: Path, capsys, monkeypatch,
                                                                     smooth: str) -> None:
    def no_reading(*args, **kwargs):
        raise AssertionError("a run was read before --smooth was checked")

    monkeypatch.setattr(compare_report, "read_runs", no_reading)
    monkeypatch.setattr(compare_cli, "pull_runs", no_reading, raising=False)  # --wandb-group: pulled in cli.main
    for extra in ([], ["--wandb-group", "g"]):
        assert main([str(sweep), "--smooth", smooth, *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("compare: error: argument --smooth: must be") and "[0, 1)" in err, err
        assert len(err.strip().splitlines()) == 1


def test_budget_sentence_says_when_runs_differ_in_tokens(tmp_path: Path) -> None:
    root = tmp_path / "sw"
    # two shapes (4 x 128, 2 x 192): same tokens and steps, different FLOPs; then one run trained fewer tokens
    jobs = write_sweep(root, groups=[GROUPS[0], GROUPS[3]], seeds=(0, 1), diverged=None, extrap=False,
                       grad_layers=False)
    md = (build_report([root], tmp_path / "out").parent / "report.md").read_text()
    assert ("Budget held equal across the 4 runs in the means: tokens 205k, steps 200. "
            "Not equal: train FLOPs (966G–1.09T).") in md
    summary = json.loads((jobs[0] / "summary.json").read_text())
    (jobs[0] / "summary.json").write_text(json.dumps({**summary, "tokens": 100_000}))
    md = (build_report([root], tmp_path / "out").parent / "report.md").read_text()
    assert "Budget held equal across the 4 runs in the means: steps 200." in md
    assert "Runs differ in tokens (100k–205k): differences mix architecture and training length." in md


# ---------------------------------------------------------------- EMA smoothing


def test_ema_against_hand_computed_values() -> None:
    # wandb's TWEMA: w = sqrt(alpha); a step of dx decays the running sums by w ** (1000 · dx / x_range)
    even = 0.5 ** (1 / 250)  # xs 0, 1, 2 (range 2): each step decays by sqrt(even) ** 500 = 0.5
    # num: 1; 0.5·1 + 2 = 2.5; 0.5·2.5 + 4 = 5.25   den: 1; 1.5; 1.75   -> 1, 5/3, 3
    np.testing.assert_allclose(ema(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 4.0]), even), [1, 5 / 3, 3])
    uneven = 0.5 ** (6 / 1000)  # xs 0, 1, 3 (range 3): decays 0.5, then 0.25 (twice as far)
    # num: 1; 2.5; 0.25·2.5 + 4 = 4.625   den: 1; 1.5; 0.25·1.5 + 1 = 1.375   -> 1, 5/3, 37/11
    np.testing.assert_allclose(ema(np.array([0.0, 1.0, 3.0]), np.array([1.0, 2.0, 4.0]), uneven), [1, 5 / 3, 37 / 11])
    # the figure's x range, not the curve's own: over a range of 4 the step 0 -> 2 decays by 0.5 -> (0.5 + 3) / 1.5;
    # over its own range of 2 it would decay by 0.25 -> 3.25 / 1.25 = 2.6
    np.testing.assert_allclose(ema(np.array([0.0, 2.0]), np.array([1.0, 3.0]), even, x_range=4.0), [1, 7 / 3])
    np.testing.assert_allclose(ema(np.array([0.0, 2.0]), np.array([1.0, 3.0]), even), [1, 2.6])
    ys = np.array([5.0, 1.0, 3.0])
    np.testing.assert_array_equal(ema(np.array([0.0, 1.0, 2.0]), ys, 0.0), ys)  # 0 = off
