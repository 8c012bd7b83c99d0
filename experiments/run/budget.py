"""How long a run trains: what a sweep holds equal across its runs, and the steps that makes for this model.

    budget = Budget.plan(rc.train, flops_per_token=fpt, tokens_per_sequence=T, world_size=2)
    budget.total_steps, budget.tokens_per_step, budget.held      # e.g. 245, 4096, "flops"

`train.flops` (total training FLOPs, 6N + attention per token: each shape trains for flops / its own
FLOPs-per-token tokens, so shapes compare at equal compute) > `train.tokens` > `train.steps`.
check_epochs: how often the budget covers the train split (`train.max_epochs` refuses more; a random-window run
past one epoch is warned about: some of its tokens are then certainly seen twice).
Not handled: budgets in wall-clock time.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from experiments.config.errors import ConfigError
from experiments.config.schema import TrainConfig

log = logging.getLogger(__name__)


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
