"""Protocol v3's rule at one size with one or more two-arm comparisons (docs/findings/PLAN_v3.md, issue 32 §3.2:
gqa_vs_mha_v3's equivalence, tied_vs_untied_v3's two directional comparisons, both at size L only).

    c = Comparison("equal hidden size", arm={"model.tie_embeddings": False, "model.d_model": 128},
                   base={"model.tie_embeddings": True}, names=("untied", "tied"), claim="higher")
    verdict = at_one_size(ev, [c], sesoi=0.02)

**Per comparison**: d = arm − baseline of final test/loss (the held-out test novels), paired by seed
(evidence.difference). Its label is outcome.py's decision table read on the interval at the family's level: the k
comparisons a rule reads are each read at 1 − α/k, α = 0.05 for a directional claim and 0.10 for an equivalence
claim (Bonferroni, as sized.py reads k sizes: it holds whatever the comparisons' correlation, and, unlike Holm's
step-down, gives each comparison an interval); with k = 1 that is outcome.py's own 95% / 90%.
**Second corpus** (final test/wikitext2/loss, its 95% interval shown): a directional comparison labelled
`reproduced` or `opposite` whose second-corpus mean difference has the other sign reads `inconclusive` (sized.py's
condition); an equivalence comparison labelled `reproduced` (equivalent) whose second-corpus mean difference lies
outside ±SESOI reads `inconclusive` (the same test of the point estimate: where the claim puts it, or not).
**Overall**: sized.py's: the label every comparison shares; else `partly` when some comparison is `reproduced`;
else `inconclusive` when some is; else `not reproduced`.
Tables: one row per comparison (pairs, the 95% and the family interval, outcome, second corpus, validation: shown,
never judged) and the parameters of each arm's runs as run (total and non-embedding).
Not handled: several sizes and a trend (sized.py), more than one baseline per comparison, unpaired designs (the
interval is evidence.difference's: Welch when the seeds do not pair).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from experiments.findings.evidence import Evidence, RunRecord, Table, Verdict, difference, fmt_ci
from experiments.findings.outcome import LEVELS, at_level, outcome
from experiments.findings.sized import ALPHA, METRIC, SECOND, VAL, _fmt, _overall


@dataclass(frozen=True)
class Comparison:
    """One claimed difference arm − baseline."""

    name: str  # what it compares, in words: "equal hidden size"
    arm: dict[str, Any]  # the arm's --by values (Evidence.runs keys)
    base: dict[str, Any]  # the baseline's
    names: tuple[str, str]  # (arm, baseline) as the doc names them: ("untied", "tied")
    claim: str  # outcome.py's claim for d = arm − baseline: "lower" | "higher" | "equal"


def family_level(claim: str, k: int) -> float:
    """The two-sided level each of k comparisons of this claim is read at (module docstring)."""
    return 1 - ALPHA[claim] / max(k, 1)


def _levels_text(comparisons: Sequence[Comparison]) -> str:
    """'each comparison read on its 97.5% interval (Bonferroni over the 2)' / 'one comparison, ...'."""
    k = len(comparisons)
    levels = ", ".join(sorted({f"{100 * family_level(c.claim, k):.4g}%" for c in comparisons}))
    return (f"each comparison read on its {levels} interval (Bonferroni over the {k})" if k > 1 else
            f"one comparison, read on its {levels} interval")


def _second_disagrees(c: Comparison, label: str, d: Any, d2: Any, sesoi: float) -> str | None:
    """Why the second corpus overturns `label`, else None (module docstring)."""
    if d2 is None or d is None:
        return None
    if c.claim == "equal" and label == "reproduced" and abs(d2.diff) >= sesoi:
        return f"on the second corpus the difference lies outside ±{sesoi:g} ({d2.diff:+.4f})"
    if c.claim != "equal" and label in ("reproduced", "opposite") and (d2.diff < 0) != (d.diff < 0):
        return f"on the second corpus the difference has the other sign ({d2.diff:+.4f})"
    return None


def _params(records: Sequence[RunRecord]) -> str:
    """'1,071,872 / 793,344': the total and non-embedding parameters the runs logged (their first values)."""
    total = next((r.get("params") for r in records if r.get("params") is not None), None)
    non_emb = next((r.get("non_embedding_params") for r in records if r.get("non_embedding_params") is not None),
                   None)
    return "—" if total is None else f"{int(total):,} / " + ("—" if non_emb is None else f"{int(non_emb):,}")


def at_one_size(ev: Evidence, comparisons: Sequence[Comparison], sesoi: float, metric: str = METRIC,
                second: str = SECOND) -> Verdict:
    """The Verdict of `comparisons`, read together at one size (module docstring)."""
    k = len(comparisons)
    rows, parts, labels, arms, keys = [], [], [], {}, []
    for c in comparisons:
        a, b = ev.runs(c.arm), ev.runs(c.base)
        arms.setdefault(c.names[1], b)
        arms.setdefault(c.names[0], a)
        level = family_level(c.claim, k)
        d, d2, dv = difference(a, b, metric), difference(a, b, second), difference(a, b, VAL)
        family_ci = at_level(d.ci, d.df, level) if d is not None and d.ci is not None and d.df is not None else None
        o = outcome(d.diff if d else float("nan"), family_ci, c.claim, sesoi, d.n if d else 0)
        label, reading = o.label, o.reading.replace(f"{LEVELS[c.claim]:.0%} CI", f"{level:.1%} CI")
        if (why := _second_disagrees(c, label, d, d2, sesoi)) is not None:
            label, reading = "inconclusive", f"{reading}, but {why}: the registered second-corpus condition fails"
        labels.append(label)
        what = f"{c.names[0]} − {c.names[1]}"
        keys.append(f"{what} ({c.name}) {label} {_fmt(d)}")
        parts.append((c.name, label, f"{what} on the test novels {_fmt(d)} (95% CI); at the family level "
                                     f"{fmt_ci(family_ci)} ({level:.1%} CI, {k} comparison{'s' if k > 1 else ''}): "
                                     f"{reading}; second corpus {_fmt(d2)}"))
        rows.append([f"{what} ({c.name})", c.claim, str(d.n if d else 0), _fmt(d), fmt_ci(family_ci), label,
                     _fmt(d2), _fmt(dv)])
    overall = _overall(labels) if labels else "inconclusive"
    key = "; ".join(keys)
    relation = {"lower": "below", "higher": "above", "equal": f"within ±{sesoi:g} of"}
    explanation = (" ".join(f"Claim ({c.name}): {c.names[0]} {relation[c.claim]} {c.names[1]} in {metric}; "
                            f"{p[1]}." for c, p in zip(comparisons, parts)) + f" SESOI {sesoi:g} nats; "
                   + _levels_text(comparisons) + ".")
    table = Table(f"Each comparison ({metric}; paired by seed), read at the family level",
                  ["comparison", "claim", "pairs", "difference [95% CI]", "family CI", "outcome",
                   "second corpus [95% CI]", "validation (not judged)"], rows)
    params = Table("Parameters of each arm's runs (as run)", ["arm", "params / non-embedding"],
                   [[name, _params(rs)] for name, rs in arms.items()])
    return Verdict(overall, explanation, key, tables=[table, params], parts=parts)
