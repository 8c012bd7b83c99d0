"""LossModule: a model's loss as its forward(), the module the trainer steps (and compiles, DDP-wraps, stacks).

    loss = LossModule(model)(ids, targets)          # == model.loss(ids, targets); seq2seq: (src, tgt_in, tgt_out)

DDP's gradient hooks and torch.compile see the whole training step through it, and a packed pack
(experiments/run/stacked.py) calls it under vmap with each member's parameters.
"""

from __future__ import annotations

import torch
from torch import nn


class LossModule(nn.Module):
    """model.loss as a forward(), so DDP's gradient hooks (and torch.compile) see the whole training step."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return self.model.loss(*batch)  # (ids, targets) | seq2seq (src, tgt_in, tgt_out)
