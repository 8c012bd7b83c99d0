"""Early validation of a composed run config, and the one conversion cfg.model -> arch.ModelConfig.

`validate(cfg)` resolves every interpolation, checks every group against its registry (schedules, optimizers,
loggers, data sources, split patterns), builds the ModelConfig (so a bad shape such as d_model not divisible by
n_heads fails here) and checks local paths and hub reachability, all before any data is read. Each failure is a
single `ConfigError` whose message names the key and the valid choices. Hydra itself rejects unknown group
options and unknown keys (struct mode) before this runs.
Not handled: checks that need the data (corpus shorter than n_ctx is caught when the token arrays exist).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from experiments.errors import ConfigError

TOP_LEVEL = ("experiment_name", "seed", "model", "data", "tokenizer", "optim", "schedule", "train", "logger")
EXTRAP = ("end", "every_eval", "never")
DTYPES = ("auto", "fp32", "bf16")
TOKENIZER_MODES = ("train", "load")
SHAPE_KEYS = ("n_params", "n_layers", "aspect_ratio", "n_heads", "d_head")


def to_plain(cfg: DictConfig | dict) -> dict[str, Any]:
    """The config as plain nested dicts/lists, every interpolation resolved; a missing `???` value raises."""
    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as e:
        key = getattr(e, "full_key", None) or "a value"
        raise ConfigError(f"{key} is required but not set (it is ??? in the config); pass {key}=...") from None
    except OmegaConfBaseException as e:
        msg = str(e).splitlines()[0]
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{key}: {msg}" if key else msg) from None


def model_config(model: dict[str, Any], vocab_size: int):
    """arch.ModelConfig from the `model` node; `shape: {n_params, n_layers | aspect_ratio[, n_heads | d_head]}`
    replaces d_model / n_layers / n_heads / d_head by arch.shape_for's solution for that non-embedding budget."""
    from arch import ModelConfig, shape_for

    d = dict(model)
    d["vocab_size"] = int(vocab_size)
    shape = d.pop("shape", None)
    try:
        if not shape:
            return ModelConfig.from_dict(d)
        unknown = sorted(set(shape) - set(SHAPE_KEYS))
        if unknown:
            raise ValueError(f"unknown model.shape key(s) {unknown}; valid keys are {list(SHAPE_KEYS)}")
        if shape.get("n_params") is None:
            raise ValueError("model.shape needs n_params (the non-embedding parameter budget)")
        for key in ("d_model", "n_layers", "n_heads", "d_head"):
            d.pop(key, None)
        if d.get("pos") is None:
            d.pop("pos", None)  # absent -> ModelConfig's default, as in the no-shape branch
        return shape_for(
            shape["n_params"],
            n_layers=shape.get("n_layers"),
            aspect_ratio=shape.get("aspect_ratio"),
            n_heads=shape.get("n_heads"),
            d_head=shape.get("d_head"),
            **d,
        )
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: {e}") from None


def _positive_int(section: dict[str, Any], key: str, where: str, allow_none: bool = False) -> None:
    v = section.get(key)
    if v is None and allow_none:
        return
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ConfigError(f"{where}.{key} must be a positive integer{' or null' if allow_none else ''}, got {v!r}")


def _choice(value: Any, choices, key: str) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {key} {value!r}; choose from {sorted(choices)}")


def _check_train(t: dict[str, Any]) -> None:
    import torch

    for key in ("steps", "batch_size", "n_ctx", "grad_accum", "log_interval", "eval_interval", "eval_batches",
                "eval_batch_size", "ckpt_interval", "extrap_max_tokens"):
        _positive_int(t, key, "train")
    _positive_int(t, "tokens", "train", allow_none=True)
    _positive_int(t, "num_threads", "train", allow_none=True)
    if t.get("grad_clip") is not None and not t["grad_clip"] > 0:
        raise ConfigError(f"train.grad_clip must be > 0 or null, got {t['grad_clip']!r}")
    _choice(t.get("extrap"), EXTRAP, "train.extrap")
    _choice(t.get("dtype"), DTYPES, "train.dtype")
    if not all(isinstance(k, int) and k > 0 for k in t.get("extrap_factors") or []):
        raise ConfigError(f"train.extrap_factors must be positive integers, got {t.get('extrap_factors')!r}")
    device = str(t.get("device"))
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device={device} but CUDA is not available; use train.device=auto or cpu")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("train.device=mps but MPS is not available; use train.device=auto or cpu")
    if device not in ("auto", "cpu", "mps") and not device.startswith("cuda"):
        raise ConfigError(f"unknown train.device {device!r}; choose from auto, cpu, cuda, cuda:N, mps")
    if t.get("dtype") == "bf16" and device == "cpu":
        raise ConfigError("train.dtype=bf16 autocast is for CUDA; use train.dtype=auto or fp32 on the CPU")


def _check_tokenizer(tok: dict[str, Any]) -> None:
    from pathlib import Path
    import os

    _choice(tok.get("mode"), TOKENIZER_MODES, "tokenizer.mode")
    if tok["mode"] == "load":
        path = Path(os.path.expanduser(str(tok["path"])))
        if not path.exists():
            raise ConfigError(f"tokenizer.path={str(path)!r} does not exist")
        return
    from tokenizer.pretokenize import resolve_pattern

    specials = list(tok.get("special_tokens") or [])
    v = tok.get("vocab_size")
    if not isinstance(v, int) or v < 256 + len(specials):
        raise ConfigError(f"tokenizer.vocab_size must be an integer >= 256 + {len(specials)} special token(s), got {v!r}")
    try:
        resolve_pattern(tok.get("pattern", "gpt2"))
    except ValueError as e:
        raise ConfigError(f"tokenizer.pattern: {e}") from None
    if tok.get("max_train_bytes") is not None:
        _positive_int(tok, "max_train_bytes", "tokenizer", allow_none=True)


def validate(cfg: DictConfig | dict) -> dict[str, Any]:
    """The resolved config as a plain dict, or one ConfigError naming what to change. Reads no data."""
    from experiments.data import check_source
    from experiments.optim import OPTIMIZERS
    from experiments.schedule import SCHEDULES
    from experiments.tracking import LOGGERS

    c = to_plain(cfg)
    missing = [k for k in TOP_LEVEL if k not in c]
    if missing:
        raise ConfigError(f"config is missing top-level key(s) {missing}; compose it from conf/train.yaml")

    _check_train(c["train"])
    _check_tokenizer(c["tokenizer"])
    _choice(c["optim"].get("name"), OPTIMIZERS, "optim.name")
    if not c["optim"].get("lr", 0) > 0:
        raise ConfigError(f"optim.lr must be > 0, got {c['optim'].get('lr')!r}")
    _choice(c["schedule"].get("name"), SCHEDULES, "schedule.name")
    ws = c["schedule"].get("warmup_steps")
    if not isinstance(ws, int) or ws < 0:
        raise ConfigError(f"schedule.warmup_steps must be an integer >= 0, got {ws!r}")
    if not 0.0 <= float(c["schedule"].get("min_lr_ratio", 0.0)) <= 1.0:
        raise ConfigError(f"schedule.min_lr_ratio must be in [0, 1], got {c['schedule'].get('min_lr_ratio')!r}")
    _choice(c["logger"].get("kind"), LOGGERS, "logger.kind")

    # the model with a stand-in vocabulary (the real one comes from the tokenizer): catches every bad shape
    vocab = c["tokenizer"].get("vocab_size") if c["tokenizer"]["mode"] == "train" else 512
    mc = model_config(c["model"], vocab_size=int(vocab or 512))
    if mc.pos.kind == "learned" and c["train"]["n_ctx"] > mc.n_ctx:
        raise ConfigError(f"train.n_ctx={c['train']['n_ctx']} exceeds model.n_ctx={mc.n_ctx} (learned positions)")

    check_source(c["data"])  # last: may probe the network (a few seconds at most)
    return c
