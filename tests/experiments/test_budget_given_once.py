"""A budget is given once, and ARCHLAB_MAX_STEPS caps every run (experiments/run/budget.py).

* A budget key on the command line that a higher one would override (train.flops > train.tokens > train.steps),
  set by an experiment or by the same command, is refused: one line naming both keys, exit 2, nothing written.
  Before, `experiment=finding_rope_vs_learned_v2 train.steps=20` trained the experiment's 1954 steps under a
  progress label reading steps=20. A null higher key (`train.tokens=null train.steps=20`) makes the lower one count.
* ARCHLAB_MAX_STEPS=N stops every run after min(N, its budget) steps and logs that it did; a value that is not an
  integer >= 1 is one line, exit 2.
The expected precedence is the table below, written out here, not read from the code.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from experiments.config.errors import ConfigError
from experiments.config.precheck import precheck
from experiments.run.budget import Budget, check_budget_given_once

from .conftest import TINY

# (what the config sets, what the command gives) -> the key the message names as winning, or None (accepted)
CASES = [
    ({"tokens": 4_000_000}, {"train.steps": [20]}, "train.tokens=4000000"),
    ({"flops": 1e12}, {"train.steps": [20]}, "train.flops=1000000000000.0"),
    ({"flops": 1e12}, {"train.tokens": [5000]}, "train.flops=1000000000000.0"),
    ({"tokens": 4_000_000}, {"train.steps": [10, 20]}, "train.tokens=4000000"),  # a sweep's values
    ({"tokens": 4_000_000}, {"train.steps": [None, 20]}, "train.tokens=4000000"),
    ({"tokens": None}, {"train.steps": [20]}, None),
    ({"tokens": 4_000_000}, {"train.tokens": [None], "train.steps": [20]}, None),  # null: the config's tokens go
    ({"tokens": 4_000_000}, {"train.tokens": [1000]}, None),  # the same key: the command's value wins, as always
    ({"tokens": 4_000_000}, {"train.flops": [1e12]}, None),  # a higher budget than the config's wins, as documented
    ({"tokens": 4_000_000}, {"train.steps": [None]}, None),  # null gives no budget
    ({}, {"train.steps": [20], "seed": [1]}, None),
]


@pytest.mark.parametrize("config,given,winner", CASES)
def test_a_budget_that_would_be_ignored_is_refused(config, given, winner):
    train = {"flops": None, "tokens": None, "steps": 200, **config}
    for key, values in given.items():  # the composed node holds the command's values (a sweep's first)
        if key.startswith("train."):
            train[key[6:]] = values[0]
    if winner is None:
        check_budget_given_once(given.items(), train, "x")
        return
    with pytest.raises(ConfigError) as e:
        check_budget_given_once(given.items(), train, "x")
    msg = str(e.value)
    lower = next(k for k in given if k.startswith("train."))
    assert "\n" not in msg and winner in msg and msg.startswith(f"{lower}=") and f"{winner.split('=')[0]}=null" in msg


def test_the_command_names_both_budgets_and_writes_nothing(train_cli, tmp_path):
    run = tmp_path / "run"
    r = train_cli(*TINY, "experiment=pos_encodings", "train.steps=20", f"hydra.run.dir={run}")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "train.steps=20" in lines[0] and "train.tokens=2000000" in lines[0], r.stderr
    assert "experiment=pos_encodings" in lines[0]
    assert not run.exists()


def test_the_same_in_a_sweep_is_refused_before_any_job(tmp_path):
    with pytest.raises(ConfigError, match=r"^train\.steps=3: experiment=pos_encodings sets train\.tokens=2000000"):
        precheck(["-m", "experiment=pos_encodings", "train.steps=3,4", f"hydra.sweep.dir={tmp_path / 's'}"])
    precheck(["-m", "experiment=pos_encodings", "train.tokens=null", "train.steps=3,4",
              f"hydra.sweep.dir={tmp_path / 's'}"])  # accepted: one budget
    assert not (tmp_path / "s").exists()


# -- ARCHLAB_MAX_STEPS ------------------------------------------------------------------------------------------


def _plan(**train) -> Budget:
    tc = SimpleNamespace(**{"flops": None, "tokens": None, "steps": 200, "batch_size": 16, "grad_accum": 1, **train})
    return Budget.plan(tc, flops_per_token=1.0, tokens_per_sequence=64, world_size=1)


# (ARCHLAB_MAX_STEPS, train node, steps of the budget alone, steps trained); 4e6 tokens / (16 x 64) = 3906.25 -> 3907
@pytest.mark.parametrize("cap,train,budget,steps", [
    (None, {"steps": 200}, 200, 200), ("3", {"steps": 200}, 200, 3), ("500", {"steps": 200}, 200, 200),
    ("3", {"tokens": 4_000_000}, 3907, 3), (None, {"tokens": 4_000_000}, 3907, 3907),
    ("3", {"flops": 1e9}, 976_563, 3), ("1", {"steps": 1}, 1, 1),
])
def test_the_cap_is_the_smaller_of_it_and_the_budget(monkeypatch, caplog, cap, train, budget, steps):
    monkeypatch.delenv("ARCHLAB_MAX_STEPS", raising=False)
    assert _plan(**train).total_steps == budget
    if cap is not None:
        monkeypatch.setenv("ARCHLAB_MAX_STEPS", cap)
    caplog.clear()
    b = _plan(**train)
    assert b.total_steps == steps and b.held == next(iter(train))
    assert (f"caps this run at {steps} of its {budget} steps" in caplog.text) == (steps < budget), caplog.text


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "2.5", "1e3", "²"])
def test_a_bad_cap_is_one_line_before_anything_is_written(train_cli, monkeypatch, tmp_path, bad):
    monkeypatch.setenv("ARCHLAB_MAX_STEPS", bad)
    run = tmp_path / "run"
    r = train_cli(*TINY, "train.steps=2", f"hydra.run.dir={run}")
    expected = f"config error: ARCHLAB_MAX_STEPS (environment): must be an integer >= 1, got {bad!r}"
    assert r.returncode == 2 and r.stderr.strip() == expected, r.stderr
    assert not run.exists()


def test_a_capped_run_trains_that_many_steps_and_says_so(train_cli, monkeypatch, tmp_path):
    monkeypatch.setenv("ARCHLAB_MAX_STEPS", "3")
    run = tmp_path / "run"
    tiny = [a for a in TINY if not a.startswith("train.steps=")]
    r = train_cli(*tiny, "train.tokens=100000", "train.eval_batches=1", "train.extrap=never", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 3, summary
    assert "ARCHLAB_MAX_STEPS=3 caps this run at 3 of its" in r.stderr + (run / "train.log").read_text()
