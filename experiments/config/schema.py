"""The typed run config: one dataclass per config group, registered with Hydra's ConfigStore.

    rc = validate(compose_config(["optim.lr=3e-3"]))     # experiments.config.check: a RunConfig
    rc.optim.lr, rc.train.n_ctx, rc.model.pos.kind         # 0.003 (a float), 64, 'learned'
    rc.to_dict()                                           # plain nested dicts: what config.yaml holds

conf/train.yaml's defaults list starts with `run_schema` (RunConfig), so Hydra composes every group onto its
schema: a value of the wrong type (`seed=abc`) and a key outside the schema (`trian.steps=3`, `+optim.lrr=1`)
are refused while composing, naming the key. The groups whose options differ in keys pick their schema per
option: conf/data/<option>.yaml lists `/schema/data/<source>@_here_` (experiments.config.data_schema),
conf/tokenizer/<option>.yaml `/schema/tokenizer/<mode>@_here_`, conf/task/seq2seq.yaml `/schema/model/seq2seq@model`
(experiments.config.model_schema). register() stores all of them; experiments.config.compose calls it on import.

Bounds and choices live on the fields (experiments.config.rules: `ruled(default, rule)`), checked when the
dataclass is built; the model's are arch's own (arch/config.py), checked when experiments.config.check builds
arch.ModelConfig. Values without a default (`???`) come from the group's YAML option, where the defaults are
written down once, with their comments. Choice lists that name a registry elsewhere (OPTIMIZER_NAMES,
SCHEDULE_NAMES, LOGGER_NAMES, TASK_NAMES) are kept equal to it by tests/experiments/test_schema.py, so
this module imports no torch and nothing from experiments.run.
Not handled: checks that need the machine, files or the model (experiments.config.check.validate does those).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from experiments.config.data_schema import DATA_SCHEMAS, DataConfig
from experiments.config.errors import ConfigError
from experiments.config.model_schema import EncDecModelNode, ModelNode, ShapeNode, switch_to
from experiments.config.rules import (POS_INT, POS_INT_OR_NULL, POS_NUMBER, STR, Checked, Rule, choice, close_key,
                                      omegaconf_error, ruled)
from tokenizer.pretokenize import resolve_pattern

OPTIMIZER_NAMES = ("adamw",)  # experiments.run.optim.OPTIMIZERS
SCHEDULE_NAMES = ("constant", "cosine", "linear")  # experiments.run.schedule.SCHEDULES
LOGGER_NAMES = ("disabled", "wandb_offline", "wandb_online")  # experiments.rundir.tracking.LOGGERS
TASK_NAMES = ("lm", "seq2seq")  # experiments.run.tasks.TASKS
EXTRAP = ("end", "every_eval", "never")
DTYPES = ("auto", "fp32", "bf16", "fp16")
SAMPLERS = ("random", "epoch")  # train.sampler: experiments.data.corpus.WindowSampler | experiments.data.epochs.EpochSampler


@dataclass
class OptimConfig(Checked):
    """optim: the optimizer (conf/optim/adamw.yaml)."""

    name: str = ruled(MISSING, choice(OPTIMIZER_NAMES))
    lr: float = ruled(MISSING, POS_NUMBER)  # peak learning rate; the schedule scales it
    betas: list[float] = ruled(MISSING, Rule("numbers", lo=0, hi=1, hi_open=True, length=2))
    eps: float = ruled(MISSING, POS_NUMBER)
    weight_decay: float = ruled(MISSING, Rule("number", lo=0))
    decay_embeddings: bool = MISSING


@dataclass
class ScheduleConfig(Checked):
    """schedule: the learning rate as a function of the step (conf/schedule/*.yaml)."""

    name: str = ruled(MISSING, choice(SCHEDULE_NAMES))
    warmup_steps: int = ruled(MISSING, Rule("int", lo=0))
    # warmup as a share of the run's optimizer steps, round(ratio * total); null: warmup_steps. Set, it wins
    warmup_ratio: float | None = ruled(MISSING, Rule("number", lo=0, hi=1, hi_open=True, nullable=True))
    min_lr_ratio: float = ruled(MISSING, Rule("number", lo=0, hi=1))


@dataclass
class TrainConfig(Checked):
    """train: budget, batching, cadence, device and run dir of one run (conf/train/default.yaml)."""

    flops: float | None = ruled(MISSING, Rule("number", lo=0, lo_open=True, nullable=True))
    tokens: int | None = ruled(MISSING, POS_INT_OR_NULL)
    steps: int = ruled(MISSING, POS_INT)
    batch_size: int = ruled(MISSING, POS_INT)
    n_ctx: int = ruled(MISSING, POS_INT)
    grad_accum: int = ruled(MISSING, POS_INT)
    grad_clip: float | None = ruled(MISSING, Rule("number", lo=0, lo_open=True, nullable=True))
    sampler: str = ruled(MISSING, choice(SAMPLERS))  # random (with replacement) | epoch (each window once per epoch)
    max_epochs: float | None = ruled(MISSING, Rule("number", lo=0, lo_open=True, nullable=True))
    log_interval: int = ruled(MISSING, POS_INT)
    eval_interval: int = ruled(MISSING, POS_INT)
    eval_batches: int = ruled(MISSING, POS_INT)
    eval_batch_size: int = ruled(MISSING, POS_INT)
    extrap: str = ruled(MISSING, choice(EXTRAP))
    extrap_factors: list[int] = ruled(MISSING, Rule("ints", lo=1))
    extrap_max_tokens: int = ruled(MISSING, POS_INT)
    ckpt_interval: int = ruled(MISSING, POS_INT)
    keep_last_k: int = ruled(MISSING, POS_INT)
    resume: bool = MISSING
    overwrite: bool = MISSING
    run_dir: str | None = ruled(MISSING, Rule("str", nullable=True))
    device: str = ruled(MISSING, STR)  # which devices exist: experiments.config.check
    dtype: str = ruled(MISSING, choice(DTYPES))
    compile: bool = MISSING
    num_threads: int | None = ruled(MISSING, POS_INT_OR_NULL)
    progress: bool = MISSING


@dataclass
class TokenizerConfig(Checked):
    """tokenizer: what every mode has."""

    mode: str = ruled(MISSING, choice(("train", "load")))


@dataclass
class TrainedTokenizer(TokenizerConfig):
    """tokenizer=train (and seq2seq): our byte-level BPE trained on the run's training split."""

    vocab_size: int = ruled(MISSING, Rule("int", lo=256))
    pattern: str = ruled(MISSING, STR)  # gpt2 | gpt4 | a regex
    special_tokens: list[str] = ruled(MISSING, Rule("strs"))
    min_frequency: int = ruled(MISSING, POS_INT)
    workers: int | None = ruled(MISSING, POS_INT_OR_NULL)
    max_train_bytes: int | None = ruled(MISSING, POS_INT_OR_NULL)

    def __post_init__(self) -> None:
        super().__post_init__()
        if MISSING in (self.vocab_size, self.special_tokens, self.pattern):
            return
        if self.vocab_size < 256 + len(self.special_tokens):
            raise ConfigError(f"vocab_size: must be an integer >= 256 + {len(self.special_tokens)} special "
                              f"token(s), got {self.vocab_size!r}")
        try:
            resolve_pattern(self.pattern)
        except ValueError as e:
            raise ConfigError(f"pattern: {e}") from None


@dataclass
class LoadedTokenizer(TokenizerConfig):
    """tokenizer=load: a tokenizer saved by Tokenizer.save / `bpe train` (its existence: experiments.config.check)."""

    path: str = ruled(MISSING, STR)


TOKENIZER_SCHEMAS: dict[str, type[TokenizerConfig]] = {"train": TrainedTokenizer, "load": LoadedTokenizer}


@dataclass
class LoggerConfig(Checked):
    """logger: wandb (offline or online) or none; metrics.jsonl and summary.json are written in every mode."""

    kind: str = ruled(MISSING, choice(LOGGER_NAMES))
    project: str = ruled(MISSING, STR)
    group: str = ruled(MISSING, STR)
    tags: list[str] = ruled(MISSING, Rule("strs"))
    job_type: str = ruled(MISSING, STR)


@dataclass
class TaskConfig(Checked):
    """task: what the run learns (conf/task/*.yaml)."""

    kind: str = ruled(MISSING, choice(TASK_NAMES))


# the groups of a run, in the order config.yaml lists them; RunConfig.from_dict builds each one on its own
GROUPS = ("model", "data", "tokenizer", "optim", "schedule", "train", "logger", "task")
# the groups with one schema for every option (data, tokenizer and model pick theirs: schema_of)
FIXED_GROUPS = {"optim": OptimConfig, "schedule": ScheduleConfig, "train": TrainConfig, "logger": LoggerConfig,
                "task": TaskConfig}


@dataclass
class RunConfig(Checked):
    """Everything one training run is configured by (conf/train.yaml composed). Attribute access, real types."""

    experiment_name: str = ruled(MISSING, STR)  # names the output dir, the wandb group and the report
    seed: int = ruled(MISSING, Rule("int", lo=0))  # model init, data windows, dropout
    model: ModelNode = field(default_factory=ModelNode)  # type: ignore[valid-type]
    data: DataConfig = MISSING
    tokenizer: TokenizerConfig = MISSING
    optim: OptimConfig = MISSING
    schedule: ScheduleConfig = MISSING
    train: TrainConfig = MISSING
    logger: LoggerConfig = MISSING
    task: TaskConfig = MISSING

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dicts and lists (what config.yaml holds); RunConfig.from_dict(rc.to_dict()) == rc."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """A RunConfig from plain, resolved dicts (a composed config's to_container, config.yaml). Each group is
        built on its own schema (data by data.source, tokenizer by mode, model by task.kind), so every mistake is
        one ConfigError naming its key: `optim.lr: must be a number > 0, got -1.0`."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown key; {close_key(unknown[0], names) or 'valid keys: ' + ', '.join(names)}")
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in d]
        if missing:
            raise ConfigError(f"{missing[0]}: missing top-level key; compose the config from conf/train.yaml")
        cls.check_fields(d)  # experiment_name, seed: before the groups that interpolate them (logger.group)
        parts = {name: _build(schema_of(name, d), d[name], name) for name in GROUPS}
        if parts["model"].shape is not None:  # a mapping in the composed config (see model_schema)
            parts["model"].shape = _build(ShapeNode, parts["model"].shape, "model.shape")
        return cls(experiment_name=d["experiment_name"], seed=d["seed"], **parts)


def schema_of(group: str, d: dict[str, Any]) -> type:
    """The schema class of `group` in the plain run config `d` (the discriminated groups read their key)."""
    if group == "data":
        source = (d.get("data") or {}).get("source")
        if source not in DATA_SCHEMAS:
            raise ConfigError(f"data.source: unknown value {source!r}; choose from {', '.join(DATA_SCHEMAS)}")
        return DATA_SCHEMAS[source]
    if group == "tokenizer":
        mode = (d.get("tokenizer") or {}).get("mode")
        if mode not in TOKENIZER_SCHEMAS:
            raise ConfigError(f"tokenizer.mode: unknown value {mode!r}; choose from {', '.join(TOKENIZER_SCHEMAS)}")
        return TOKENIZER_SCHEMAS[mode]
    if group == "model":
        return EncDecModelNode if (d.get("task") or {}).get("kind") == "seq2seq" else ModelNode
    return FIXED_GROUPS[group]


def _build(schema: type, value: Any, key: str) -> Any:
    """`schema` built from the plain dict `value`: OmegaConf converts and type-checks, __post_init__ checks."""
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: must be a group of keys, got {value!r}")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), value))
    except ConfigError as e:  # a Rule, from __post_init__: `<field>: <why>`
        raise ConfigError(f"{key}.{e}") from None
    except OmegaConfBaseException as e:
        raise omegaconf_error(e, prefix=key) from None
    except (TypeError, ValueError) as e:  # arch's own checks (PosConfig inside the model node)
        raise ConfigError(f"{key}: {e}") from None


def register(store: ConfigStore | None = None) -> None:
    """Store the schemas where conf/ names them: run_schema, schema/data/<source>, schema/tokenizer/<mode>,
    schema/model/seq2seq (idempotent: a second call stores the same nodes again)."""
    cs = store or ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    for source, schema in DATA_SCHEMAS.items():
        cs.store(group="schema/data", name=source, node=schema)
    for mode, schema in TOKENIZER_SCHEMAS.items():
        cs.store(group="schema/tokenizer", name=mode, node=schema)
    cs.store(group="schema/model", name="seq2seq", node=switch_to(EncDecModelNode))
