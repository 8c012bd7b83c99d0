"""DDP on the CPU: `torchrun --nproc_per_node 2 -m experiments.train` (gloo) trains, only rank 0 writes one
metrics.jsonl, tokens count both ranks, and the logged loss is the mean over ranks that drew different windows.
μP (issue 19) under DDP: the optimizer keeps its per-group lr multipliers (it is built on the unwrapped model), and
a 2-rank μP run resumes onto its uninterrupted curve (slow)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from experiments.run.train import train
from experiments.rundir.checkpoint import Checkpoints

from .conftest import PYTHON, REPO, TINY, train_losses

RUN = [*TINY, "train.steps=4", "train.eval_interval=4", "train.ckpt_interval=4"]
# d_model 64 against a proxy of 32: the hidden matrices train at lr x 1/2 (arch/mup.py), everything else at lr
MUP = ["model/param=mup", "model.base_width=32", "model.d_model=64", "schedule=constant", "optim.lr=3e-3"]


def torchrun_train(cli_env, cache_dir, run_dir, *overrides):
    """`torchrun --standalone --nproc_per_node 2 -m experiments.train *overrides` into run_dir; asserts exit 0."""
    torchrun = Path(PYTHON).with_name("torchrun")
    if not torchrun.exists():
        torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the interpreter")
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "experiments.train", *overrides,
         f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"],
        cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_two_cpu_ranks_with_torchrun(make_cfg, cli_env, cache_dir, tmp_path):
    run_dir = tmp_path / "ddp"
    torchrun_train(cli_env, cache_dir, run_dir, *RUN)

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2, 3, 4]  # rank 0 alone logs: no duplicated lines
    assert all(math.isfinite(r["train/loss"]) for r in train_rows)
    assert train_rows[-1]["tokens"] == 4 * 2 * 4 * 32  # steps x ranks x batch x n_ctx
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and math.isfinite(summary["final_val_loss"])
    assert any((run_dir / "checkpoints").glob("step_*/model.safetensors"))

    # one process with the same seed draws rank 0's windows; the 2-rank mean differs only if rank 1's differ
    single = tmp_path / "single"
    train(make_cfg(*RUN[len(TINY):], run_dir=single))
    first = json.loads((single / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 1 and first["train/loss"] != train_rows[0]["train/loss"]


@pytest.mark.slow  # (~14 s: a third torchrun; test_two_cpu_ranks_with_torchrun keeps DDP in the default suite)
def test_mup_groups_survive_ddp(cli_env, cache_dir, tmp_path):
    run_dir = tmp_path / "ddp_mup"
    torchrun_train(cli_env, cache_dir, run_dir, *RUN, *MUP)
    ckpts = Checkpoints(run_dir / "checkpoints")
    groups = ckpts.load_state(ckpts.latest())["optimizer"]["param_groups"]
    # constant schedule: each group's lr is optim.lr x its multiplier, hidden matrices at 32/64
    assert sorted({(g["lr_mult"], round(g["lr"], 12)) for g in groups}) == [(0.5, 1.5e-3), (1.0, 3e-3)]
    assert (run_dir / "train.log").read_text().count("μP parameter groups") == 1  # rank 0 says it once


@pytest.mark.slow
def test_a_two_rank_mup_run_resumes_onto_its_curve(cli_env, cache_dir, tmp_path):
    steps = [*TINY, *MUP, "train.eval_interval=100", "train.ckpt_interval=4"]
    torchrun_train(cli_env, cache_dir, tmp_path / "straight", *steps, "train.steps=8")
    torchrun_train(cli_env, cache_dir, tmp_path / "split", *steps, "train.steps=4")
    torchrun_train(cli_env, cache_dir, tmp_path / "split", *steps, "train.steps=8", "train.resume=true")
    straight = train_losses(tmp_path / "straight")
    assert [s for s, _ in straight] == list(range(1, 9))
    assert train_losses(tmp_path / "split") == straight
