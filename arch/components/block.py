"""Transformer blocks, one class per (block kind, norm placement), and the BLOCK_KINDS registry.

`BLOCK_KINDS[cfg.block][cfg.norm]` is the class: `sequential` (attn, then mlp on the updated stream: BLOCKS) or
`parallel` (GPT-J / PaLM: attn and mlp read the same input and both outputs join the stream at once:
PARALLEL_BLOCKS). A parallel block is one sublayer F(h) = attn(h) + mlp(h), and the norm placement applies to F
as it would to any sublayer: pre x + F(ln_1(x)) (one shared norm, GPT-J / PaLM), post ln_1(x + F(x)), sandwich
x + ln_1_out(F(ln_1(x))). Each class says with `final_norm` whether the model needs a final norm `ln_f` after
the last block. Dropout lives inside the sublayers (on their outputs). CROSS_BLOCKS (by norm placement) are the
decoder blocks of an encoder-decoder (arch.encdec): self-attention, then cross-attention over the encoder
output, then the MLP, each sublayer normed as its placement says; the encoder's blocks are BLOCKS.
Hook points (arch.hook_points): a sequential block fires `step.hooks` hook_resid_mid on the stream between its
two sublayers (after ln_1 for post-LN) and passes them to the MLP; parallel blocks have no such point.
Not handled: DeepNorm residual scaling, parallel blocks with cross-attention, PaLM's fused attn+mlp input
projection (the math is the same, the kernels are not).
"""

from __future__ import annotations

from torch import Tensor, nn

from arch.components.attention import CausalSelfAttention, CrossAttention, Step
from arch.components.mlp import build_mlp
from arch.components.norms import build_norm
from arch.config import ModelConfig


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
        if step.hooks is not None:
            x = step.hooks.fire("hook_resid_mid", x)
        x = x + self.mlp(self.ln_2(x), step.hooks)
        return x


class PostNormBlock(Block):
    """Post-LN (original Transformer): normalise after each residual add; no final norm.

        x ──┬──────────(+)─ ln_1 ──┬──────────(+)─ ln_2 ──> out
            └─ attn ────┘          └─ mlp ─────┘
    https://arxiv.org/abs/1706.03762 (Vaswani et al. 2017)"""

    final_norm = False

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = self.ln_1(x + self.attn(x, step))
        if step.hooks is not None:
            x = step.hooks.fire("hook_resid_mid", x)
        x = self.ln_2(x + self.mlp(x, step.hooks))
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
        if step.hooks is not None:
            x = step.hooks.fire("hook_resid_mid", x)
        x = x + self.ln_2_out(self.mlp(self.ln_2(x), step.hooks))
        return x


class ParallelBlock(nn.Module):
    """Holds the parts every parallel placement has: ln_1, attn, mlp (no ln_2: one norm feeds both)."""

    final_norm: bool

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.ln_1 = build_norm(cfg)
        self.attn = CausalSelfAttention(cfg, layer_idx)
        self.mlp = build_mlp(cfg)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        raise NotImplementedError


class ParallelPreNormBlock(ParallelBlock):
    """Parallel attention + MLP with one shared pre-norm (GPT-J; PaLM section 2, "Parallel Layers").

        x ──┬───────────────────────────(+)──> out
            └─ ln_1 ─┬─ attn ──(+)──────┘
                     └─ mlp ────┘
    https://github.com/kingoflolz/mesh-transformer-jax (Wang & Komatsuzaki 2021), https://arxiv.org/abs/2204.02311"""

    final_norm = True

    def forward(self, x: Tensor, step: Step) -> Tensor:
        h = self.ln_1(x)
        return x + self.attn(h, step) + self.mlp(h, step.hooks)


class ParallelPostNormBlock(ParallelBlock):
    """Parallel attention + MLP with post-LN: one norm after the single residual add; no final norm.

        x ──┬─────────(+)─ ln_1 ──> out
            ├─ attn ───┤
            └─ mlp ────┘"""

    final_norm = False

    def forward(self, x: Tensor, step: Step) -> Tensor:
        return self.ln_1(x + self.attn(x, step) + self.mlp(x, step.hooks))


class ParallelSandwichNormBlock(ParallelBlock):
    """Parallel attention + MLP with sandwich-LN: one norm on the summed branch output before the add.

        x ──┬─────────────────────────────────(+)──> out
            └─ ln_1 ─┬─ attn ──(+)─ ln_1_out ──┘
                     └─ mlp ────┘"""

    final_norm = True

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx)
        self.ln_1_out = build_norm(cfg)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        h = self.ln_1(x)
        return x + self.ln_1_out(self.attn(h, step) + self.mlp(h, step.hooks))


class CrossPreNormBlock(PreNormBlock):
    """Pre-LN decoder block of an encoder-decoder: causal self-attention, cross-attention, MLP.

        x ──┬──────────────────(+)──┬─────────────────────────────(+)──┬─────────────────(+)──> out
            └─ ln_1 ─ attn ─────┘   └─ ln_cross ─ cross_attn(mem) ─┘   └─ ln_2 ─ mlp ────┘
    https://arxiv.org/abs/1910.10683 (T5), https://arxiv.org/abs/2002.04745 (Xiong et al. 2020)"""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx)
        self.ln_cross = build_norm(cfg)
        self.cross_attn = CrossAttention(cfg, layer_idx)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = x + self.attn(self.ln_1(x), step)
        x = x + self.cross_attn(self.ln_cross(x), step)
        x = x + self.mlp(self.ln_2(x))
        return x


class CrossPostNormBlock(PostNormBlock):
    """Post-LN decoder block, the original Transformer's (Vaswani et al. 2017, figure 1): no final norm.

        x ──┬──────────(+)─ ln_1 ──┬────────────────────(+)─ ln_cross ──┬──────────(+)─ ln_2 ──> out
            └─ attn ────┘          └─ cross_attn(mem) ───┘              └─ mlp ─────┘
    https://arxiv.org/abs/1706.03762"""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx)
        self.ln_cross = build_norm(cfg)
        self.cross_attn = CrossAttention(cfg, layer_idx)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = self.ln_1(x + self.attn(x, step))
        x = self.ln_cross(x + self.cross_attn(x, step))
        x = self.ln_2(x + self.mlp(x))
        return x


class CrossSandwichNormBlock(SandwichNormBlock):
    """Sandwich-LN decoder block: each of the three sublayers normed on its input and on its output."""

    def __init__(self, cfg: ModelConfig, layer_idx: int) -> None:
        super().__init__(cfg, layer_idx)
        self.ln_cross = build_norm(cfg)
        self.cross_attn = CrossAttention(cfg, layer_idx)
        self.ln_cross_out = build_norm(cfg)

    def forward(self, x: Tensor, step: Step) -> Tensor:
        x = x + self.ln_1_out(self.attn(self.ln_1(x), step))
        x = x + self.ln_cross_out(self.cross_attn(self.ln_cross(x), step))
        x = x + self.ln_2_out(self.mlp(self.ln_2(x)))
        return x


BLOCKS: dict[str, type[Block]] = {  # sequential blocks, by norm placement
    "pre": PreNormBlock,
    "post": PostNormBlock,
    "sandwich": SandwichNormBlock,
}

PARALLEL_BLOCKS: dict[str, type[ParallelBlock]] = {  # parallel blocks, by norm placement
    "pre": ParallelPreNormBlock,
    "post": ParallelPostNormBlock,
    "sandwich": ParallelSandwichNormBlock,
}

CROSS_BLOCKS: dict[str, type[Block]] = {  # encoder-decoder decoder blocks (with cross-attention), by placement
    "pre": CrossPreNormBlock,
    "post": CrossPostNormBlock,
    "sandwich": CrossSandwichNormBlock,
}

BLOCK_KINDS: dict[str, dict[str, type[nn.Module]]] = {
    "sequential": BLOCKS,
    "parallel": PARALLEL_BLOCKS,
}


def block_class(cfg: ModelConfig) -> type[nn.Module]:
    """BLOCK_KINDS[cfg.block][cfg.norm], e.g. ParallelPreNormBlock for block=parallel, norm=pre."""
    if cfg.block not in BLOCK_KINDS:
        raise ValueError(f"unknown block {cfg.block!r}; choose from {sorted(BLOCK_KINDS)}")
    kinds = BLOCK_KINDS[cfg.block]
    if cfg.norm not in kinds:
        raise ValueError(f"unknown norm {cfg.norm!r}; choose from {sorted(kinds)}")
    return kinds[cfg.norm]
