"""The model matrix trained on the device under test against the CPU in fp32: 20 AdamW steps, every step's loss.

Models: vocab 256, n_ctx 32, d_model 32, 2 layers (GQA: 4 heads), batch 4 x 32, lr 1e-3, clip 1.0, dropout 0.
Cases (the configs of tests/arch/test_model_matrix.py, at this size):
* fp32, eager: every knob of tests/arch/knobs.py with every position encoding (the attention kernel and the norm
  placement rotating, as the default CPU suite runs them) and the pairwise cover of pos x norm x norm_type x
  activation x attention. Within FP32_RTOL = 1e-4 relative at every step (TF32 off).
* bf16 autocast and fp16 autocast + the product's GradScaler (experiments.run.precision.Precision), eager: one case
  per knob. Against the same CPU fp32 curve, within BF16_RTOL = 1e-2 / FP16_RTOL = 3e-3 (below, with the reasons).
* torch.compile'd (the trainer's LossModule): GPT-2's config in fp32 (1e-4) and every knob at once in bf16.
Not here: the SDPA backends one by one (test_sdpa_backends.py), the trainer (test_trainer_cuda.py).
"""

from __future__ import annotations

import pytest

from arch import ModelConfig, build_model
from arch.config import ATTENTION_IMPLS, NORM_PLACEMENTS

from ..arch.knobs import KNOBS, ROPE_SCALED, kernel_rotation
from ..arch.test_model_matrix import KNOB_COMBOS, PAIRWISE, knob_cfg, make_cfg
from .conftest import FP32_RTOL, lm_batches, rel_diff, train_curve

pytestmark = pytest.mark.gpu

SIZE = dict(vocab_size=256, n_ctx=32, d_model=32)
BATCH, SEQ = 4, 32
# bf16 keeps 8 significant bits (unit roundoff 2^-9 ~ 2e-3): matmul inputs and outputs are rounded, the loss itself
# is fp32 (autocast's cross-entropy). Measured on the CPU (bf16 autocast vs fp32, the 12 HALF_CASES, 20 steps,
# torch 2.13): at most 3.9e-4 relative (xavier-relative-sdpa). 1e-2 is 25x that and ~5 roundoffs, room for CUDA's
# other kernels and accumulation orders; a real error (a wrong mask, a dropped bias, a missed update) moves a loss
# near ln(256) = 5.5 by more.
BF16_RTOL = 1e-2
# fp16 keeps 11 significant bits (roundoff 2^-12 ~ 2.4e-4), 8x finer than bf16; the GradScaler's scaling and
# unscaling are exact (powers of two). Measured on the CPU as above: at most 1.5e-4 (rope_yarn, qk_rmsnorm).
# 3e-3 is 20x that.
FP16_RTOL = 3e-3
RTOL = {"fp32": FP32_RTOL, "bf16": BF16_RTOL, "fp16": FP16_RTOL}


def _knob_params() -> list:
    """(knob, pos, attention, norm) of the default CPU matrix: each knob with each pos, kernel rotating."""
    out = []
    for p in kernel_rotation(KNOB_COMBOS):
        if p.marks:  # slow in the CPU suite too: the other kernels of the pair
            continue
        knob, pos, attention = p.values
        norm = NORM_PLACEMENTS[KNOB_COMBOS.index(p.values) % len(NORM_PLACEMENTS)]
        out.append(pytest.param(knob, pos, attention, norm, id=f"{knob}-{pos}-{attention}-{norm}"))
    return out


def check_curve(cfg: ModelConfig, device, cpu_curves, dtype: str = "fp32", compile: bool = False) -> None:
    import torch

    torch.manual_seed(0)
    model = build_model(cfg)  # on the CPU: the same initial weights for both sides
    batches = lm_batches(cfg.vocab_size, BATCH, SEQ)
    want = cpu_curves(repr(cfg), model, batches)
    got = train_curve(model, batches, device, dtype=dtype, compile=compile)
    assert max(want) - min(want) > 0.02, want  # the weights move: the curves compared are not flat
    diff = rel_diff(got, want)
    assert diff <= RTOL[dtype], f"{dtype} on {device}: max relative loss difference {diff:.2e} > {RTOL[dtype]:.0e}\n" \
                                f"got  {got}\nwant {want}"


@pytest.mark.parametrize("knob, pos, attention, norm", _knob_params())
def test_every_knob_fp32(device, cpu_curves, knob, pos, attention, norm):
    check_curve(knob_cfg(knob, pos, norm, attention, **SIZE), device, cpu_curves)


@pytest.mark.parametrize("combo", PAIRWISE, ids=["-".join(c) for c in PAIRWISE])
def test_pairwise_matrix_fp32(device, cpu_curves, combo):
    check_curve(make_cfg(*combo, **SIZE), device, cpu_curves)


# one case per knob (the rope scalings on rope, the rest on a pos encoding that rotates), kernel rotating
ROTATING_POS = ["learned", "relative", "alibi", "rope", "sinusoidal", "none"]
HALF_CASES = [(k, "rope" if k.startswith("rope") else ROTATING_POS[i % 6], ATTENTION_IMPLS[i % len(ATTENTION_IMPLS)])
              for i, k in enumerate([*KNOBS, *ROPE_SCALED])]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("knob, pos, attention", HALF_CASES, ids=["-".join(c) for c in HALF_CASES])
def test_every_knob_in_half_precision(device, cpu_curves, knob, pos, attention, dtype):
    if dtype == "bf16" and device.type == "cuda" and not __import__("torch").cuda.is_bf16_supported():
        pytest.skip(f"{device} has no bf16")
    check_curve(knob_cfg(knob, pos, "pre", attention, **SIZE), device, cpu_curves, dtype=dtype)


@pytest.mark.parametrize(("name", "dtype"), [("gpt2", "fp32"), ("all+rope_yarn", "bf16")])
def test_compiled(device, cpu_curves, name, dtype):
    if name == "gpt2":
        cfg = ModelConfig(vocab_size=256, n_ctx=32, d_model=32, n_layers=2, n_heads=2)
    else:
        cfg = knob_cfg(name, "rope", "sandwich", "sdpa", **SIZE)
    check_curve(cfg, device, cpu_curves, dtype=dtype, compile=True)
