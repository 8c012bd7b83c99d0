"""The optimizer: AdamW with weight decay on matrices only.

No decay on biases and norm weights (1-D gains and shifts: decaying them pulls norms towards zero). Embeddings
(token, learned-position and T5 relative-bias tables, every `nn.Embedding`) are not decayed either by default
(`optim.decay_embeddings=false`), as in minGPT's configure_optimizers, which puts LayerNorm and Embedding weights in
its no-decay set: decay would pull the vectors of rare tokens towards the origin. nanoGPT's configure_optimizers
decays every parameter with >= 2 dimensions, embeddings included: `optim.decay_embeddings=true` does that. A tied
output projection is the token embedding, so it follows the embedding's group. Parameters are grouped by the module
that owns them, not by name patterns, so a new norm class needs no change here as long as its name contains "Norm".
μP (model.param=mup, arch.mup): each group is split further by the parameters' lr multiplier (1 / fan_in_mult for
the hidden matrices, 1 elsewhere); a split group carries `lr_mult` (the schedule's lr is multiplied by it) and its
weight decay times fan_in_mult (the mup package's MuAdamW). SP groups are as before (no `lr_mult`: 1).
Not handled: other optimizers (add a builder to OPTIMIZERS), per-layer lr, ZeRO/FSDP sharding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from arch.mup import lr_multipliers
from experiments.config.schema import OptimConfig

log = logging.getLogger(__name__)


def _no_decay_module(module: nn.Module, decay_embeddings: bool) -> bool:
    return (isinstance(module, nn.Embedding) and not decay_embeddings) or "Norm" in type(module).__name__


def param_groups(model: nn.Module, weight_decay: float, decay_embeddings: bool = False) -> list[dict[str, Any]]:
    """[{decay params, weight_decay}, {no-decay params, 0.0}]; each parameter appears once (tied ones too).

    A parameter is in the no-decay group if it is 1-D (a bias or a gain) or owned by a norm module, or by an
    embedding module unless `decay_embeddings` (then every >= 2-D tensor outside the norms decays, as in nanoGPT).
    """
    no_decay: dict[int, nn.Parameter] = {}
    for module in model.modules():
        if _no_decay_module(module, decay_embeddings):
            for p in module.parameters(recurse=False):
                no_decay[id(p)] = p
    decay, rest = [], []
    for p in model.parameters():  # deduplicated by torch: a tied weight is yielded once
        if not p.requires_grad:
            continue
        (rest if id(p) in no_decay or p.ndim < 2 else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": rest, "weight_decay": 0.0},
    ]
    by_name = lr_multipliers(model)
    mults = {id(p): by_name[name] for name, p in model.named_parameters()}
    if all(m == 1.0 for m in mults.values()):
        return groups
    return [split for g in groups for split in _by_lr_mult(g, mults)]


def _by_lr_mult(group: dict[str, Any], mults: dict[int, float]) -> list[dict[str, Any]]:
    """One group per lr multiplier (in order of first appearance), weight decay x 1 / multiplier (MuAdamW)."""
    by: dict[float, list[nn.Parameter]] = {}
    for p in group["params"]:
        by.setdefault(mults[id(p)], []).append(p)
    return [{"params": ps, "weight_decay": group["weight_decay"] / m, "lr_mult": m} for m, ps in by.items()]


def _adamw(model: nn.Module, cfg: OptimConfig, device: torch.device) -> torch.optim.Optimizer:
    # fused AdamW: one kernel for all parameters instead of ~10 small ops per tensor. On CUDA, and on the CPU too
    # (bench/bench_nanogpt.py: -4 ms of a 70 ms step at nanoGPT's shakespeare_char shape); deterministic, so a
    # resume stays bit-exact. It rounds differently from the for-loop implementation (float rounding only).
    fused = device.type in ("cuda", "cpu")
    return torch.optim.AdamW(
        param_groups(model, cfg.weight_decay, cfg.decay_embeddings),
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        fused=fused,
    )


OPTIMIZERS: dict[str, Callable[[nn.Module, OptimConfig, torch.device], torch.optim.Optimizer]] = {
    "adamw": _adamw,
}


def build_optimizer(model: nn.Module, cfg: OptimConfig, device: torch.device, *,
                    say: bool = True) -> torch.optim.Optimizer:
    """OPTIMIZERS[cfg.name](model, cfg, device); the lr in each group is later set by the schedule. With `say`
    (the loop passes it on rank 0 only) μP's groups are logged: what each trains at."""
    if cfg.name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg.name!r}; choose from {sorted(OPTIMIZERS)}")
    optimizer = OPTIMIZERS[cfg.name](model, cfg, device)
    if say and any("lr_mult" in g for g in optimizer.param_groups):
        log.info("μP parameter groups: %s", "; ".join(
            f"{len(g['params'])} tensors ({sum(p.numel() for p in g['params']):,} params) at lr x {g['lr_mult']:.4g}, "
            f"weight decay {g['weight_decay']:.4g}" for g in optimizer.param_groups))
    return optimizer
