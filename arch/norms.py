"""Normalisation layers over the last dim and the NORMS registry.

`layernorm` subtracts the mean and divides by the std, then scales (and shifts when cfg.bias: GPT-2 has the
shift; bias=False drops it, as nanoGPT does). `rmsnorm` only divides by the root mean square and scales.
Both use cfg.layer_norm_eps inside the square root. Not handled: norms over other dims, scale-free variants.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arch.config import ModelConfig


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight (+ bias).  https://arxiv.org/abs/1607.06450 (Ba et al. 2016)"""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        self.weight = nn.Parameter(torch.ones(cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(cfg.d_model)) if cfg.bias else None

    def forward(self, x: Tensor) -> Tensor:  # (B, T, C) -> (B, T, C)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight.  https://arxiv.org/abs/1910.07467 (Zhang & Sennrich 2019)"""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        self.weight = nn.Parameter(torch.ones(cfg.d_model))

    def forward(self, x: Tensor) -> Tensor:  # (B, T, C) -> (B, T, C)
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


NORMS: dict[str, type[nn.Module]] = {
    "layernorm": LayerNorm,
    "rmsnorm": RMSNorm,
}


def build_norm(cfg: ModelConfig) -> nn.Module:
    if cfg.norm_type not in NORMS:
        raise ValueError(f"unknown norm_type {cfg.norm_type!r}; choose from {sorted(NORMS)}")
    return NORMS[cfg.norm_type](cfg)
