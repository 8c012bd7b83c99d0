"""Open report.html in headless Chromium as a person would: it renders (not blank), tables and images are there.

Skips with a reason when no chromium / chromium-browser is on PATH (`make browser` installs Debian's).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from experiments.compare import build_report
from tests.experiments.synthetic_runs import write_sweep

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium/chromium-browser on PATH (run `make browser`)")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars"]


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("browser") / "sweep"
    write_sweep(root)
    return build_report([root], None)


def test_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    p = _chromium([f"--screenshot={shot}", "--window-size=1400,3000", report.as_uri()], tmp_path / "profile")
    assert shot.is_file(), p.stderr[-2000:]
    img = mpimg.imread(shot)[..., :3]
    assert img.shape[:2] == (3000, 1400)
    ink = (img.min(axis=2) < 0.85).mean()
    colours = len(np.unique((img * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)))
    assert ink > 0.03, f"only {ink:.1%} non-white pixels"
    assert colours > 500, f"only {colours} distinct colours"
    # the top of the page (title + groups table) renders, not just the figures below
    assert (img[:400].min(axis=2) < 0.5).mean() > 0.005


def test_rendered_dom_has_tables_images_and_sort_script(report: Path, tmp_path: Path) -> None:
    p = _chromium(["--dump-dom", report.as_uri()], tmp_path / "profile")
    dom = p.stdout
    assert "</html>" in dom, p.stderr[-2000:]
    assert len(re.findall(r'<img src="data:image/png;base64,', dom)) == 6
    groups = re.search(r'<table class="sortable" id="groups-table">.*?</table>', dom, re.S)
    runs = re.search(r'<table class="sortable" id="runs-table">.*?</table>', dom, re.S)
    assert groups and runs
    assert groups.group(0).count("<tr") == 1 + 5  # header + 5 groups
    assert runs.group(0).count("<tr") == 1 + 15
    assert runs.group(0).count("st-diverged") == 1
    assert "2 (+1 diverged)" in groups.group(0)


def _first_group(dom: str) -> str:
    table = re.search(r'id="groups-table">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    return re.findall(r'</span>([^<]+)</td>', table)[0]


def test_clicking_a_header_sorts_the_table(report: Path, tmp_path: Path) -> None:
    # the page's own JS clicks the header named in the URL hash (column 2 = final val/loss)
    dom_asc = _chromium(["--dump-dom", report.as_uri() + "#sort=groups-table:2"], tmp_path / "p1").stdout
    dom_desc = _chromium(["--dump-dom", report.as_uri() + "#sort=groups-table:2:desc"], tmp_path / "p2").stdout
    assert 'aria-sort="ascending"' in dom_asc and 'aria-sort="descending"' in dom_desc
    assert _first_group(dom_asc) == "pos=rope norm=pre d_model=128 n_layers=4"  # lowest loss (synthetic floor 3.10)
    assert _first_group(dom_desc) == "pos=learned norm=pre d_model=128 n_layers=4"  # highest (floor 3.30)
