"""What a finding's verdict rule reads: the sweep's comparison.json, one plain record per run, and a finding's own
measurement; what it returns: a Verdict. Plus the few statistics helpers the rules share.

    ev = Evidence(comparison=json.load(open("report/comparison.json")), records=records_from_groups(groups, by))
    verdict = alibi_extrapolation.rule(ev)   # -> Verdict("reproduced" | "partly" | "not reproduced" | "undecided", ...)

Records are plain data (no Run objects, no files), so tests build them by hand. The intervals are
experiments/compare/significance.py's (t-interval of a mean; paired-by-seed or Welch difference), the same numbers
the report's "Differences vs baseline" shows. A Verdict carries the family of tests its rule read (multiple.py:
Holm's correction across them) and, for a finding with a pre-registered smallest effect of interest (SESOI), the
seeds that would give 80% power against it at the observed spread (never against the observed effect).
Not handled: loading runs (experiments.compare), rendering (doc.py). scipy (through experiments.compare.significance)
is imported inside the functions that need it: it takes seconds to import and `--list` needs none of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from experiments.findings.multiple import Family
from experiments.rundir.layout import RunStatus

OUTCOMES = ("reproduced", "partly", "not reproduced", "undecided",  # undecided: the seeds disagree (mup_lr_transfer)
            "opposite", "equivalent", "inconclusive")  # protocol v3 (outcome.py): CI beyond 0, inside ±SESOI, neither
EXTRAP_MODES = ("nonoverlap", "sliding")


@dataclass(frozen=True)
class RunRecord:
    """One run of a finding's sweep, as the rules see it."""

    group: str  # the group's label in the report ("pos=alibi")
    keys: dict[str, Any]  # the group's --by values ({"model.pos.kind": "alibi"})
    seed: int | None
    status: str  # completed | diverged | failed | interrupted | running
    values: dict[str, Any] = field(default_factory=dict)  # "final val/loss", "tokens_per_s", "flops", "params",
    # "non_embedding_params", "vocab_size", "extrap/nonoverlap/loss@8x", "lr", "epochs", "final test/loss",
    # "final test/<corpus>/loss" (held-out sets, scored once at the end), ... (numbers; None: not
    # logged / N/A), and "device" (a string)

    def get(self, key: str) -> float | None:
        v = self.values.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass(frozen=True)
class Table:
    """A small table a rule adds to the doc (its own derived numbers)."""

    title: str
    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class SeedsNeeded:
    """Seeds per group at which the comparison's t-test (two-sided, 95%) has 80% power against a true difference of
    the finding's SESOI, taking the observed spread as the truth."""

    sesoi: float  # the pre-registered smallest effect of interest, in the metric's units
    n: int | None  # seeds per group; None: more than experiments.compare.significance.MAX_SEEDS
    sd: float  # paired: sd of the per-seed differences; welch: the pooled sd of the two groups
    test: str  # "paired" | "welch"
    n_now: int  # seeds per group in this sweep (pairs when paired)


@dataclass(frozen=True)
class Verdict:
    outcome: str  # one of OUTCOMES
    explanation: str  # one paragraph, with the numbers
    key_number: str  # the headline number with its CI, for docs/findings/README.md
    likely_reason: str = ""  # "What was tried / likely reason" text, filled when the outcome is not "reproduced"
    tables: list[Table] = field(default_factory=list)
    parts: list[tuple[str, str, str]] = field(default_factory=list)  # (part, outcome, explanation), multi-part findings
    family: Family | None = None  # the tests the rule read, Holm-corrected (multiple.py)
    seeds_needed: SeedsNeeded | None = None  # only for a finding with a SESOI

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {self.outcome!r}; choose from {OUTCOMES}")


@dataclass(frozen=True)
class Evidence:
    comparison: dict[str, Any]  # comparison.json (experiments/compare/comparison.py; schema in docs/compare.md)
    records: list[RunRecord]  # the runs compared: a tuned sweep's final runs only
    extra: dict[str, Any] | None = None  # a finding's own measurement (xiong_postln_warmup: measure_init's result)
    tuning: dict[str, Any] | None = None  # a tuned sweep's tuning.json (experiments/sweep/tuning_record.py), as JSON
    tuning_records: list[RunRecord] = field(default_factory=list)  # its tuning runs (never in `records`)

    def metric(self, name: str = "final val/loss") -> dict[str, Any] | None:
        """comparison.json's block for `name` ("final val/loss", "best val/loss", "final val/bpb"), else None."""
        return next((m for m in self.comparison.get("metrics", []) if m.get("name") == name), None)

    def group_row(self, keys: dict[str, Any], name: str = "final val/loss") -> dict[str, Any] | None:
        """The comparison row of the group whose keys include `keys`, else None."""
        block = self.metric(name)
        return next((g for g in (block or {}).get("groups", []) if matches(g.get("keys", {}), keys)), None)

    def baseline_keys(self, name: str = "final val/loss") -> dict[str, Any] | None:
        """The --by values of the baseline group in comparison.json, else None."""
        return next((g.get("keys", {}) for g in (self.metric(name) or {}).get("groups", []) if g.get("baseline")), None)

    def runs(self, keys: dict[str, Any], statuses: Sequence[str] | None = (RunStatus.COMPLETED,)) -> list[RunRecord]:
        """Records of the group with `keys` (all statuses when statuses is None)."""
        return [r for r in self.records if matches(r.keys, keys) and (statuses is None or r.status in statuses)]


def matches(have: dict[str, Any], want: dict[str, Any]) -> bool:
    """Every key of `want` has its value in `have` (compared as strings: 500 == "500", True == "True")."""
    return all(k in have and str(have[k]) == str(v) for k, v in want.items())


# -- the two-group rule (swiglu_vs_gelu, rope_vs_learned) ------------------------------------------------


def lower_than_baseline(ev: Evidence, group: dict, names: tuple[str, str], sesoi: float | None = None) -> Verdict:
    """The shared two-group rule (swiglu_vs_gelu, rope_vs_learned), read from comparison.json: reproduced when the
    95% CI of group − baseline final val/loss lies below 0; else not reproduced, read as "not distinguishable at this
    n" (CI covers 0) or "<baseline> better" (CI above 0). names = (group name, baseline name). One comparison: a
    family of k = 1 (Holm leaves its p as it is). `sesoi`: the finding's smallest effect of interest (nats), for
    the seeds-needed line; None gives none."""
    row = ev.group_row(group)
    vs = (row or {}).get("vs_baseline") or {}
    ci, diff = vs.get("ci"), vs.get("diff")
    what, base = names
    if ci and ci[1] < 0:
        outcome, reading = "reproduced", f"{what} is better"
    elif ci and ci[0] > 0:
        outcome, reading = "not reproduced", f"{base} better"
    else:
        outcome, reading = "not reproduced", "not distinguishable at this n"
    n = vs.get("n", 0)
    how = (f"{vs.get('test')}, n={n}, p={vs['p']:.3g}" if vs.get("p") is not None else vs.get("note") or "no interval")
    detail = f"{what} − {base} final val/loss = {fmt_signed(diff)} {fmt_ci(ci)} nats ({how})"
    explanation = f"{detail}: {reading}. Verdict: {outcome}."
    if outcome == "reproduced":
        likely = ""
    elif reading.startswith(base):
        likely = (f"{base} is better by a resolvable margin: the claim does not hold in this setup (small model, "
                  f"short training, one lr for both).")
    else:
        likely = ("The difference is within seed noise at this n. The paper measured its effect on far larger models "
                  "trained far longer; at this model size and token budget the gap may not have opened yet, or be "
                  "smaller than the seed-to-seed spread.")
    family = Family(f"{what} − {base} final val/loss against 0 ({vs.get('test') or 'no'} t-test)", (f"{what} − {base}",),
                    (vs.get("p"),), (reading,))
    base_keys = ev.baseline_keys()
    need = (seeds_for_sesoi(ev.runs(group), ev.runs(base_keys), "final val/loss", sesoi)
            if sesoi is not None and base_keys is not None else None)
    return Verdict(outcome, explanation, f"{what} − {base} = {fmt_signed(diff)} {fmt_ci(ci)} nats", likely,
                   family=family, seeds_needed=need)


# -- statistics --------------------------------------------------------------------------------------------------


def mean_ci(values: Iterable[float | None]) -> tuple[float | None, tuple[float, float] | None, int]:
    """(mean, 95% t-interval of the mean or None when n < 2, n) over the finite values."""
    from experiments.compare.significance import mean_ci as t_ci

    v = [x for x in values if x is not None and math.isfinite(x)]
    return (sum(v) / len(v) if v else None), t_ci(v), len(v)


def _values(rs: Sequence[RunRecord], key: str, substitute: dict[str, float] | None = None
            ) -> tuple[list[Any], list[float]]:
    """(seeds, values) of the records that have `key` (or a substitute for their status)."""
    pairs = [(r.seed, (substitute or {}).get(r.status, r.get(key))) for r in rs]
    kept = [(s, v) for s, v in pairs if v is not None]
    return [s for s, _ in kept], [float(v) for _, v in kept]


def difference(group: Sequence[RunRecord], base: Sequence[RunRecord], key: str, higher_better: bool | None = None,
               substitute: dict[str, float] | None = None):
    """significance.difference of `key` between two lists of records (paired by seed when the seeds allow).
    `substitute`: {status: value} used for runs of that status instead of their own value (a diverged run counted
    as a fixed bad loss). Returns experiments.compare.significance.Difference, or None when a side has no value."""
    from experiments.compare.significance import difference as diff
    from experiments.compare.stats import higher_is_better

    seeds, x = _values(group, key, substitute)
    base_seeds, y = _values(base, key, substitute)
    if not x or not y:
        return None
    hb = higher_is_better(key) if higher_better is None else higher_better
    return diff(x, y, hb, seeds=seeds, base_seeds=base_seeds)


def seeds_for_sesoi(group: Sequence[RunRecord], base: Sequence[RunRecord], key: str,
                    sesoi: float) -> SeedsNeeded | None:
    """Seeds per group for 80% power against a true difference of `sesoi` in `key`, with the test `difference`
    would use (paired by seed when the seeds allow, else the equal-n two-sample test) and the observed spread as
    the truth; None when a side has fewer than 2 values or there is no spread to estimate."""
    import numpy as np

    from experiments.compare.significance import pairable, pooled_sd, seeds_needed

    seeds, x = _values(group, key)
    base_seeds, y = _values(base, key)
    if min(len(x), len(y)) < 2:
        return None
    if pairable(seeds, base_seeds):
        by_seed = dict(zip(base_seeds, y))
        d = np.asarray(x) - np.asarray([by_seed[s] for s in seeds])  # (n,) per-seed differences
        test, sd, n_now = "paired", float(d.std(ddof=1)), len(d)
    else:
        test, sd, n_now = "welch", pooled_sd(np.asarray(x), np.asarray(y)), min(len(x), len(y))
    if not sd > 0:
        return None
    return SeedsNeeded(sesoi, seeds_needed(sesoi, sd, paired=test == "paired"), sd, test, n_now)


def p_against(values: Iterable[float | None], value: float) -> float | None:
    """Two-sided p of the one-sample t-test of mean(values) = value (the test behind mean_ci's interval: p < 0.05
    exactly when the 95% interval excludes `value`); None when mean_ci gives no interval (n < 2, zero spread)."""
    from scipy import stats

    v = [x for x in values if x is not None and math.isfinite(x)]
    if mean_ci(v)[1] is None:
        return None
    return float(stats.ttest_1samp(v, value).pvalue)


def fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def fmt_ci(ci: Sequence[float] | None, digits: int = 3) -> str:
    return "[—]" if not ci else f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def fmt_mean_ci(mean: float | None, ci: Sequence[float] | None, digits: int = 3) -> str:
    """'0.123 [0.100, 0.146]' (no interval: '0.123 [—]')."""
    return f"{fmt(mean, digits)} {fmt_ci(ci, digits)}"


def fmt_signed(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:+.{digits}f}"


def records_from_groups(groups: list, by: Sequence[str]) -> list[RunRecord]:
    """RunRecords from experiments.compare Groups (every run, every status)."""
    from experiments.compare.comparison import group_keys
    from experiments.compare.stats import best_value, budget_value, final_value, num, run_extrap

    out = []
    for g in groups:
        keys = group_keys(g, by)
        for r in g.runs:
            values: dict[str, float | None] = {
                "final val/loss": final_value(r, "val/loss"), "best val/loss": best_value(r, "val/loss"),
                "final val/bpb": final_value(r, "val/bpb"), "flops": budget_value(r, "flops", "flops", "train.flops"),
                "tokens": budget_value(r, "tokens", "tokens", "train.tokens"),
                "vocab_size": _num(r.flat.get("model.vocab_size")) or _num(r.flat.get("tokenizer.vocab_size")),
            }
            for key in ("tokens_per_s", "params", "non_embedding_params", "wall_time_s", "mfu", "steps", "epochs",
                        "num_threads"):
                values[key] = num(r, key)
            values["lr"] = _num(r.flat.get("optim.lr"))
            values["init_loss"] = first_value(r, "train/loss")  # the loss of the model at init, on its first batch
            values["attn_max_logit"] = final_value(r, "attn_max_logit")  # None where the runs did not log it
            for key in _held_out_keys(r):  # test/loss, test/<corpus>/loss, ...: scored once, at the end
                values[f"final {key}"] = final_value(r, key)
            values["device"] = r.summary.get("device")  # a string: read it from .values, not .get()
            for (mode, k), v in run_extrap(r).items():
                values[f"extrap/{mode}/loss@{k:g}x"] = v
            out.append(RunRecord(group=g.label, keys=keys, seed=r.seed, status=r.status, values=values))
    return out


def _held_out_keys(run: Any) -> list[str]:
    """The held-out metrics a run logged (test/loss, test/bpb, test/<corpus>/loss, ...), in the order logged."""
    return list(dict.fromkeys(k for line in run.metrics for k in line if isinstance(k, str) and k.startswith("test/")))


def first_value(run: Any, metric: str) -> float | None:
    """The first logged value of `metric` in a compare Run's metrics (step 1's train/loss: the model at init)."""
    for line in run.metrics:
        v = line.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v) if math.isfinite(v) else None
    return None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
