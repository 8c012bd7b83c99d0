"""experiments.run.flops: datasheet lookup, env override, measured CPU peak (per process, best burst, no cache file), mfu ratio."""

from __future__ import annotations

import json
import math

import pytest
import torch

from experiments.run import flops


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(flops.ENV_OVERRIDE, raising=False)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100-PCIE-40GB", 312e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A10G", 70e12),
        ("NVIDIA A10", 125e12),
        ("NVIDIA L4", 121e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA GeForce RTX 4090", 165e12),
        ("Tesla V100-SXM2-16GB", 125e12),
        ("Tesla T4", 65e12),
        ("NVIDIA B200", 2.25e15),
        ("NVIDIA GB200", 2.5e15),
    ],
)
def test_lookup_by_device_name(name, expected):
    assert flops.lookup_peak(name) == expected


def test_lookup_unknown_is_none():
    assert flops.lookup_peak("Some Future Accelerator") is None


def test_cuda_peak_uses_table(monkeypatch):
    # no GPU needed: the name query is the only CUDA call on the lookup path
    monkeypatch.setattr(flops, "_cuda_device_name", lambda dev: "NVIDIA H100 80GB HBM3")
    assert flops.peak_flops("cuda") == 989e12
    assert flops.peak_flops(torch.device("cuda:0")) == 989e12
    assert flops.mfu(494.5e12, "cuda") == pytest.approx(0.5)


def test_env_override_wins(monkeypatch):
    monkeypatch.setenv(flops.ENV_OVERRIDE, "1.5e12")
    monkeypatch.setattr(flops, "_cuda_device_name", lambda dev: "NVIDIA A100-SXM4-80GB")
    assert flops.peak_flops("cpu") == 1.5e12
    assert flops.peak_flops("cuda") == 1.5e12
    assert flops.mfu(3e11, "cpu") == pytest.approx(0.2)


def test_cpu_peak_is_measured_once(monkeypatch):
    calls = []
    real = flops.measure_matmul_flops.__wrapped__

    def counting(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    cached = flops.functools.cache(counting)
    monkeypatch.setattr(flops, "measure_matmul_flops", cached)
    first = flops.peak_flops("cpu")
    second = flops.peak_flops(torch.device("cpu"))
    assert first == second
    assert len(calls) == 1
    # a plausible matmul rate for any CPU this runs on: above 100 MFLOP/s, below 100 TFLOP/s
    assert 1e8 < first < 1e14
    # mfu is the ratio against the same cached number
    assert flops.mfu(first / 4, "cpu") == pytest.approx(0.25)


def test_measured_rate_is_the_best_burst_of_2n3_flops_per_matmul(monkeypatch):
    # A fake clock. Each burst reads t0, then once after every matmul (the CPU syncs every iteration) until 0.5 s
    # (2.5 s / 5 bursts) have passed, then once more at its end. Burst k's clock moves step_k per reading, so it runs
    # iters = ceil(0.5 / step) matmuls in (iters + 1) * step seconds: rate 2 n^3 iters / ((iters + 1) step).
    steps = [1.0, 0.25, 0.5, 0.1, 2.0]
    readings, expected, t = [], [], 0.0
    for step in steps:
        iters = math.ceil(0.5 / step)
        readings += [t + i * step for i in range(iters + 2)]
        expected.append(2 * 8**3 * iters / ((iters + 1) * step))
        t = readings[-1] + 7.0  # time passes between bursts; it is never counted
    clock = iter(readings)
    monkeypatch.setattr(flops.time, "perf_counter", lambda: next(clock))
    rate = flops.measure_matmul_flops.__wrapped__("cpu", torch.float32, n=8, seconds=2.5)
    assert next(clock, None) is None  # every reading used: 5 bursts, the iteration counts above
    assert rate == pytest.approx(max(expected))  # the best burst (0.1 s steps: 5 in 0.6 s), not the mean
    assert max(expected) == pytest.approx(2 * 8**3 * 5 / 0.6)


def test_peak_is_measured_in_this_process_never_read_from_a_cache(monkeypatch, tmp_path):
    # the peak used to be the best rate ever stored in <cache_dir>/peak_flops.json, a running maximum that made two
    # identical runs show different MFU; now it is this process's measurement at this thread count, and nothing else
    monkeypatch.chdir(tmp_path)
    (tmp_path / "peak_flops.json").write_text(json.dumps({"cpu": 1e15}))
    measured = []

    def fake(device_type, dtype=torch.float32, n=1024, seconds=0.25, threads=None):
        measured.append((device_type, threads))
        return 2e9 * threads

    monkeypatch.setattr(flops, "measure_matmul_flops", fake)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert flops.peak_flops("cpu") == 2e9
        assert flops.mfu(5e8, "cpu") == pytest.approx(0.25)
        torch.set_num_threads(2)
        assert flops.peak_flops("cpu") == 4e9  # the run's own thread count, not the best over thread counts
    finally:
        torch.set_num_threads(before)
    assert measured[0] == ("cpu", 1) and measured[-1] == ("cpu", 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["peak_flops.json"]  # nothing written either
    with pytest.raises(TypeError):
        flops.peak_flops("cpu", cache_dir=tmp_path)  # the cache argument is gone
