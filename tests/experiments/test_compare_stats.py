"""experiments.compare.stats: the numbers: interpolation, mean ± std bands, per-group stats checked against numpy."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from experiments.compare import (
    band,
    best_value,
    count_label,
    final_value,
    group_runs,
    interpolate,
    read_runs,
    mean_std,
    run_extrap,
    summarize,
)
from tests.experiments.synthetic_runs import write_sweep


def test_interpolate_hand_case() -> None:
    xs = np.array([0.0, 10.0, 20.0])
    ys = np.array([4.0, 2.0, 1.0])
    got = interpolate(xs, ys, np.array([-5.0, 0.0, 5.0, 15.0, 20.0, 25.0]))
    assert np.isnan(got[0]) and np.isnan(got[-1])  # never extrapolated
    np.testing.assert_allclose(got[1:-1], [4.0, 3.0, 1.5, 1.0])


def test_interpolate_unsorted_and_repeated_x_keeps_last() -> None:
    got = interpolate(np.array([10.0, 0.0, 10.0]), np.array([9.0, 0.0, 2.0]), np.array([5.0, 10.0]))
    np.testing.assert_allclose(got, [1.0, 2.0])


def test_band_mean_std_where_runs_overlap() -> None:
    a = (np.array([0.0, 100.0]), np.array([1.0, 3.0]))
    b = (np.array([0.0, 50.0]), np.array([3.0, 3.0]))  # stops halfway
    grid, mean, std, n = band([a, b], n_points=5)  # grid 0, 25, 50, 75, 100
    np.testing.assert_allclose(grid, [0, 25, 50, 75, 100])
    np.testing.assert_array_equal(n, [2, 2, 2, 1, 1])
    np.testing.assert_allclose(mean, [2.0, 2.25, 2.5, 2.5, 3.0])
    np.testing.assert_allclose(std[:3], [np.std([1, 3], ddof=1), np.std([1.5, 3], ddof=1), np.std([2, 3], ddof=1)])
    assert np.isnan(std[3:]).all()  # one run: no spread to show


def test_mean_std_matches_numpy_and_ignores_missing() -> None:
    vals = [3.1, 2.9, None, 3.4, math.nan]
    m, s, n = mean_std(vals)
    ref = np.array([3.1, 2.9, 3.4])
    assert n == 3 and m == pytest.approx(ref.mean()) and s == pytest.approx(ref.std(ddof=1))
    assert mean_std([]) == (pytest.approx(math.nan, nan_ok=True), pytest.approx(math.nan, nan_ok=True), 0)
    assert math.isnan(mean_std([1.0])[1])


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("stats")
    write_sweep(root)
    runs = read_runs([root])
    return group_runs(runs, ["model.pos.kind", "model.norm", "model.n_layers"])


def test_group_stats_against_numpy(groups) -> None:
    rows = summarize(groups, "val/loss")
    for g, row in zip(groups, rows):
        done = [r for r in g.runs if r.status == "completed"]
        # independent computation straight from the metric lines
        finals = np.array([[l["val/loss"] for l in r.metrics if "val/loss" in l][-1] for r in done])
        bests = np.array([min(l["val/loss"] for l in r.metrics if "val/loss" in l) for r in done])
        m, s, n = row["final"]
        assert n == len(done)
        assert m == pytest.approx(finals.mean()) and s == pytest.approx(finals.std(ddof=1))
        assert row["best"][0] == pytest.approx(bests.mean())
        assert row["params"][0] == pytest.approx(np.mean([r.summary["params"] for r in done]))


def test_diverged_run_is_counted_separately(groups) -> None:
    post = next(g for g in groups if "norm=post" in g.label)
    assert count_label(post) == "2 (+1 diverged)"
    assert summarize([post])[0]["final"][2] == 2
    bad = next(r for r in post.runs if r.status == "diverged")
    # its last finite value, not NaN
    assert math.isfinite(final_value(bad, "val/loss")) and math.isfinite(best_value(bad, "val/loss"))


def test_final_value_falls_back_to_summary(groups) -> None:
    r = groups[0].runs[0]
    keep = r.metrics
    r.metrics = []
    try:
        assert final_value(r, "val/loss") == r.summary["final_val_loss"]
        assert best_value(r, "val/loss") == r.summary["best_val_loss"]
    finally:
        r.metrics = keep


def test_extrap_reads_summary_and_keeps_na(groups) -> None:
    learned = run_extrap(groups[0].runs[0])
    assert learned[("nonoverlap", 2.0)] is None and learned[("sliding", 1.0)] is not None
    assert len(learned) == 8


def test_count_label_for_running_and_failed(tmp_path: Path) -> None:
    from experiments.compare import Group, read_run
    from tests.experiments.synthetic_runs import GROUPS, make_config, write_run

    live = read_run(write_run(tmp_path / "a", make_config(GROUPS[0], 0), [{"step": 0, "tokens": 0, "train/loss": 6.0}], None))
    dead = read_run(write_run(tmp_path / "b", make_config(GROUPS[0], 1), [], {"status": "failed"}))
    assert count_label(Group(values=(), runs=[live, dead])) == "1 running (+1 failed)"
