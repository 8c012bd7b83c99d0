"""The number format of a training step (`train.dtype`): the autocast around the forward pass.

    precision = Precision(device, "auto")
    with precision.autocast:
        loss = model.loss(x, y)

auto: bf16 autocast on a CUDA device that supports it, fp32 elsewhere; bf16: bf16 autocast (CUDA; the config check
refuses it on the CPU); fp32: no autocast. Parameters, gradients and optimizer state stay fp32 in every mode.
Not handled: fp8, pure half-precision weights.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch


class Precision:
    """The autocast context of one run (re-entered every step)."""

    def __init__(self, device: torch.device, dtype: str) -> None:
        use_bf16 = dtype == "bf16" or (dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
        self.dtype = torch.bfloat16 if use_bf16 else torch.float32  # what matmuls run in
        self.autocast: AbstractContextManager = (torch.autocast(device_type=device.type, dtype=torch.bfloat16)
                                                 if use_bf16 else nullcontext())
