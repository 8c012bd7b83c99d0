"""Writers for the comparison report: a self-contained `report.html` and a pasteable `report.md`.

The HTML inlines its CSS, the PNGs (base64 data URIs) and ~25 lines of JS that sort tables on a header
click, so it works offline and from an e-mail attachment. No external JS/CSS/fonts/CDN.
Not handled here: computing anything (compare.py hands over a ready `ctx` dict).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

Stat = tuple[float, float, int]


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


# ---------------------------------------------------------------- table model shared by HTML and markdown


def _group_table(ctx: dict[str, Any]) -> tuple[list[str], list[list[tuple[str, Any]]]]:
    m = ctx["metric"]
    head = ["group", "runs", f"final {m}", f"best {m}", "final val/bpb", "params", "non-emb params", "tokens",
            "tokens/s", "MFU", "wall time"]
    rows = []
    for g in ctx["groups"]:
        rows.append([
            (g["group"], g["group"]), (g["runs"], g["n"]),
            (fmt_stat(g["final"], loss=True), g["final"][0]), (fmt_stat(g["best"], loss=True), g["best"][0]),
            (fmt_stat(g["final_bpb"], loss=True), g["final_bpb"][0]),
            (fmt(g["params"][0]), g["params"][0]), (fmt(g["non_embedding_params"][0]), g["non_embedding_params"][0]),
            (fmt(g["tokens"][0]), g["tokens"][0]), (fmt_stat(g["tokens_per_s"], f=fmt3), g["tokens_per_s"][0]),
            (fmt_stat(g["mfu"], f=fmt_pct), g["mfu"][0]), (fmt_stat(g["wall_time_s"], f=fmt_time), g["wall_time_s"][0]),
        ])
    return head, rows


def _run_table(ctx: dict[str, Any]) -> tuple[list[str], list[list[tuple[str, Any]]]]:
    m = ctx["metric"]
    head = ["group", "seed", "status", f"final {m}", f"best {m}", "final train/loss", "params",
            "non-emb params", "tokens", "steps", "tokens/s", "MFU", "wall time", "run dir"]
    rows = []
    for r in ctx["runs"]:
        num = lambda v: (f"{v:.4f}" if v is not None and math.isfinite(v) else "—", v)  # noqa: E731
        rows.append([
            (r["group"], r["group"]), (str(r["seed"]) if r["seed"] is not None else "—", r["seed"]),
            (r["status"], r["status"]), num(r["final"]), num(r["best"]), num(r["final_train"]),
            (fmt(r["params"]), r["params"]), (fmt(r["non_embedding_params"]), r["non_embedding_params"]),
            (fmt(r["tokens"]), r["tokens"]), (fmt(r["steps"]), r["steps"]), (fmt3(r["tokens_per_s"]), r["tokens_per_s"]),
            (fmt_pct(r["mfu"]), r["mfu"]), (fmt_time(r["wall_time_s"]), r["wall_time_s"]), (shorten(r["path"]), r["path"]),
        ])
    return head, rows


def shorten(s: str, n: int = 44) -> str:
    """Long run dirs (Hydra puts every override in the name) cut in the middle: 'abc…xyz'."""
    return s if len(s) <= n else s[: n // 2 - 1] + "…" + s[-(n // 2):]


def _diff_table(ctx: dict[str, Any]) -> tuple[list[str], list[list[tuple[str, Any]]]]:
    """One row per group, one column per differing config key ('a | b' where it varies inside a group)."""
    head = ["group"] + ctx["diff_keys"]
    rows = []
    for gi, label in enumerate(ctx["diff_groups"]):
        rows.append([(label, label)] + [(ctx["diff_cells"][ki][gi], ctx["diff_cells"][ki][gi]) for ki in range(len(ctx["diff_keys"]))])
    return head, rows


# ---------------------------------------------------------------- markdown


def _md_cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def write_markdown(path: Path, ctx: dict[str, Any]) -> Path:
    """report.md: groups, config differences, runs, figures (relative PNG links), notes."""
    lines = [f"# {ctx['title']}", "",
             f"{ctx['n_runs']} runs ({_status_text(ctx)}), grouped by {', '.join(ctx['by']) or '(nothing differs)'}; "
             f"metric `{ctx['metric']}`, x = `{ctx['x']}`. Mean ± sample std over completed seeds; "
             "diverged/failed runs are counted separately.", "", "## Groups", ""]
    head, rows = _group_table(ctx)
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    lines += ["", "## Config differences", ""]
    if ctx["diff_keys"]:
        dh, drows = _diff_table(ctx)
        lines += _md_table(dh, [[c for c, _ in row] for row in drows])
    else:
        lines.append("No config key differs between the runs (apart from seeds / per-run noise).")
    if ctx["noise_keys"]:
        lines += ["", "Also differ per run, ignored for grouping: " + ", ".join(f"`{k}`" for k in ctx["noise_keys"])]
    lines += ["", "## Runs", ""]
    head, rows = _run_table(ctx)
    lines += _md_table(head, [[c[0] for c in row] for row in rows])
    lines += ["", "## Figures", ""]
    for f in ctx["figures"]:
        lines += [f"### {f['title']}", "", f"![{f['title']}]({f['file']})", "", f["caption"], ""]
    if ctx["notes"]:
        lines += ["## Notes", ""] + [f"- {n}" for n in ctx["notes"]] + [""]
    path.write_text("\n".join(lines) + "\n")
    return path


def _status_text(ctx: dict[str, Any]) -> str:
    return ", ".join(f"{n} {s}" for s, n in ctx["status_counts"].items())


# ---------------------------------------------------------------- HTML

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
.table-wrap { overflow-x: auto; }
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
                bad_rows: list[bool] | None = None, table_id: str = "", title_col: int | None = None) -> str:
    cls = ' class="sortable"' if sortable else ""
    tid = f' id="{table_id}"' if table_id else ""
    out = [f"<div class=\"table-wrap\"><table{cls}{tid}><thead><tr>"]
    out += [f'<th class="{"l" if i in left else ""}">{_e(h)}</th>' for i, h in enumerate(head)]
    out.append("</tr></thead><tbody>")
    for ri, row in enumerate(rows):
        out.append('<tr class="bad">' if bad_rows and bad_rows[ri] else "<tr>")
        for i, (text, v) in enumerate(row):
            inner = _e(text)
            if colors and i == swatch_col:
                inner = f'<span class="sw" style="background:{colors[ri]}"></span>{inner}'
            if status_col is not None and i == status_col:
                inner = f'<span class="st st-{_e(text)}">{inner}</span>'
            title = f' title="{_e(v)}"' if i == title_col else ""
            out.append(f'<td class="{"l" if i in left else ""}" data-v="{_data_v(v)}"{title}>{inner}</td>')
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _img(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def write_html(path: Path, ctx: dict[str, Any]) -> Path:
    """report.html: self-contained (inline CSS, JS and base64 PNGs)."""
    out_dir = path.parent
    parts = ["<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
             f"<title>{_e(ctx['title'])}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(ctx['title'])}</h1>",
             f"<p class=\"meta\">{ctx['n_runs']} runs ({_e(_status_text(ctx))}) in {len(ctx['groups'])} groups, "
             f"grouped by {' '.join(f'<code>{_e(k)}</code>' for k in ctx['by']) or '(nothing differs)'}; "
             f"metric <code>{_e(ctx['metric'])}</code>, x axis <code>{_e(ctx['x'])}</code>.</p>",
             f"<p class=\"meta\">Generated {_e(ctx['generated'])}"
             + (f" from <code>{_e(ctx['root'])}</code>" if ctx["root"] else "") + ".</p>",
             "<nav><a href=\"#groups\">Groups</a><a href=\"#config\">Config differences</a>"
             "<a href=\"#figures\">Figures</a><a href=\"#runs\">Runs</a></nav>"]

    head, rows = _group_table(ctx)
    parts += ["<h2 id=\"groups\">Groups</h2>",
              "<p class=\"meta\">Mean ± sample std over the completed seeds of each group (n); diverged and failed runs "
              "are counted in brackets, not averaged in. Click a header to sort.</p>",
              _html_table(head, rows, left={0, 1}, colors=[g["color"] for g in ctx["groups"]], table_id="groups-table")]

    parts.append("<h2 id=\"config\">Config differences</h2><p class=\"meta\">Every config key whose value differs "
                 "between runs (seeds and per-run noise aside), per group.</p>")
    if ctx["diff_keys"]:
        dh, drows = _diff_table(ctx)
        parts.append(_html_table(dh, drows, left=set(range(len(dh))), colors=[g["color"] for g in ctx["groups"]],
                                 table_id="diff-table"))
    else:
        parts.append("<p>No config key differs between the runs (apart from seeds and per-run noise).</p>")
    if ctx["noise_keys"]:
        parts.append("<p class=\"meta\">Also differ per run, ignored for grouping: "
                     + ", ".join(f"<code>{_e(k)}</code>" for k in ctx["noise_keys"]) + ".</p>")

    parts.append("<h2 id=\"figures\">Figures</h2>")
    for f in ctx["figures"]:
        parts.append(f"<figure><h3>{_e(f['title'])}</h3><img src=\"{_img(out_dir / f['file'])}\" alt=\"{_e(f['title'])}\">"
                     f"<figcaption>{_e(f['caption'])} <span class=\"meta\">({_e(f['file'])})</span></figcaption></figure>")
    if ctx["notes"]:
        parts.append("<h3>Skipped</h3><ul class=\"notes\">" + "".join(f"<li>{_e(n)}</li>" for n in ctx["notes"]) + "</ul>")

    head, rows = _run_table(ctx)
    parts += ["<h2 id=\"runs\">Runs</h2>",
              _html_table(head, rows, left={0, 2, 13}, colors=[r["color"] for r in ctx["runs"]], swatch_col=0,
                          status_col=2, title_col=13, bad_rows=[r["status"] in ("diverged", "failed") for r in ctx["runs"]],
                          table_id="runs-table")]
    if ctx["command"]:
        parts.append(f"<footer>Reproduce: <code>{_e(ctx['command'])}</code></footer>")
    parts.append(f"<script>{JS}</script></body></html>")
    path.write_text("".join(parts))
    return path
