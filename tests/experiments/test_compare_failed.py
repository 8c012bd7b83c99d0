"""Failed, interrupted and diverged runs are listed with their status and reason, never averaged in, never dropped;
a sweep whose runs all failed still gets a report that says so (the sweep callback always builds one).

Before: the reason (summary `error`) appeared nowhere, an interrupted run was averaged into the curves, a failed
run without config.yaml made every config key "differ", and an all-failed sweep was an error
("metric 'val/loss' is not in any run") instead of a report.
"""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import numpy as np
import pytest

from experiments.compare import build_report, default_group_keys, group_runs, read_runs, main, summarize
from experiments.compare.figures import _curve_data
from tests.experiments.synthetic_runs import GROUPS, make_metrics, val_loss, write_sweep, write_unfinished_run

ERR_FAILED = "RuntimeError: CUDA out of memory | tried 2.0 GiB"
ERR_INTERRUPTED = "KeyboardInterrupt: SIGTERM at step 60"
ERR_CONFIG = "config error: optim.lr: must be > 0, got -1"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 groups x 2 completed seeds, plus: a failed and an interrupted run in group 0 (with metrics up to their
    stop), a diverged one in group 1, and a run that failed before writing its config."""
    root = tmp_path_factory.mktemp("mixed") / "sweep"
    write_sweep(root, groups=GROUPS[:2], seeds=(0, 1), diverged=None, extrap=False, grad_layers=False)
    write_unfinished_run(root / "4", "failed", ERR_FAILED, GROUPS[0], seed=2, steps=30)
    write_unfinished_run(root / "5", "interrupted", ERR_INTERRUPTED, GROUPS[0], seed=3, steps=60)
    write_unfinished_run(root / "6", "diverged", None, GROUPS[1], seed=2, steps=80)
    write_unfinished_run(root / "7", "failed", ERR_CONFIG)
    return root


@pytest.fixture(scope="module")
def report(mixed: Path) -> Path:
    return build_report([mixed], None)


def _section(md: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", md, re.S | re.M)
    assert m, title
    return m.group(1)


def test_markdown_lists_every_unfinished_run_with_status_and_reason(report: Path) -> None:
    md = (report.parent / "report.md").read_text()
    excluded = _section(md, "Runs not in the means")
    bullets = [l for l in excluded.splitlines() if l.startswith("- ")]
    assert len(bullets) == 4
    assert any("failed" in b and "CUDA out of memory \\| tried 2.0 GiB" in b and b.endswith("-- 4") for b in bullets)
    assert any("interrupted" in b and ERR_INTERRUPTED in b and b.endswith("-- 5") for b in bullets)
    assert any("diverged" in b and b.endswith("-- 6") for b in bullets)
    assert any(b.startswith("- (no config)") and ERR_CONFIG in b and b.endswith("-- 7") for b in bullets)
    # the runs table has every run, the reason in its last column
    runs = [l for l in _section(md, "Runs").splitlines() if l.startswith("| ") and not l.startswith("| group")]
    assert len(runs) == 8
    reasons = {l.rstrip(" |").rsplit(" | ", 1)[-1] for l in runs}
    assert {ERR_INTERRUPTED, ERR_CONFIG} <= reasons
    assert any(line.startswith("8 runs (4 completed, 2 failed, 1 interrupted, 1 diverged)") for line in md.splitlines())


def test_html_lists_them_too(report: Path) -> None:
    page = report.read_text()
    ul = re.search(r'<ul class="excluded">(.*?)</ul>', page, re.S)
    assert ul and ul.group(1).count("<li>") == 4
    text = htmllib.unescape(ul.group(1))
    for reason in (ERR_FAILED, ERR_INTERRUPTED, ERR_CONFIG):
        assert reason in text
    runs_table = re.search(r'id="runs-table">.*?</table>', page, re.S).group(0)
    assert runs_table.count('<tr class="bad">') == 4
    assert runs_table.count('class="st st-interrupted"') == 1 and runs_table.count('class="st st-failed"') == 2
    assert htmllib.escape(ERR_FAILED) in runs_table


def test_counts_but_never_averages_them(mixed: Path) -> None:
    runs = read_runs([mixed])
    by = default_group_keys(runs)
    assert by == ["model.pos.kind"]  # the run without a config does not make every key differ
    groups = group_runs(runs, by)
    assert [g.label for g in groups] == ["pos=learned", "pos=rope", "(no config)"]
    rows = summarize(groups, "val/loss")
    assert [r["runs"] for r in rows] == ["2 (+1 failed, +1 interrupted)", "2 (+1 diverged)", "0 (+1 failed)"]
    # group means over the two completed seeds only, from the synthetic curve itself
    for g, row in zip(GROUPS[:2], rows):
        ref = [val_loss(g, s, max(m["tokens"] for m in make_metrics(g, s))) for s in (0, 1)]
        assert row["final"][0] == pytest.approx(np.mean(ref)) and row["final"][2] == 2
    # the curves: the interrupted and failed runs are drawn apart, not in the band
    learned = _curve_data(groups[:1], "train/loss", "tokens")[0]
    assert learned["n_runs"] == 2 and len(learned["bad"]) == 2


def test_all_failed_sweep_still_gets_a_report(tmp_path: Path, capsys) -> None:
    root = tmp_path / "sweep"
    write_unfinished_run(root / "0", "failed", ERR_CONFIG)
    write_unfinished_run(root / "1", "failed", ERR_FAILED, GROUPS[1], steps=20)  # logged train lines, no val/loss
    write_unfinished_run(root / "2", "interrupted", ERR_INTERRUPTED, GROUPS[0], steps=10)
    assert main([str(root)]) == 0
    out = root / "report"
    assert capsys.readouterr().out.splitlines() == ["final val/loss (lower is better): no group has a value; nothing to "
                                                    "compare.", str(out / "report.html")]
    md = (out / "report.md").read_text()
    assert "**No run completed (2 failed, 1 interrupted): nothing is averaged" in md
    assert len([l for l in _section(md, "Runs not in the means").splitlines() if l.startswith("- ")]) == 3
    assert "final val/loss per group: skipped" in md
    page = (out / "report.html").read_text()
    assert '<p class="headline">No run completed' in page and htmllib.escape(ERR_FAILED) in page


def test_all_failed_without_any_file_but_summaries(tmp_path: Path) -> None:
    for i in range(3):
        write_unfinished_run(tmp_path / str(i), "failed", f"{ERR_CONFIG} ({i})")
    md = (build_report([tmp_path], tmp_path / "rep").parent / "report.md").read_text()
    assert "| (no config) | 0 (+3 failed) |" in md
    assert all(f"{ERR_CONFIG} ({i})" in md for i in range(3))


def test_sweep_callback_builds_the_report_of_an_all_failed_sweep(tmp_path: Path, capsys) -> None:
    from omegaconf import OmegaConf

    from experiments.sweep.callbacks import SweepReport

    root = tmp_path / "multirun" / "x" / "t"
    for i in range(2):
        write_unfinished_run(root / str(i), "failed", ERR_FAILED)
    cfg = OmegaConf.create({"experiment_name": "x", "hydra": {"sweep": {"dir": str(root)}}})
    with pytest.raises(SystemExit) as e:  # failed jobs: the sweep exits non-zero, after the report is built
        SweepReport().on_multirun_end(cfg)
    assert e.value.code == 1
    err = capsys.readouterr().err
    assert f"[archlab] report: {root / 'report' / 'report.html'}" in err, err
    assert "[archlab] 2 of 2 run(s) did not complete: 0 (failed), 1 (failed)" in err
    assert ERR_FAILED.replace("|", "\\|") in (root / "report" / "report.md").read_text()  # markdown escapes |


def test_a_metric_typo_is_still_an_error_when_runs_completed(mixed: Path, capsys) -> None:
    assert main([str(mixed), "--metric", "val/lss", "--out", str(mixed.parent / "typo")]) == 2
    assert "'val/lss' is not in any run" in capsys.readouterr().err
