"""Benchmark RMSNorm against LayerNorm on the CPU: the norm alone, and one training step of the model that uses it.

Not a test: prints a markdown table with ratios. Written for the `rmsnorm_vs_layernorm` finding
(docs/findings/rmsnorm_vs_layernorm.md), whose full run measured RMSNorm *slower* per step on this CPU. The
reference is LayerNorm measured in the same run, through the same code path
(`arch.components.norms.build_norm`):

* norm alone: forward + backward of one norm module on a (batch, n_ctx, d_model) activation;
* model step: forward + loss + backward + AdamW step of the finding's model (d_model 128, 4 layers, 4 heads,
  n_ctx 128, batch 16, vocab 2048, pre-LN, GELU, learned positions), layernorm vs rmsnorm, same seed.

Timings are interleaved (layernorm, rmsnorm, layernorm, ...) in `--repeats` rounds, after warm-up; the median
per call is reported. Ratio = rmsnorm time / layernorm time (> 1: RMSNorm is slower).

    python bench/bench_norms.py                    # the finding's shape, 1 thread
    python bench/bench_norms.py --threads 2 --d-model 512
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arch import ModelConfig, build_model  # noqa: E402
from arch.components.norms import build_norm  # noqa: E402
from bench.timing import train_step  # noqa: E402

NORMS = ("layernorm", "rmsnorm")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--n-ctx", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5, help="rounds of timed calls")
    p.add_argument("--calls", type=int, default=None, help="timed calls per round (default 200 norm, 10 step)")
    return p.parse_args(argv)


def config(args: argparse.Namespace, norm: str) -> ModelConfig:
    return ModelConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, d_model=args.d_model, n_layers=args.layers,
                       n_heads=args.heads, norm_type=norm, dropout=0.0)


def norm_call(args: argparse.Namespace, norm: str) -> Callable[[], None]:
    module = build_norm(config(args, norm))
    x0 = torch.randn(args.batch, args.n_ctx, args.d_model)  # (B, T, d)

    def call() -> None:
        x = x0.clone().requires_grad_()
        module(x).sum().backward()

    return call


def step_call(args: argparse.Namespace, norm: str) -> Callable[[], None]:
    torch.manual_seed(0)
    model = build_model(config(args, norm))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab, (args.batch, args.n_ctx + 1), generator=g)  # (B, T+1)

    return lambda: train_step(lambda: model.loss(x[:, :-1], x[:, 1:]), opt)


def timed(calls: dict[str, Callable[[], None]], n: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each, rounds interleaved so that background load hits both alike."""
    for fn in calls.values():
        for _ in range(max(2, n // 10)):
            fn()
    per_call: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            per_call[name].append((time.perf_counter() - t0) / n)
    return {k: statistics.median(v) for k, v in per_call.items()}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = f"({args.batch}, {args.n_ctx}, {args.d_model})"
    print(f"torch {torch.__version__}, {args.threads} thread(s); activation {shape}; "
          f"model d_model {args.d_model}, {args.layers} layers, vocab {args.vocab}")
    print()
    print("| what | layernorm | rmsnorm | rmsnorm / layernorm |")
    print("|---|---|---|---|")
    rows = (("norm alone, fwd+bwd", norm_call, args.calls or 200, 1e6, "µs"),
            ("model step (fwd+loss+bwd+AdamW)", step_call, args.calls or 10, 1e3, "ms"))
    for label, make, n, scale, unit in rows:
        t = timed({norm: make(args, norm) for norm in NORMS}, n, args.repeats)
        print(f"| {label} | {t['layernorm'] * scale:.1f} {unit} | {t['rmsnorm'] * scale:.1f} {unit} | "
              f"{t['rmsnorm'] / t['layernorm']:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
