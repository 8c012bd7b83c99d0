"""Early validation of a composed run config, and the one conversion cfg.model -> arch.ModelConfig.

`validate(cfg)` resolves every interpolation, checks every value against one table (`rules()`: key -> type,
range or registry choices, e.g. `optim.lr` a number > 0, `optim.betas` two numbers in [0, 1)), builds the
ModelConfig (so a bad shape such as d_model not divisible by n_heads fails here) and checks local paths and hub
reachability, all before any data is read. Each failure is a single `ConfigError` shaped `<key>: <why>`, e.g.
`seed: must be an integer >= 0, got 'abc'` or `model.norm: unknown value 'mid'; choose from post, pre, sandwich`.
Unknown group options and unknown keys on the command line are caught earlier by experiments.config.precheck
(Hydra's struct mode otherwise).
Not handled: data.* values (experiments.data.corpus.check_source owns them); checks that need the data (a corpus
shorter than n_ctx is caught when the token arrays exist).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from experiments.config.errors import ConfigError

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
        raise ConfigError(f"{key}: is required but not set (it is ??? in the config); pass {key}=...") from None
    except OmegaConfBaseException as e:
        msg = str(e).splitlines()[0]
        key = getattr(e, "full_key", None)
        raise ConfigError(f"{key}: {msg}" if key else msg) from None


TASKS = ("lm", "seq2seq")
ENCDEC_TIES = {True: "all", False: "none"}  # model.tie_embeddings as a bool (the decoder-only default) -> EncDecConfig's


def task_kind(c: dict[str, Any]) -> str:
    """`lm` (decoder-only, the default) or `seq2seq` (encoder-decoder), from the `task` group."""
    return str((c.get("task") or {}).get("kind", "lm"))


def encdec_config(model: dict[str, Any], vocab_size: int, pad_id: int | None = None):
    """arch.EncDecConfig from the `model` node of a task=seq2seq run: n_layers is the default depth of both stacks
    (n_encoder_layers / n_decoder_layers override it), tie_embeddings true/false mean all/none; block must be
    sequential and window null (the encoder-decoder has neither); src_pad_id is the tokenizer's <|pad|>."""
    from arch import EncDecConfig

    d = dict(model)
    d["vocab_size"] = int(vocab_size)
    n_layers = d.pop("n_layers", None)
    if d.pop("shape", None):
        raise ConfigError("model.shape: the shape solver is decoder-only; set d_model / n_layers for task=seq2seq")
    if d.pop("block", "sequential") != "sequential":
        raise ConfigError("model.block: the encoder-decoder has sequential blocks only (no model/block=parallel)")
    if d.pop("window", None) is not None:
        raise ConfigError("model.window: the encoder-decoder has full attention only (no sliding window)")
    for key in ("n_encoder_layers", "n_decoder_layers"):
        if d.get(key) is None:
            d[key] = n_layers
    d["tie_embeddings"] = ENCDEC_TIES.get(d.get("tie_embeddings"), d.get("tie_embeddings"))
    d["src_pad_id"] = pad_id
    try:
        return EncDecConfig.from_dict(d)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: {e}") from None


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


# -- the table: key -> what it must be ------------------------------------------------------------------------
# One Rule per key a user can set. `check(value) -> None | why` returns the reason a value is wrong; validate()
# reports it as `<key>: <why>`. Keys absent from the composed config are not checked (the consumer's default
# applies); choices that live in a registry are filled in from that registry by rules().


@dataclass(frozen=True)
class Rule:
    """What one config value must be: kind in int | number | bool | str | choice | numbers | ints | strs."""

    kind: str
    lo: float | None = None  # bound on the value (int/number) or on each item (numbers/ints)
    hi: float | None = None
    lo_open: bool = False  # True: value > lo (else >=)
    hi_open: bool = False  # True: value < hi (else <=)
    nullable: bool = False
    choices: tuple = ()
    length: int | None = None  # numbers/ints/strs: exact item count

    def check(self, v: Any) -> str | None:
        """None if v is allowed, else why not (no key in it): `must be an integer >= 1, got 'abc'`."""
        if v is None:
            return None if self.nullable else f"must be {self.describe()}, got null"
        if self.kind == "choice":
            return None if v in self.choices else f"unknown value {v!r}; choose from {', '.join(map(str, self.choices))}"
        if self.kind in ("numbers", "ints", "strs"):
            item = {"numbers": Rule("number", self.lo, self.hi, self.lo_open, self.hi_open),
                    "ints": Rule("int", self.lo, self.hi, self.lo_open, self.hi_open), "strs": Rule("str")}[self.kind]
            if not isinstance(v, (list, tuple)) or (self.length is not None and len(v) != self.length):
                return f"must be {self.describe()}, got {v!r}"
            return None if all(item.check(x) is None for x in v) else f"must be {self.describe()}, got {v!r}"
        return None if self._ok(v) else f"must be {self.describe()}, got {v!r}"

    def _ok(self, v: Any) -> bool:
        if self.kind == "bool":
            return isinstance(v, bool)
        if self.kind == "str":
            return isinstance(v, str) and v != ""
        if isinstance(v, bool) or not isinstance(v, int if self.kind == "int" else (int, float)):
            return False
        if self.kind == "number" and not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))

    def describe(self) -> str:
        """`an integer >= 1`, `a number in (0, 1)`, `a list of 2 numbers in [0, 1)`, `true or false`..."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "a non-empty string" + (" or null" if self.nullable else "")
        if self.kind in ("numbers", "ints", "strs"):
            n = f"{self.length} " if self.length is not None else ""
            noun = {"numbers": "numbers", "ints": "integers", "strs": "strings"}[self.kind]
            return f"a list of {n}{noun}{self._range()}"
        noun = "an integer" if self.kind == "int" else "a number"
        return noun + self._range() + (" or null" if self.nullable else "")

    def _range(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f" in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f" {'>' if self.lo_open else '>='} {self.lo:g}"
        if self.hi is not None:
            return f" {'<' if self.hi_open else '<='} {self.hi:g}"
        return ""


POS_INT = Rule("int", lo=1)
POS_INT_OR_NULL = Rule("int", lo=1, nullable=True)
POS_NUMBER = Rule("number", lo=0, lo_open=True)
BOOL = Rule("bool")
STR = Rule("str")


def rules() -> dict[str, Rule]:
    """Every user-settable key of conf/ (except data.*, checked by experiments.data.corpus.check_source) -> its Rule.

    Registries (optimizers, schedules, loggers, arch choices) supply the valid choices, so a new registry entry
    is accepted without editing this table."""
    from arch.config import (ACTIVATIONS, ATTENTION_IMPLS, BLOCK_KINDS, INIT_SCHEMES, NORM_PLACEMENTS, NORM_TYPES,
                             POS_KINDS, QK_NORMS, ROPE_SCALINGS)
    from experiments.run.optim import OPTIMIZERS
    from experiments.run.schedule import SCHEDULES
    from experiments.rundir.tracking import LOGGERS

    def choice(names) -> Rule:
        return Rule("choice", choices=tuple(sorted(names)))

    return {
        "experiment_name": STR,
        "task.kind": choice(TASKS),
        "model.n_encoder_layers": POS_INT_OR_NULL,
        "model.n_decoder_layers": POS_INT_OR_NULL,
        "model.scale_embeddings": BOOL,
        "seed": Rule("int", lo=0),
        # optim
        "optim.name": choice(OPTIMIZERS),
        "optim.lr": POS_NUMBER,
        "optim.betas": Rule("numbers", lo=0, hi=1, hi_open=True, length=2),
        "optim.eps": POS_NUMBER,
        "optim.weight_decay": Rule("number", lo=0),
        "optim.decay_embeddings": BOOL,
        # schedule
        "schedule.name": choice(SCHEDULES),
        "schedule.warmup_steps": Rule("int", lo=0),
        "schedule.min_lr_ratio": Rule("number", lo=0, hi=1),
        # train
        **{f"train.{k}": POS_INT for k in ("steps", "batch_size", "n_ctx", "grad_accum", "log_interval",
                                            "eval_interval", "eval_batches", "eval_batch_size", "ckpt_interval", "keep_last_k",
                                            "extrap_max_tokens")},
        "train.tokens": POS_INT_OR_NULL,
        "train.flops": Rule("number", lo=0, lo_open=True, nullable=True),
        "train.num_threads": POS_INT_OR_NULL,
        "train.grad_clip": Rule("number", lo=0, lo_open=True, nullable=True),
        "train.extrap": choice(EXTRAP),
        "train.extrap_factors": Rule("ints", lo=1),
        "train.dtype": choice(DTYPES),
        "train.device": STR,  # which devices exist: _check_device
        "train.run_dir": Rule("str", nullable=True),
        **{f"train.{k}": BOOL for k in ("resume", "overwrite", "compile", "progress")},
        # model (ModelConfig / PosConfig fields; ModelConfig re-checks the combinations)
        "model.vocab_size": POS_INT_OR_NULL,
        **{f"model.{k}": POS_INT for k in ("n_ctx", "d_model", "n_layers", "n_heads")},
        "model.d_head": POS_INT_OR_NULL,
        "model.d_mlp": POS_INT_OR_NULL,
        "model.activation": choice(ACTIVATIONS),
        "model.norm": choice(NORM_PLACEMENTS),
        "model.norm_type": choice(NORM_TYPES),
        "model.attention": choice(ATTENTION_IMPLS),
        "model.init": choice(INIT_SCHEMES),
        "model.block": choice(BLOCK_KINDS),
        "model.qk_norm": Rule("choice", choices=tuple(sorted(QK_NORMS)), nullable=True),
        "model.n_kv_heads": POS_INT_OR_NULL,
        "model.window": POS_INT_OR_NULL,
        "model.pos.rope_scaling": Rule("choice", choices=tuple(sorted(ROPE_SCALINGS)), nullable=True),
        "model.pos.rope_scaling_factor": Rule("number", lo=1),
        "model.pos.original_n_ctx": POS_INT_OR_NULL,
        "model.bias": BOOL,
        "model.tie_embeddings": Rule("choice", choices=(True, False, "all", "inputs", "decoder", "none")),
        "model.dropout": Rule("number", lo=0, hi=1, hi_open=True),
        "model.layer_norm_eps": POS_NUMBER,
        "model.pos.kind": choice(POS_KINDS),
        "model.pos.num_buckets": Rule("int", lo=2),
        "model.pos.max_distance": POS_INT,
        "model.pos.rope_base": Rule("number", lo=1, lo_open=True),
        "model.pos.scale": Rule("number", lo=0, lo_open=True, nullable=True),
        # tokenizer (vocab_size's lower bound depends on special_tokens: _check_tokenizer)
        "tokenizer.mode": choice(TOKENIZER_MODES),
        "tokenizer.path": STR,
        "tokenizer.vocab_size": Rule("int", lo=256),
        "tokenizer.pattern": STR,
        "tokenizer.special_tokens": Rule("strs"),
        "tokenizer.min_frequency": POS_INT,
        "tokenizer.workers": POS_INT_OR_NULL,
        "tokenizer.max_train_bytes": POS_INT_OR_NULL,
        # logger
        "logger.kind": choice(LOGGERS),
        "logger.project": STR,
        "logger.group": STR,
        "logger.job_type": STR,
        "logger.tags": Rule("strs"),
    }


_MISSING = object()


def _lookup(c: dict[str, Any], key: str) -> Any:
    node: Any = c
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def check_values(c: dict[str, Any]) -> None:
    """Every key of the table present in the plain config `c` against its Rule; the first failure raises
    ConfigError(`<key>: <why>`), e.g. `optim.lr: must be a number > 0, got 'abc'`."""
    for key, rule in rules().items():
        value = _lookup(c, key)
        if value is _MISSING:
            continue
        why = rule.check(value)
        if why:
            raise ConfigError(f"{key}: {why}")


def _check_device(t: dict[str, Any]) -> None:
    import torch

    device = str(t.get("device"))
    if device not in ("auto", "cpu", "mps") and not re.fullmatch(r"cuda(:\d+)?", device):
        raise ConfigError(f"train.device: unknown value {device!r}; choose from auto, cpu, cuda, cuda:N, mps")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"train.device: {device} but CUDA is not available; use train.device=auto or cpu")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("train.device: mps but MPS is not available; use train.device=auto or cpu")
    if t.get("dtype") == "bf16" and device == "cpu":
        raise ConfigError("train.dtype: bf16 autocast is for CUDA; use train.dtype=auto or fp32 on the CPU")


def _check_tokenizer(tok: dict[str, Any]) -> None:
    from pathlib import Path
    import os

    if tok["mode"] == "load":
        path = Path(os.path.expanduser(str(tok["path"])))
        if not path.exists():
            raise ConfigError(f"tokenizer.path: {str(path)!r} does not exist")
        return
    from tokenizer.pretokenize import resolve_pattern

    specials = list(tok.get("special_tokens") or [])
    v = tok.get("vocab_size")
    if not isinstance(v, int) or v < 256 + len(specials):
        raise ConfigError(f"tokenizer.vocab_size: must be an integer >= 256 + {len(specials)} special token(s), got {v!r}")
    try:
        resolve_pattern(tok.get("pattern", "gpt2"))
    except ValueError as e:
        raise ConfigError(f"tokenizer.pattern: {e}") from None


def validate(cfg: DictConfig | dict) -> dict[str, Any]:
    """The resolved config as a plain dict, or one ConfigError naming what to change. Reads no data."""
    from experiments.data.corpus import check_source

    c = to_plain(cfg)
    missing = [k for k in TOP_LEVEL if k not in c]
    if missing:
        raise ConfigError(f"{missing[0]}: missing top-level key; compose the config from conf/train.yaml")

    check_values(c)
    _check_device(c["train"])
    _check_tokenizer(c["tokenizer"])

    # the model with a stand-in vocabulary (the real one comes from the tokenizer): catches every bad shape
    vocab = c["tokenizer"].get("vocab_size") if c["tokenizer"]["mode"] == "train" else 512
    if task_kind(c) == "seq2seq":
        from experiments.data import pairs as seq2seq_data

        mc = encdec_config(c["model"], vocab_size=int(vocab or 512))
        seq2seq_data.check_source(c["data"])
        return c
    mc = model_config(c["model"], vocab_size=int(vocab or 512))
    if mc.pos.kind == "learned" and c["train"]["n_ctx"] > mc.n_ctx:
        raise ConfigError(f"train.n_ctx: {c['train']['n_ctx']} exceeds model.n_ctx={mc.n_ctx} (learned positions)")

    check_source(c["data"])  # last: may probe the network (a few seconds at most)
    return c
