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
from typing import Any

import numpy as np
import torch

from experiments.rundir import atomic_write


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read back (truncated, garbage, not ours); the message is one line."""


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


REQUIRED_KEYS = ("step", "tokens", "elapsed", "model", "optimizer", "rng", "world_size", "model_config")


def save_checkpoint(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """torch.save(state) to `path` atomically (temp file + fsync + os.replace)."""
    atomic_write(path, lambda f: torch.save(state, f), binary=True)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The dict written by save_checkpoint (tensors on `map_location`).

    Raises CheckpointError (one line naming the file) for a truncated or garbage file or one that is not a dict
    with the keys save_checkpoint writes; never deletes or rewrites it.
    """
    try:
        # weights_only=False: the state holds python/numpy RNG tuples next to tensors; only load your own files
        state = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # noqa: BLE001 - zip/pickle/EOF errors of every kind: a damaged file
        why = " ".join(str(e).split())[:120] or type(e).__name__
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or damaged: {why})") from None
    missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
    if missing:
        raise CheckpointError(f"{path} is not an archlab checkpoint (missing {', '.join(missing)})")
    return state
