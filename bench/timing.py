"""What the model benchmarks time: one training step (forward + loss + backward + optimizer step).

Shared by bench_model.py, bench_encdec.py and bench_norms.py so that every model, ours and the peer's, is timed
through the same code: the loss function is the only thing that differs between them.
"""

from __future__ import annotations

import time
from typing import Callable

import torch


def train_step(loss_fn: Callable[[], torch.Tensor], opt: torch.optim.Optimizer) -> None:
    """loss_fn() -> scalar loss; backward, optimizer step, gradients cleared."""
    loss_fn().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def timed_train_step(loss_fn: Callable[[], torch.Tensor], opt: torch.optim.Optimizer) -> tuple[float, float]:
    """train_step, returning (wall seconds, process CPU seconds of all threads)."""
    t0, c0 = time.perf_counter(), time.process_time()
    train_step(loss_fn, opt)
    return time.perf_counter() - t0, time.process_time() - c0
