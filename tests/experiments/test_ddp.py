"""DDP on the CPU: `torchrun --nproc_per_node 2 -m experiments.train` (gloo) trains, only rank 0 writes one
metrics.jsonl, tokens count both ranks, and the logged loss is the mean over ranks that drew different windows."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from experiments.run.train import train

from .conftest import PYTHON, REPO, TINY

RUN = [*TINY, "train.steps=4", "train.eval_interval=4", "train.ckpt_interval=4"]


def test_two_cpu_ranks_with_torchrun(make_cfg, cli_env, cache_dir, tmp_path):
    torchrun = Path(PYTHON).with_name("torchrun")
    if not torchrun.exists():
        torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the interpreter")
    run_dir = tmp_path / "ddp"
    proc = subprocess.run(
        [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "experiments.train", *RUN,
         f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"],
        cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]

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
