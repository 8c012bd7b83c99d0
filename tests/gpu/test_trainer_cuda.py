"""The trainer (experiments.run.train.train) on the device under test, fp32, against the same run on the CPU.

* End to end: a tiny run (tests/experiments/conftest.py's TINY, 20 steps, batch 4 x 32) logs every step's
  train/loss within 1e-4 relative of the CPU run's, and its final val/loss too. The model is built on the CPU with
  the run's seed and copied, the batches are drawn on the CPU: only the kernels differ (CUDA: fused AdamW,
  the unfused loss; CPU: the reference AdamW, the chunked fused loss).
* Resume after a kill is exact with torch.use_deterministic_algorithms(True) (CUBLAS_WORKSPACE_CONFIG=:4096:8 is
  set by conftest before CUDA starts): 4 steps, then train.resume=true to 8, equals 8 steps straight, bit for
  bit. A checkpoint at step 4 is what a SIGKILL after step 4 leaves (tests/experiments/test_resume.py kills for
  real on the CPU). Without deterministic algorithms CUDA's atomics (embedding / index backward, the
  memory-efficient attention backward, split-K matmuls) may differ run to run: docs/gpu-correctness.md.
* DDP: one torchrun rank on the device runs the DDP path (NCCL on CUDA, gloo on a CPU dry run) and trains what a
  plain process trains.
"""

from __future__ import annotations

import pytest

from ..experiments.conftest import TINY, train_losses
from .conftest import FP32_RTOL, rel_diff
from .test_cuda_path_on_cpu import one_rank_ddp

pytestmark = pytest.mark.gpu

RUN = [*TINY, "train.steps=20", "train.eval_interval=20", "train.ckpt_interval=20", "train.dtype=fp32",
       "train.log_interval=1"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """run(name, device, *overrides) -> the run dir of a train() run into a module-wide tmp dir (one data cache)."""
    from experiments.config.compose import compose_config
    from experiments.run.train import train

    root = tmp_path_factory.mktemp("trainer")

    def go(name: str, device, *overrides: str):
        run_dir = root / name
        train(compose_config([*RUN, f"data.cache_dir={root / 'cache'}", f"train.run_dir={run_dir}",
                              f"train.device={device}", *overrides]))
        return run_dir

    return go


def _val_loss(run_dir) -> float:
    import json

    return json.loads((run_dir / "summary.json").read_text())["final_val_loss"]


def test_trainer_loss_curve_matches_cpu(device, run):
    cpu, dev = run("cpu", "cpu"), run("dev", str(device))
    want, got = train_losses(cpu), train_losses(dev)
    assert [s for s, _ in got] == list(range(1, 21)) == [s for s, _ in want]
    want_l, got_l = [loss for _, loss in want], [loss for _, loss in got]
    assert max(want_l) - min(want_l) > 0.05, want_l  # it trains: the curves compared are not flat
    assert rel_diff(got_l, want_l) <= FP32_RTOL, f"got  {got_l}\nwant {want_l}"
    assert rel_diff([_val_loss(dev)], [_val_loss(cpu)]) <= FP32_RTOL


@pytest.fixture
def deterministic():
    import torch

    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_resume_is_exact_with_deterministic_algorithms(device, run, deterministic, dtype):
    if dtype == "bf16" and device.type != "cuda":
        pytest.skip(f"needs real CUDA (bf16 autocast is refused on {device} by the config check)")
    steps = [f"train.dtype={dtype}", "train.ckpt_interval=4", "train.eval_interval=100"]
    straight = run(f"straight-{dtype}", str(device), *steps, "train.steps=8")
    split = run(f"split-{dtype}", str(device), *steps, "train.steps=4")
    run(f"split-{dtype}", str(device), *steps, "train.steps=8", "train.resume=true")
    want = train_losses(straight)
    assert [s for s, _ in want] == list(range(1, 9))
    assert train_losses(split) == want  # bit for bit


def test_ddp_one_rank(device, tmp_path):
    """NCCL on a CUDA device (gloo in a dry run): the process group of one rank, and the plain run's curve."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    ddp, plain, log = one_rank_ddp(tmp_path, str(device))
    assert f"DDP: 1 rank(s), backend {backend}" in log, log[-2000:]
    assert [s for s, _ in ddp] == [s for s, _ in plain]
    assert rel_diff([x for _, x in ddp], [x for _, x in plain]) <= FP32_RTOL
