"""The report's first lines: which group won, by how much, how sure (report.html, report.md, the terminal).

    headline(pairwise_doc, protocol) ->
    {"best": "pos=alibi", "runner_up": "pos=rope", "diff": -0.0252, "ci": [-0.0998, 0.0494], "p_holm": 0.62,
     "resolved": False, "lines": ["final val/loss (lower is better): no clear winner: pos=alibi and pos=rope are not
     distinguishable at n=3 (pos=alibi − pos=rope = -0.0252, 95% CI [-0.0998, +0.0494], paired; Holm p=0.620 over
     6 pairs); both beat pos=sinusoidal and pos=learned.", "Means, best first: ..."]}

Built from pairwise.py's document (every pair of groups, Holm-corrected). "The lead" is the best group and every
group not distinguishable from it after Holm's correction:
* the lead is the best group alone: "<best> wins", its margin over the runner-up with that pair's 95% interval and
  Holm p, and how many other groups it beats;
* otherwise "no clear winner: <lead> are not distinguishable (from the best mean) at n=<n>", the best-vs-runner-up
  difference with its interval and Holm p (an interval that excludes 0 while Holm's p does not is marked
  "uncorrected"), then the groups outside the lead and who in the lead beats them;
* a tuned sweep (tuning.py's protocol) says the comparison is best-vs-best: each arm at its own tuned lr (a sweep
  tuned once on a proxy says it is not: every arm ran at the lr transferred from the proxy);
* with a smallest effect of interest (--sesoi), the seeds per group that would resolve it between the top two.
Fewer than two groups with a value: one line saying there is nothing to compare.
Imports no scipy (the command line reads the lines back with read_headline). Not handled: the statistics
(pairwise.py, significance.py), where the lines go (report.py, html.py, markdown.py, cli.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from experiments.compare.tables import fmt_ci, fmt_p, fmt_signed
from experiments.compare.tuning import TUNED, TUNED_PROXY

COUNTS = {2: "both", 3: "all three", 4: "all four"}


def beats(pw: dict[str, Any], a: int, b: int) -> bool:
    """In pairwise.py's document `pw`, group `a` is better than group `b` (indices) after Holm's correction."""
    return any(p["better_index"] == a and p["worse_index"] == b and p["verdict"] == "better" for p in pw["pairs"])


def join(labels: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'"""
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def n_text(ranking: Sequence[dict[str, Any]]) -> str:
    """'n=3' when every ranked group has 3 values, else 'n=2–3 per group'."""
    ns = sorted({g["n"] for g in ranking})
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}–{ns[-1]} per group"


def margin_text(pair: dict[str, Any], family: int) -> str:
    """'pos=alibi − pos=rope = -0.0252, 95% CI [-0.0998, +0.0494], paired; Holm p=0.620 over 6 pairs' (the note
    when there is no test); 'uncorrected' marks an interval that excludes 0 when Holm's p does not."""
    head = f"{pair['better']} − {pair['worse']} = {fmt_signed(pair['diff'])}"
    if pair["p_holm"] is None:
        return f"{head}; {pair['note'] or 'no test'}"
    lo, hi = pair["ci"]
    uncorrected = ", uncorrected" if (lo > 0 or hi < 0) and pair["verdict"] != "better" else ""
    over = f" over {family} pairs" if family > 1 else ""
    p = fmt_p(pair["p_holm"])
    p = p if p.startswith("<") else f"={p}"  # 'Holm p<0.001', 'Holm p=0.140'
    return f"{head}, 95% CI {fmt_ci(pair['ci'])}{uncorrected}, {pair['test']}; Holm p{p}{over}"


def lead_text(lead: list[dict[str, Any]], ranking: list[dict[str, Any]]) -> str:
    """'a and b are not distinguishable', 'b and c are not distinguishable from the best mean, a,' or 'no group is
    distinguishable from the best mean, a,' (then ' at n=3')."""
    if len(lead) == 2:
        return f"{lead[0]['label']} and {lead[1]['label']} are not distinguishable at {n_text(ranking)}"
    if len(lead) == len(ranking):
        return f"no group is distinguishable from the best mean, {lead[0]['label']}, at {n_text(ranking)}"
    return (f"{join([g['label'] for g in lead[1:]])} are not distinguishable from the best mean, "
            f"{lead[0]['label']}, at {n_text(ranking)}")


def _rest_clause(pw: dict[str, Any], lead: list[dict[str, Any]], rest: list[dict[str, Any]]) -> str:
    """Who in the lead beats the groups outside it: 'both beat c and d', or the best's wins and each exception."""
    names = join([g["label"] for g in rest])
    if all(beats(pw, t["index"], r["index"]) for t in lead for r in rest):
        return f"{COUNTS.get(len(lead), f'all {len(lead)}')} beat {names}"
    parts = [f"{lead[0]['label']} beats {names}"]
    for t in lead[1:]:
        open_ = [r["label"] for r in rest if not beats(pw, t["index"], r["index"])]
        if open_:
            parts.append(f"{t['label']} is not distinguishable from {join(open_)}")
    return "; ".join(parts)


def headline(pw: dict[str, Any], protocol: str = "") -> dict[str, Any]:
    """The headline of pairwise.py's document `pw` (see the module docstring); `protocol`: tuning.protocol's text."""
    ranking, name = pw["ranking"], pw["name"]
    prefix = f"{name} ({'higher' if pw['direction'] == 'higher_is_better' else 'lower'} is better)"
    if protocol == TUNED:
        prefix = f"Best-vs-best (each arm at its own tuned lr, fresh seeds), {prefix}"
    elif protocol == TUNED_PROXY:  # one arm's lr, transferred: not best-vs-best
        prefix = f"Every arm at the lr tuned on a proxy (not best-vs-best), {prefix}"
    out: dict[str, Any] = {"metric": name, "best": None, "runner_up": None, "diff": None, "ci": None, "test": None,
                           "p": None, "p_holm": None, "resolved": False, "lead": [], "lines": []}
    if len(ranking) < 2:
        what = (f"only {ranking[0]['label']} has a value ({ranking[0]['mean']:.4f})" if ranking
                else "no group has a value")
        out["lines"] = [f"{prefix}: {what}; nothing to compare."]
        out["best"] = ranking[0]["label"] if ranking else None
        return out
    best, runner = ranking[0], ranking[1]
    top = pw["pairs"][0]  # best vs runner-up: pairs come in ranking order
    lead = [best] + [g for g in ranking[1:] if not beats(pw, best["index"], g["index"])]
    rest = [g for g in ranking if g not in lead]
    out.update(best=best["label"], runner_up=runner["label"], diff=top["diff"], ci=top["ci"], test=top["test"],
               p=top["p"], p_holm=top["p_holm"], resolved=len(lead) == 1, lead=[g["label"] for g in lead])
    if len(lead) == 1:
        others = len(ranking) - 1
        line = (f"{prefix}: {best['label']} wins. Margin over the runner-up: {margin_text(top, pw['family'])}"
                + (f"; {best['label']} beats all {others} other groups." if others > 1 else "."))
    else:
        line = (f"{prefix}: no clear winner: {lead_text(lead, ranking)} ({margin_text(top, pw['family'])})"
                + (f"; {_rest_clause(pw, lead, rest)}." if rest else "."))
    out["lines"] = [line, "Means, best first: " + ", ".join(f"{g['label']} {g['mean']:.4f}" for g in ranking)
                    + f" ({n_text(ranking)})."]
    if pw["sesoi"] and not out["resolved"]:
        need = top["seeds_needed"]
        out["lines"].append(
            f"Seeds per group for 80% power against a true difference of {pw['sesoi']:g} (--sesoi) between "
            f"{best['label']} and {runner['label']}, after Holm's correction: "
            + (f"{need} ({top['test']}, the observed spread taken as the truth)." if need
               else f"— ({top['note'] or 'no spread to estimate'})."))
    return out


def read_headline(report: str | Path) -> list[str]:
    """The headline lines stored in comparison.json beside `report` (report.html or its dir); [] when absent."""
    path = Path(report)
    path = (path if path.is_dir() else path.parent) / "comparison.json"
    try:
        return list(json.loads(path.read_text(encoding="utf-8")).get("headline", {}).get("lines", []))
    except (OSError, ValueError, AttributeError):
        return []
