"""train.dtype=fp16: fp16 autocast with a gradient scaler (experiments/run/precision.py), on the CPU where torch
allows fp16 autocast there. The scaler's state is in the checkpoint, so an interrupted fp16 run resumes exactly."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch

from experiments.run import schedule
from experiments.run.interrupt import RunInterrupted
from experiments.run.precision import Precision
from experiments.run.train import train


def _cpu_fp16_autocast() -> bool:
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    except (RuntimeError, ValueError):
        return False


pytestmark = pytest.mark.skipif(not _cpu_fp16_autocast(), reason=f"torch {torch.__version__} has no fp16 autocast "
                                                                  f"on the CPU")
RUN = ["train.dtype=fp16", "train.steps=12", "train.eval_interval=4", "train.ckpt_interval=100", "optim.lr=3e-3"]


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def comparable(run_dir):
    return [tuple(v for k, v in r.items() if k not in ("time", "tokens_per_s", "mfu")) for r in rows(run_dir)]


def state(run_dir, step):
    return torch.load(run_dir / "checkpoints" / f"step_{step:08d}" / "state.pt", weights_only=False)


def test_precision_fp16_scales_and_skips_an_overflow():
    p = Precision(torch.device("cpu"), "fp16")
    with p.autocast:
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([w], lr=1.0)
    p.backward((w * 1e35).sum())  # x 65536 overflows fp32: inf gradients
    p.unscale(opt)
    p.step(opt)
    assert torch.equal(w.detach(), torch.ones(3))  # the update was skipped ...
    assert p.state_dict()["scale"] == 65536.0 / 2  # ... and the scale halved
    assert Precision(torch.device("cpu"), "fp32").state_dict() == {}


def test_an_fp16_run_trains_in_half_precision(make_cfg, tmp_path):
    fp16 = train(make_cfg(*RUN, "train.ckpt_interval=12", run_dir=tmp_path / "fp16"))
    fp32 = train(make_cfg(*RUN[1:], "train.ckpt_interval=12", run_dir=tmp_path / "fp32"))
    assert fp16["status"] == "completed" and fp16["steps"] == 12
    losses = [r["train/loss"] for r in rows(tmp_path / "fp16") if "train/loss" in r]
    assert all(map(lambda v: v == v and abs(v) < 100, losses))
    assert losses != [r["train/loss"] for r in rows(tmp_path / "fp32") if "train/loss" in r]  # not silently fp32
    assert "scale" in state(tmp_path / "fp16", 12)["grad_scaler"]
    assert "grad_scaler" not in state(tmp_path / "fp32", 12)  # an fp32 checkpoint is as it was


def test_an_interrupted_fp16_run_resumes_exactly(make_cfg, tmp_path, monkeypatch):
    # a first scale of 2^24 overflows the tiny model's fp16 backward: the scaler halves it over the first steps
    real_scaler = torch.amp.GradScaler
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device: real_scaler(device, init_scale=2.0 ** 24))
    reference = tmp_path / "reference"
    train(make_cfg(*RUN, run_dir=reference))

    real = schedule.lr_at

    def lr_at(step, **kw):
        if step == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return real(step, **kw)

    run = tmp_path / "run"
    monkeypatch.setattr(schedule, "lr_at", lr_at)
    with pytest.raises(RunInterrupted, match="interrupted at step 6"):
        train(make_cfg(*RUN, run_dir=run))
    monkeypatch.setattr(schedule, "lr_at", real)
    # the scale came down before the stop: a resume that forgot it would skip steps the reference took
    assert state(run, 6)["grad_scaler"]["scale"] < 2.0 ** 24
    assert train(make_cfg(*RUN, "train.resume=true", run_dir=run))["status"] == "completed"
    assert comparable(run) == comparable(reference)
