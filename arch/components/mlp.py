"""The position-wise feed-forward sublayer and the MLPS registry (keyed by cfg.activation).

gelu / relu: c_fc (C -> d_mlp), activation, c_proj (d_mlp -> C). GELU is the tanh approximation, which is
GPT-2's (HF "gelu_new"). swiglu: one fused c_fc (C -> 2 d_mlp) split into gate and up, silu(gate) * up, then
c_proj (d_mlp -> C); with the default d_mlp = 4 C it therefore has 1.5x the MLP parameters of gelu (no 2/3
rescaling is applied: set d_mlp yourself to match budgets). Dropout is on the output (the residual branch).
`hooks` (a block's arch.hook_points.PointHooks, passed by the decoder-only blocks while hooks are set) fires
mlp.hook_pre, mlp.hook_post and hook_mlp_out. Not handled: other gated variants (GeGLU, ReGLU), mixture of experts.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from arch.config import ModelConfig
from arch.hook_points import PointHooks


class MLP(nn.Module):
    """c_fc -> act -> c_proj -> dropout. Subclasses set `act`."""

    def __init__(self, cfg: ModelConfig, fc_mult: int = 1) -> None:
        super().__init__()
        self.fc_sizes = (cfg.d_mlp,) * fc_mult  # c_fc's output rows: one block, or swiglu's gate | up
        self.c_fc = nn.Linear(cfg.d_model, fc_mult * cfg.d_mlp, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def act(self, h: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor, hooks: PointHooks | None = None) -> Tensor:  # (B, T, C) -> (B, T, C)
        if hooks is None:
            return self.dropout(self.c_proj(self.act(self.c_fc(x))))  # hidden (B, T, d_mlp)
        h = self.act(hooks.fire("mlp.hook_pre", self.c_fc(x)))  # arch.hook_points: same ops, hooks between them
        return hooks.fire("hook_mlp_out", self.dropout(self.c_proj(hooks.fire("mlp.hook_post", h))))


class GeluMLP(MLP):
    """GELU, tanh approximation (GPT-2). https://arxiv.org/abs/1606.08415 (Hendrycks & Gimpel 2016)"""

    def act(self, h: Tensor) -> Tensor:
        return F.gelu(h, approximate="tanh")


class GeluExactMLP(MLP):
    """GELU, exact (erf) form, as BERT / BART / PyTorch's default. Differs from the tanh form by < 5e-4."""

    def act(self, h: Tensor) -> Tensor:
        return F.gelu(h)


class ReluMLP(MLP):
    """ReLU, as in the original Transformer. https://arxiv.org/abs/1706.03762"""

    def act(self, h: Tensor) -> Tensor:
        return F.relu(h)


class SwigluMLP(MLP):
    """SwiGLU gated MLP. https://arxiv.org/abs/2002.05202 (Shazeer 2020)"""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg, fc_mult=2)

    def act(self, h: Tensor) -> Tensor:
        gate, up = h.chunk(2, dim=-1)  # (B, T, 2 d_mlp) -> 2 x (B, T, d_mlp)
        return F.silu(gate) * up


MLPS: dict[str, type[MLP]] = {
    "gelu": GeluMLP,
    "gelu_exact": GeluExactMLP,
    "relu": ReluMLP,
    "swiglu": SwigluMLP,
}


def build_mlp(cfg: ModelConfig) -> MLP:
    if cfg.activation not in MLPS:
        raise ValueError(f"unknown activation {cfg.activation!r}; choose from {sorted(MLPS)}")
    return MLPS[cfg.activation](cfg)
