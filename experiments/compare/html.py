"""report.html: the comparison report as one self-contained HTML file.

It inlines its CSS, the PNGs (base64 data URIs) and ~25 lines of JS that sort tables on a header click, so it
works offline and from an e-mail attachment. No external JS/CSS/fonts/CDN. Same tables as report.md (tables.py).
Not handled here: computing anything, or where the file goes (report.py).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

from experiments.compare.analysis import ANALYSIS_NOTE, LENS_TABLE_NOTE
from experiments.compare.runs import EXCLUDED_STATUSES
from experiments.compare.tables import (
    RUN_PATH_COL,
    RUN_REASON_COL,
    RUN_STATUS_COL,
    VERDICT_COL,
    baseline_note,
    baseline_table,
    budget_text,
    diff_table,
    excluded_line,
    excluded_runs,
    group_order,
    group_table,
    pairwise_note,
    pairwise_table,
    run_table,
    status_text,
)


CSS = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#dde1e8; --bg:#ffffff; --head:#f3f5f9; --accent:#0b5fad; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 24px 32px 48px; max-width: 1320px; }
h1 { font-size: 24px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 15px; margin: 22px 0 6px; }
.meta { color: var(--muted); margin: 2px 0; }
code { background: var(--head); padding: 1px 5px; border-radius: 4px; font-size: 12.5px; }
nav a { margin-right: 14px; color: var(--accent); text-decoration: none; }
.table-wrap { overflow-x: auto; max-width: 100%; }
.scroll-box { max-height: 70vh; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; margin: 6px 0 4px; font-size: 12.5px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 7px; text-align: right; white-space: nowrap; }
th { background: var(--head); font-weight: 600; position: sticky; top: 0; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th::after { content: " \\2195"; color: #aab; font-size: 11px; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; color: var(--accent); }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; color: var(--accent); }
td.l, th.l { text-align: left; }
tbody tr:hover { background: #f7f9fc; }
tr.bad td { background: #fff1f0; }
.sw { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 7px; vertical-align: -1px; }
.st { display: inline-block; padding: 0 8px; border-radius: 9px; font-size: 12px; font-weight: 600; }
.st-completed { background: #e3f4e8; color: #17672f; } .st-diverged { background: #fde2df; color: #a8231a; }
.st-failed { background: #f3d6e6; color: #7d1d52; } .st-running { background: #e1ecfa; color: #1f4f91; }
.st-interrupted { background: #fdf0d5; color: #7a4d00; }
.st-better { background: #e3f4e8; color: #17672f; } .st-worse { background: #fde2df; color: #a8231a; }
.st-baseline { background: var(--head); color: var(--muted); }
p.headline { font-weight: 600; color: #a8231a; }
#verdict { border-left: 4px solid var(--accent); background: #f3f7fc; padding: 8px 14px; margin: 12px 0 8px; }
#verdict p { margin: 3px 0; } #verdict p.lead { font-size: 15px; font-weight: 600; }
ul.excluded li { margin: 2px 0; }
figure { margin: 18px 0 28px; }
figure img { max-width: 100%; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); max-width: 1000px; margin-top: 4px; }
ul.notes li { color: var(--muted); }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""

JS = r"""
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var c = row.cells[col], v = c.getAttribute("data-v");
        if (v === null || v === "") return [2, ""];           // blanks always last
        var n = parseFloat(v);
        return isNaN(n) ? [1, v.toLowerCase()] : [0, n];
      }
      rows.sort(function (a, b) {
        var ka = key(a), kb = key(b);
        if (ka[0] !== kb[0]) return ka[0] - kb[0];
        var d = ka[1] < kb[1] ? -1 : ka[1] > kb[1] ? 1 : 0;
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
// report.html#sort=runs-table:3 (or :3:desc) opens with that column sorted: shareable links, and testable
var m = location.hash.match(/^#sort=([\w-]+):(\d+)(:desc)?$/);
if (m) {
  var th = document.querySelectorAll("#" + m[1] + " th")[+m[2]];
  if (th) { th.click(); if (m[3]) th.click(); }
}
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _data_v(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return _e(v)


def _html_table(head: list[str], rows: list[list[tuple[str, Any]]], left: set[int], sortable: bool = True,
                colors: list[str] | None = None, swatch_col: int = 0, status_col: int | None = None,
                bad_rows: list[bool] | None = None, table_id: str = "", title_col: int | None = None,
                box: bool = False) -> str:
    """A table in a div that scrolls sideways when it is wider than the page; `box`: also scrolls down, inside a
    framed box of at most 70% of the window's height (the runs table)."""
    cls = ' class="sortable"' if sortable else ""
    tid = f' id="{table_id}"' if table_id else ""
    wrap = "table-wrap scroll-box" if box else "table-wrap"
    out = [f"<div class=\"{wrap}\"><table{cls}{tid}><thead><tr>"]
    out += [f'<th class="{"l" if i in left else ""}">{_e(h)}</th>' for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for ri, row in enumerate(rows):
        out.append('<tr class="bad">' if bad_rows and bad_rows[ri] else "<tr>")
        for i, (text, v) in enumerate(row):
            inner = _e(text)
            if colors and i == swatch_col:
                inner = f'<span class="sw" style="background:{colors[ri]}"></span>{inner}'
            if status_col is not None and i == status_col:
                inner = f'<span class="st st-{_e(text).replace(" ", "-")}">{inner}</span>'
            title = f' title="{_e(v)}"' if i == title_col else ""
            out.append(f'<td class="{"l" if i in left else ""}" data-v="{_data_v(v)}"{title}>{inner}</td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _img(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _figure(f: dict[str, str], out_dir: Path) -> str:
    return (f"<figure><h3>{_e(f['title'])}</h3><img src=\"{_img(out_dir / f['file'])}\" alt=\"{_e(f['title'])}\">"
            f"<figcaption>{_e(f['caption'])} <span class=\"meta\">({_e(f['file'])})</span></figcaption></figure>")


def _tuning(section: dict[str, Any], out_dir: Path) -> list[str]:
    """The learning-rate tuning section of a tuned sweep (compare/tuning.py): text, table, basin.png."""
    head, rows = section["table"]
    parts = ["<h2 id=\"tuning\">Learning-rate tuning</h2>", f"<p class=\"meta\">{_e(section['text'])}</p>",
             _html_table(head, rows, left={0, 2, 3, 5, 6}, table_id="tuning-table")]
    return parts + ([_figure(section["figure"], out_dir)] if section["figure"] else [])


def _analysis(section: dict[str, Any], out_dir: Path) -> list[str]:
    """The Analysis section (analysis.py): its figures, the logit-lens table, its notes."""
    parts = ["<h2 id=\"analysis\">Analysis</h2>", f"<p class=\"meta\">{_e(ANALYSIS_NOTE)}</p>"]
    parts += [_figure(f, out_dir) for f in section["figures"]]
    if section["table"] is not None:
        head, rows = section["table"]
        parts += ["<h3>Logit lens per layer</h3>", f"<p class=\"meta\">{_e(LENS_TABLE_NOTE)}</p>",
                  _html_table(head, rows, left={0}, table_id="lens-table")]
    if section["notes"]:
        parts.append("<h3>Analysis notes</h3><ul class=\"notes\">"
                     + "".join(f"<li>{_e(n)}</li>" for n in section["notes"]) + "</ul>")
    return parts


def _verdict(ctx: dict[str, Any]) -> str:
    """The headline (headline.py) as the page's first lines: the verdict, then the means and the seeds line."""
    lines = ctx["comparison"]["headline"]["lines"]
    if not lines:
        return ""
    return ("<div id=\"verdict\">" + f"<p class=\"lead\">{_e(lines[0])}</p>"
            + "".join(f"<p class=\"meta\">{_e(line)}</p>" for line in lines[1:]) + "</div>")


def render_html(ctx: dict[str, Any], out_dir: Path) -> str:
    """report.html's text: self-contained (inline CSS, JS and the PNGs of ctx["figures"] from out_dir, base64)."""
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
             f"<title>{_e(ctx['title'])}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(ctx['title'])}</h1>", _verdict(ctx),
             f"<p class=\"meta\">{ctx['n_runs']} runs ({_e(status_text(ctx))}) in {len(ctx['groups'])} groups, "
             f"grouped by {' '.join(f'<code>{_e(k)}</code>' for k in ctx['by']) or '(nothing differs)'}; "
             f"metric <code>{_e(ctx['metric'])}</code>, x axis <code>{_e(ctx['x'])}</code>.</p>",
             (f"<p class=\"meta\">{_e(budget_text(ctx))}</p>" if budget_text(ctx) else ""),
             f"<p class=\"meta\">Generated {_e(ctx['generated'])}"
             + (f" from <code>{_e(ctx['root'])}</code>" if ctx["root"] else "") + ".</p>"]
    if ctx["headline"]:
        parts.append(f"<p class=\"headline\">{_e(ctx['headline'])}</p>")
    parts.append("<nav><a href=\"#groups\">Groups</a><a href=\"#pairwise\">All pairwise differences</a>"
                 "<a href=\"#baseline\">Differences vs baseline</a>"
                 "<a href=\"#config\">Config differences</a>"
                 "<a href=\"#figures\">Figures</a>"
                 + ("<a href=\"#analysis\">Analysis</a>" if ctx.get("analysis") is not None else "")
                 + "<a href=\"#runs\">Runs</a></nav>")

    head, rows = group_table(ctx)
    parts += ["<h2 id=\"groups\">Groups</h2>",
              "<p class=\"meta\">Mean ± sample std over the completed seeds of each group (n); diverged, interrupted "
              "and failed runs are counted in brackets, not averaged in. Click a header to sort.</p>",
              _html_table(head, rows, left={0, 1}, colors=[ctx["groups"][i]["color"] for i in group_order(ctx)],
                          table_id="groups-table")]
    excluded = excluded_runs(ctx)
    if excluded:
        parts += ["<h3 id=\"excluded\">Runs not in the means</h3><ul class=\"excluded\">"]
        parts += [f"<li><span class=\"sw\" style=\"background:{r['color']}\"></span>{_e(excluded_line(r))}</li>"
                  for r in excluded]
        parts.append("</ul>")

    head, rows = pairwise_table(ctx)
    colors = [ctx["groups"][d["better_index"]]["color"] for d in ctx["comparison"]["pairwise"]["pairs"]]
    parts += ["<h2 id=\"pairwise\">All pairwise differences</h2>",
              f"<p class=\"meta\"><strong>Protocol: {_e(ctx['protocol'])}.</strong> {_e(pairwise_note(ctx))}</p>",
              _html_table(head, rows, left={0, 1, VERDICT_COL, len(head) - 1}, colors=colors, status_col=VERDICT_COL,
                          table_id="pairwise-table")]
    head, rows = baseline_table(ctx)
    colors = [ctx["groups"][g["index"]]["color"] for m in ctx["comparison"]["metrics"] for g in m["groups"]]
    parts += [f"<h2 id=\"baseline\">Differences vs baseline {_e(ctx['comparison']['baseline']['label'])}</h2>",
              f"<p class=\"meta\">{_e(baseline_note(ctx))}</p>",
              _html_table(head, rows, left={0, 1, VERDICT_COL, len(head) - 1}, colors=colors,
                          swatch_col=1, status_col=VERDICT_COL, table_id="baseline-table")]

    if ctx.get("tuning"):
        parts += _tuning(ctx["tuning"], out_dir)
    parts.append("<h2 id=\"config\">Config differences</h2><p class=\"meta\">Every config key whose value differs "
                 "between runs (seeds and per-run noise aside), per group.</p>")
    if ctx["diff_keys"]:
        dh, drows = diff_table(ctx)
        parts.append(_html_table(dh, drows, left=set(range(len(dh))), colors=[g["color"] for g in ctx["groups"]],
                                 table_id="diff-table"))
    else:
        parts.append("<p>No config key differs between the runs (apart from seeds and per-run noise).</p>")
    if ctx["noise_keys"]:
        parts.append("<p class=\"meta\">Also differ per run, ignored for grouping: "
                     + ", ".join(f"<code>{_e(k)}</code>" for k in ctx["noise_keys"]) + ".</p>")

    parts.append("<h2 id=\"figures\">Figures</h2>")
    for f in ctx["figures"]:
        parts.append(_figure(f, out_dir))
    if ctx["notes"]:
        parts.append("<h3>Skipped</h3><ul class=\"notes\">" + "".join(f"<li>{_e(n)}</li>" for n in ctx["notes"]) + "</ul>")

    if ctx.get("analysis") is not None:
        parts += _analysis(ctx["analysis"], out_dir)

    head, rows = run_table(ctx)
    parts += ["<h2 id=\"runs\">Runs</h2>",
              _html_table(head, rows, left={0, RUN_STATUS_COL, RUN_PATH_COL, RUN_REASON_COL},
                          colors=[r["color"] for r in ctx["runs"]], swatch_col=0, status_col=RUN_STATUS_COL,
                          title_col=RUN_PATH_COL, bad_rows=[r["status"] in EXCLUDED_STATUSES for r in ctx["runs"]],
                          table_id="runs-table", box=True)]
    if ctx["command"]:
        parts.append(f"<footer>Reproduce: <code>{_e(ctx['command'])}</code></footer>")
    parts.append(f"<script>{JS}</script></body></html>")
    return "".join(parts)
