"""Packed training on the device under test (tests/gpu/conftest.py): members stepped as one stack equal the same
members stepped alone on that device, in fp32 (TF32 off) and under bf16 autocast; and the trainer's packed members
equal their solo runs there. The CPU is where tests/experiments/test_pack.py checks the same things every run."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ..experiments.test_pack import _curves, _model, max_rel

SEEDS, LRS = [0, 1, 2, 3], [1e-3, 2e-3, 3e-3, 4e-3]


@pytest.mark.gpu
@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
@pytest.mark.parametrize("pos", ["rope", "alibi", "learned"])
def test_packed_members_equal_solo_on_the_device_fp32(device, pos, attention):
    cfg = _model(pos=pos, attention=attention, n_heads=4, n_kv_heads=2, qk_norm="rmsnorm")
    solo = _curves(cfg, SEEDS, LRS, packed=False, steps=20, device=device)
    packed = _curves(cfg, SEEDS, LRS, packed=True, steps=20, device=device)
    other = _curves(dataclasses.replace(cfg, attention="explicit" if attention == "sdpa" else "sdpa"), SEEDS, LRS,
                    packed=False, steps=20, device=device)
    reference = max(max_rel(o, s) for o, s in zip(other, solo))
    worst = max(max_rel(p, s) for p, s in zip(packed, solo))
    assert worst <= max(1e-5, reference), f"packed {worst:.2e}, equivalent kernels {reference:.2e}"


@pytest.mark.gpu
def test_packed_members_track_solo_under_bf16(cuda):
    """bf16 autocast rounds each matmul to 8 mantissa bits: members stay within 2e-2 relative of their solo curves
    over 20 steps (two solo runs with sdpa and explicit attention differ by the same order)."""
    cfg = _model(pos="rope")
    autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    solo = _curves(cfg, SEEDS, LRS, packed=False, steps=20, device=cuda, autocast=autocast)
    packed = _curves(cfg, SEEDS, LRS, packed=True, steps=20, device=cuda, autocast=autocast)
    assert max(max_rel(p, s) for p, s in zip(packed, solo)) <= 2e-2
