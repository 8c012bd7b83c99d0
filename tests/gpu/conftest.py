"""The device the `gpu` tests check against the CPU reference, and the helpers they share.

    device under test = ARCHLAB_GPU_TEST_DEVICE if set (e.g. `cpu`: a dry run of the test code on any machine,
                        `cuda:1`: another GPU), else `cuda` when torch.cuda.is_available(), else none:
                        every test here is skipped with the reason "needs CUDA".

A dry run (`ARCHLAB_GPU_TEST_DEVICE=cpu`) compares the CPU with itself, so it proves the tests run, not that a GPU
agrees; the cases only a GPU has (the SDPA backends flash / efficient / cudnn, NCCL) skip there with the reason.
Nothing here builds a model or touches CUDA at import: collection on a CPU machine stays instant.

The reference is always the CPU in fp32. CUDA runs in fp32 with TF32 off (`tf32_off`, an autouse fixture: TF32
matmuls keep 10 mantissa bits, ~1e-3 relative, which would swamp a 1e-4 comparison). Both sides start from the
same weights (built on the CPU with one seed, then copied) and see the same batches (drawn on the CPU).
CUBLAS_WORKSPACE_CONFIG is set here, before anything initialises CUDA, so that the resume test can switch
deterministic algorithms on (cuBLAS reads it when its handle is made).
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterator
from contextlib import nullcontext

import pytest

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS makes its handle: before any CUDA op

DEVICE_ENV = "ARCHLAB_GPU_TEST_DEVICE"
STEPS = 20  # optimizer steps each loss curve is compared over
FP32_RTOL = 1e-4  # CUDA fp32 (TF32 off) vs CPU fp32, every step's loss


def device_under_test() -> str | None:
    """ARCHLAB_GPU_TEST_DEVICE, else "cuda" where CUDA is available, else None (the tests skip)."""
    if os.environ.get(DEVICE_ENV):
        return os.environ[DEVICE_ENV]
    import torch

    return "cuda" if torch.cuda.is_available() else None


@pytest.fixture(scope="session")
def device():
    """The torch.device under test; skips with "needs CUDA" when there is none."""
    name = device_under_test()
    if name is None:
        pytest.skip(f"needs CUDA (torch.cuda.is_available() is False; {DEVICE_ENV}=cpu dry-runs these tests on "
                    "the CPU)")
    import torch

    return torch.device(name)


@pytest.fixture
def cuda(device):
    """The device, for a case only a real GPU has; skips in a dry run on the CPU."""
    if device.type != "cuda":
        pytest.skip(f"needs real CUDA (dry run on {device})")
    return device


@pytest.fixture(autouse=True)
def tf32_off(request) -> Iterator[None]:
    """fp32 matmuls and convolutions in full fp32 on CUDA for the test (restored after it)."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    import torch

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def rel_diff(got: list[float], want: list[float]) -> float:
    """max over steps of |got - want| / |want|; inf for a non-finite loss or a length mismatch."""
    if len(got) != len(want) or not all(map(math.isfinite, got)):
        return math.inf
    return max(abs(g - w) / abs(w) for g, w in zip(got, want))


def lm_batches(vocab: int, batch: int, seq: int, steps: int = STEPS, seed: int = 0) -> list[tuple]:
    """`steps` (ids, targets) pairs, each (batch, seq) long, drawn on the CPU from one seed: a Markov chain whose
    next token is perm[token] with probability 3/4 (else uniform), so that 20 steps visibly lower the loss."""
    import torch

    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(vocab, generator=g)
    out = []
    for _ in range(steps):
        chunk = torch.randint(0, vocab, (batch, seq + 1), generator=g)  # (B, T+1): the uniform draws
        follow = torch.rand(batch, seq + 1, generator=g) < 0.75
        for t in range(1, seq + 1):
            chunk[:, t] = torch.where(follow[:, t], perm[chunk[:, t - 1]], chunk[:, t])
        out.append((chunk[:, :-1], chunk[:, 1:]))
    return out


def train_curve(model, batches: list[tuple], device, *, dtype: str = "fp32", compile: bool = False,
                lr: float = 3e-3, step_hook: Callable[[], object] | None = None) -> list[float]:
    """Train a copy of `model` on `device` over `batches` (tuples of CPU tensors passed to model.loss); returns
    the loss of every step. The step is the trainer's: LossModule (compiled when asked), the product's Precision
    (autocast; fp16 with its GradScaler: scaled backward, unscale, clip, step that skips on overflow), AdamW.
    `step_hook` (e.g. an SDPA backend context) is entered around every forward + backward."""
    import torch

    from experiments.run.loop import LossModule
    from experiments.run.precision import Precision

    model = copy.deepcopy(model).to(device).train()
    precision = Precision(device, dtype)
    loss_module = LossModule(model)
    if compile:
        loss_module = torch.compile(loss_module)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    losses = []
    for batch in batches:
        batch = tuple(t.to(device) for t in batch)
        with step_hook() if step_hook is not None else nullcontext():
            with precision.autocast:
                loss = loss_module(*batch)
            precision.backward(loss)
        precision.unscale(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        precision.step(opt)
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach().float()))
    return losses


@pytest.fixture(scope="session")
def cpu_curves() -> Callable[..., list[float]]:
    """cpu_curves(key, model, batches) -> the CPU fp32 reference curve, computed once per key in a session
    (several tests compare other devices / precisions / backends against one reference)."""
    import torch

    done: dict[str, list[float]] = {}

    def get(key: str, model, batches) -> list[float]:
        if key not in done:
            done[key] = train_curve(model, batches, torch.device("cpu"))
        return done[key]

    return get
