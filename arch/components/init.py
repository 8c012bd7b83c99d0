"""Weight initialisation schemes, one function per paper, and the INITS registry keyed by cfg.init.

A scheme takes a whole stack (a Transformer, or an encoder-decoder's Encoder / Decoder: any module with `cfg` and
`wte`) once all its modules exist and overwrites every Linear and Embedding weight in module order, so the random
numbers drawn (and the loss curves) follow the modules' construction order. Biases become 0; norms keep their
construction values (weight 1, shift 0). `gpt2`: N(0, 0.02), the residual output projections N(0, 0.02 / sqrt(2
n_layers)). `xavier`: uniform per logical matrix (q, k, v and swiglu's gate / up, each fused into one Linear, get
their own fans: `_fused_blocks`), embeddings N(0, 1 / d_model). HEAD_INITS initialises an encoder-decoder's untied
lm_head the same way. Not handled: muP, depth-scaled (DeepNet) inits, a scheme per module type.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from arch.components.attention import CausalSelfAttention, CrossAttention
from arch.components.mlp import MLP


def init_gpt2(model: nn.Module) -> None:
    """GPT-2 init: Linear/Embedding weights N(0, 0.02), biases 0, norms 1 (and 0), and the residual output
    projections (attn.c_proj, mlp.c_proj; cross_attn.c_proj too) N(0, 0.02 / sqrt(2 n_layers)).
    (Radford et al. 2019, section 2.3). `model` is any stack with `cfg` and `wte`: a Transformer, or an
    encoder-decoder's Encoder / Decoder (each scaled by its own depth)."""
    std = 0.02
    for name, module in model.named_modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            proj = name.endswith("attn.c_proj") or name.endswith("mlp.c_proj")
            nn.init.normal_(module.weight, mean=0.0, std=std / math.sqrt(2 * model.cfg.n_layers) if proj else std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


def _fused_blocks(model: nn.Module) -> dict[nn.Linear, tuple[int, ...]]:
    """Linears that fuse several logical matrices, with their row-block sizes: c_attn = q | k | v, and swiglu's
    c_fc = gate | up. Xavier's fans belong to each logical matrix, not to the fused one."""
    out: dict[nn.Linear, tuple[int, ...]] = {}
    for module in model.modules():
        if isinstance(module, CausalSelfAttention):
            out[module.c_attn] = module.qkv_sizes
        elif isinstance(module, CrossAttention):
            out[module.c_kv] = module.kv_sizes
        elif isinstance(module, MLP):
            out[module.c_fc] = module.fc_sizes
    return out


@torch.no_grad()
def init_xavier(model: nn.Module) -> None:
    """Xavier init as Xiong et al. 2020 analyse the original Transformer (https://arxiv.org/abs/2002.04745,
    Vaswani et al. 2017): every Linear weight xavier_uniform, U(-a, a) with a = sqrt(6 / (fan_in + fan_out)) so
    std = sqrt(2 / (fan_in + fan_out)), per logical matrix (q, k, v and swiglu's gate / up each get their own
    fans); biases 0; every Embedding (wte, wpe, the relative-bias table) N(0, 1 / d_model); norms 1 (and 0).
    No residual-projection scaling. A tied lm_head keeps wte's embedding init."""
    fused = _fused_blocks(model)
    std_embed = model.cfg.d_model ** -0.5
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std_embed)
        elif isinstance(module, nn.Linear):
            if module.weight is model.wte.weight:
                continue  # tied output projection: one matrix, initialised as the embedding
            fan_in = module.weight.shape[1]
            for rows in module.weight.split(fused.get(module, (module.weight.shape[0],)), dim=0):
                a = math.sqrt(6.0 / (fan_in + rows.shape[0]))
                rows.uniform_(-a, a)  # a view: writes into the weight
            if module.bias is not None:
                nn.init.zeros_(module.bias)


INITS: dict[str, Callable[[nn.Module], None]] = {  # cfg.init -> scheme, applied to a whole stack
    "gpt2": init_gpt2,
    "xavier": init_xavier,
}


# init of an encoder-decoder's untied lm_head (C -> V), the same scheme INITS gives every other Linear
HEAD_INITS: dict[str, Callable[[Tensor], Tensor]] = {
    "gpt2": lambda w: nn.init.normal_(w, mean=0.0, std=0.02),
    "xavier": nn.init.xavier_uniform_,  # U(-a, a), a = sqrt(6 / (C + V))
}
