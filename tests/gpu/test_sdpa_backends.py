"""Each SDPA backend the device offers, forced with torch.nn.attention.sdpa_kernel, trains the model (attention=sdpa)
as the CPU does in fp32: FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH, CUDNN_ATTENTION x fp32 / bf16 autocast x a
plain causal call (rope: is_causal=True, no mask) and a float bias (alibi: attn_mask). A backend that does not take
the dtype or the mask (flash: fp16/bf16 only, no attn_mask; cudnn: GPU and torch dependent) is skipped with torch's
reason, found by trying one forward + backward. Tolerances are the matrix's (test_model_matrix_cuda.py): fp32 1e-4,
bf16 1e-2, relative, every step's loss over 20 steps.
In a dry run on the CPU the backends the CPU has (MATH, FLASH_ATTENTION's CPU kernel) run; the others skip."""

from __future__ import annotations

import re
import warnings

import pytest

from arch import ModelConfig, PosConfig, build_model

from .conftest import lm_batches, rel_diff, train_curve
from .test_model_matrix_cuda import BATCH, RTOL, SEQ

pytestmark = pytest.mark.gpu

BACKENDS = ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION"]


def _cfg(pos: str) -> ModelConfig:
    return ModelConfig(vocab_size=256, n_ctx=32, d_model=64, n_layers=2, n_heads=4, pos=PosConfig(kind=pos))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("pos", ["rope", "alibi"], ids=["causal", "bias"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sdpa_backend(device, cpu_curves, backend, pos, dtype):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not hasattr(SDPBackend, backend):
        pytest.skip(f"torch {torch.__version__} has no SDPBackend.{backend}")
    kernel = lambda: sdpa_kernel(getattr(SDPBackend, backend))  # noqa: E731
    torch.manual_seed(0)
    model = build_model(_cfg(pos))
    batches = lm_batches(256, BATCH, SEQ)
    # does the backend take this dtype / mask here? one forward + backward tells, with torch's reasons as warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            train_curve(model, batches[:1], device, dtype=dtype, step_hook=kernel)
        except RuntimeError as e:
            if not any(m in str(e) for m in ("No available kernel", "No viable backend")):  # CUDA's, the CPU's words
                raise
            said = {re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", str(w.message)).strip() for w in caught}
            reasons = "; ".join(sorted(s for s in said if s)) or str(e).split("\n")[0]
            pytest.skip(f"{backend} not available for {dtype} {'with attn_mask' if pos == 'alibi' else 'causal'} "
                        f"on {device}: {reasons}")
    want = cpu_curves(f"sdpa-{pos}", model, batches)
    got = train_curve(model, batches, device, dtype=dtype, step_hook=kernel)
    diff = rel_diff(got, want)
    assert diff <= RTOL[dtype], f"{backend} {dtype}: max relative loss difference {diff:.2e}\ngot  {got}\nwant {want}"
