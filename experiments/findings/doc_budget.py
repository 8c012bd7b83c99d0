"""The doc's paragraphs on how the runs were budgeted, from the sweep's finding.json (judge.py computes them from
the runs): the learning-rate tuning of a tuned sweep, the data each run saw, and what the sweep cost.

    tuning_lines(meta)   # "## Learning-rate tuning": protocol label, the report's tuning sentence and best-lr table
    seen_lines(meta)     # tokens per non-embedding parameter per group; epochs, max over the runs
    cost_lines(meta)     # CPU-hours (sum over every run of wall_time_s x num_threads), machine-hours, where it ran

Every number here comes from meta (tuned.tuning_meta, budget.data_seen, budget.cost): nothing is a fixed string.
A doc without them (an untuned sweep has no tuning section; a finding.json from before they existed) leaves the
paragraph out. Not handled: computing (budget.py, tuned.py), the rest of the doc (doc.py).
"""

from __future__ import annotations

from typing import Any

from experiments.findings.md import md_table


def _g(v: float) -> str:
    return f"{v:g}"


def _hours(v: float) -> str:
    """2 decimals, or 2 significant digits below 0.1 h (a smoke sweep's seconds still show)."""
    return f"{v:.2f}" if v >= 0.1 or v == 0 else f"{v:.2g}"


def tuning_lines(meta: dict[str, Any]) -> list[str]:
    """The tuning section of a tuned sweep's doc (empty for an untuned one)."""
    t = meta.get("tuning")
    if not t:
        return []
    seeds = ", ".join(map(str, t.get("seeds", [])))
    proxy = t.get("proxy")
    horizon = t.get("tuning_horizon") or (t.get("horizon") or [{}])[0]  # (finding.json written before it: no proxy)
    if proxy:
        who = (f"Every difference in this doc is at one transferred lr, not best-vs-best: only the proxy `{proxy}`"
               f"{' (not a compared arm)' if t.get('proxy_only') else ''} was trained")
        then = "then every arm was run at that lr"
    else:
        who, then = "Every difference in this doc is best-vs-best: each arm was trained", "then run at that lr"
    return ["## Learning-rate tuning", "",
            f"**Protocol: {t.get('protocol')}.** {who} "
            f"over the {t.get('key')} grid [{', '.join(_g(v) for v in t.get('grid', []))}] on tuning seed(s) "
            f"{', '.join(map(str, t.get('tune_seeds', [])))} at {_g(t.get('fraction', 0))} of its budget "
            f"({horizon.get('key', 'the budget')} {horizon.get('tuning', '?')} of {horizon.get('full', '?')}), its "
            f"best lr picked by final val/loss (a best point at a grid edge widened by up to {t.get('widen')} "
            f"points per side), {then} on the fresh seeds {seeds}; the results come from those "
            f"{t.get('final_runs')} final runs alone, the {t.get('tuning_runs')} tuning runs never enter a mean or "
            "an interval.", "",
            f"From the report: {t.get('text')}", "", *md_table(t.get("head", []), t.get("rows", [])), ""]


def seen_lines(meta: dict[str, Any]) -> list[str]:
    """Bullets: tokens per non-embedding parameter per group, and the epochs the runs made."""
    seen = meta.get("seen") or {}
    lines = []
    if seen.get("tokens_per_param"):
        per = "; ".join(f"{g}: {v:.3g}" for g, v in seen["tokens_per_param"].items())
        lines.append(f"- Training tokens per non-embedding parameter (final runs, per group): {per}.")
    if seen.get("epochs_max") is not None:
        once = "no training token was seen twice" if seen["epochs_max"] <= 1 else "some tokens were seen more than once"
        lines.append(f"- Epochs (summary.json `epochs`, tokens trained / tokens in one pass over the train split): "
                     f"max {seen['epochs_max']:.3f} over the {seen.get('epochs_runs')} runs that report it "
                     f"(final runs: max {seen.get('epochs_max_final') or 0:.3f}): {once}.")
    return lines


def cost_lines(meta: dict[str, Any]) -> list[str]:
    """Bullets: CPU-hours and machine-hours of the sweep, and where it ran."""
    c = meta.get("cost")
    if not c:
        return []
    machine = "not measured" if c.get("machine_hours") is None else _hours(c["machine_hours"])
    tuning = f", of which tuning runs {_hours(c['tuning_cpu_hours'])}" if c.get("tuning_cpu_hours") else ""
    missing = (f"; {c['uncounted']} run(s) without wall_time_s or num_threads are not in the sum"
               if c.get("uncounted") else "")
    return [f"- CPU-hours: {_hours(c['cpu_hours'])} (the sum over the {c['runs']} runs, tuning runs included, of each "
            f"run's wall_time_s × num_threads / 3600{tuning}{missing}); machine-hours: {machine} (the wall time of "
            "the whole sweep, all attempts).",
            f"- Ran on: {', '.join(c.get('devices') or ['device not recorded'])} (the runs' summary.json `device`), "
            f"a host with {c.get('cpus') or '?'} CPUs (os.sched_getaffinity where the findings command ran)."]
