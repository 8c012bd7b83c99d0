"""validate(cfg) -> RunConfig: every value of a composed run config checked before any data is read.

    rc = validate(compose_config(["model/pos=rope"]))   # RunConfig (experiments.config.schema)
    rc.train.n_ctx, rc.model.pos.kind                    # 64, 'rope': attribute access, real types

In order: every interpolation is resolved (to_plain), every group is built on its typed schema (types, unknown
keys and each field's Rule: `optim.lr: must be a number > 0, got -1.0`), then what needs the machine, the files
or the model: the device exists, tokenizer.path exists and loads (experiments.config.tokenizer_file),
arch.ModelConfig / EncDecConfig builds with a stand-in vocabulary (arch's own checks: `model: d_model=30 is not
divisible by n_heads=4; ...`), learned positions cover
train.n_ctx, and the data source answers (experiments.data.corpus / pairs check_source: files exist, the hub is
reachable; last, as it may take a few seconds). Each failure is one ConfigError shaped `<key>: <why>`.
Unknown group options and command-line keys are refused earlier, before Hydra starts (experiments.config.precheck).
Not handled: checks that need the data (a corpus shorter than n_ctx is caught when the token arrays exist).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments.config.errors import ConfigError
from experiments.config.model_schema import encdec_config, model_config
from experiments.config.rules import omegaconf_error
from experiments.config.schema import LoadedTokenizer, RunConfig, TrainConfig
from experiments.config.tokenizer_file import check_tokenizer_file
from experiments.data import corpus, pairs


def to_plain(cfg: DictConfig | dict) -> dict[str, Any]:
    """The config as plain nested dicts/lists, every interpolation resolved; a missing `???` value raises."""
    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as e:
        raise omegaconf_error(e) from None


def check_device(t: TrainConfig) -> None:
    """train.device names a device this machine has; bf16 autocast is not asked of the CPU."""
    device = t.device
    if device not in ("auto", "cpu", "mps") and not re.fullmatch(r"cuda(:\d+)?", device):
        raise ConfigError(f"train.device: unknown value {device!r}; choose from auto, cpu, cuda, cuda:N, mps")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device: {device} but CUDA is not available; use train.device=auto or cpu")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("train.device: mps but MPS is not available; use train.device=auto or cpu")
    if t.dtype == "bf16" and device == "cpu":
        raise ConfigError("train.dtype: bf16 autocast is for CUDA; use train.dtype=auto or fp32 on the CPU")


def validate(cfg: DictConfig | dict) -> RunConfig:
    """The typed, checked run config, or one ConfigError naming what to change. Reads no data."""
    rc = RunConfig.from_dict(to_plain(cfg))
    check_device(rc.train)
    if isinstance(rc.tokenizer, LoadedTokenizer):
        path = Path(os.path.expanduser(rc.tokenizer.path))
        if not path.exists():
            raise ConfigError(f"tokenizer.path: {str(path)!r} does not exist")
        check_tokenizer_file(path)  # read and checked now, before any data: experiments/config/tokenizer_file.py
    # the model with a stand-in vocabulary (the real one comes from the tokenizer): catches every bad shape
    vocab = getattr(rc.tokenizer, "vocab_size", 512)
    if rc.task.kind == "seq2seq":
        encdec_config(rc.model, vocab_size=vocab)
        pairs.check_source(rc.data)
        return rc
    mc = model_config(rc.model, vocab_size=vocab)
    if mc.pos.kind == "learned" and rc.train.n_ctx > mc.n_ctx:
        raise ConfigError(f"train.n_ctx: {rc.train.n_ctx} exceeds model.n_ctx={mc.n_ctx} (learned positions)")
    corpus.check_source(rc.data)  # last: may probe the network (a few seconds at most)
    return rc
