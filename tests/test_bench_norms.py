"""bench/bench_norms.py: the eager and the torch.compile rows of one run, their spread over rounds, and a compile
failure said in the table. No timings are asserted: only what the script prints and that the compiled norms it
times compute what the eager ones do."""

from __future__ import annotations

import re

import pytest
import torch

from arch import ModelConfig
from arch.components.norms import build_norm
from bench import bench_norms

TINY = ["--d-model", "16", "--layers", "1", "--heads", "2", "--n-ctx", "8", "--batch", "2", "--vocab", "32",
        "--calls", "1"]
CELL = r"\d+\.\d \[\d+\.\d, \d+\.\d\] (µs|ms)"
RATIO = r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]×"


def table(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| what")]


def test_a_row_is_median_and_range_and_the_ratio_is_per_round():
    t = {"layernorm": [1e-3, 2e-3, 4e-3], "rmsnorm": [2e-3, 2e-3, 2e-3]}  # per-round ratios 2, 1, 0.5
    assert bench_norms.row("x", t, 1e3, "ms") == "| x | 2.0 [1.0, 4.0] ms | 2.0 [2.0, 2.0] ms | 1.00 [0.50, 2.00]× |"


def test_a_failing_compile_is_a_row_that_says_why(monkeypatch, capsys):
    def no_compiler(*a, **kw):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\nmore detail")

    monkeypatch.setattr(bench_norms.torch, "compile", no_compiler)
    bench_norms.main([*TINY, "--repeats", "1"])
    rows = table(capsys.readouterr().out)
    assert len(rows) == 4
    for line in rows[:2]:
        assert line.startswith("| eager: ") and re.fullmatch(rf"\| .* \| {CELL} \| {CELL} \| {RATIO} \|", line), line
    for line in rows[2:]:
        assert line.startswith("| compiled: ")
        assert line.endswith("| n/a | n/a | n/a (RuntimeError: InvalidCxxCompiler: No working C++ compiler found) |")


@pytest.mark.parametrize("kind", ["layernorm", pytest.param("rmsnorm", marks=pytest.mark.slow)])  # (~3 s each)
def test_the_compiled_norm_computes_the_eager_one(kind):
    cfg = ModelConfig(vocab_size=32, n_ctx=8, d_model=16, n_layers=1, n_heads=2, norm_type=kind)
    torch.manual_seed(0)
    norm = build_norm(cfg)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 8, 16, requires_grad=True)
    xc = x.detach().clone().requires_grad_()
    eager, compiled = norm(x), torch.compile(norm)(xc)
    torch.testing.assert_close(compiled, eager)
    eager.pow(2).sum().backward()
    grad_w = norm.weight.grad.clone()
    norm.weight.grad = None
    compiled.pow(2).sum().backward()
    torch.testing.assert_close(xc.grad, x.grad)
    torch.testing.assert_close(norm.weight.grad, grad_w)


@pytest.mark.slow
def test_both_modes_print_their_rows(capsys):
    """The real thing on a tiny shape: four rows of numbers (inductor needs a C++ compiler, as here)."""
    bench_norms.main([*TINY, "--repeats", "2"])
    rows = table(capsys.readouterr().out)
    assert [r.split(":")[0] for r in rows] == ["| eager", "| eager", "| compiled", "| compiled"]
    assert all(re.fullmatch(rf"\| .* \| {CELL} \| {CELL} \| {RATIO} \|", r) for r in rows), rows
