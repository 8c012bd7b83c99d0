"""build_report: runs in, one report dir out (report.html, report.md, comparison.json, the PNGs,
report_manifest.json; with analysis=True also the Analysis section's PNGs, analysis.py).

Order: check the arguments and the out dir (outdir.py) before any run is read; load, check and group the runs
and pick the baseline group; draw the figures (figures.py); compare every pair of groups (Holm-corrected, with the
headline they give) and every group with the baseline (comparison.py, pairwise.py, headline.py); write
comparison.json, report.md and report.html (markdown.py, html.py), each atomically; then the manifest. A tuned sweep (a dir holding tuning.json) is compared on its final runs only; its tuning section and
basin.png come from tuning.json (tuning.py, basin.py). A sweep whose runs all failed still gets a report that says so (the runs table lists every run with its
status and reason); only a metric or x axis that no completed run logged is an error (a typo, most likely).
Not handled: two builds writing one out dir at the same time.
"""

from __future__ import annotations

import math
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from experiments.compare.grouping import Group, check_keys, default_group_keys, group_runs
from experiments.compare.outdir import COMPARISON, REPORT_FILES, ReportDir
from experiments.compare.runs import Run, RunsError, check_single_experiment, read_runs
from experiments.compare.stats import budgets, config_diff, final_value, run_rows, stat_runs, summarize
from experiments.compare.tuning import BASIN, find_tuned, protocol, split_runs, tuning_table, tuning_text
from experiments.rundir.layout import RunStatus, atomic_write

X_KEYS = ("tokens", "step", "flops", "time")


def available_metrics(runs: list[Run]) -> list[str]:
    """Logged metric keys (per-layer keys collapsed to `.../layer_{i}`)."""
    keys: set[str] = set()
    for r in runs:
        keys |= r.metric_keys()
    keys -= set(X_KEYS)
    return sorted({re.sub(r"layer_\d+$", "layer_{i}", k) for k in keys})


def _check_metric(runs: list[Run], metric: str, x: str) -> None:
    """A metric / x axis that no run has is an error once some run completed (then it is a typo, not a run that
    died before logging it)."""
    if not any(r.status == RunStatus.COMPLETED for r in runs):
        return
    has_metric = any(metric in r.metric_keys() for r in runs) or any(
        final_value(r, metric) is not None for r in runs)
    if not has_metric:
        avail = available_metrics(runs)
        raise RunsError(f"metric {metric!r} is not in any run; available: {', '.join(avail) if avail else '(no metrics logged)'}")
    if not any(x in r.metric_keys() for r in runs) and any(r.metrics for r in runs):
        raise RunsError(f"x axis {x!r} is not logged in any run's metrics.jsonl; try --x step")


def default_out_dir(runs: list[Run]) -> Path:
    """`<common dir of the runs>/report`, or ./report when the runs share no useful common dir."""
    paths = [str(r.path) for r in runs if r.path is not None]
    if not paths:
        return Path("report")
    common = Path(os.path.commonpath(paths))
    if len(common.parts) <= 1:
        return Path("report")
    return common / "report"


def _headline(status_counts: dict[str, int], groups: list[Group]) -> str:
    """'' normally; a sentence when no group has a run to average (every run failed, diverged or was interrupted)."""
    if any(stat_runs(g) for g in groups):
        return ""
    what = ", ".join(f"{n} {s}" for s, n in status_counts.items())
    return f"No run completed ({what}): nothing is averaged; every run is listed below with its reason."


def check_out_dir(out_dir: str | os.PathLike, metric: str, analysis: bool = False) -> ReportDir:
    """The user's --out, checked before any run is read (outdir.ReportDir.check); RunsError when unusable."""
    report_dir = ReportDir(out_dir, what=f"--out {out_dir}")
    report_dir.check(_names(metric, analysis))
    return report_dir


def _names(metric: str, analysis: bool = False) -> list[str]:
    from experiments.compare.analysis import ANALYSIS_FIGURES
    from experiments.compare.figures import figure_names

    return [*REPORT_FILES, *figure_names(metric), BASIN, *(ANALYSIS_FIGURES if analysis else ())]


def build_report(run_paths: Sequence[str | os.PathLike] | None, out_dir: str | os.PathLike | None = None,
                 by: Sequence[str] | None = None, metric: str = "val/loss", x: str = "tokens",
                 allow_mixed: bool = False, runs: list[Run] | None = None, command: str | None = None,
                 baseline: str | int | None = None, smooth: float = 0.0, analysis: bool = False,
                 sesoi: float | None = None) -> Path:
    """Load runs, group them, write report.html / report.md / comparison.json / PNGs into out_dir; returns
    report.html's path. `baseline`: the group the others are compared with (label or 0-based index; default the
    first); `smooth`: EMA weight in [0, 1) for the train-loss curves (0 = off; the command line refuses others);
    `analysis`: add the Analysis section (attention entropy, logit lens, per-head entropy: analysis.py; loads every
    completed run's weights); `sesoi`: the smallest difference of interest in `metric`'s units, for which the
    tables give the seeds per group 80% power needs (None: no such column). The headline (which group won, by how
    much, how sure: headline.py) is in comparison.json's "headline"; headline.read_headline(path) returns it.

    Example: build_report(["multirun/pos_encodings/2026-01-01_00-00-00"], None, by=["model.pos.kind"])
    Raises RunsError on bad input (no runs, mixed experiments, unknown metric, --by key or --baseline group,
    unusable out dir)."""
    from experiments.compare.comparison import compare_groups, comparison_json, resolve_baseline
    from experiments.compare.figures import draw_figures
    from experiments.compare.html import render_html
    from experiments.compare.markdown import render_markdown

    if x not in X_KEYS:
        raise RunsError(f"--x must be one of {', '.join(X_KEYS)}, got {x!r}")
    if sesoi is not None and not (math.isfinite(sesoi) and sesoi > 0):
        raise RunsError(f"--sesoi must be a finite number > 0, got {sesoi!r}")
    names = _names(metric, analysis)
    report_dir = check_out_dir(out_dir, metric, analysis) if out_dir is not None else None  # before any run is read
    runs = list(runs or []) + (read_runs(run_paths) if run_paths else [])
    if not runs:
        raise RunsError("no runs to compare")
    tuned = find_tuned(run_paths or [], runs)
    runs, set_aside = split_runs(runs, tuned)  # a tuned sweep: its final runs only, never its tuning runs (tuning.py)
    if not allow_mixed:
        check_single_experiment(runs)
    by = list(by) if by else default_group_keys(runs)
    check_keys(runs, by)
    _check_metric(runs, metric, x)
    groups = group_runs(runs, by)
    base = resolve_baseline(groups, baseline)
    if report_dir is None:
        report_dir = ReportDir(default_out_dir([*runs, *set_aside]))  # a tuned sweep's: <sweep dir>/report
        report_dir.check(names)
    out = report_dir.path
    with report_dir.writing():  # an OSError from here on (disk full) is one line, naming the out dir
        report_dir.begin(names)
        paths = [r.path for r in runs if r.path is not None]
        root = Path(os.path.commonpath([str(p) for p in paths])) if paths else None

        figures, notes = draw_figures(out, runs, groups, by, metric, x, smooth)
        section = None
        if analysis:
            from experiments.compare.analysis import build_analysis

            section = build_analysis(out, groups, x)
        tuning = None
        if tuned:
            from experiments.compare.basin import draw_basin  # matplotlib: imported when a report is built

            tuning = {"text": tuning_text(tuned), "table": tuning_table(tuned), "figure": draw_basin(out, tuned)}
        comparison = compare_groups(groups, by, metric, base, sesoi=sesoi, protocol=protocol(runs, tuned))
        keys, cells, noise = config_diff(runs, groups)
        status_counts = {s: sum(r.status == s for r in runs) for s in dict.fromkeys(r.status for r in runs)}
        ctx = {
            "title": "archlab comparison: "
                     + (", ".join(sorted({str(r.experiment) for r in runs if r.experiment})) or "runs"),
            "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command or "", "metric": metric, "x": x, "by": by, "n_runs": len(runs),
            "status_counts": status_counts, "headline": _headline(status_counts, groups),
            "groups": summarize(groups, metric), "runs": run_rows(groups, metric, root),
            "root": str(root) if root else "",
            "diff_keys": keys, "diff_cells": cells, "diff_groups": [g.label for g in groups], "noise_keys": noise,
            "figures": figures, "notes": notes, "out": out, "comparison": comparison, "budget": budgets(groups),
            "analysis": section, "protocol": comparison["protocol"], "tuning": tuning,
        }
        text = comparison_json(comparison)
        atomic_write(out / COMPARISON, lambda f: f.write(text), binary=False)
        md = render_markdown(ctx)
        atomic_write(out / "report.md", lambda f: f.write(md), binary=False)
        page = render_html(ctx, out)
        atomic_write(out / "report.html", lambda f: f.write(page), binary=False)
        report_dir.finish([*REPORT_FILES, *(f["file"] for f in figures),
                           *(f["file"] for f in (section or {}).get("figures", [])),
                           *([tuning["figure"]["file"]] if tuning and tuning["figure"] else [])])
    return out / "report.html"
