"""The number format of a training step (`train.dtype`): the autocast around the forward pass and, for fp16, the
gradient scaler that keeps small gradients from underflowing.

    precision = Precision(device, "fp16")
    with precision.autocast:
        loss = model.loss(x, y)
    precision.backward(loss)        # fp16: backward of loss x scale
    precision.unscale(optimizer)    # fp16: gradients divided back (before grad norms and clipping)
    precision.step(optimizer)       # fp16: skipped when a gradient overflowed (inf / nan), and the scale lowered

auto: bf16 autocast on a CUDA device that supports it, fp32 elsewhere; bf16: bf16 autocast (CUDA; the config check
refuses it on the CPU); fp16: fp16 autocast with torch.amp.GradScaler (GPUs without bf16, e.g. V100 / T4; the
CPU too where torch allows it); fp32: no autocast. Parameters, gradients and optimizer state stay fp32 in every
mode. The scaler's state (scale, growth tracker) is part of a checkpoint (`state_dict`), so a resumed fp16 run
continues exactly. Not handled: fp8, pure half-precision weights.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch


class Precision:
    """The autocast context (re-entered every step) and, for fp16, the gradient scaler of one run."""

    def __init__(self, device: torch.device, dtype: str) -> None:
        use_bf16 = dtype == "bf16" or (dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
        self.dtype = torch.float16 if dtype == "fp16" else torch.bfloat16 if use_bf16 else torch.float32  # matmuls
        self.autocast: AbstractContextManager = (nullcontext() if self.dtype == torch.float32
                                                 else torch.autocast(device_type=device.type, dtype=self.dtype))
        self.scaler = torch.amp.GradScaler(device.type) if self.dtype == torch.float16 else None

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss the backward starts from: fp16 multiplies it by the scaler's scale, the rest leave it as is."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaled(loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """fp16: divide the gradients by the scale in place; an overflow leaves inf / nan in them."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    @property
    def skips_overflow(self) -> bool:
        """fp16: a non-finite gradient is an overflow of the scaled backward (that step is skipped, the scale
        lowered), not a diverged run; a non-finite loss still is one."""
        return self.scaler is not None

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)  # skipped when unscale found inf / nan
            self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps (fp16: the scaler's scale and growth tracker; {} otherwise)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)
