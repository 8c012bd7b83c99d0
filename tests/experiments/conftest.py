"""Fixtures for experiments tests: a composed config (Hydra compose API) pointed at tmp dirs, wandb off.

`make_cfg(*overrides, run_dir=...)` composes conf/train.yaml with TINY (a 2-layer d_model 32 model, 3 steps,
one thread, no extrapolation) plus the given overrides. Every run shares one session-wide tokenizer/token cache in
a tmp dir, so the BPE tokenizer is trained once per test session. `cli_env()` is the environment for
`python -m experiments.train` subprocesses (same cache, wandb disabled, offline hub).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from experiments.config.compose import CONF_DIR, compose_config

REPO = Path(__file__).resolve().parents[2]
CONF = CONF_DIR  # the one place that knows where conf/ is

# A model and budget small enough for a CPU test: seconds per run.
TINY = [
    "logger=disabled",
    "model=tiny",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_layers=2",
    "train.n_ctx=32",
    "train.batch_size=4",
    "train.steps=3",
    "train.eval_interval=3",
    "train.eval_batches=2",
    "train.ckpt_interval=3",
    "train.extrap=never",
    "train.progress=false",
    "train.num_threads=1",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("archlab_cache")


@pytest.fixture
def make_cfg(cache_dir, tmp_path, monkeypatch):
    """make_cfg(*overrides, run_dir=None) -> DictConfig with TINY + overrides; run_dir defaults to tmp_path/run."""

    monkeypatch.setenv("WANDB_MODE", "disabled")  # tests/conftest.py sets it too; never let a test reach wandb

    def make(*overrides: str, run_dir: Path | None = None):
        run_dir = run_dir or tmp_path / "run"
        return compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run_dir}", *overrides])

    return make


@pytest.fixture
def cli_env(cache_dir):
    env = dict(os.environ)
    env.update({"WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "ARCHLAB_CACHE": str(cache_dir),
                "ARCHLAB_PEAK_FLOPS": "1e12", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    return env


PYTHON = sys.executable
