"""Checkpoints: weights in safetensors (no pickle to read them), the training state beside them, last / best.

    <run dir>/checkpoints/
        step_00000120/model.safetensors   the weights at step 120 (metadata: step, tokens, model_config as JSON)
        step_00000120/state.pt            optimizer, counters, every RNG state: what an exact resume needs
        best.safetensors                  the weights at the lowest val/loss so far (metadata adds val_loss)

A step dir is written complete under a temp name and renamed into place, so a run killed at any instant (SIGKILL
included) leaves the previous checkpoints or the new one, never a half one; `latest()` is the highest step dir.
`train.keep_last_k` step dirs are kept (older ones are deleted after a new one lands). `best.safetensors` is one
atomic file. A write that fails (a full disk, a read-only dir) is one CheckpointWriteError (a ConfigError: one line)
naming the checkpoint; nothing of it is left and the older ones are intact, so the run resumes from them. Tied weights (wte = lm_head) are stored once. The lr schedule is a pure function of the step
(experiments.run.schedule), so the step counter is the scheduler state. The RNG states are python, numpy, torch CPU
(and CUDA) and each rank's data generator, so a resumed run draws the same windows and dropout masks as an
uninterrupted one. `state.pt` holds python/numpy RNG tuples and so is a pickle: it is read only to resume your own
run; the weights (what `experiments.load_run` and exports read) never need pickle.
`state.pt` also records the fingerprints of the run's tokenizer and data (`inputs`); `check_same_inputs` refuses a
resume that would go on with others (a checkpoint from before that record is compared by the run dir's tokenizer).
Also read: the single `checkpoints/last.pt` of runs from before this layout (model + state in one pickle).
Not handled: sharded (FSDP) state, resuming with a different world size exactly (the data generators are then
re-seeded; train() warns).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from experiments.config.errors import ConfigError
from tokenizer.outputs import atomic_directory, atomic_write
from tokenizer import Tokenizer

WEIGHTS = "model.safetensors"
STATE = "state.pt"
BEST = "best.safetensors"
LEGACY = "last.pt"
WEIGHTS_FORMAT = "archlab-weights/1"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read back (truncated, garbage, not ours); the message is one line."""


class CheckpointWriteError(ConfigError):
    """A checkpoint that could not be written (a full disk, a read-only dir): one line naming it. Nothing of it is
    left, and the checkpoints written before are intact, so the run resumes from the last of them."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"cannot write checkpoint {path} ({reason}); the checkpoints before it are intact: free "
                         f"space, then continue the run with train.resume=true")
        self.reason = reason


def _write_failure(e: BaseException) -> str | None:
    """Why a write failed when `e` is, or was raised while handling, an OSError (torch.save turns a full disk into
    a RuntimeError about zip positions); None for anything else."""
    while e is not None and not isinstance(e, OSError):
        e = e.__cause__ or e.__context__
    return None if e is None else (e.strerror or type(e).__name__)


def rng_state() -> dict[str, Any]:
    """This process's global random states (python, numpy, torch CPU, CUDA when available)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _on_cpu(states: Any) -> Any:
    """A rank's random states (rng_state() + the data generator's) with every tensor on the CPU."""
    if isinstance(states, torch.Tensor):
        return states.cpu()
    if isinstance(states, dict):
        return {k: _on_cpu(v) for k, v in states.items()}
    if isinstance(states, list):
        return [_on_cpu(v) for v in states]
    return states


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


REQUIRED_KEYS = ("step", "tokens", "elapsed", "optimizer", "rng", "world_size", "model_config")


def _damaged(path: Path, e: BaseException) -> CheckpointError:
    why = " ".join(str(e).split())[:120] or type(e).__name__
    return CheckpointError(f"{path} is not a readable checkpoint (truncated or damaged: {why})")


def unique_tensors(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict with each shared tensor once (the first name wins: `wte.weight` over a tied `lm_head.weight`)."""
    seen: set[tuple] = set()
    out = {}
    for name, t in state_dict.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
        if key not in seen:
            seen.add(key)
            out[name] = t.detach().contiguous()
    return out


def save_weights(path: str | os.PathLike, model: torch.nn.Module, model_config: dict[str, Any], **meta: Any) -> None:
    """The model's weights as safetensors, atomically; metadata: format, model_config (JSON) and `meta` (as strings)."""
    tensors = {k: v.cpu() for k, v in unique_tensors(model.state_dict()).items()}
    metadata = {"format": WEIGHTS_FORMAT, "model_config": json.dumps(model_config),
                **{k: json.dumps(v) for k, v in meta.items()}}
    try:
        atomic_write(path, lambda f: f.write(safetensors_bytes(tensors, metadata=metadata)), binary=True)
    except Exception as e:  # noqa: BLE001 - only a failed write is turned into one line
        if (reason := _write_failure(e)) is None:
            raise
        raise CheckpointWriteError(Path(path), reason) from None


def read_weights_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The metadata of a weights file, values decoded from JSON (`model_config` a dict, `step` an int, ...)."""
    try:
        with safe_open(str(path), framework="pt") as f:
            raw = f.metadata() or {}
    except Exception as e:  # noqa: BLE001 - a truncated header, not safetensors at all
        raise _damaged(Path(path), e) from None
    if raw.get("format") != WEIGHTS_FORMAT:
        raise CheckpointError(f"{path} is not an archlab weights file (format {raw.get('format')!r})")
    return {k: (v if k == "format" else json.loads(v)) for k, v in raw.items()}


def load_weights(model: torch.nn.Module, path: str | os.PathLike, device: str | torch.device = "cpu") -> None:
    """Load a weights file into `model` (built from its metadata's model_config); names must match exactly, up to
    tied aliases stored once."""
    path = Path(path)
    try:
        tensors = load_file(str(path), device=str(device))
    except Exception as e:  # noqa: BLE001
        raise _damaged(path, e) from None
    expected = set(unique_tensors(model.state_dict()))
    if set(tensors) != expected:
        extra, missing = sorted(set(tensors) - expected), sorted(expected - set(tensors))
        raise CheckpointError(f"{path} does not match the model (missing {missing[:3]}, unexpected {extra[:3]})")
    model.load_state_dict(tensors, strict=False)  # the aliases of tied weights are the same tensors


def recorded_inputs(state: dict[str, Any], tokenizer_path: Path) -> dict[str, str]:
    """The fingerprints of what a checkpoint was trained on ({"tokenizer": ..., "data": ...}): its own record, or for
    a checkpoint from before it kept one, the tokenizer copy in the run dir (data then unknown: {} if neither)."""
    if isinstance(state.get("inputs"), dict):
        return state["inputs"]
    try:
        return {"tokenizer": Tokenizer.load(tokenizer_path).fingerprint()}
    except (OSError, ValueError):
        return {}


def check_same_inputs(where: Path, recorded: dict[str, str], current: dict[str, str]) -> None:
    """ConfigError (one line) when a resume would go on with another tokenizer or other data than the checkpoint
    at `where` was trained on; a fingerprint the checkpoint does not record is not compared."""
    for what, other in (("tokenizer", "another tokenizer"), ("data", "other data")):
        have, now = recorded.get(what), current.get(what)
        if have and now and have != now:
            raise ConfigError(f"train.resume=true but {where} was trained on {other} (fingerprint {have[:12]}, this "
                              f"config gives {now[:12]}); resume with the run's own {what} settings (its config.yaml) "
                              f"or start a new run dir")


class Checkpoints:
    """The checkpoints/ dir of one run: save and find step checkpoints, the best weights."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)

    @property
    def best(self) -> Path:
        return self.dir / BEST

    @property
    def legacy(self) -> Path:
        return self.dir / LEGACY

    def step_dirs(self) -> list[Path]:
        """Complete step dirs, oldest first."""
        if not self.dir.is_dir():
            return []
        found = [p for p in self.dir.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
        return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))

    def latest(self) -> Path | None:
        """The newest step dir, else a legacy `last.pt`, else None."""
        dirs = self.step_dirs()
        if dirs:
            return dirs[-1]
        return self.legacy if self.legacy.exists() else None

    def save(self, step: int, model: torch.nn.Module, state: dict[str, Any], model_config: dict[str, Any],
             keep_last_k: int = 1) -> Path:
        """Write step_<step>/ (weights + training state) under a temp name, rename it into place, prune old ones.
        A write that fails (full disk, read-only dir) is one CheckpointWriteError; the older step dirs are kept."""
        try:
            return self._save(step, model, state, model_config, keep_last_k)
        except Exception as e:  # noqa: BLE001 - named by the step dir, not by the temp file that failed
            reason = e.reason if isinstance(e, CheckpointWriteError) else _write_failure(e)
            if reason is None:
                raise
            raise CheckpointWriteError(self.dir / f"step_{step:08d}", reason) from None

    def _save(self, step: int, model: torch.nn.Module, state: dict[str, Any], model_config: dict[str, Any],
              keep_last_k: int) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        for stale in self.dir.glob(".step_*.tmp*"):  # left by a run killed while writing
            shutil.rmtree(stale, ignore_errors=True)
        final = self.dir / f"step_{step:08d}"
        with atomic_directory(final) as tmp:  # replaces a step dir saved before (an interrupt right after a resume)
            save_weights(tmp / WEIGHTS, model, model_config, step=step, tokens=state["tokens"])
            atomic_write(tmp / STATE, lambda f: torch.save(state, f), binary=True)
        for old in self.step_dirs()[:-max(1, keep_last_k)]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load_state(self, where: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
        """The training state of a step dir (or a legacy last.pt, whose state also holds `model`)."""
        path = where if where.is_file() else where / STATE
        try:
            # weights_only=False: the state holds python/numpy RNG tuples; only your own run's file is read here
            state = torch.load(path, map_location=map_location, weights_only=False)
        except Exception as e:  # noqa: BLE001 - zip/pickle/EOF errors of every kind: a damaged file
            raise _damaged(path, e) from None
        missing = [k for k in REQUIRED_KEYS if not isinstance(state, dict) or k not in state]
        if missing:
            raise CheckpointError(f"{path} is not an archlab checkpoint (missing {', '.join(missing)})")
        # random states stay CPU byte tensors whatever map_location says: torch.set_rng_state and a CPU
        # Generator's set_state refuse a CUDA tensor (a resume on CUDA loads with map_location=cuda)
        state["rng"] = _on_cpu(state["rng"])
        return state

    def load_model_weights(self, model: torch.nn.Module, where: Path, state: dict[str, Any],
                           device: str | torch.device = "cpu") -> None:
        if where.is_file():  # legacy last.pt
            model.load_state_dict(state["model"])
        else:
            load_weights(model, where / WEIGHTS, device)
