"""Pick a finished (or interrupted) run back up: `load_run(run_dir) -> (model, tokenizer, cfg)`.

    from experiments import load_run
    model, tok, cfg = load_run("outputs/default/2026-11-25_10-00-00")            # best weights, on the CPU
    model, tok, cfg = load_run(run_dir, which="last", device="cuda")              # the newest step checkpoint

`which`: `best` (checkpoints/best.safetensors, the lowest val/loss seen; falls back to `last` when the run never
evaluated), `last` (the newest checkpoints/step_<N>/), or a step number that still has its step dir. The model is
built from the ModelConfig stored in the weights file's metadata and put in eval mode; the weights are read with
safetensors (no pickle). The tokenizer is the run dir's tokenizer.json (runs from before it was copied there: the
cache path in config.yaml). `cfg` is config.yaml as a plain dict.
Used by `python -m experiments.sample`, `experiments.use.evaluate.cli` and `experiments.use.export`. A run dir that cannot
be loaded (no directory there, no config.yaml, no checkpoint, no such `which`, a corrupt file) and a `device` this
machine does not have raise RunLoadError, one line that names the path or value and what is wrong, before any
weights are read.
Also read: the single checkpoints/last.pt of runs from before safetensors (that one is a pickle).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from arch import EncDecConfig, ModelConfig, build_model
from experiments.run.distributed import unavailable
from experiments.rundir.checkpoint import WEIGHTS, CheckpointError, Checkpoints, load_weights, read_weights_meta
from experiments.rundir.layout import RunDir, RunDirError
from tokenizer import Tokenizer

WHICH = ("best", "last")


class RunLoadError(ValueError):
    """A run dir that cannot be loaded; the message is one line."""


def open_run_dir(run_dir: str | os.PathLike) -> RunDir:
    """RunDir(run_dir), refused when there is no directory at that path."""
    rd = RunDir(run_dir)
    if not rd.path.is_dir():
        raise RunLoadError(f"run dir {rd.path} {'is not a directory' if rd.path.exists() else 'does not exist'}")
    return rd


def read_config(rd: RunDir) -> dict[str, Any] | None:
    """The run's config.yaml as a dict (None when there is none); a corrupt one is a RunLoadError."""
    try:
        return rd.read_config()
    except RunDirError as e:
        raise RunLoadError(str(e)) from None


def check_device(device: str | torch.device) -> torch.device:
    """`device` as a torch.device, refused when torch does not know it or this machine does not have it."""
    try:
        d = torch.device(device)
    except (RuntimeError, TypeError):
        raise RunLoadError(f"unknown device {str(device)!r}; choose cpu, cuda, cuda:N or mps") from None
    if (why := unavailable(d)) is not None:
        raise RunLoadError(f"device {str(device)!r}: {why}")
    return d


def weights_path(run_dir: str | os.PathLike, which: str | int = "best") -> Path:
    """The weights file `which` names in a run dir (see the module docstring)."""
    rd = open_run_dir(run_dir)
    ckpts = Checkpoints(rd.checkpoint_dir)
    if isinstance(which, int) or str(which).isdecimal():
        path = ckpts.dir / f"step_{int(which):08d}" / WEIGHTS
        if not path.exists():
            kept = ", ".join(p.name.removeprefix("step_").lstrip("0") or "0" for p in ckpts.step_dirs()) or "none"
            raise RunLoadError(f"{rd.path} has no checkpoint at step {int(which)} (steps kept: {kept})")
        return path
    if which not in WHICH:
        raise RunLoadError(f"unknown checkpoint {which!r}; choose from best, last, or a step number")
    if which == "best" and ckpts.best.exists():
        return ckpts.best
    latest = ckpts.latest()
    if latest is None:
        raise RunLoadError(f"{rd.path} holds no checkpoint ({ckpts.dir} is missing or empty); is it a run dir?")
    return latest if latest.is_file() else latest / WEIGHTS


def run_tokenizer_file(run_dir: str | os.PathLike, cfg: dict[str, Any] | None = None) -> Path:
    """The run's tokenizer file: its tokenizer.json, else (older runs) the cache path config.yaml names."""
    rd = RunDir(run_dir)
    path = rd.tokenizer_path
    if not path.exists():
        path = Path(str(((cfg or {}).get("tokenizer") or {}).get("resolved_path") or path))
    if not path.exists():
        raise RunLoadError(f"{rd.path} has no tokenizer.json and its config names none that exists ({path})")
    return path


def load_run_tokenizer(run_dir: str | os.PathLike, cfg: dict[str, Any] | None = None):
    path = run_tokenizer_file(run_dir, cfg)
    try:
        return Tokenizer.load(path)
    except ValueError as e:
        raise RunLoadError(f"cannot load the run's tokenizer: {e}") from None


def config_from_dict(d: dict[str, Any]):
    """The arch config a weights file describes: an EncDecConfig (encoder-decoder runs) or a ModelConfig."""
    return (EncDecConfig if "n_encoder_layers" in d else ModelConfig).from_dict(d)


def load_run(run_dir: str | os.PathLike, which: str | int = "best", device: str | torch.device = "cpu"):
    """(model in eval mode on `device`, tokenizer, cfg dict) of a run dir; see the module docstring."""
    check_device(device)
    rd = open_run_dir(run_dir)
    cfg = read_config(rd)
    if cfg is None:
        raise RunLoadError(f"{rd.path} has no config.yaml; is it a run dir?")
    path = weights_path(rd.path, which)
    try:
        if path.name == WEIGHTS or path.suffix == ".safetensors":
            model = build_model(config_from_dict(read_weights_meta(path)["model_config"]))
            load_weights(model, path)
        else:  # legacy checkpoints/last.pt
            state = Checkpoints(rd.checkpoint_dir).load_state(path)
            model = build_model(config_from_dict(state["model_config"]))
            model.load_state_dict(state["model"])
    except CheckpointError as e:
        raise RunLoadError(str(e)) from None
    return model.to(device).eval(), load_run_tokenizer(rd.path, cfg), cfg
