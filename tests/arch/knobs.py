"""The decoder knobs as ModelConfig / PosConfig keyword sets, shared by the matrix, cache and accounting tests.

Sizes assume a d_model=16 model (n_heads 2 by default; the GQA entries set n_heads=4 so that 1 < n_kv_heads < H).
"""

from __future__ import annotations

import pytest

from arch.config import ATTENTION_IMPLS, POS_KINDS

# one entry per knob value, and all of them at once
KNOBS: dict[str, dict] = {
    "mqa": dict(n_kv_heads=1),
    "gqa": dict(n_heads=4, n_kv_heads=2),
    "window1": dict(window=1),
    "window3": dict(window=3),
    "qk_layernorm": dict(qk_norm="layernorm"),
    "qk_rmsnorm": dict(qk_norm="rmsnorm"),
    "parallel": dict(block="parallel"),
    "xavier": dict(init="xavier"),
    "all": dict(n_heads=4, n_kv_heads=2, window=3, qk_norm="rmsnorm", block="parallel", init="xavier"),
}

# PosConfig keywords: rope scaling only applies to kind=rope
ROPE_SCALED: dict[str, dict] = {
    f"rope_{k}": dict(kind="rope", rope_scaling=k, rope_scaling_factor=4.0) for k in ("linear", "ntk", "yarn")
}


def kernel_rotation(cases: list[tuple[str, str, str]]) -> list:
    """pytest params of (knob, pos, attention) cases. The default suite runs every (knob, pos) pair once, with the
    kernel rotating ((knob's rank + pos's rank) mod 3), so every kernel still meets every knob and every encoding;
    the other two kernels of each pair are marked slow (`make test-all` runs the full product)."""
    knobs = list(dict.fromkeys(k for k, _, _ in cases))
    params = []
    for k, p, a in cases:
        default = ATTENTION_IMPLS.index(a) == (knobs.index(k) + POS_KINDS.index(p)) % len(ATTENTION_IMPLS)
        params.append(pytest.param(k, p, a, id=f"{k}-{p}-{a}", marks=() if default else pytest.mark.slow))
    return params
