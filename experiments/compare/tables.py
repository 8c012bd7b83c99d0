"""The report's tables as (header, rows) and its number formatting, shared by html.py and markdown.py.

A row is a list of cells `(text, sort_value)`: the text is what both formats show, the sort value is what the
HTML tables sort on. Tables: groups (best final metric first), all pairwise differences and differences vs the
baseline group (from comparison.py's document), runs (every run, with its status and reason), config differences;
plus one line per excluded run (diverged, interrupted, failed: never averaged in) and the sentence on which
training budget the runs share.
Not handled here: computing anything (report.py hands over a ready `ctx` dict, see build_report).
"""

from __future__ import annotations

import math
from typing import Any

from experiments.compare.runs import EXCLUDED_STATUSES
from experiments.compare.stats import higher_is_better

Stat = tuple[float, float, int]
Table = tuple[list[str], list[list[tuple[str, Any]]]]


# ---------------------------------------------------------------- number formatting


def fmt(v: float | None, digits: int = 4) -> str:
    """Compact number: 3.4121 -> '3.412', 1234567 -> '1.23M', None/nan -> '—'."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    a = abs(v)
    if a >= 1e5:
        for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if a >= scale:
                return f"{v / scale:.3g}{unit}"
    if a >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


def fmt3(v: float | None) -> str:
    """Three significant digits for rates: 612.83 -> '613', 18234 -> '18,234'."""
    return fmt(v, digits=3)


def fmt_pct(v: float | None) -> str:
    """MFU is logged as a fraction: 0.123 -> '12.3%'."""
    if v is None or not math.isfinite(v):
        return "—"
    return f"{100 * v:.3g}%" if abs(v) <= 1.5 else fmt(v)


def fmt_time(v: float | None) -> str:
    """Seconds -> '42.1 s', '3m 05s', '1h 02m'."""
    if v is None or not math.isfinite(v):
        return "—"
    if v < 60:
        return f"{v:.3g} s"
    if v < 3600:
        return f"{int(v // 60)}m {int(v % 60):02d}s"
    return f"{int(v // 3600)}h {int(v % 3600 // 60):02d}m"


def fmt_stat(s: Stat, f=fmt, loss: bool = False) -> str:
    """(mean, std, n) -> '3.412 ± 0.012'; the std is dropped when n < 2."""
    mean, std, n = s
    if n == 0 or not math.isfinite(mean):
        return "—"
    if loss:
        m = f"{mean:.4f}"
        return f"{m} ± {std:.4f}" if n > 1 and math.isfinite(std) else m
    return f"{f(mean)} ± {f(std)}" if n > 1 and math.isfinite(std) and std > 0 else f(mean)


def shorten(s: str, n: int = 44) -> str:
    """Long run dirs (Hydra puts every override in the name) cut in the middle: 'abc…xyz'."""
    return s if len(s) <= n else s[: n // 2 - 1] + "…" + s[-(n // 2):]


def status_text(ctx: dict[str, Any]) -> str:
    """'14 completed, 1 diverged'"""
    return ", ".join(f"{n} {s}" for s, n in ctx["status_counts"].items())


def budget_text(ctx: dict[str, Any]) -> str:
    """Which budget was held equal (stats.budgets), one or two sentences; '' when nothing can be told.
    Example: 'Budget held equal across the 14 runs in the means: tokens 205k, steps 200. Not equal: train FLOPs
    (9.66G–10.9G).'"""
    b = ctx["budget"]
    out = []
    if b["equal"]:
        out.append(f"Budget held equal across the {b['n_runs']} runs in the means: "
                   + ", ".join(f"{name} {fmt(v)}" for name, v in b["equal"]) + ".")
    for name, lo, hi in b["differ"]:
        if name == "tokens":
            out.append(f"Runs differ in tokens ({fmt(lo)}–{fmt(hi)}): differences mix architecture and training length.")
        else:
            out.append(f"Not equal: {name} ({fmt(lo)}–{fmt(hi)}).")
    return " ".join(out)


# ---------------------------------------------------------------- tables


def group_order(ctx: dict[str, Any]) -> list[int]:
    """Positions in ctx["groups"], best final metric first (lowest loss, highest accuracy); groups without a
    value last, in their own order."""
    sign = -1.0 if higher_is_better(ctx["metric"]) else 1.0
    means = [g["final"][0] for g in ctx["groups"]]
    return sorted(range(len(means)), key=lambda i: (0, sign * means[i], i) if math.isfinite(means[i]) else (1, 0.0, i))


def group_table(ctx: dict[str, Any]) -> Table:
    """One row per group in group_order; the final val/bpb column is left out when it is the metric's."""
    m = ctx["metric"]
    bpb = m != "val/bpb"
    head = ["group", "runs", f"final {m}", f"best {m}", *(["final val/bpb"] if bpb else []), "params",
            "non-emb params", "tokens", "tokens/s", "MFU", "wall time"]
    rows = []
    for g in (ctx["groups"][i] for i in group_order(ctx)):
        rows.append([
            (g["group"], g["group"]), (g["runs"], g["n"]),
            (fmt_stat(g["final"], loss=True), g["final"][0]), (fmt_stat(g["best"], loss=True), g["best"][0]),
            *([(fmt_stat(g["final_bpb"], loss=True), g["final_bpb"][0])] if bpb else []),
            (fmt(g["params"][0]), g["params"][0]), (fmt(g["non_embedding_params"][0]), g["non_embedding_params"][0]),
            (fmt(g["tokens"][0]), g["tokens"][0]), (fmt_stat(g["tokens_per_s"], f=fmt3), g["tokens_per_s"][0]),
            (fmt_stat(g["mfu"], f=fmt_pct), g["mfu"][0]), (fmt_stat(g["wall_time_s"], f=fmt_time), g["wall_time_s"][0]),
        ])
    return head, rows


def fmt_signed(v: float | None) -> str:
    """A difference: 0.01234 -> '+0.0123', None -> '—'."""
    return "—" if v is None or not math.isfinite(v) else f"{v:+.4f}"


def fmt_ci(ci: list[float] | tuple[float, float] | None, f=fmt_signed) -> str:
    """'[-0.0210, +0.0040]'; '—' without an interval."""
    return "—" if ci is None else f"[{f(ci[0])}, {f(ci[1])}]"


def fmt_p(p: float | None) -> str:
    """0.00012 -> '<0.001', 0.0456 -> '0.046', None -> '—'."""
    if p is None or not math.isfinite(p):
        return "—"
    return "<0.001" if p < 0.001 else f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


VERDICT_COL = 7  # column of baseline_table and pairwise_table the HTML styles
# what baseline_table shows, in words (under its heading in both formats)
BASELINE_NOTE = ("Δ = group mean − baseline mean, with its 95% t-interval: paired by seed when both groups ran the same "
                 "seeds, else Welch. Better / worse when the interval excludes 0 (read through the metric's "
                 "direction: lower is better for losses), else not distinguishable at this n. Each row is its own "
                 "test, uncorrected for the others (the pairwise table above corrects). Also in comparison.json.")
PAIRWISE_NOTE = ("Every pair of groups on the final {metric}, the better mean first, best vs runner-up on top: "
                 "Δ = group − vs group with its own 95% t-interval (paired by seed when both ran the same seeds, else "
                 "Welch) and p; Holm p is Holm's step-down correction over the {family} pairs with a test, and the "
                 "verdict is better when Holm p < 0.05, else not distinguishable at this n.")
SESOI_NOTE = (" Seeds/group: how many seeds per group give 80% power against a true difference of {sesoi:g} "
              "(--sesoi) with the same test{where}, the observed spread taken as the truth.")


def _seeds_cells(doc: dict[str, Any], d: dict[str, Any] | None, applies: bool = True) -> list[tuple[str, Any]]:
    """The seeds-needed cell, only when a --sesoi was given; '—' where it does not apply (another metric)."""
    if not doc.get("sesoi"):
        return []
    if d is None:
        return [("", None)]
    n = d["seeds_needed"] if applies else None
    return [(str(n) if n is not None else "—", n)]


def _seeds_head(doc: dict[str, Any]) -> list[str]:
    return [f"seeds/group for {100 * doc['power']:g}% power at |Δ|={doc['sesoi']:g}"] if doc.get("sesoi") else []


def pairwise_table(ctx: dict[str, Any]) -> Table:
    """Every pair of groups on the final metric (pairwise.py): Δ and its 95% CI, the test, p, Holm p, verdict."""
    doc = ctx["comparison"]
    pw = doc["pairwise"]
    head = ["group", "vs group", "n", f"Δ [{100 * doc['level']:g}% CI]", "test", "p", "Holm p", "verdict",
            *_seeds_head(doc), "note"]
    rows = []
    for d in pw["pairs"]:
        n = str(d["n"]) if d["n"] == d["n_worse"] else f"{d['n']} / {d['n_worse']}"
        rows.append([(d["better"], d["better"]), (d["worse"], d["worse"]), (n, d["n"]),
                     (f"{fmt_signed(d['diff'])} {fmt_ci(d['ci'])}", d["diff"]), (d["test"] or "—", d["test"] or ""),
                     (fmt_p(d["p"]), d["p"]), (fmt_p(d["p_holm"]), d["p_holm"]), (d["verdict"], d["verdict"]),
                     *_seeds_cells(doc, d), (d["note"], d["note"])])
    return head, rows


def pairwise_note(ctx: dict[str, Any]) -> str:
    doc = ctx["comparison"]
    note = PAIRWISE_NOTE.format(metric=ctx["metric"], family=doc["pairwise"]["family"])
    pw = doc["pairwise"]
    where = f" at α = 0.05/{pw['family']} = {1 - pw['seeds_level']:.2g} (Holm's strictest step)"
    return note + (SESOI_NOTE.format(sesoi=doc["sesoi"], where=where) if doc.get("sesoi") else "")


def baseline_note(ctx: dict[str, Any]) -> str:
    doc = ctx["comparison"]
    omitted = "".join(f" The {name} rows are left out: it equals the final value in every run."
                      for name in doc.get("omitted", []))
    where = f" at α = 0.05, on the {ctx['metric']} rows"
    sesoi = SESOI_NOTE.format(sesoi=doc["sesoi"], where=where) if doc.get("sesoi") else ""
    return BASELINE_NOTE + omitted + sesoi


def baseline_table(ctx: dict[str, Any]) -> Table:
    """One row per compared metric per group (comparison.py's document): mean and its 95% CI, the difference
    group - baseline with its 95% CI, the test, p, the verdict (and with a --sesoi, the seeds per group needed)."""
    doc = ctx["comparison"]
    pct = f"{100 * doc['level']:g}%"
    head = ["metric", "group", "n", f"mean [{pct} CI]", f"Δ vs baseline [{pct} CI]", "test", "p", "verdict",
            *_seeds_head(doc), "note"]
    plain = lambda v: "—" if v is None else f"{v:.4f}"  # noqa: E731
    rows = []
    for m in doc["metrics"]:
        for g in m["groups"]:
            mean = plain(g["mean"]) + (f" {fmt_ci(g['ci'], plain)}" if g["ci"] else "")
            d = g["vs_baseline"]
            if d is None:
                cells = [("(baseline)", ""), ("", ""), ("", None), ("baseline", ""), *_seeds_cells(doc, None), ("", "")]
            else:
                cells = [(f"{fmt_signed(d['diff'])} {fmt_ci(d['ci'])}", d["diff"]), (d["test"] or "—", d["test"] or ""),
                         (fmt_p(d["p"]), d["p"]), (d["verdict"], d["verdict"]),
                         *_seeds_cells(doc, d, m["metric"] == doc["metric"]), (d["note"], d["note"])]
            rows.append([(m["name"], m["name"]), (g["label"], g["label"]), (str(g["n"]), g["n"]), (mean, g["mean"]),
                         *cells])
    return head, rows


# column indices of the runs table the HTML styles (reason is last, so `#sort=runs-table:N` links stay valid)
RUN_STATUS_COL, RUN_PATH_COL, RUN_REASON_COL = 2, 13, 14


def run_table(ctx: dict[str, Any]) -> Table:
    m = ctx["metric"]
    head = ["group", "seed", "status", f"final {m}", f"best {m}", "final train/loss", "params",
            "non-emb params", "tokens", "steps", "tokens/s", "MFU", "wall time", "run dir", "reason"]
    rows = []
    for r in ctx["runs"]:
        num = lambda v: (f"{v:.4f}" if v is not None and math.isfinite(v) else "—", v)  # noqa: E731
        rows.append([
            (r["group"], r["group"]), (str(r["seed"]) if r["seed"] is not None else "—", r["seed"]),
            (r["status"], r["status"]), num(r["final"]), num(r["best"]), num(r["final_train"]),
            (fmt(r["params"]), r["params"]), (fmt(r["non_embedding_params"]), r["non_embedding_params"]),
            (fmt(r["tokens"]), r["tokens"]), (fmt(r["steps"]), r["steps"]), (fmt3(r["tokens_per_s"]), r["tokens_per_s"]),
            (fmt_pct(r["mfu"]), r["mfu"]), (fmt_time(r["wall_time_s"]), r["wall_time_s"]), (shorten(r["path"]), r["path"]),
            (r["reason"], r["reason"]),
        ])
    return head, rows


def excluded_runs(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs that are not averaged in (diverged, interrupted, failed), in run-table order."""
    return [r for r in ctx["runs"] if r["status"] in EXCLUDED_STATUSES]


def excluded_line(r: dict[str, Any]) -> str:
    """One run not in the means, as one line: 'pos=alibi seed 2: diverged (non-finite loss ...) -- 8'."""
    seed = f" seed {r['seed']}" if r["seed"] is not None else ""
    reason = f" ({r['reason']})" if r["reason"] else ""
    return f"{r['group']}{seed}: {r['status']}{reason} -- {r['path']}"


def diff_table(ctx: dict[str, Any]) -> Table:
    """One row per group, one column per differing config key ('a | b' where it varies inside a group)."""
    head = ["group"] + ctx["diff_keys"]
    rows = []
    for gi, label in enumerate(ctx["diff_groups"]):
        rows.append([(label, label)] + [(ctx["diff_cells"][ki][gi], ctx["diff_cells"][ki][gi]) for ki in range(len(ctx["diff_keys"]))])
    return head, rows
