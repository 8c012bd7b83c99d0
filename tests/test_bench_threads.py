"""bench/bench_threads.py's arithmetic and input checks (no training, no timing): steady-state steps/s from
metrics.jsonl rows, the ratio to the best setting per (model, load), the verdict on the default, bad input."""

from __future__ import annotations

import pytest

from bench import bench_threads as bt


def cell(model, load, setting, *rates, threads=1):
    return bt.Cell(model, load, setting, [bt.Run(r, 10.0, 0.5, threads) for r in rates])


def test_steady_rate_skips_the_warmup_steps():
    rows = [{"step": 1, "time": 0.0}, {"step": 2, "time": 5.0}, {"step": 3, "time": 5.5}, {"step": 4, "time": 6.0},
            {"step": 5, "time": 6.5}]
    assert bt.steady_rate(rows, warmup=2) == (2.0, 3)  # steps 2 -> 5: 3 steps in 1.5 s; step 1's 5 s not counted
    assert bt.steady_rate(rows[:2], warmup=2) is None  # nothing after the warm-up yet
    assert bt.steady_rate(list(reversed(rows)), warmup=0) == (4 / 6.5, 4)


def test_summarize_divides_by_the_best_setting_of_each_model_and_load():
    rows = bt.summarize([cell("tiny", "idle", "1", 10, 12, 11), cell("tiny", "idle", "2", 8, 13, 9),
                         cell("tiny", "loaded", "1", 4, 5, 6), cell("tiny", "loaded", "2", 1, 1, 1)])
    by = {(r["load"], r["setting"]): r for r in rows}
    assert by["idle", "1"]["ratio"] == 1.0 and by["idle", "2"]["ratio"] == pytest.approx(9 / 11)
    assert by["idle", "2"]["ratio_best_round"] == 1.0 and by["idle", "1"]["ratio_best_round"] == pytest.approx(12 / 13)
    assert by["loaded", "2"]["ratio"] == pytest.approx(1 / 5) and by["loaded", "1"]["median"] == 5


def test_verdict_counts_cells_within_target_and_cells_on_the_best_thread_count():
    rows = bt.summarize([cell("small", "idle", "2", 10, threads=2), cell("small", "idle", "null", 9.2, threads=2),
                         cell("tiny", "loaded", "1", 10), cell("tiny", "loaded", "null", 8.5, threads=2)])
    assert bt.verdict(rows) == ("train.num_threads=null: within 10% of the best setting in 1/2 cells (worst "
                                "tiny/loaded at 0.85); the best setting's thread count in 1/2 cells")
    assert bt.verdict(rows, "3") == "train.num_threads=3 not measured"


def test_replicates_of_the_best_thread_count_are_marked_as_such():
    """null that ran 1 thread where `1` was best is the same configuration: its lower median is noise."""
    rows = bt.summarize([cell("tiny", "idle", "1", 10, 12), cell("tiny", "idle", "null", 6, 7),
                         cell("tiny", "idle", "2", 1, threads=2)])
    by = {r["setting"]: r for r in rows}
    assert by["null"]["same_threads_as_best"] and by["null"]["best_setting"] == "1"
    assert not by["2"]["same_threads_as_best"]
    assert bt.verdict(rows).endswith("the best setting's thread count in 1/1 cells")


def test_table_marks_the_best_setting():
    text = bt.table(bt.summarize([cell("tiny", "idle", "1", 10, 20, 30), cell("tiny", "idle", "2", 5, threads=2)]))
    assert "| tiny | idle | 1 | 1 | 20.00 [10.00, 30.00] | **1.00** | 1.00 | 10 | 0.50 |" in text
    assert "| tiny | idle | 2 | 2 | 5.00 [5.00, 5.00] | 0.25 | 0.17 | 10 | 0.50 |" in text


@pytest.mark.parametrize("argv, message", [
    (["--models", "tiny,huge"], "--models: unknown preset huge"),
    (["--settings", "1,0"], "--settings: '0' is not a positive integer or null"),
    (["--settings", "1,auto"], "--settings: 'auto' is not a positive integer or null"),
    (["--settings", "2,2"], "--settings: 2 given twice"),
    (["--loads", "busy"], "--loads: 'busy'"),
    (["--rounds", "0"], "--rounds: 0 is too small"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_runs(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(bt, "run_bench", lambda *a: pytest.fail("ran despite bad input"))
    assert bt.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bench_threads: error: {message}") and err.count("\n") == 1


def test_isolate_that_the_system_refuses_is_one_line(capsys, monkeypatch):
    def refused():
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(bt.os, "setsid", refused)
    monkeypatch.setattr(bt, "run_bench", lambda *a: pytest.fail("ran without isolation"))
    assert bt.main(["--isolate", "-19"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bench_threads: error: --isolate: [Errno 1] Operation not permitted") and err.count("\n") == 1


def test_medium_is_the_benchs_own_shape_and_presets_pass_through():
    """medium is not a preset (arch/presets.py is hashed by a registered finding): model=small at d 256, 6 x 8."""
    assert bt.model_overrides("medium") == ["model=small", "model.d_model=256", "model.n_layers=6",
                                                       "model.n_heads=8"]
    assert bt.model_overrides("tiny") == ["model=tiny"]
