"""The report's headline and its pairwise table, on hand-made runs whose final val/loss values are written here:
Holm's correction against the step-down procedure done by hand, every pair's difference, interval and p against
scipy.stats, the verdict in each situation (a clear winner, a lead of two that beats the rest, nothing resolved,
one seed, one group, a metric where higher is better, a tuned sweep's best-vs-best), the groups table's order,
the best-val rows left out only when they repeat the final ones, and --sesoi's seeds and errors."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from experiments.compare import build_report, main
from experiments.compare.headline import headline, read_headline
from experiments.compare.pairwise import pairwise
from experiments.compare.significance import holm, seeds_needed
from experiments.compare.tuning import TUNED, TUNED_PROXY, UNTUNED
from tests.experiments.synthetic_runs import GROUPS, make_config, write_run

REPO = Path(__file__).resolve().parents[2]
POS = ["learned", "rope", "alibi", "sinusoidal"]
SHARED = [0.0, 0.10, -0.05, 0.20]  # a seed's offset, shared by every group (what pairing by seed removes)
# final val/loss per group and seed 0..3: alibi and rope 0.01 apart (unresolved), both far below the other two
CLEAR_LEAD_OF_TWO = {
    "learned": [3.50 + s + e for s, e in zip(SHARED, [0.01, -0.02, 0.00, 0.01])],
    "rope": [3.01 + s + e for s, e in zip(SHARED, [0.00, 0.02, -0.01, 0.01])],
    "alibi": [3.00 + s + e for s, e in zip(SHARED, [0.01, -0.01, 0.02, 0.00])],
    "sinusoidal": [3.30 + s + e for s, e in zip(SHARED, [0.01, 0.00, -0.01, 0.02])],
}


def write_runs(root: Path, finals: dict[str, list[float]], metric: str = "val/loss",
               best_differs: bool = False) -> Path:
    """One run dir per (group, seed): an early eval and a final eval holding the given value (with best_differs
    the early eval is 0.01 better, so best != final)."""
    for j, (pos, values) in enumerate(finals.items()):
        for seed, v in enumerate(values):
            g = {**GROUPS[0], "pos": pos}
            early = v - 0.01 if best_differs else v + 0.5
            if metric.endswith("acc"):
                early = v + 0.01 if best_differs else v - 0.5
            write_run(root / f"{j}_{pos}_s{seed}", make_config(g, seed), [
                {"step": 0, "tokens": 0, "train/loss": 6.0},
                {"step": 50, "tokens": 51_200, "train/loss": 5.0, metric: early},
                {"step": 100, "tokens": 102_400, "train/loss": 4.0, metric: v},
            ], {"status": "completed", "seed": seed})
    return root


def holm_by_hand(ps: list[float], alpha: float) -> list[bool]:
    """Holm's step-down procedure as written: sort, reject p_(k) while p_(k) <= alpha / (m - k + 1), stop at the
    first that is not."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    rejected = [False] * len(ps)
    for k, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - k):
            break
        rejected[i] = True
    return rejected


# ---------------------------------------------------------------- Holm's correction


def test_holm_on_a_hand_computed_example() -> None:
    # m = 3, sorted 0.01, 0.03, 0.04: 3 x 0.01 = 0.03; 2 x 0.03 = 0.06; 1 x 0.04 = 0.04 -> max(0.06, 0.04) = 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, None, 0.01]) == [pytest.approx(0.5), None, pytest.approx(0.02)]  # None: not in the family
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # 2 x 0.8 capped at 1; then max(1, 0.9)
    assert holm([]) == []


@pytest.mark.parametrize("seed", range(30))
def test_holm_rejects_exactly_what_the_step_down_procedure_rejects(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    ps = list(rng.uniform(0, 0.2, m) ** rng.uniform(0.5, 3))  # many small p's, some ties of magnitude
    adjusted = holm(ps)
    for alpha in (0.01, 0.05, 0.1):
        assert [a <= alpha for a in adjusted] == holm_by_hand(ps, alpha)
    assert all(a >= p for a, p in zip(adjusted, ps)) and all(a <= 1 for a in adjusted)


# ---------------------------------------------------------------- the pairwise table against scipy.stats


@pytest.fixture(scope="module")
def lead_of_two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_runs(tmp_path_factory.mktemp("headline") / "sweep", CLEAR_LEAD_OF_TWO)
    return build_report([root], root.parent / "report", by=["model.pos.kind"], sesoi=0.02)


def expected_pairs(finals: dict[str, list[float]], higher_better: bool = False) -> list[dict]:
    """Every pair, better mean first, in ranking order, with scipy's paired t-test and Holm done by hand."""
    ranked = sorted(finals, key=lambda k: -np.mean(finals[k]) if higher_better else np.mean(finals[k]))
    out = []
    for a, b in itertools.combinations(ranked, 2):
        res = stats.ttest_rel(finals[a], finals[b])
        ci = res.confidence_interval(0.95)
        out.append({"better": f"pos={a}", "worse": f"pos={b}", "diff": np.mean(np.subtract(finals[a], finals[b])),
                    "ci": [ci.low, ci.high], "p": res.pvalue})
    ps = sorted(p["p"] for p in out)
    m = len(ps)
    steps = list(itertools.accumulate((min(1.0, (m - k) * p) for k, p in enumerate(ps)), max))
    for pair in out:
        pair["p_holm"] = steps[ps.index(pair["p"])]
    return out


def test_every_pair_matches_scipy_and_holm_by_hand(lead_of_two: Path) -> None:
    doc = json.loads((lead_of_two.parent / "comparison.json").read_text())
    pw = doc["pairwise"]
    want = expected_pairs(CLEAR_LEAD_OF_TWO)
    assert [(p["better"], p["worse"]) for p in pw["pairs"]] == [(w["better"], w["worse"]) for w in want]
    for got, w in zip(pw["pairs"], want):
        assert got["test"] == "paired" and got["n"] == 4
        assert got["diff"] == pytest.approx(w["diff"]) and got["ci"] == pytest.approx(w["ci"])
        assert got["p"] == pytest.approx(w["p"]) and got["p_holm"] == pytest.approx(w["p_holm"])
        assert got["verdict"] == ("better" if w["p_holm"] < 0.05 else "not distinguishable")
    assert pw["family"] == 6 and [g["label"] for g in pw["ranking"]] == ["pos=alibi", "pos=rope", "pos=sinusoidal",
                                                                          "pos=learned"]
    # seeds for --sesoi 0.02 at Holm's strictest level, alpha = 0.05 / 6, from the paired differences' spread
    top = pw["pairs"][0]
    sd = np.std(np.subtract(CLEAR_LEAD_OF_TWO["alibi"], CLEAR_LEAD_OF_TWO["rope"]), ddof=1)
    assert top["seeds_needed"] == seeds_needed(0.02, sd, paired=True, level=1 - 0.05 / 6)


def test_headline_of_a_lead_of_two(lead_of_two: Path) -> None:
    lines = read_headline(lead_of_two)
    top = expected_pairs(CLEAR_LEAD_OF_TWO)[0]
    assert top["p_holm"] > 0.05 and all(p["p_holm"] < 0.05 for p in expected_pairs(CLEAR_LEAD_OF_TWO)[1:])
    assert lines[0] == (
        "final val/loss (lower is better): no clear winner: pos=alibi and pos=rope are not distinguishable at n=4 "
        f"(pos=alibi − pos=rope = {top['diff']:+.4f}, 95% CI [{top['ci'][0]:+.4f}, {top['ci'][1]:+.4f}], paired; "
        f"Holm p={top['p_holm']:.3f} over 6 pairs); both beat pos=sinusoidal and pos=learned.")
    means = {k: np.mean(v) for k, v in CLEAR_LEAD_OF_TWO.items()}
    assert lines[1] == ("Means, best first: " + ", ".join(f"pos={k} {means[k]:.4f}" for k in
                                                          ("alibi", "rope", "sinusoidal", "learned")) + " (n=4).")
    assert lines[2].startswith("Seeds per group for 80% power against a true difference of 0.02 (--sesoi) between "
                               "pos=alibi and pos=rope, after Holm's correction: ")


def test_report_tables_order_and_no_repeated_rows(lead_of_two: Path) -> None:
    md = (lead_of_two.parent / "report.md").read_text()
    head = md.index("**final val/loss (lower is better): no clear winner")
    assert head < md.index("## Groups")  # the headline comes first
    groups = [line.split(" | ")[0].lstrip("| ") for line in md.split("## Groups")[1].split("##")[0].splitlines()
              if line.startswith("| pos=")]
    assert groups == ["pos=alibi", "pos=rope", "pos=sinusoidal", "pos=learned"]  # best final val/loss first
    baseline = md.split("## Differences vs baseline")[1].split("\n## ")[0]
    rows = [line for line in baseline.splitlines() if line.startswith("| final") or line.startswith("| best")]
    assert len(rows) == 4 and not any(r.startswith("| best") for r in rows)  # best = final in every run: not repeated
    assert "The best val/loss rows are left out: it equals the final value in every run." in baseline
    pairwise = md.split("## All pairwise differences")[1].split("\n## ")[0]
    assert len([line for line in pairwise.splitlines() if line.startswith("| pos=")]) == 6
    assert "seeds/group for 80% power at \\|Δ\\|=0.02" in pairwise


def test_best_rows_stay_when_best_differs_from_final(tmp_path: Path) -> None:
    root = write_runs(tmp_path / "sweep", CLEAR_LEAD_OF_TWO, best_differs=True)
    report = build_report([root], tmp_path / "r", by=["model.pos.kind"])
    doc = json.loads((report.parent / "comparison.json").read_text())
    assert [m["name"] for m in doc["metrics"]] == ["final val/loss", "best val/loss"] and doc["omitted"] == []
    assert "seeds/group" not in (report.parent / "report.md").read_text()  # no --sesoi: no power column at all


# ---------------------------------------------------------------- the verdict in each situation


def headline_of(tmp_path: Path, finals: dict[str, list[float]], **kw) -> list[str]:
    metric = kw.pop("metric", "val/loss")
    root = write_runs(tmp_path / "sweep", finals, metric=metric)
    return read_headline(build_report([root], tmp_path / "r", by=["model.pos.kind"], metric=metric, **kw))


def test_a_clear_winner(tmp_path: Path) -> None:
    finals = {k: [v - 0.3 * (k == "alibi") for v in vals] for k, vals in CLEAR_LEAD_OF_TWO.items()}
    lines = headline_of(tmp_path, finals)
    top = expected_pairs(finals)[0]
    assert top["better"] == "pos=alibi" and top["p_holm"] < 0.05
    assert lines[0] == ("final val/loss (lower is better): pos=alibi wins. Margin over the runner-up: pos=alibi − "
                        f"pos=rope = {top['diff']:+.4f}, 95% CI [{top['ci'][0]:+.4f}, {top['ci'][1]:+.4f}], paired; "
                        "Holm p<0.001 over 6 pairs; pos=alibi beats all 3 other groups.")
    assert top["p_holm"] < 0.001


def test_nothing_resolved_names_the_best_mean(tmp_path: Path) -> None:
    noisy = {"learned": [3.0, 3.4, 2.95], "rope": [3.1, 2.9, 3.4], "alibi": [2.9, 3.2, 3.0]}
    lines = headline_of(tmp_path, noisy)
    assert lines[0].startswith("final val/loss (lower is better): no clear winner: no group is distinguishable from "
                               "the best mean, pos=alibi, at n=3 (pos=alibi − pos=learned = ")


def test_one_seed_has_no_interval(tmp_path: Path) -> None:
    lines = headline_of(tmp_path, {"learned": [3.3], "rope": [3.1]})
    assert lines[0] == ("final val/loss (lower is better): no clear winner: pos=rope and pos=learned are not "
                        "distinguishable at n=1 (pos=rope − pos=learned = -0.2000; n=1: no interval).")


def test_one_group_has_nothing_to_compare(tmp_path: Path) -> None:
    assert headline_of(tmp_path, {"rope": [3.1, 3.2]})[0] == ("final val/loss (lower is better): only pos=rope has a "
                                                              "value (3.1500); nothing to compare.")


def test_higher_is_better_ranks_the_highest_first(tmp_path: Path) -> None:
    acc = {"learned": [0.50, 0.52, 0.51], "rope": [0.70, 0.73, 0.71]}
    lines = headline_of(tmp_path, acc, metric="val/acc")
    assert lines[0].startswith("final val/acc (higher is better): pos=rope wins. Margin over the runner-up: "
                               "pos=rope − pos=learned = +0.2033")


def test_a_tuned_sweep_says_best_vs_best(tmp_path: Path) -> None:
    from tests.experiments.test_tune_report import FINAL, make_sweep

    root = make_sweep(tmp_path / "tuned")
    lines = read_headline(build_report([root], tmp_path / "r", by=["model.pos.kind"]))
    res = stats.ttest_rel(FINAL["rope"], FINAL["learned"])  # the final runs alone, fresh seeds 0-2
    assert lines[0].startswith("Best-vs-best (each arm at its own tuned lr, fresh seeds), final val/loss (lower is "
                               "better): no clear winner: pos=rope and pos=learned are not distinguishable at n=3")
    assert f"Holm p={res.pvalue:.3f})" in lines[0]  # one pair: Holm's p is the pair's own


@pytest.mark.parametrize("protocol, prefix", [
    (TUNED, "Best-vs-best (each arm at its own tuned lr, fresh seeds), final val/loss"),
    (TUNED_PROXY, "Every arm at the lr tuned on a proxy (not best-vs-best), final val/loss"),  # one arm was tuned
    (UNTUNED, "final val/loss"),
])
def test_the_protocol_says_whether_it_is_best_vs_best(protocol: str, prefix: str) -> None:
    groups = [{"label": f"pos={k}", "index": i, "seeds": [0, 1, 2], "values": v}
              for i, (k, v) in enumerate({"learned": [3.10, 3.20, 3.05], "rope": [3.00, 3.15, 2.90]}.items())]
    line = headline(pairwise(groups, "final val/loss", higher_better=False), protocol)["lines"][0]
    assert line.startswith(prefix + " (lower is better): no clear winner: pos=rope and pos=learned")


# ---------------------------------------------------------------- --sesoi on the command line


@pytest.mark.parametrize("value, message", [
    ("0", "argument --sesoi: must be a finite number > 0, got 0"),
    ("-0.1", "argument --sesoi: must be a finite number > 0, got -0.1"),
    ("nan", "argument --sesoi: must be a finite number > 0, got nan"),
    ("inf", "argument --sesoi: must be a finite number > 0, got inf"),
    ("x", "argument --sesoi: expected a number, got 'x'"),
])
def test_a_bad_sesoi_is_one_line_before_anything_is_read(tmp_path: Path, value: str, message: str) -> None:
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "experiments.compare", str(tmp_path / "missing"), "--out", str(out),
                        "--sesoi", value], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert p.stderr.splitlines() == [f"compare: error: {message} (see 'python -m experiments.compare --help')"]
    assert not out.exists()  # nothing written (and the missing path was never looked at)


def test_cli_prints_the_headline_then_the_path(lead_of_two: Path, tmp_path: Path, capsys) -> None:
    sweep = lead_of_two.parent.parent / "sweep"
    assert main([str(sweep), "--by", "model.pos.kind", "--out", str(tmp_path / "o"), "--sesoi", "0.02"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [*read_headline(lead_of_two), str(tmp_path / "o" / "report.html")]
