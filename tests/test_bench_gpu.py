"""bench/bench_gpu.py without a GPU: the MFU arithmetic against numbers worked by hand, the datasheet peak lookup,
`--smoke --json` on the CPU writing the keys scripts/gpu_check.py reads, and bad input as one line. No timings are
asserted (the figures of a smoke run mean nothing)."""

from __future__ import annotations

import json
import math

import pytest

from arch import flops_per_token
from bench import bench_gpu

KEYS = {"device", "torch", "cuda", "tokens_per_s", "mfu_measured_peak", "mfu_spec_peak", "measured_peak_tflops",
        "spec_peak_tflops", "peak_mem_gib", "hf_tokens_per_s", "ratio_vs_hf",
        "mfu", "mfu_spec", "peak_tflops_measured", "peak_tflops_spec"}  # the names scripts/gpu_check.py reads


def test_gpt2_flops_per_token_by_hand():
    """GPT-2 124M, T = 1024: N = non-embedding parameters + the (tied) unembedding, counted from the shapes."""
    d, layers, vocab, t = 768, 12, 50257, 1024
    per_layer = (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d  # + ln_1, ln_2
    n = layers * per_layer + 2 * d + vocab * d  # + ln_f; the unembedding is a matmul
    assert n == 123_653_376
    cfg = bench_gpu.config(bench_gpu.GPT2)
    assert flops_per_token(cfg, seq_len=t) == 6 * n + 12 * layers * 12 * 64 * t == 855_166_464


def test_mfu_arithmetic():
    # 855,166,464 FLOPs/token x 400,000 tokens/s = 342.07 TFLOP/s; of 800 TFLOP/s measured: 42.758%
    assert bench_gpu.mfu(855_166_464, 4e5, 800e12) == pytest.approx(0.427583232, rel=1e-12)
    assert bench_gpu.mfu(855_166_464, 4e5, 989e12) == pytest.approx(342.0665856 / 989, rel=1e-12)
    assert bench_gpu.mfu(1e9, 1e5, None) is None  # unknown spec peak: no MFU, not a made-up one


@pytest.mark.parametrize(("name", "tflops"), [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H200", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA A100-SXM4-80GB", 312),
    ("NVIDIA A100 80GB PCIe", 312), ("NVIDIA GeForce RTX 4090", 165), ("Banana Accelerator 9000", None),
])
def test_spec_peak_lookup(name, tflops):
    got = bench_gpu.spec_peak(name)
    assert (got is None) if tflops is None else got == tflops * 1e12


def test_smoke_json_on_cpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench_gpu.torch.cuda, "is_available", lambda: False)  # the CPU path, also on a GPU box
    out = tmp_path / "bench_gpu.json"
    assert bench_gpu.main(["--smoke", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert KEYS <= set(got), KEYS - set(got)
    assert got["device"] == "cpu" and got["smoke"] is True and got["spec_peak_tflops"] is None
    assert got["mfu_spec_peak"] is None and got["tokens_per_s"] > 0 and got["measured_peak_tflops"] > 0
    # the JSON's MFU is its own numbers' arithmetic: flops/token x tokens/s over the measured peak
    assert math.isclose(got["mfu_measured_peak"],
                        got["flops_per_token"] * got["tokens_per_s"] / (got["measured_peak_tflops"] * 1e12))
    if got["hf_tokens_per_s"] is not None:  # transformers installed
        assert math.isclose(got["ratio_vs_hf"], got["tokens_per_s"] / got["hf_tokens_per_s"])
    table = capsys.readouterr().out
    assert "| archlab |" in table and "MFU of measured peak" in table and "unknown" in table


@pytest.mark.parametrize(("argv", "says"), [
    (["--smoke", "--batch", "0"], "--batch must be >= 1"),
    (["--smoke", "--steps", "-3"], "--steps must be >= 1"),
    (["--smoke", "--warmup", "-1"], "--warmup must be >= 0"),
    (["--smoke", "--batch", "many"], "invalid int value"),
    (["--smoke", "--bogus"], "unrecognized arguments: --bogus"),
    (["--smoke", "--json", "/no/such/dir/out.json"], "does not exist"),
    ([], "no CUDA device here"),
])
def test_bad_input_is_one_line(capsys, monkeypatch, argv, says):
    monkeypatch.setattr(bench_gpu.torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench_gpu.py: error: ") and says in err, err
