"""report.html in headless Chromium, as a reader sees it: the page's first lines name the winner (or say there is
none) with the margin, its 95% interval and Holm's p, and those numbers agree with scipy.stats on the hand-made
runs' values; the groups table is best first; the runs table scrolls inside its own box, not the page.

Skips with a reason when no chromium / chromium-browser is on PATH (`make browser` installs Debian's).
"""

from __future__ import annotations

import html
import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from experiments.compare import build_report
from tests.experiments.test_compare_headline import CLEAR_LEAD_OF_TWO, write_runs
from tests.experiments.test_report_browser import CHROMIUM, _chromium

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium/chromium-browser on PATH (run `make browser`)")

NUMBER = r"[+-]?\d+\.\d+"
# measurements the page takes of itself once loaded, written into the DOM for --dump-dom to return
MEASURE = """<script>window.addEventListener("load", function () {
  var box = document.querySelector("#runs-table").parentElement, s = getComputedStyle(box);
  var out = document.createElement("pre"); out.id = "measured";
  out.textContent = JSON.stringify({page: document.documentElement.scrollWidth, window: window.innerWidth,
    box: box.clientWidth, table: box.scrollWidth, overflowX: s.overflowX, overflowY: s.overflowY,
    maxHeight: s.maxHeight, innerHeight: window.innerHeight,
    firstText: document.body.innerText.split("\\n").filter(function (l) { return l.trim(); }).slice(0, 3)});
  document.body.appendChild(out);
});</script>"""


def scipy_holm(finals: dict[str, list[float]]) -> dict[tuple[str, str], tuple[float, tuple[float, float], float]]:
    """{(a, b): (mean difference a - b, its 95% CI, Holm p)} of every pair, from scipy.stats.ttest_rel; Holm's
    adjustment written out: sorted p's times m, m-1, ..., kept non-decreasing, capped at 1."""
    pairs = {}
    for a, b in itertools.combinations(finals, 2):
        res = stats.ttest_rel(finals[a], finals[b])
        ci = res.confidence_interval(0.95)
        pairs[a, b] = (float(np.mean(finals[a]) - np.mean(finals[b])), (ci.low, ci.high), res.pvalue)
    order = sorted(pairs, key=lambda k: pairs[k][2])
    out, running = {}, 0.0
    for k, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - k) * pairs[key][2]))
        out[key] = (pairs[key][0], pairs[key][1], running)
        out[key[::-1]] = (-pairs[key][0], (-pairs[key][1][1], -pairs[key][1][0]), running)
    return out


def rendered(report: Path, tmp_path: Path, width: int = 1000) -> tuple[str, dict]:
    """(the DOM after the page's scripts ran, the page's own measurements) at a window `width` px wide."""
    page = tmp_path / "measured.html"
    page.write_text(report.read_text().replace("</body>", MEASURE + "</body>"))
    p = _chromium([f"--window-size={width},900", "--dump-dom", page.as_uri()], tmp_path / "profile")
    m = re.search(r'<pre id="measured">(.*?)</pre>', p.stdout, re.S)
    assert m, p.stderr[-2000:]
    return p.stdout, json.loads(html.unescape(m.group(1)))


SHARED = [0.0, 0.10, -0.05, 0.20]
# alibi - rope: p = 0.038 alone, its interval excludes 0, but Holm's p over the 6 pairs is 0.075: not resolved
HOLM_DECIDES = {
    "learned": [3.30 + s + e for s, e in zip(SHARED, [0.05, -0.06, 0.02, 0.0])],
    "rope": [3.03 + s + e for s, e in zip(SHARED, [0.0, 0.02, -0.01, 0.01])],
    "alibi": [3.00 + s + e for s, e in zip(SHARED, [0.01, -0.005, 0.0, 0.015])],
    "sinusoidal": [3.30 + s + e for s, e in zip(SHARED, [0.01, 0.0, -0.01, 0.02])],
}
SCENARIOS = {
    "lead of two": CLEAR_LEAD_OF_TWO,
    "clear winner": {**CLEAR_LEAD_OF_TWO, "alibi": [v - 0.3 for v in CLEAR_LEAD_OF_TWO["alibi"]]},
    "Holm decides": HOLM_DECIDES,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_headline_is_the_first_thing_on_the_page_and_matches_scipy(tmp_path: Path, scenario: str) -> None:
    finals = SCENARIOS[scenario]
    report = build_report([write_runs(tmp_path / "sweep", finals)], tmp_path / "out", by=["model.pos.kind"])
    dom, measured = rendered(report, tmp_path)
    title, first, means = measured["firstText"]
    assert title == "archlab comparison: arch_sweep"
    want = scipy_holm(finals)
    order = sorted(finals, key=lambda k: np.mean(finals[k]))
    best, runner, *rest = order
    assert (best, runner) == ("alibi", "rope")
    diff, (lo, hi), p_holm = want[best, runner]
    # which won, by how much, how sure: parsed from the text the browser shows, checked against scipy
    m = re.search(rf"pos=alibi − pos=rope = ({NUMBER}), 95% CI \[({NUMBER}), ({NUMBER})\](, uncorrected)?, paired; "
                  rf"Holm p(=|<)(\d\.\d+) over 6 pairs", first)
    assert m, first
    assert float(m[1]) == pytest.approx(diff, abs=5e-5)
    assert (float(m[2]), float(m[3])) == pytest.approx((lo, hi), abs=5e-5)
    if m[5] == "<":
        assert p_holm < 0.001 and m[6] == "0.001"
    else:
        assert float(m[6]) == pytest.approx(p_holm, abs=5e-4)
    assert bool(m[4]) == (hi < 0 and p_holm >= 0.05)  # 'uncorrected': the interval alone would have resolved it
    assert all(want[a, r][2] < 0.05 for a in (best, runner) for r in rest)  # premise: the lead beats the rest
    rest_text = f"pos={rest[0]} and pos={rest[1]}"
    if p_holm >= 0.05:
        assert first.startswith("final val/loss (lower is better): no clear winner: pos=alibi and pos=rope are not "
                                "distinguishable at n=4 (")
        assert first.endswith(f"; both beat {rest_text}.")
    else:
        assert first.startswith("final val/loss (lower is better): pos=alibi wins. Margin over the runner-up: ")
        assert first.endswith("; pos=alibi beats all 3 other groups.")
    assert means.startswith("Means, best first: " + ", ".join(f"pos={k} {np.mean(finals[k]):.4f}" for k in order))
    table = re.search(r'id="groups-table">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    assert re.findall(r'</span>([^<]+)</td>', table) == [f"pos={k}" for k in order]  # best first


def test_holm_decides_premise() -> None:
    p = stats.ttest_rel(HOLM_DECIDES["alibi"], HOLM_DECIDES["rope"]).pvalue
    assert p < 0.05 <= scipy_holm(HOLM_DECIDES)["alibi", "rope"][2]  # so the correction changes the verdict


def test_runs_table_scrolls_inside_its_own_box(tmp_path: Path) -> None:
    report = build_report([write_runs(tmp_path / "sweep", CLEAR_LEAD_OF_TWO)], tmp_path / "out",
                          by=["model.pos.kind"])
    _, m = rendered(report, tmp_path, width=900)
    assert m["table"] > m["box"], m  # the table is wider than the window here ...
    assert m["page"] <= m["window"], m  # ... yet the page does not scroll sideways: its box does
    assert m["overflowX"] == "auto" and m["overflowY"] == "auto", m
    assert float(m["maxHeight"].removesuffix("px")) == pytest.approx(0.7 * m["innerHeight"], abs=1), m  # a box
