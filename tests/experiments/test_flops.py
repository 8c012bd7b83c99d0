"""experiments.run.flops: datasheet lookup, env override, measured CPU peak (cached), mfu ratio."""

from __future__ import annotations

import json

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


def test_measured_rate_counts_2n3_flops_per_matmul(monkeypatch):
    # with a fake clock advancing 1 s per reading, the measured rate is exactly 2 n^3 * iters / elapsed
    ticks = iter(range(1000))
    monkeypatch.setattr(flops.time, "perf_counter", lambda: float(next(ticks)))
    rate = flops.measure_matmul_flops.__wrapped__("cpu", torch.float32, n=8, seconds=2.5)
    # readings: t0=0, after iter1 -> 1, iter2 -> 2, iter3 -> 3 (>= 2.5, stop), final read -> 4
    assert rate == pytest.approx(2 * 8**3 * 3 / 4)


def test_measured_peak_is_the_best_ever_measured_on_this_machine(monkeypatch, tmp_path):
    # a measurement taken under contention comes out low; the stored best keeps MFU from exceeding 100%
    monkeypatch.delenv(flops.ENV_OVERRIDE, raising=False)
    rates = iter([2e9, 0.5e9, 3e9])
    monkeypatch.setattr(flops, "measure_matmul_flops", lambda *a, **k: next(rates))
    assert flops.peak_flops("cpu", cache_dir=tmp_path) == 2e9
    assert flops.peak_flops("cpu", cache_dir=tmp_path) == 2e9  # 0.5e9 measured under load: the best stands
    assert flops.peak_flops("cpu", cache_dir=tmp_path) == 3e9
    stored = json.loads((tmp_path / "peak_flops.json").read_text())
    assert list(stored.values()) == [3e9] and "threads" in next(iter(stored))
    (tmp_path / "peak_flops.json").write_text("{corrupt")  # a broken file is replaced, not fatal
    monkeypatch.setattr(flops, "measure_matmul_flops", lambda *a, **k: 1e9)
    assert flops.peak_flops("cpu", cache_dir=tmp_path) == 1e9
    assert flops.peak_flops("cpu") == 1e9  # without a cache dir: this process's measurement alone
