"""How long a run trains: what a sweep holds equal across its runs, and the steps that makes for this model.

    budget = Budget.plan(rc.train, flops_per_token=fpt, tokens_per_sequence=T, world_size=2)
    budget.total_steps, budget.tokens_per_step, budget.held      # e.g. 245, 4096, "flops"

`train.flops` (total training FLOPs, 6N + attention per token: each shape trains for flops / its own
FLOPs-per-token tokens, so shapes compare at equal compute) > `train.tokens` > `train.steps`.
A budget is given once: check_budget_given_once refuses a budget key on the command line that a higher one set
elsewhere would override (`experiment=X train.steps=20` where X sets train.tokens: one line naming both, exit 2,
instead of training X's tokens while the label reads steps=20); `train.tokens=null train.steps=20` trains 20 steps.
ARCHLAB_MAX_STEPS=N (environment) caps every run at N optimizer steps, whatever its budget, and says so in the
run's log: for trying commands quickly (the README test sets it); max_steps_cap() reads and checks it.
check_epochs: how often the budget covers the train split (`train.max_epochs` refuses more; a random-window run
past one epoch is warned about: some of its tokens are then certainly seen twice).
Not handled: budgets in wall-clock time.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from experiments.config.errors import ConfigError
from experiments.config.schema import TrainConfig

log = logging.getLogger(__name__)


MAX_STEPS_ENV = "ARCHLAB_MAX_STEPS"
BUDGET_KEYS = ("flops", "tokens", "steps")  # under train., highest precedence first


def max_steps_cap() -> int | None:
    """ARCHLAB_MAX_STEPS as an integer >= 1, None when unset or empty; ConfigError for any other value."""
    raw = os.environ.get(MAX_STEPS_ENV, "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ConfigError(f"{MAX_STEPS_ENV} (environment): must be an integer >= 1, got {raw!r}")
    return int(raw)


def check_budget_given_once(given: Iterable[tuple[str, list[Any]]], train: Mapping[str, Any],
                            experiment: str | None = None) -> None:
    """ConfigError (one line) when a budget this command gives would be ignored: `given` holds (key, values) of
    the command's overrides (a sweep's values all listed), `train` the composed train node, `experiment` the
    command's experiment=... (named as what set the config's budget). A null value gives no budget; flops >
    tokens > steps."""
    source = f"experiment={experiment}" if experiment else "the config"
    given = {k: vs for k, vs in given if k.startswith("train.") and k[6:] in BUDGET_KEYS}
    for key, values in given.items():
        shown = next((v for v in values if v is not None), None)
        if shown is None:
            continue
        for higher in BUDGET_KEYS[: BUDGET_KEYS.index(key[6:])]:
            value = train.get(higher)
            if value:
                where = "this command also sets" if f"train.{higher}" in given else f"{source} sets"
                raise ConfigError(f"{key}={shown}: {where} train.{higher}={value}, which takes precedence "
                                  f"(train.flops > train.tokens > train.steps); give one budget: "
                                  f"train.{higher}=null {key}={shown}, or leave {key} out")


def training_budget(tc: TrainConfig, flops_per_token: float) -> dict[str, Any]:
    """{"held": "flops" | "tokens" | "steps", "tokens": the token budget, or None when steps are held}."""
    if tc.flops:
        return {"held": "flops", "tokens": tc.flops / flops_per_token}
    if tc.tokens:
        return {"held": "tokens", "tokens": tc.tokens}
    return {"held": "steps", "tokens": None}


@dataclass(frozen=True)
class Budget:
    held: str                # flops | tokens | steps: what summary.json's `budget` says
    total_steps: int         # optimizer steps this run takes
    tokens_per_step: int     # batch_size x tokens per sequence x grad_accum x world_size
    flops_per_token: float   # training FLOPs per token (6N + attention), for the `flops` column and MFU
    grad_accum: int          # micro-batches per optimizer step

    @classmethod
    def plan(cls, tc: TrainConfig, *, flops_per_token: float, tokens_per_sequence: int, world_size: int) -> Budget:
        tokens_per_step = tc.batch_size * tokens_per_sequence * tc.grad_accum * world_size
        budget = training_budget(tc, flops_per_token)
        steps = math.ceil(budget["tokens"] / tokens_per_step) if budget["tokens"] else tc.steps
        cap = max_steps_cap()
        if cap is not None and cap < steps:
            log.warning("%s=%d caps this run at %d of its %d steps (%s budget)", MAX_STEPS_ENV, cap, cap, steps,
                        budget["held"])
            steps = cap
        return cls(held=budget["held"], total_steps=steps, tokens_per_step=tokens_per_step,
                   flops_per_token=flops_per_token, grad_accum=tc.grad_accum)


def check_epochs(tc: TrainConfig, budget: Budget, epoch_tokens: int | None, *, warn: bool) -> None:
    """ConfigError when this run's budget covers the train split (`epoch_tokens` a pass; None: not counted,
    seq2seq) more than train.max_epochs times; a warning (if `warn`) when random windows go past one pass."""
    if epoch_tokens is None:
        return
    planned = budget.total_steps * budget.tokens_per_step
    epochs = planned / epoch_tokens
    if tc.max_epochs is not None and epochs > tc.max_epochs:
        raise ConfigError(f"train.max_epochs: the budget of {planned} tokens covers the train split "
                          f"({epoch_tokens} tokens a pass) {epochs:.2f} times, more than {tc.max_epochs:g}; lower "
                          f"the budget, use more data, or raise train.max_epochs")
    if warn and epochs > 1 and tc.sampler == "random":
        log.warning("the budget of %d tokens covers the train split (%d tokens) %.2f times: tokens repeat "
                    "(train.sampler=epoch with train.max_epochs=1 sees each once)", planned, epoch_tokens, epochs)
