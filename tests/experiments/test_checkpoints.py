"""Checkpoints: safetensors weights beside the training state, step dirs with keep_last_k, best by val/loss, and
load_run picking a run back up."""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch

from experiments import load_run
from experiments.config.errors import ConfigError
from experiments.rundir.checkpoint import CheckpointWriteError, Checkpoints, load_weights, save_weights
from experiments.run.train import train
from experiments.use.load import RunLoadError

from .small_fs import remount, temp_leftovers, tmpfs


def _weights(path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # reads without pickle

    return load_file(str(path))


def test_keep_last_k_best_and_load_run(make_cfg, tmp_path):
    run = tmp_path / "run"
    s = train(make_cfg("train.steps=6", "train.eval_interval=1", "train.ckpt_interval=1", "train.keep_last_k=6"))
    assert s["status"] == "completed"
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("step_*")) == [f"step_{i:08d}" for i in range(1, 7)]
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "val/loss" in line]
    best_step = min(evals, key=lambda r: r["val/loss"])["step"]
    best = _weights(ckpts / "best.safetensors")
    at_best = _weights(ckpts / f"step_{best_step:08d}" / "model.safetensors")
    assert best.keys() == at_best.keys() and all(torch.equal(best[k], at_best[k]) for k in best)
    assert "lm_head.weight" not in best  # tied to wte.weight: stored once

    model, tok, cfg = load_run(run)  # best
    assert all(torch.equal(model.state_dict()[k], best[k]) for k in best)
    assert not model.training and cfg["model"]["d_model"] == 32 and tok.vocab_size == cfg["model"]["vocab_size"]
    last, _, _ = load_run(run, which="last")
    final = _weights(ckpts / "step_00000006" / "model.safetensors")
    assert all(torch.equal(last.state_dict()[k], final[k]) for k in final)
    # the loaded model reproduces the run's final val/loss on the same val windows
    from experiments.config.check import validate
    from experiments.run.eval_lm import evaluate_model
    from experiments.data.cache import prepare_data

    rc = validate(make_cfg())
    data = prepare_data(rc.data, rc.to_dict()["tokenizer"], rc.data.cache_dir).data
    got = evaluate_model(last, data.val, n_ctx=32, batch_size=4, max_batches=2, bytes_per_token=data.bytes_per_token, device="cpu")
    assert got["val/loss"] == pytest.approx(s["final_val_loss"], abs=1e-6)


def test_keep_last_k_prunes(make_cfg, tmp_path):
    train(make_cfg("train.steps=5", "train.ckpt_interval=1", "train.keep_last_k=2"))
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step_*")) == ["step_00000004", "step_00000005"]


def test_load_run_errors_are_one_line(make_cfg, tmp_path):
    with pytest.raises(RunLoadError, match="no config.yaml"):
        load_run(tmp_path)
    train(make_cfg())
    with pytest.raises(RunLoadError, match=r"no checkpoint at step 2 \(steps kept: 3\)"):
        load_run(tmp_path / "run", which=2)
    with pytest.raises(RunLoadError, match="choose from best, last"):
        load_run(tmp_path / "run", which="first")


# ------------------------------------------------------------------------------------------ a full or read-only disk


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(256, 256)  # 257 KB of weights: one step dir fits in 400 KB, two do not


def _state(step: int) -> dict:
    return {"step": step, "tokens": step, "elapsed": 0.0, "optimizer": {}, "rng": [], "world_size": 1, "model_config": {}}


def _check(e: pytest.ExceptionInfo, path, reason: str) -> None:
    msg = str(e.value)
    assert isinstance(e.value, ConfigError) and "\n" not in msg and str(path) in msg and reason in msg, msg


def _whole(ckpts: Checkpoints) -> list[int]:
    """Steps of the step dirs a resume would read, each loadable; no temp dir left beside them."""
    assert temp_leftovers(ckpts.dir) == []
    steps = []
    for d in ckpts.step_dirs():
        steps.append(ckpts.load_state(d)["step"])
        load_weights(_net(), d / "model.safetensors")
    return steps


def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_last_checkpoint(tmp_path):
    with tmpfs(tmp_path / "disk", "size=400k") as disk:
        ckpts = Checkpoints(disk / "checkpoints")
        ckpts.save(1, _net(), _state(1), {})
        with pytest.raises(CheckpointWriteError) as e:
            ckpts.save(2, _net(), _state(2), {})  # needs a second step dir before the first goes
        _check(e, disk / "checkpoints" / "step_00000002", "No space left on device")
        assert "train.resume=true" in str(e.value)
        assert _whole(ckpts) == [1] and ckpts.latest().name == "step_00000001"
        with pytest.raises(CheckpointWriteError) as e:
            save_weights(ckpts.best, torch.nn.Linear(512, 512), {})  # 1 MB of best weights
        _check(e, ckpts.best, "No space left on device")
        assert not ckpts.best.exists() and _whole(ckpts) == [1]
        remount(disk, "rw,size=2m")  # space freed: the next save lands and prunes the old one
        ckpts.save(2, _net(), _state(2), {})
        assert _whole(ckpts) == [2]


@pytest.mark.parametrize("what", ["step", "best"])
def test_a_failed_checkpoint_write_is_one_line(tmp_path, monkeypatch, what):
    # the same fault without a small filesystem: the atomic write at its place of use fails with ENOSPC
    import experiments.rundir.checkpoint as checkpoint

    ckpts = Checkpoints(tmp_path / "checkpoints")
    ckpts.save(1, _net(), _state(1), {})

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint, "atomic_write", full)
    with pytest.raises(CheckpointWriteError) as e:
        if what == "step":
            ckpts.save(2, _net(), _state(2), {})
        else:
            save_weights(ckpts.best, _net(), {})
    _check(e, ckpts.dir / ("step_00000002" if what == "step" else "best.safetensors"), "No space left on device")
    assert _whole(ckpts) == [1]


def test_a_read_only_checkpoint_dir_is_one_line(tmp_path):
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        ckpts = Checkpoints(disk / "checkpoints")
        ckpts.save(1, _net(), _state(1), {})
        remount(disk, "ro")
        for save in (lambda: ckpts.save(2, _net(), _state(2), {}), lambda: save_weights(ckpts.best, _net(), {})):
            with pytest.raises(CheckpointWriteError) as e:
                save()
            _check(e, ckpts.dir, "Read-only file system")
        assert _whole(ckpts) == [1]


def test_a_run_that_fills_its_disk_fails_in_one_line_and_resumes_after(make_cfg, tmp_path):
    # TINY: a step dir is ~0.76 MB, best.safetensors ~0.24 MB. 1.6 MB holds the step-3 checkpoint and the best
    # weights, but not the step-6 checkpoint beside them
    with tmpfs(tmp_path / "disk", "size=1600k") as disk:
        run = disk / "run"
        cfg = ("train.steps=6", "train.eval_interval=3", "train.ckpt_interval=3")
        with pytest.raises(ConfigError) as e:
            train(make_cfg(*cfg, run_dir=run))
        _check(e, run / "checkpoints" / "step_00000006", "No space left on device")
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "failed" and "No space left on device" in summary["error"]
        assert [p.name for p in Checkpoints(run / "checkpoints").step_dirs()] == ["step_00000003"]
        remount(disk, "rw,size=4m")
        resumed = train(make_cfg(*cfg, "train.resume=true", run_dir=run))
        assert resumed["status"] == "completed" and resumed["steps"] == 6
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()
                 if "train/loss" in line]
        assert steps == [1, 2, 3, 4, 5, 6]
