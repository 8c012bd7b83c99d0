"""The parts of the CUDA path a CPU can check (not marked `gpu`: they run in the default suite).

* The manual attention kernel under autocast: its hand-written backward runs outside autocast, where rope's fp32
  q / k (and CUDA autocast's fp32 softmax) met bf16 / fp16 values ("expected scalar type Float but found
  BFloat16"); it now casts q, k, v to the autocast dtype. Checked under the CPU's bf16 autocast, against the sdpa
  kernel under the same autocast.
* One torchrun rank runs the DDP path (a process group of one, DistributedDataParallel): on a 1-GPU box that is
  the only way NCCL runs. Here with gloo; tests/gpu/test_trainer_cuda.py runs it with NCCL.
* Parallel sweep jobs under hydra/launcher=joblib_2 spread over the GPUs: a real two-worker joblib sweep with
  four fake GPUs (train.device=auto; torch.cuda patched around pick_device in each worker by a sitecustomize on
  PYTHONPATH; the job records the device pick_device chose, then trains on the CPU).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model

from ..experiments.conftest import PYTHON, REPO, TINY, train_losses


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_manual_attention_under_bf16_autocast(pos):
    losses, grads = {}, {}
    for kernel in ("manual", "sdpa"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(vocab_size=64, n_ctx=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                        pos=PosConfig(kind=pos), attention=kernel))
        ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model.loss(ids[:, :-1], ids[:, 1:])
        loss.backward()  # failed here for rope before: the backward met fp32 q / k and bf16 v
        losses[kernel], grads[kernel] = loss.item(), model.blocks[0].attn.c_attn.weight.grad
    assert losses["manual"] == pytest.approx(losses["sdpa"], rel=1e-2)
    rel = (grads["manual"] - grads["sdpa"]).norm() / grads["sdpa"].norm()
    assert rel < 5e-2, rel  # bf16 rounding of two kernels; a wrong backward is off by O(1)


def torchrun_cmd(nproc: int = 1) -> list[str]:
    torchrun = Path(PYTHON).with_name("torchrun")
    return [str(torchrun if torchrun.exists() else "torchrun"), "--standalone", "--nproc_per_node", str(nproc)]


def run_env(cache_dir: Path) -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "ARCHLAB_CACHE": str(cache_dir), "ARCHLAB_PEAK_FLOPS": "1e12", "OMP_NUM_THREADS": "1"}


def one_rank_ddp(tmp_path: Path, device: str) -> tuple[list, list, str]:
    """(losses of a 1-rank torchrun run, losses of the same run in this process, the torchrun run's train.log)."""
    from experiments.config.compose import compose_config
    from experiments.run.train import train

    cache = tmp_path / "cache"
    common = [*TINY, "train.steps=6", "train.eval_interval=6", "train.ckpt_interval=6", f"train.device={device}",
              "train.dtype=fp32", f"data.cache_dir={cache}"]
    proc = subprocess.run([*torchrun_cmd(1), "-m", "experiments.train", *common, f"hydra.run.dir={tmp_path / 'ddp'}"],
                          cwd=REPO, env=run_env(cache), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    train(compose_config([*common, f"train.run_dir={tmp_path / 'plain'}"]))
    log = (tmp_path / "ddp" / "train.log").read_text()
    return train_losses(tmp_path / "ddp"), train_losses(tmp_path / "plain"), log


def test_one_torchrun_rank_runs_the_ddp_path(tmp_path):
    ddp, plain, log = one_rank_ddp(tmp_path, "cpu")
    assert "DDP: 1 rank(s), backend gloo" in log, log[-2000:]
    assert ddp == plain  # one rank: the all-reduce of its own gradients changes nothing


SITE = """
import json, os, sys, torch
from experiments.run import distributed
_pick = distributed.pick_device

def pick_device(pref, info, *, parallel=False):
    real = torch.cuda.is_available, torch.cuda.device_count
    torch.cuda.is_available, torch.cuda.device_count = (lambda: True), (lambda: 4)
    try:
        chosen = _pick(pref, info, parallel=parallel)
    finally:
        torch.cuda.is_available, torch.cuda.device_count = real
    with open(os.environ["ARCHLAB_TEST_PICKS"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "device": str(chosen), "parallel": parallel}) + "\\n")
    return torch.device("cpu")  # the fake GPUs cannot train: the job runs on the CPU

distributed.pick_device = pick_device
"""


@pytest.mark.slow  # ~45 s: a real joblib sweep of 4 jobs
def test_joblib_sweep_jobs_spread_over_fake_gpus(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    picks = tmp_path / "picks.jsonl"
    env = {**run_env(tmp_path / "cache"), "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "ARCHLAB_TEST_PICKS": str(picks),
           "TMPDIR": str(tmp_path)}  # the slot lock files (distributed.gpu_slot) go in this test's own dir
    proc = subprocess.run(
        [PYTHON, "-m", "experiments.train", "-m", "hydra/launcher=joblib_2", *TINY, "train.steps=2",
         "train.eval_interval=2", "train.ckpt_interval=2", "train.device=auto", f"data.cache_dir={tmp_path / 'cache'}",
         "seed=0,1,2,3", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    rows = [json.loads(line) for line in picks.read_text().splitlines()]
    assert len(rows) == 4 and all(r["parallel"] for r in rows), rows  # every job knew it ran beside another
    by_worker: dict[int, set[str]] = {}
    for r in rows:
        by_worker.setdefault(r["pid"], set()).add(r["device"])
    # two workers, each kept one GPU for all its jobs, and not the same one: cuda:0 and cuda:1 (slots 0 and 1)
    assert sorted(d for devices in by_worker.values() for d in devices) == ["cuda:0", "cuda:1"], by_worker
