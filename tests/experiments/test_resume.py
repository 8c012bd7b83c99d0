"""Kill-and-resume: a `python -m experiments.train` process SIGKILLed after a checkpoint and restarted with
train.resume=true (the same command, run in this process: conftest's train_cli) logs exactly the losses of an
uninterrupted run (CPU, bit for bit), with no duplicated steps."""

from __future__ import annotations

import json

import pytest

from experiments.config.errors import ConfigError
from experiments.run.train import train

from .conftest import TINY, sigkill_at_checkpoint

STEPS, CKPT = 200, 30
RUN = [*TINY, f"train.steps={STEPS}", f"train.ckpt_interval={CKPT}", "train.eval_interval=100", "optim.lr=3e-3"]


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def comparable(run_dir):
    """(step, loss, lr, grad_norm) of train lines and (step, val/loss) of eval lines: everything but wall-clock."""
    out = []
    for r in rows(run_dir):
        if "train/loss" in r:
            out.append((r["step"], r["tokens"], r["train/loss"], r["lr"], r["grad_norm"], r["grad_norm/layer_1"]))
        else:
            out.append((r["step"], r["tokens"], r["val/loss"], r["val/bpb"]))
    return out


def test_sigkill_then_resume_matches_uninterrupted_run(make_cfg, cli_env, train_cli, cache_dir, tmp_path):
    reference = tmp_path / "reference"
    assert train(make_cfg(*RUN[len(TINY):], run_dir=reference))["status"] == "completed"

    run_dir = tmp_path / "killed"
    args = [*RUN, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"]
    sigkill_at_checkpoint(args, cli_env, run_dir / "checkpoints", "step_*/state.pt")
    killed_at = max(r["step"] for r in rows(run_dir))
    assert killed_at < STEPS
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "running"

    resumed = train_cli(*args, "train.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout + resumed.stderr

    got, want = comparable(run_dir), comparable(reference)
    steps = [r[0] for r in got if len(r) == 6]
    assert steps == list(range(1, STEPS + 1))  # every step once: nothing lost, nothing duplicated
    assert got == want
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == STEPS


def test_resume_without_checkpoint_starts_fresh(make_cfg, tmp_path):
    summary = train(make_cfg("train.resume=true"))
    assert summary["status"] == "completed" and summary["steps"] == 3


def test_resume_of_a_finished_run_changes_nothing(make_cfg, tmp_path):
    first = train(make_cfg("train.extrap=end", "train.eval_interval=1"))
    before = comparable(tmp_path / "run")
    summary = train(make_cfg("train.resume=true", "train.extrap=end", "train.eval_interval=1"))
    assert summary["steps"] == 3 and comparable(tmp_path / "run") == before
    # the summary's val values are rebuilt from metrics.jsonl (no eval ran after the resume)
    for key in ("final_val_loss", "best_val_loss", "final_val_bpb", "best_val_bpb", "final_train_loss", "extrap"):
        assert summary[key] == first[key], key
    assert first["best_val_loss"] == min(r[2] for r in before if len(r) == 4)  # 3 evals: best over all of them


def test_resume_with_a_different_model_is_a_config_error(make_cfg):
    train(make_cfg())
    with pytest.raises(ConfigError, match="holds a different model"):
        train(make_cfg("train.resume=true", "model.n_layers=3"))
