"""Protocol v3's two-arm rule at several sizes: one verdict per size on the test split, the sign on a second corpus,
and the difference's trend against log size (docs/findings/PLAN_v3.md).

    verdict = across_sizes(ev, arm={"model.pos.kind": "rope"}, base={"model.pos.kind": "learned"},
                           names=("rope", "learned"), claim="lower", sesoi=0.02)

**Per size** (the runs whose `size_key`, model.d_model, has one value; the size is their non-embedding parameter
count): d = arm − baseline of `metric` (final test/loss: the held-out test novels), paired by seed
(evidence.difference). Its label is outcome.py's decision table read on the interval at the family's level: the
sizes are `k` tests of one claim, so each is read at 1 − 0.05/k for a directional claim (1 − 0.10/k for an
equivalence claim: Bonferroni over the sizes, which holds whatever the sizes' correlation); the doc shows that
interval beside the plain 95% one. **Second corpus**: the same difference on `second` (final test/wikitext2/loss),
with its 95% interval; a size whose test-split label is `reproduced` or `opposite` but whose second-corpus mean
difference has the other sign is labelled `inconclusive` (the registered condition: the sign must agree).
**Overall**: the label every size shares; else `partly` when some size is `reproduced`; else `inconclusive` when
some size is; else `not reproduced` (every size excludes the claimed effect, in its own way).
**Trend**: scale.trend over the per-seed test-split differences (slope per doubling of non-embedding parameters).
Validation numbers (final val/loss, the split every selection read) are shown, never judged.
Not handled: more than two arms (a rule with several comparisons calls this per pair and combines the verdicts),
arms whose size key differs between them (the size must be shared by the two arms of a comparison).
"""

from __future__ import annotations

from typing import Any, Sequence

from experiments.findings.evidence import Evidence, RunRecord, Table, Verdict, difference, fmt_ci
from experiments.findings.outcome import LEVELS, at_level, outcome
from experiments.findings.scale import fmt_size, trend, trend_text

METRIC = "final test/loss"
SECOND = "final test/wikitext2/loss"
VAL = "final val/loss"
SIZE_KEY = "model.d_model"
ALPHA = {"lower": 0.05, "higher": 0.05, "equal": 0.10}  # 1 − LEVELS[claim]: the family's error rate, split over sizes


def _size(records: Sequence[RunRecord]) -> float | None:
    """The non-embedding parameter count of a size's runs (they share it), else None."""
    values = sorted({r.get("non_embedding_params") for r in records if r.get("non_embedding_params") is not None})
    return values[0] if values else None


def _per_seed(arm: Sequence[RunRecord], base: Sequence[RunRecord], key: str) -> list[float]:
    """arm − baseline of `key` for every seed both arms hold a value for."""
    b = {r.seed: r.get(key) for r in base if r.get(key) is not None}
    return [r.get(key) - b[r.seed] for r in arm if r.get(key) is not None and r.seed in b]


def _fmt(d: Any) -> str:
    return "—" if d is None else f"{d.diff:+.4f} {fmt_ci(d.ci)}"


def _overall(labels: Sequence[str]) -> str:
    if len(set(labels)) == 1:
        return labels[0]
    if "reproduced" in labels:
        return "partly"
    return "inconclusive" if "inconclusive" in labels else "not reproduced"


def across_sizes(ev: Evidence, arm: dict[str, Any], base: dict[str, Any], names: tuple[str, str], claim: str,
                 sesoi: float, metric: str = METRIC, second: str = SECOND, size_key: str = SIZE_KEY) -> Verdict:
    """The Verdict of the claim "arm is `claim` than base" at every size of the sweep (module docstring)."""
    sizes = sorted({r.keys.get(size_key) for r in ev.records if r.keys.get(size_key) is not None}, key=float)
    k = max(len(sizes), 1)
    level = 1 - ALPHA[claim] / k
    rows, parts, labels, per_size = [], [], [], {}
    for s in sizes:
        a, b = ev.runs({**arm, size_key: s}), ev.runs({**base, size_key: s})
        n_params = _size(a + b) or float(s)
        d, d2, dv = difference(a, b, metric), difference(a, b, second), difference(a, b, VAL)
        if d is None or d.ci is None or d.df is None:
            o = outcome(d.diff if d else float("nan"), None, claim, sesoi, d.n if d else 0)
            family_ci = None
        else:
            family_ci = at_level(d.ci, d.df, level)
            o = outcome(d.diff, family_ci, claim, sesoi, d.n)
        label, reading = o.label, o.reading.replace(f"{LEVELS[claim]:.0%} CI", f"{level:.1%} CI")
        if label in ("reproduced", "opposite") and d2 is not None and (d2.diff < 0) != (d.diff < 0):
            label, reading = "inconclusive", (f"{reading}, but on the second corpus the difference has the other "
                                              f"sign ({d2.diff:+.4f}): the registered sign condition fails")
        labels.append(label)
        per_size[n_params] = _per_seed(a, b, metric)
        name = f"{fmt_size(n_params)} (d_model {s})"
        parts.append((name, label, f"{names[0]} − {names[1]} on the test novels {_fmt(d)} (95% CI); at the family "
                                   f"level {fmt_ci(family_ci)} ({level:.1%} CI, {k} sizes): {reading}; second corpus "
                                   f"{_fmt(d2)}"))
        rows.append([name, str(d.n if d else 0), _fmt(d), fmt_ci(family_ci), label, _fmt(d2),
                     "—" if d2 is None or d is None else ("yes" if (d2.diff < 0) == (d.diff < 0) else "no"), _fmt(dv)])
    t = trend(per_size, claim)
    overall = _overall(labels) if labels else "inconclusive"
    largest = parts[-1] if parts else ("—", "inconclusive", "")
    key = (f"{names[0]} − {names[1]}: " + "; ".join(f"{p[0].split(' ')[0]} {p[1]}" for p in parts)
           + (f"; slope {t.slope:+.4f}/doubling {fmt_ci(t.ci)}" if t.slope is not None else ""))
    relation = {"lower": "below", "higher": "above", "equal": f"within ±{sesoi:g} of"}[claim]
    explanation = (f"Claim: {names[0]} {relation} {names[1]} in {metric} (SESOI {sesoi:g} nats). "
                   + " ".join(f"At {p[0]}: {p[1]}." for p in parts) + " " + trend_text(t)
                   + f" The largest size reads {largest[1]}.")
    table = Table(f"{names[0]} − {names[1]} per size ({metric}; paired by seed)",
                  ["size", "pairs", "difference [95% CI]", f"family CI ({level:.1%})", "outcome",
                   "second corpus [95% CI]", "same sign", "validation (not judged)"], rows)
    trend_table = Table("Trend against size (OLS of the per-seed differences on log2 non-embedding parameters)",
                        ["slope per doubling", "95% CI", "differences", "reading"],
                        [["—" if t.slope is None else f"{t.slope:+.4f}", fmt_ci(t.ci), str(t.df + 2), t.label]])
    return Verdict(overall, explanation, key, tables=[table, trend_table], parts=parts)
