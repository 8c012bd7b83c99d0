"""Normalisation layers over the last dim and the NORMS registry.

`layernorm` subtracts the mean and divides by the std, then scales (and shifts when cfg.bias: GPT-2 has the
shift; bias=False drops it, as nanoGPT does). `rmsnorm` only divides by the root mean square and scales.
Both use cfg.layer_norm_eps inside the square root. `build_norm(cfg, kind, dim, bias)` also makes the per-head
QK-norm (kind = cfg.qk_norm, dim = d_head, bias=False: a shift on k adds the same q.b to every score of a query,
which softmax ignores, and ViT-22B's QK LayerNorms have none). Not handled: scale-free variants.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from arch.config import ModelConfig


class LayerNorm(nn.Module):
    """y = (x - mean) / sqrt(var + eps) * weight (+ bias).  https://arxiv.org/abs/1607.06450 (Ba et al. 2016)"""

    def __init__(self, cfg: ModelConfig, dim: int | None = None, bias: bool | None = None) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        shift = cfg.bias if bias is None else bias
        self.weight = nn.Parameter(torch.ones(dim or cfg.d_model))
        self.bias = nn.Parameter(torch.zeros(dim or cfg.d_model)) if shift else None

    def forward(self, x: Tensor) -> Tensor:  # (..., dim) -> (..., dim)
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight.  https://arxiv.org/abs/1910.07467 (Zhang & Sennrich 2019)"""

    def __init__(self, cfg: ModelConfig, dim: int | None = None, bias: bool | None = None) -> None:
        super().__init__()
        self.eps = cfg.layer_norm_eps
        self.weight = nn.Parameter(torch.ones(dim or cfg.d_model))  # no shift, whatever `bias` says

    def forward(self, x: Tensor) -> Tensor:  # (..., dim) -> (..., dim)
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


NORMS: dict[str, type[nn.Module]] = {
    "layernorm": LayerNorm,
    "rmsnorm": RMSNorm,
}


def build_norm(cfg: ModelConfig, kind: str | None = None, dim: int | None = None,
               bias: bool | None = None) -> nn.Module:
    """NORMS[kind or cfg.norm_type] over the last `dim` (default d_model) features; LayerNorm's shift follows
    `bias` (default cfg.bias)."""
    kind = kind or cfg.norm_type
    if kind not in NORMS:
        raise ValueError(f"unknown norm_type {kind!r}; choose from {sorted(NORMS)}")
    return NORMS[kind](cfg, dim, bias)
