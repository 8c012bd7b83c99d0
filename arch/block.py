"""Transformer blocks, one class per norm placement (pre / post / sandwich), and the BLOCKS registry.

Each class says with `final_norm` whether the model needs a final norm `ln_f` after the last block.
Dropout lives inside the sublayers (on their outputs). Not handled: parallel attention+MLP (GPT-J),
DeepNorm residual scaling, cross-attention.
"""

from __future__ import annotations

from torch import Tensor, nn

from arch.attention import CausalSelfAttention, Step
from arch.config import ModelConfig
from arch.mlp import build_mlp
from arch.norms import build_norm


class Block(nn.Module):
    """Holds the parts every placement has: ln_1, attn, ln_2, mlp."""

    final_norm: bool

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.ln_1 = build_norm(cfg)
        self.attn = CausalSelfAttention(cfg, layer_idx)
        self.ln_2 = build_norm(cfg)
        self.mlp = build_mlp(cfg)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        raise NotImplementedError


class PreNormBlock(Block):
    """Pre-LN (GPT-2): normalise each sublayer's input; the residual stream itself is never normalised.

        x ──┬──────────────────────(+)──┬───────────────────(+)──> out
            └─ ln_1 ─ attn ─────────┘   └─ ln_2 ─ mlp ──────┘
    https://arxiv.org/abs/2002.04745 (Xiong et al. 2020)"""

    final_norm = True

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = x + self.attn(self.ln_1(x), step)
        x = x + self.mlp(self.ln_2(x))
        return x


class PostNormBlock(Block):
    """Post-LN (original Transformer): normalise after each residual add; no final norm.

        x ──┬──────────(+)─ ln_1 ──┬──────────(+)─ ln_2 ──> out
            └─ attn ────┘          └─ mlp ─────┘
    https://arxiv.org/abs/1706.03762 (Vaswani et al. 2017)"""

    final_norm = False

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = self.ln_1(x + self.attn(x, step))
        x = self.ln_2(x + self.mlp(x))
        return x


class SandwichNormBlock(Block):
    """Sandwich-LN: pre-LN plus a norm on each sublayer's output before the residual add.

        x ──┬──────────────────────────────(+)──┬──────────────────────────────(+)──> out
            └─ ln_1 ─ attn ─ ln_1_out ──────┘   └─ ln_2 ─ mlp ─ ln_2_out ───────┘
    https://arxiv.org/abs/2105.13290 (Ding et al. 2021, CogView)"""

    final_norm = True

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx)
        self.ln_1_out = build_norm(cfg)
        self.ln_2_out = build_norm(cfg)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = x + self.ln_1_out(self.attn(self.ln_1(x), step))
        x = x + self.ln_2_out(self.mlp(self.ln_2(x)))
        return x


BLOCKS: dict[str, type[Block]] = {
    "pre": PreNormBlock,
    "post": PostNormBlock,
    "sandwich": SandwichNormBlock,
}
