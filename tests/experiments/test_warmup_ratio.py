"""schedule.warmup_ratio: warmup as a share of the run's optimizer steps (HF Trainer's warmup_ratio, litgpt's
lr_warmup_fraction). Checked against the schedule's closed form written out here, not against lr_at itself; null
keeps the lr of schedule.warmup_steps exactly; a ratio outside [0, 1) is one config-error line."""

from __future__ import annotations

import json
import math

import pytest

from experiments.config.compose import compose_config
from experiments.run.schedule import lr_at
from experiments.run.train import train


def closed_form(step: int, *, base: float, total: int, warmup: int, min_ratio: float) -> float:
    """Linear warmup from base/warmup, then cosine to min_ratio * base at the last update (by hand)."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup + 1) / (total - warmup)
    return base * (min_ratio + (1 - min_ratio) * (1 + math.cos(math.pi * progress)) / 2)


def test_ratio_of_the_total_steps_is_the_warmup():
    """0.05 of 200 updates = 10 warmup updates: lr 0.1, 0.2, ..., 1.0 · base, then cosine over the other 190."""
    kw = dict(name="cosine", base_lr=3e-3, total_steps=200, min_lr_ratio=0.1)
    got = [lr_at(s, warmup_ratio=0.05, warmup_steps=77, **kw) for s in range(200)]  # the ratio wins over 77
    want = [closed_form(s, base=3e-3, total=200, warmup=10, min_ratio=0.1) for s in range(200)]
    assert got == pytest.approx(want, rel=1e-12)
    assert got[:10] == pytest.approx([3e-3 * k / 10 for k in range(1, 11)], rel=1e-12)
    assert got[-1] == pytest.approx(3e-4, rel=1e-12)


@pytest.mark.parametrize("total,ratio,warmup", [(50, 0.05, 2), (1000, 0.05, 50), (7, 0.3, 2), (10, 0.0, 0)])
def test_same_share_at_every_budget(total, ratio, warmup):
    """warmup = round(ratio * total) (2.5 -> 2, Python's round); ratio 0 is no warmup (the first lr is the peak)."""
    kw = dict(name="linear", base_lr=1.0, total_steps=total, min_lr_ratio=0.0)
    assert [lr_at(s, warmup_ratio=ratio, **kw) for s in range(total)] == [lr_at(s, warmup_steps=warmup, **kw)
                                                                          for s in range(total)]
    if warmup:
        assert lr_at(warmup - 1, warmup_ratio=ratio, **kw) == 1.0 and lr_at(0, warmup_ratio=ratio, **kw) == 1 / warmup


@pytest.mark.parametrize("name", ["cosine", "linear", "constant"])
def test_null_keeps_the_warmup_steps_lr_exactly(name):
    kw = dict(name=name, base_lr=2e-3, total_steps=120, warmup_steps=20, min_lr_ratio=0.1)
    assert [lr_at(s, warmup_ratio=None, **kw) for s in range(120)] == [lr_at(s, **kw) for s in range(120)]
    assert lr_at(4, warmup_ratio=None, **kw) == 2e-3 * 5 / 20


def test_default_is_null_in_every_schedule():
    for name in ("cosine", "linear", "constant"):
        assert compose_config([f"schedule={name}"]).schedule.warmup_ratio is None


def _logged_lrs(run_dir) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["lr"] for r in rows if "train/loss" in r]


def test_a_run_warms_up_over_its_share(make_cfg, tmp_path):
    """train.steps=20, warmup_ratio=0.25: 5 warmup updates, whatever warmup_steps says; null: warmup_steps (3)."""
    common = ("train.steps=20", "train.eval_interval=20", "train.ckpt_interval=20", "schedule.warmup_steps=3",
              "optim.lr=1e-3", "schedule.min_lr_ratio=0.1")
    train(make_cfg(*common, "schedule.warmup_ratio=0.25", run_dir=tmp_path / "ratio"))
    train(make_cfg(*common, run_dir=tmp_path / "steps"))
    for run, warmup in (("ratio", 5), ("steps", 3)):
        want = [closed_form(s, base=1e-3, total=20, warmup=warmup, min_ratio=0.1) for s in range(20)]
        assert _logged_lrs(tmp_path / run) == pytest.approx(want, rel=1e-12), run


@pytest.mark.parametrize("value,why", [("1", "in [0, 1) or null, got 1"), ("-0.1", "in [0, 1) or null, got -0.1"),
                                       ("abc", "in [0, 1) or null, got 'abc'")])
def test_cli_ratio_outside_0_1_is_one_line(value, why, train_cli, tmp_path):
    run = tmp_path / "run"
    proc = train_cli(f"schedule.warmup_ratio={value}", f"hydra.run.dir={run}")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("config error: schedule.warmup_ratio: must be "), proc.stderr
    assert why in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and not run.exists()
