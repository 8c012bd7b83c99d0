"""report.md: the comparison report as markdown, for pasting into issues and papers (figures as relative links).

Same tables as the HTML (tables.py). Not handled here: computing anything, or where the file goes (report.py).
"""

from __future__ import annotations

from typing import Any

from experiments.compare.analysis import ANALYSIS_NOTE, LENS_TABLE_NOTE
from experiments.compare.tables import (
    baseline_note,
    baseline_table,
    budget_text,
    diff_table,
    excluded_line,
    excluded_runs,
    group_table,
    pairwise_note,
    pairwise_table,
    run_table,
    status_text,
)


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def render_markdown(ctx: dict[str, Any]) -> str:
    """report.md's text: headline, groups, runs not in the means, all pairwise differences, differences vs
    baseline, config differences, runs, figures, notes."""
    verdict = ctx["comparison"]["headline"]["lines"]
    lines = [f"# {ctx['title']}", ""] + ([f"**{verdict[0]}**", ""] + [f"{v}  " for v in verdict[1:]] + [""]
                                         if verdict else [])
    lines += [f"{ctx['n_runs']} runs ({status_text(ctx)}), grouped by {', '.join(ctx['by']) or '(nothing differs)'}; "
             f"metric `{ctx['metric']}`, x = `{ctx['x']}`. Mean ± sample std over completed seeds; "
             "diverged/interrupted/failed runs are counted separately.", ""]
    if budget_text(ctx):
        lines += [budget_text(ctx), ""]
    if ctx["headline"]:
        lines += [f"**{ctx['headline']}**", ""]
    lines += ["## Groups", ""]
    head, rows = group_table(ctx)
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    excluded = excluded_runs(ctx)
    if excluded:
        lines += ["", "## Runs not in the means", ""] + [f"- {_md_cell(excluded_line(r))}" for r in excluded]
    lines += ["", "## All pairwise differences", "", f"**Protocol: {ctx['protocol']}.** {pairwise_note(ctx)}", ""]
    head, rows = pairwise_table(ctx)
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    lines += ["", f"## Differences vs baseline {ctx['comparison']['baseline']['label']}", "", baseline_note(ctx), ""]
    head, rows = baseline_table(ctx)
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    if ctx.get("tuning"):
        lines += _tuning(ctx["tuning"])
    lines += ["", "## Config differences", ""]
    if ctx["diff_keys"]:
        dh, drows = diff_table(ctx)
        lines += _md_table(dh, [[c for c, _ in row] for row in drows])
    else:
        lines.append("No config key differs between the runs (apart from seeds / per-run noise).")
    if ctx["noise_keys"]:
        lines += ["", "Also differ per run, ignored for grouping: " + ", ".join(f"`{k}`" for k in ctx["noise_keys"])]
    lines += ["", "## Runs", ""]
    head, rows = run_table(ctx)
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    lines += ["", "## Figures", ""]
    for f in ctx["figures"]:
        lines += [f"### {f['title']}", "", f"![{f['title']}]({f['file']})", "", f["caption"], ""]
    if ctx["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in ctx["notes"]] + [""]
    if ctx.get("analysis") is not None:
        lines += _analysis(ctx["analysis"])
    return "\n".join(lines) + "\n"


def _tuning(section: dict[str, Any]) -> list[str]:
    """The learning-rate tuning section of a tuned sweep (compare/tuning.py): text, table, basin.png."""
    lines = ["", "## Learning-rate tuning", "", section["text"], ""]
    head, rows = section["table"]
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    if section["figure"]:
        f = section["figure"]
        lines += ["", f"![{f['title']}]({f['file']})", "", f["caption"]]
    return lines


def _analysis(section: dict[str, Any]) -> list[str]:
    lines = ["## Analysis", "", ANALYSIS_NOTE, ""]
    for f in section["figures"]:
        lines += [f"### {f['title']}", "", f"![{f['title']}]({f['file']})", "", f["caption"], ""]
    if section["table"] is not None:
        head, rows = section["table"]
        lines += ["### Logit lens per layer", "", LENS_TABLE_NOTE, ""]
        lines += _md_table(head, [[c[0] for c in row] for row in rows]) + [""]
    if section["notes"]:
        lines += ["### Analysis notes", ""] + [f"- {_md_cell(n)}" for n in section["notes"]] + [""]
    return lines
