"""The comparison of a report's groups: every pair of groups on the final `metric` with Holm's correction and the
headline it gives (pairwise.py, headline.py), and every group against a baseline group per metric (the
"Differences vs baseline" view); the data of report/comparison.json and of those tables (report.md, report.html).

    doc = compare_groups(groups, by=["model.pos.kind"], metric="val/loss", baseline=0)
    doc["headline"]["lines"][0] -> "final val/loss (lower is better): pos=rope wins. ..."
    doc["metrics"][0]["groups"][1]["vs_baseline"]["verdict"] -> "better"

Metrics compared against the baseline: the final and the best `metric` (the best left out, and listed in
"omitted", when it equals the final value in every run, as with a single evaluation), then the final val/bpb when
some run logged it and it is not `metric`, then the final test/loss, test/bpb and test/<name>/loss, /bpb that some
run's summary.json lists (the held-out sets a run scores once at its end: docs/experiments.md#held-out-evaluation).
A group's values are those its means average (stats.stat_runs: its completed runs, one value per run); the
statistics are significance.py's (paired by seed or Welch, verdict, seeds needed for a user-stated smallest effect
`sesoi`, in `metric`'s units). The document is strict JSON (non-finite numbers are null) with "version": 2; its
schema is in docs/compare.md.
Not handled here: the statistics themselves (significance.py), rendering (tables.py), writing the file (report.py).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Sequence

import numpy as np

from experiments.compare.grouping import MISSING, Group
from experiments.compare.headline import headline
from experiments.compare.pairwise import pairwise
from experiments.compare.runs import Run, RunsError
from experiments.compare.significance import LEVEL, POWER, difference, mean_ci
from experiments.compare.stats import best_value, final_value, higher_is_better, stat_runs

VERSION = 2  # of the comparison.json schema (2: pairwise, headline, sesoi, omitted; seeds_needed only for a sesoi)
# stat name -> its per-run value
STATS: dict[str, Callable[[Run, str], float | None]] = {"final": final_value, "best": best_value}


def resolve_baseline(groups: list[Group], baseline: str | int | None) -> int:
    """The baseline group's index: None -> 0; a group label; or an index (0-based, as an int or a string of
    digits). RunsError (one line, listing the groups) for anything else."""
    if baseline is None:
        return 0
    labels = [g.label for g in groups]
    if isinstance(baseline, str) and baseline in labels:
        return labels.index(baseline)
    text = str(baseline).strip()
    if isinstance(baseline, int) or text.isdigit():
        i = int(text)
        if 0 <= i < len(groups):
            return i
        raise RunsError(f"--baseline {baseline}: there are {len(groups)} groups, indexed 0 to {len(groups) - 1}")
    listed = "; ".join(f"{i} = {label!r}" for i, label in enumerate(labels))
    raise RunsError(f"--baseline {baseline!r} is neither a group label nor a group index; groups: {listed}")


def best_is_final(groups: list[Group], metric: str) -> bool:
    """Some counted run has `metric`, and every counted run's best is its final (one evaluation, or the last was
    the best)."""
    pairs = [(best_value(r, metric), final_value(r, metric)) for g in groups for r in stat_runs(g)]
    return any(f is not None for _, f in pairs) and all(b == f for b, f in pairs)


def compared_metrics(groups: list[Group], metric: str) -> list[tuple[str, str]]:
    """[(stat, metric key)]: final and best `metric` (not the best when best_is_final), then final val/bpb when
    some counted run has it and it is not `metric`, then each final held-out metric (`held_out_metrics`)."""
    out = [("final", metric)] + ([] if best_is_final(groups, metric) else [("best", metric)])
    if metric != "val/bpb" and any(final_value(r, "val/bpb") is not None for g in groups for r in stat_runs(g)):
        out.append(("final", "val/bpb"))
    return out + [("final", key) for key in held_out_metrics(groups) if key != metric]


def held_out_metrics(groups: list[Group]) -> list[str]:
    """The test/* loss and bpb keys in the counted runs' summary.json `test` (test/loss, test/bpb, then each extra
    corpus's test/<name>/loss, test/<name>/bpb, by name)."""
    keys = {k for g in groups for r in stat_runs(g) for k in (r.summary.get("test") or {})
            if k.endswith(("/loss", "/bpb"))}
    return sorted(keys, key=lambda k: (k.count("/"), k.rsplit("/", 1)[0], k.endswith("/bpb")))


def seed_values(group: Group, stat: str, key: str) -> tuple[list[Any], list[float]]:
    """(seeds, values) of the group's counted runs that have a value (stat 'final' or 'best' of `key`)."""
    pairs = [(r.seed, STATS[stat](r, key)) for r in stat_runs(group)]
    kept = [(s, v) for s, v in pairs if v is not None]
    return [s for s, _ in kept], [v for _, v in kept]


def group_keys(group: Group, by: Sequence[str]) -> dict[str, Any]:
    """{config key: value} of the group's --by keys (keys its runs lack are left out)."""
    if not any(r.flat for r in group.runs):
        return {}
    return {k: v for k, v in zip(by, group.values) if v != MISSING}


def compare_groups(groups: list[Group], by: Sequence[str], metric: str, baseline: int, sesoi: float | None = None,
                   protocol: str = "") -> dict[str, Any]:
    """The comparison.json document: every pair of groups on the final `metric` (Holm-corrected) and its headline,
    then every group against groups[baseline], per compared metric. `sesoi`: the smallest difference of interest in
    `metric`'s units (seeds needed are given for it, and only for `metric`); `protocol`: tuning.protocol's text."""
    finals = [dict(zip(("seeds", "values"), seed_values(g, "final", metric)), label=g.label, index=g.index)
              for g in groups]
    pw = pairwise(finals, f"final {metric}", higher_is_better(metric), sesoi)
    base = groups[baseline]
    metrics = []
    for stat, key in compared_metrics(groups, metric):
        higher = higher_is_better(key)
        base_seeds, base_values = seed_values(base, stat, key)
        rows = []
        for g in groups:
            seeds, values = seed_values(g, stat, key)
            v = np.asarray(values, dtype=float)
            row: dict[str, Any] = {
                "label": g.label, "index": g.index, "keys": group_keys(g, by), "n": len(values), "seeds": seeds,
                "mean": float(v.mean()) if len(v) else None, "std": float(v.std(ddof=1)) if len(v) > 1 else None,
                "ci": mean_ci(values), "baseline": g is base, "vs_baseline": None,
            }
            if g is not base:
                d = difference(values, base_values, higher, seeds=seeds, base_seeds=base_seeds,
                               sesoi=sesoi if key == metric else None)
                row["vs_baseline"] = {"test": d.test, "n": d.n, "n_baseline": d.n_base, "diff": d.diff, "ci": d.ci,
                                      "df": d.df, "p": d.p, "verdict": d.verdict, "seeds_needed": d.seeds_needed,
                                      "note": d.note}
            rows.append(row)
        metrics.append({"name": f"{stat} {key}", "metric": key, "stat": stat,
                        "direction": "higher_is_better" if higher else "lower_is_better", "groups": rows})
    omitted = [f"best {metric}"] if best_is_final(groups, metric) else []
    return {"version": VERSION, "written_by": "experiments.compare", "metric": metric, "level": LEVEL,
            "power": POWER, "sesoi": sesoi, "protocol": protocol, "headline": headline(pw, protocol), "pairwise": pw,
            "baseline": {"label": base.label, "index": baseline}, "metrics": metrics, "omitted": omitted}


def _strict(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats -> None, tuples -> lists, numpy scalars -> Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def comparison_json(doc: dict[str, Any]) -> str:
    """The document as strict JSON text (no NaN/Infinity tokens; anything else non-JSON as its str)."""
    return json.dumps(_strict(doc), indent=2, allow_nan=False, default=str) + "\n"
