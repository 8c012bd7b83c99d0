"""The tuned sweep's pure parts: best-lr picking (tune_select), the declaration checks and the tuning horizon
(tune_spec), and tuning.json's round trip (tuning_record). Expected values are worked out by hand in each test."""

from __future__ import annotations

import json
import math

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from experiments.sweep.tune_select import loss_spread, next_point, pick_best, point_losses, run_loss
from experiments.sweep.tune_spec import TuneError, TuneSpec, horizon_override
from experiments.sweep.tuning_record import ArmResult, TuningRecord, TuningRecordError, TuningRun


def run(lr, loss, status="completed", seed=1000):
    return TuningRun(run_dir=f"x_{lr}_{seed}", arm=0, lr=lr, seed=seed, final_val_loss=loss, status=status)


# ---------------------------------------------------------------------------------------------- picking the best lr


def test_a_diverged_or_nan_run_counts_as_inf_and_a_failed_one_is_left_out():
    assert run_loss(run(1e-3, 3.0)) == 3.0
    assert run_loss(run(1e-2, None, "diverged")) == math.inf
    assert run_loss(run(1e-2, float("nan"))) == math.inf
    for status in ("failed", "interrupted", "running", "not started"):
        assert run_loss(run(1e-3, 3.0, status)) is None
    runs = [run(1e-3, 3.0, seed=1), run(1e-3, 3.2, seed=2), run(3e-3, 2.9, seed=1), run(3e-3, None, "diverged", seed=2),
            run(1e-2, 2.0, "failed")]
    losses = point_losses(runs)
    assert list(losses) == [1e-3, 3e-3]           # 1e-2 has no result: no point
    assert losses[1e-3] == pytest.approx(3.1)     # the mean over the seeds
    assert losses[3e-3] == math.inf               # one diverged seed makes the point +inf


def test_pick_best_interior_edges_and_ties():
    assert pick_best({1e-3: 3.2, 3e-3: 3.0, 1e-2: 3.1, 3e-2: 3.5}) == (3e-3, None)
    assert pick_best({1e-3: 3.2, 3e-3: 3.1, 1e-2: 3.05, 3e-2: 3.0}) == (3e-2, "high")
    assert pick_best({1e-3: 2.9, 3e-3: 3.1, 1e-2: 3.2, 3e-2: math.inf}) == (1e-3, "low")
    assert pick_best({1e-3: 3.0, 3e-3: 3.0, 1e-2: 3.5}) == (1e-3, "low")     # a tie goes to the smaller lr
    assert pick_best({1e-3: 3.3, 3e-3: 3.0, 1e-2: 3.0, 3e-2: 3.4}) == (3e-3, None)
    # the edges are those of the measured points: a diverged top point is measured (+inf), so the best is interior
    assert pick_best({1e-3: 3.2, 3e-3: 3.0, 1e-2: math.inf}) == (3e-3, None)
    assert pick_best({}) == (None, None)
    assert pick_best({1e-3: math.inf, 3e-3: math.inf}) == (None, "low")  # all diverged: look lower


def test_next_point_is_one_log_step_beyond_the_edge():
    grid = [3e-4, 1e-3, 3e-3, 1e-2]
    assert next_point(grid, "high") == pytest.approx(1e-2 * (1e-2 / 3e-3), rel=1e-3) and next_point(grid, "high") == 0.03333
    assert next_point(grid, "low") == 9e-05  # 3e-4 / (1e-3 / 3e-4)
    assert next_point([1e-3, 2e-3, 4e-3, 8e-3], "high") == 0.016
    assert next_point([1e-3, 2e-3, 4e-3, 8e-3, 0.016], "high") == 0.032  # the ratio of the new edge and its neighbour


def test_loss_spread_over_finite_points():
    assert loss_spread({1e-3: 3.5, 3e-3: 3.0, 1e-2: math.inf, 3e-2: 3.25}) == pytest.approx(0.5)
    assert loss_spread({1e-3: 3.5, 3e-3: math.inf}) is None


# ---------------------------------------------------------------------------------------------- the declaration


GOOD = dict(tune={"optim.lr": [1e-2, 3e-4, 1e-3, 3e-3]}, tune_seeds=[1000], seeds=[0, 1, 2], tune_fraction=0.25, widen=2)


def test_a_good_declaration_is_sorted():
    spec = TuneSpec.declared(**GOOD)
    assert spec.key == "optim.lr" and spec.grid == (3e-4, 1e-3, 3e-3, 1e-2)
    assert spec.tune_seeds == (1000,) and spec.seeds == (0, 1, 2) and spec.fraction == 0.25 and spec.widen == 2


@pytest.mark.parametrize("change, message", [
    ({"tune": {"optim.lr": [1e-3, 3e-3, 1e-2]}}, "hydra.sweeper.tune.optim.lr: a log grid needs at least 4 points"),
    ({"tune": {"optim.lr": [0.0, 1e-3, 3e-3, 1e-2]}}, "every point must be a number > 0"),
    ({"tune": {"optim.lr": [-1e-3, 1e-3, 3e-3, 1e-2]}}, "every point must be a number > 0"),
    ({"tune": {"optim.lr": [1e-3, 1e-3, 3e-3, 1e-2]}}, "a point is repeated"),
    ({"tune": {"optim.lr": ["a", 1e-3, 3e-3, 1e-2]}}, "must be a list of floats"),
    ({"tune": None}, "hydra.sweeper.tune: must name one key and its grid"),
    ({"tune": {"optim.lr": [1e-3, 3e-3, 1e-2, 3e-2], "optim.weight_decay": [0.1, 0.2, 0.3, 0.4]}}, "got 2 keys"),
    ({"seeds": [2, 1000]}, "hydra.sweeper.seeds: the final runs need fresh seeds, but 1000 is also in tune_seeds"),
    ({"seeds": []}, "hydra.sweeper.seeds: needs at least one seed"),
    ({"tune_seeds": [1, 1]}, "hydra.sweeper.tune_seeds: a seed is repeated"),
    ({"seeds": 3}, "hydra.sweeper.seeds: must be a list of ints"),
    ({"tune_fraction": 0}, "hydra.sweeper.tune_fraction: must be a number in (0, 1]"),
    ({"tune_fraction": 1.5}, "hydra.sweeper.tune_fraction: must be a number in (0, 1]"),
    ({"widen": -1}, "hydra.sweeper.widen: must be an integer >= 0"),
    ({"widen": 1.5}, "hydra.sweeper.widen: must be an integer >= 0"),
])
def test_bad_declarations_are_one_line(change, message):
    with pytest.raises(TuneError) as e:
        TuneSpec.declared(**{**GOOD, **change})
    assert message in str(e.value) and "\n" not in str(e.value)


def parse(*lines):
    return OverridesParser.create().parse_overrides(list(lines))


def test_arms_are_the_cartesian_product_and_the_rest_is_fixed():
    spec = TuneSpec.declared(**GOOD)
    arms, fixed = spec.split(parse("model/pos=learned,rope", "model.n_layers=1,2", "train.steps=12", "logger=disabled"))
    assert arms == [["model/pos=learned", "model.n_layers=1"], ["model/pos=learned", "model.n_layers=2"],
                    ["model/pos=rope", "model.n_layers=1"], ["model/pos=rope", "model.n_layers=2"]]
    assert fixed == [("train.steps", "train.steps=12"), ("logger", "logger=disabled")]
    assert spec.split(parse("train.steps=12")) == ([[]], [("train.steps", "train.steps=12")])  # one arm


@pytest.mark.parametrize("line, key", [("seed=0,1", "seed"), ("seed=3", "seed"), ("optim.lr=1e-3", "optim.lr"),
                                       ("optim.lr=1e-3,1e-2", "optim.lr")])
def test_seed_or_the_tuned_key_among_the_overrides_is_refused(line, key):
    with pytest.raises(TuneError) as e:
        TuneSpec.declared(**GOOD).split(parse("model/pos=learned,rope", line))
    assert str(e.value).startswith(f"{key}: set per run by the tuned sweeper") and line in str(e.value)


def test_the_horizon_scales_the_budget_the_run_holds():
    assert horizon_override({"flops": None, "tokens": None, "steps": 200}, 0.25) == ("train.steps", 200, 50)
    assert horizon_override({"flops": None, "tokens": 400, "steps": 200}, 0.1) == ("train.tokens", 400, 40)
    assert horizon_override({"flops": 1e12, "tokens": 400, "steps": 200}, 0.5) == ("train.flops", 1e12, 5e11)
    assert horizon_override({"flops": None, "tokens": None, "steps": 3}, 0.25) == ("train.steps", 3, 1)  # >= 1
    assert horizon_override({"flops": None, "tokens": None, "steps": 10}, 0.25) == ("train.steps", 10, 3)  # rounded up


# ---------------------------------------------------------------------------------------------- tuning.json


def test_the_record_round_trips_through_its_file(tmp_path):
    rec = TuningRecord(key="optim.lr", grid=[1e-3, 3e-3, 1e-2, 3e-2], tune_seeds=[1000], seeds=[0, 1], fraction=0.25,
                       widen=2, arms=[{"model/pos": "learned"}], horizon=[{"key": "train.steps", "full": 8, "tuning": 2}],
                       phase="final", runs=[run(1e-3, 3.0), run(3e-2, float("nan"), "diverged")],
                       results=[ArmResult(best_lr=1e-3, edge="low", widened=[3.333e-4], loss_spread=None, note="")],
                       finals=[TuningRun("9_x", 0, 1e-3, 0)])
    rec.write(tmp_path)
    data = json.loads((tmp_path / "tuning.json").read_text())  # strict JSON: the NaN is null
    assert data["version"] == 1 and data["runs"][1]["final_val_loss"] is None and data["results"][0]["edge"] == "low"
    back = TuningRecord.read(tmp_path)
    assert back.runs[1].final_val_loss is None and back.runs[1].status == "diverged"
    back.runs[1].final_val_loss = rec.runs[1].final_val_loss = None
    assert back == rec and not back.results[0].interior and back.arm_label(0) == "model/pos=learned"
    assert TuningRecord.read(tmp_path / "none") is None


@pytest.mark.parametrize("text", ["{", "[]", '{"version": 1}', '{"version": 2, "phase": "done"}'])
def test_a_record_that_is_not_one_is_one_line(tmp_path, text):
    (tmp_path / "tuning.json").write_text(text)
    with pytest.raises(TuningRecordError) as e:
        TuningRecord.read(tmp_path)
    assert str(tmp_path / "tuning.json") in str(e.value) and "\n" not in str(e.value)
