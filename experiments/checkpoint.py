"""Checkpoints for exact resume: model, optimizer, counters and every random state, written atomically.

`save_checkpoint` writes to a temp file in the same directory, fsyncs it and `os.replace`s it over
`checkpoints/last.pt`, so a run killed at any instant (SIGKILL included) leaves either the previous checkpoint or
the new one, never a torn file. The lr schedule is a pure function of the step (experiments.schedule), so the step
counter is the scheduler state. The RNG states are python, numpy, torch CPU (and CUDA) and each rank's data
generator, so a resumed run draws the same windows and dropout masks as an uninterrupted one.
Not handled: keeping more than the last checkpoint, sharded (FSDP) state, resuming with a different world size
exactly (the data generators are then re-seeded; train() warns).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from experiments.atomic import atomic_write

CKPT_DIR = "checkpoints"
LAST = "last.pt"


def last_checkpoint(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CKPT_DIR / LAST


def rng_state() -> dict[str, Any]:
    """This process's global random states (python, numpy, torch CPU, CUDA when available)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """torch.save(state) to `path` atomically (temp file + fsync + os.replace)."""
    atomic_write(path, lambda f: torch.save(state, f), binary=True)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The dict written by save_checkpoint (tensors on `map_location`)."""
    # weights_only=False: the state holds python/numpy RNG tuples next to tensors; only load your own files
    return torch.load(path, map_location=map_location, weights_only=False)
