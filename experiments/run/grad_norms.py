"""Per-layer gradient norms, logged as grad_norm/layer_{i} (the residual blocks, input side first).

    layer_grad_norms(model_blocks(model))  -> {"grad_norm/layer_0": 0.41, "grad_norm/layer_1": 0.37, ...}

Taken before clipping, so they show what the loss asked of each layer. Not handled: embeddings and the final
norm / head (only the blocks), per-parameter norms.
"""

from __future__ import annotations

import torch
from torch import nn


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """The residual blocks, input side first: a decoder-only model's blocks; an encoder-decoder's encoder blocks
    then decoder blocks (grad_norm/layer_{i} counts through both stacks)."""
    if hasattr(model, "blocks"):
        return list(model.blocks)
    return [*model.encoder.blocks, *model.decoder.blocks]


def layer_grad_norms(blocks: list[nn.Module] | nn.ModuleList) -> dict[str, float]:
    """grad_norm/layer_{i}: the L2 norm of all gradients in block i (before clipping).

    Logged every `log_interval` steps, so it is kept cheap: one fused norm over every gradient (the kernel
    clip_grad_norm_ uses), then a scatter-add of the squares per layer and a single host transfer.
    """
    grads, layer_of = [], []
    for i, block in enumerate(blocks):
        for p in block.parameters():
            if p.grad is not None:
                grads.append(p.grad.detach())
                layer_of.append(i)
    sums = torch.zeros(len(blocks), dtype=torch.float64)
    if grads:
        per_param = torch.stack([n.float().cpu() for n in torch._foreach_norm(grads)])  # (n_params,)
        sums.index_add_(0, torch.tensor(layer_of), per_param.double() ** 2)
    return {f"grad_norm/layer_{i}": v for i, v in enumerate(sums.sqrt().tolist())}
