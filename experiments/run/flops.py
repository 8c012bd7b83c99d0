"""Peak FLOP/s of a device and model-FLOPs utilisation (MFU).

    peak_flops(device) -> float      # FLOP/s the device could do at best
    mfu(flops_per_s, device) -> float  # achieved / peak

Where the peak comes from, in order:
  1. env `ARCHLAB_PEAK_FLOPS` (a float, e.g. `312e12`) for any device;
  2. CUDA: `PEAK_BF16_FLOPS`, the vendor's dense bf16 tensor-core peak (no 2:4 sparsity), matched by a
     substring of `torch.cuda.get_device_name`; an unknown GPU falls back to (3) with a bf16 matmul and a warning;
  3. anything else (CPU, MPS): *measured* once per process, device and thread count, as the best FLOP/s of 5
     bursts of a 1024³ fp32 matmul (~0.25 s in all). CPU MFU is therefore relative to what this machine's BLAS
     reaches on one large matmul while this run is running, not a datasheet number: numbers from different CPU
     machines do not compare. Nothing is cached across processes: an earlier build kept the best rate ever
     measured in `<cache_dir>/peak_flops.json`, a running maximum that only grew, so two identical runs at
     different times showed different MFU (issue 30: 24.1% and 19.9% for two demos). The best of several
     bursts keeps one slow burst (another process taking the core for a moment) from lowering the peak.
Not handled: fp8/tf32 peaks (training here is bf16 on GPU, fp32 on CPU), multi-GPU (the peak is per device).
"""

from __future__ import annotations

import functools
import logging
import os
import time

import torch

log = logging.getLogger(__name__)

ENV_OVERRIDE = "ARCHLAB_PEAK_FLOPS"

# Dense bf16 tensor-core peak FLOP/s from NVIDIA datasheets, keyed by a substring of the device name.
# More specific keys come first: the first key found in the name wins.
PEAK_BF16_FLOPS: dict[str, float] = {
    "GB200": 2.5e15,
    "B200": 2.25e15,
    "GH200": 989e12,
    "H200": 989e12,  # SXM; same tensor cores as H100 SXM
    "H100 NVL": 835e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,  # SXM / HBM3
    "A100": 312e12,  # SXM and PCIe have the same peak
    "A800": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10G": 70e12,  # AWS variant of the A10
    "A10": 125e12,
    "A6000": 155e12,  # RTX A6000
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
    "V100": 125e12,  # fp16 (no bf16 on Volta)
    "T4": 65e12,  # fp16 (no bf16 on Turing)
}


def _as_device(device: torch.device | str) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device)


def _cuda_device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device)


def lookup_peak(device_name: str) -> float | None:
    """Datasheet bf16 peak for a CUDA device name, or None if unknown.

    >>> lookup_peak("NVIDIA H100 80GB HBM3")
    989000000000000.0
    """
    for key, peak in PEAK_BF16_FLOPS.items():
        if key in device_name:
            return peak
    return None


BURSTS = 5  # the measured peak is the best of this many timed bursts


@functools.cache
def measure_matmul_flops(device_type: str, dtype: torch.dtype = torch.float32, n: int = 1024, seconds: float = 0.25,
                         threads: int | None = None) -> float:
    """Best FLOP/s of BURSTS bursts of repeated (n, n) @ (n, n) matmuls on `device_type`, the bursts taking about
    `seconds` in all (cached per process; `threads`, torch's thread count, is part of the cache key only)."""
    dev = torch.device(device_type)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        elif dev.type == "mps":
            torch.mps.synchronize()

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(dev, dtype)
    b = torch.randn(n, n, generator=gen).to(dev, dtype)
    for _ in range(2):  # warm-up: thread pools, kernel selection
        a @ b
    sync()
    best = 0.0
    for _ in range(BURSTS):
        iters, elapsed = 0, 0.0
        t0 = time.perf_counter()
        while elapsed < seconds / BURSTS:
            a @ b
            iters += 1
            if iters % 4 == 0 or dev.type == "cpu":
                sync()
                elapsed = time.perf_counter() - t0
        sync()
        best = max(best, 2.0 * n**3 * iters / (time.perf_counter() - t0))
    return best


def peak_flops(device: torch.device | str) -> float:
    """Peak FLOP/s used as the MFU denominator for `device` (see the module docstring for the sources)."""
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        return float(override)
    dev = _as_device(device)
    if dev.type == "cuda":
        name = _cuda_device_name(dev)
        peak = lookup_peak(name)
        if peak is not None:
            return peak
        log.warning("unknown GPU %r: MFU uses a measured bf16 matmul peak; set %s to override", name, ENV_OVERRIDE)
        return measure_matmul_flops(str(dev), torch.bfloat16, n=4096)
    return measure_matmul_flops(dev.type, threads=torch.get_num_threads())


def mfu(flops_per_s: float, device: torch.device | str) -> float:
    """Model-FLOPs utilisation: achieved model FLOP/s over `peak_flops(device)` (a fraction, 0.4 = 40%)."""
    return flops_per_s / peak_flops(device)
