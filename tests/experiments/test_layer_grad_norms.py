"""grad_norm/layer_{i} (the fused per-layer gradient norm the trainer logs) against the plain definition."""

from __future__ import annotations

import math

import torch
from torch import nn

from experiments.run.grad_norms import layer_grad_norms


def naive(blocks: nn.ModuleList) -> list[float]:
    out = []
    for block in blocks:
        squares = [float(p.grad.double().pow(2).sum()) for p in block.parameters() if p.grad is not None]
        out.append(math.sqrt(sum(squares)))
    return out


def test_matches_the_definition_with_unused_layers_and_missing_grads():
    torch.manual_seed(0)
    blocks = nn.ModuleList([nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3)), nn.Linear(2, 2)])
    blocks[1](blocks[0](torch.randn(5, 4))).pow(2).sum().backward()  # layer 2 gets no gradient at all
    got = layer_grad_norms(blocks)
    assert list(got) == [f"grad_norm/layer_{i}" for i in range(3)]
    for g, want in zip(got.values(), naive(blocks)):
        assert math.isclose(g, want, rel_tol=1e-6, abs_tol=1e-12)
    assert got["grad_norm/layer_2"] == 0.0 and got["grad_norm/layer_1"] > 0


def test_non_finite_gradients_stay_visible():
    blocks = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])
    for p in blocks.parameters():
        p.grad = torch.ones_like(p)
    blocks[1].weight.grad[0, 0] = float("inf")
    got = layer_grad_norms(blocks)
    assert math.isclose(got["grad_norm/layer_0"], math.sqrt(6), rel_tol=1e-6) and math.isinf(got["grad_norm/layer_1"])
