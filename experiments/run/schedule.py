"""Learning-rate schedules: linear warmup, then cosine | linear | constant, as a pure function of the step.

`lr_at(step)` is stateless, so a resumed run gets the same lr from its step counter alone (no scheduler
state to checkpoint). Steps count optimizer updates from 0; `step` here is the update about to be taken.
The warmup is `warmup_steps` updates, or with `warmup_ratio` set (HF Trainer's name; litgpt's lr_warmup_fraction)
`round(warmup_ratio * total_steps)` (Python's round: half to even), so runs of different lengths warm up over the
same share of their updates; the ratio takes precedence over warmup_steps.
Not handled: restarts, per-group lrs, schedules in tokens instead of steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def _cosine(progress: float, min_ratio: float) -> float:
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _linear(progress: float, min_ratio: float) -> float:
    return 1.0 - (1.0 - min_ratio) * progress


def _constant(progress: float, min_ratio: float) -> float:
    return 1.0


# decay shape after warmup: progress in [0, 1] -> multiplier of the peak lr
SCHEDULES: dict[str, Callable[[float, float], float]] = {
    "cosine": _cosine,
    "linear": _linear,
    "constant": _constant,
}


def warmup_updates(total_steps: int, warmup_steps: int, warmup_ratio: float | None) -> int:
    """The warmup length in updates: round(warmup_ratio * total_steps) when the ratio is set, else warmup_steps.

    >>> warmup_updates(200, 20, 0.05), warmup_updates(200, 20, None)
    (10, 20)
    """
    return warmup_steps if warmup_ratio is None else round(warmup_ratio * total_steps)


def lr_at(step: int, *, name: str, base_lr: float, total_steps: int, warmup_steps: int = 0,
          warmup_ratio: float | None = None, min_lr_ratio: float = 0.0) -> float:
    """Learning rate for optimizer update `step` (0-based) of `total_steps`.

    Warmup ramps linearly from base_lr / W (never 0) to base_lr over W = warmup_updates(...) updates; the decay
    then runs from base_lr to min_lr_ratio * base_lr at the last update.

    >>> [round(lr_at(s, name="cosine", base_lr=1.0, total_steps=5, warmup_steps=2, min_lr_ratio=0.0), 3) for s in range(5)]
    [0.5, 1.0, 0.75, 0.25, 0.0]
    """
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; choose from {sorted(SCHEDULES)}")
    warmup_steps = warmup_updates(total_steps, warmup_steps, warmup_ratio)
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    decay_steps = total_steps - warmup_steps
    progress = 1.0 if decay_steps <= 0 else min(1.0, (step - warmup_steps + 1) / decay_steps)
    return base_lr * SCHEDULES[name](progress, min_lr_ratio)
