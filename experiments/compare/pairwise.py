"""Every group against every other on one metric, with Holm's correction across the pairs: the data of the report's
"All pairwise differences" table and of its headline (headline.py).

    pw = pairwise([{"label": "pos=rope", "index": 0, "seeds": [0, 1, 2], "values": [5.16, 5.15, 5.14]}, ...],
                  name="final val/loss", higher_better=False)
    pw["ranking"][0]["label"] -> the group with the best mean; pw["pairs"][0] -> best vs runner-up

Handled:
* the ranking: groups with at least one value, best mean first (lowest for a loss, highest for accuracy; ties keep
  the group order); groups without a value are listed in `no_value`;
* one pair per two ranked groups, `better` the higher-ranked one, Δ = better − worse, its 95% interval and p from
  significance.difference (paired by seed when both ran the same seeds, else Welch), in ranking order: best vs
  runner-up first, then best vs third, ..., runner-up vs third, ...;
* Holm's step-down correction over the pairs that have a p-value (significance.holm): the pair's verdict is
  `better` when its Holm-adjusted p is below 1 - LEVEL, else `not distinguishable`. The interval printed is each
  pair's own 95% interval (unadjusted), so with several groups an interval may exclude 0 while the Holm verdict
  stays `not distinguishable`;
* seeds per group for 80% power against the user's smallest effect of interest `sesoi` (None without one), at
  Bonferroni's level 1 - 0.05/m for the m pairs tested (Holm's strictest step: enough seeds for a difference of
  `sesoi` to survive the correction, a bound).
Not handled: which runs count and how values are read (comparison.py), the wording (headline.py), rendering.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Sequence

from experiments.compare.significance import LEVEL, MAX_SEEDS, difference, holm, seeds_needed

CORRECTION = "holm"


def rank(groups: Sequence[dict[str, Any]], higher_better: bool) -> list[dict[str, Any]]:
    """The groups that have a value, best mean first (ties: group order). Each: {label, index, n, mean}."""
    valued = [{"label": g["label"], "index": g["index"], "n": len(g["values"]),
               "mean": sum(g["values"]) / len(g["values"])} for g in groups if g["values"]]
    return sorted(valued, key=lambda g: (-g["mean"] if higher_better else g["mean"], g["index"]))


def pairwise(groups: Sequence[dict[str, Any]], name: str, higher_better: bool,
             sesoi: float | None = None) -> dict[str, Any]:
    """Every pair of ranked groups compared (see the module docstring). `groups`: [{label, index, seeds, values}]
    with the values the group's means average (one per run) and the seed of each."""
    by_index = {g["index"]: g for g in groups}
    ranking = rank(groups, higher_better)
    pairs = []
    for a, b in combinations(ranking, 2):  # a ranks above b
        ga, gb = by_index[a["index"]], by_index[b["index"]]
        d = difference(ga["values"], gb["values"], higher_better, seeds=ga["seeds"], base_seeds=gb["seeds"])
        pairs.append({"better": a["label"], "better_index": a["index"], "worse": b["label"], "worse_index": b["index"],
                      "test": d.test, "n": d.n, "n_worse": d.n_base, "diff": d.diff, "ci": d.ci, "df": d.df,
                      "p": d.p, "seeds_needed": None, "note": d.note, "_sd": d.sd})
    family = sum(p["p"] is not None for p in pairs)
    level = 1 - (1 - LEVEL) / max(family, 1)  # Bonferroni's level, the first (strictest) step of Holm's
    for pair, adjusted in zip(pairs, holm([p["p"] for p in pairs])):
        pair["p_holm"] = adjusted
        pair["verdict"] = "better" if adjusted is not None and adjusted < 1 - LEVEL else "not distinguishable"
        sd = pair.pop("_sd")
        if sesoi and sd:
            pair["seeds_needed"] = seeds_needed(sesoi, sd, paired=pair["test"] == "paired", level=level)
            pair["note"] = pair["note"] or ("" if pair["seeds_needed"] else f"more than {MAX_SEEDS} seeds")
    return {"name": name, "correction": CORRECTION, "family": family, "seeds_level": level,
            "direction": "higher_is_better" if higher_better else "lower_is_better", "sesoi": sesoi,
            "ranking": ranking, "no_value": [g["label"] for g in groups if not g["values"]], "pairs": pairs}

