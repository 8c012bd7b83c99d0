"""Benchmark RMSNorm against LayerNorm on the CPU: the norm alone, and one training step of the model that uses it.

Not a test: prints a markdown table with ratios. Written for the `rmsnorm_vs_layernorm` finding
(docs/findings/rmsnorm_vs_layernorm.md), whose full run measured RMSNorm *slower* per step on this CPU. The
reference is LayerNorm measured in the same run, through the same code path
(`arch.components.norms.build_norm`):

* norm alone: forward + backward of one norm module on a (batch, n_ctx, d_model) activation;
* model step: forward + loss + backward + AdamW step of the finding's model (d_model 128, 4 layers, 4 heads,
  n_ctx 128, batch 16, vocab 2048, pre-LN, GELU, learned positions), layernorm vs rmsnorm, same seed.

Both are measured twice in the same run: `eager` (torch's kernels: a fused CPU `F.layer_norm` against an unfused,
op-by-op `F.rms_norm`) and `compiled` (`torch.compile`, inductor: each norm module, and for the step the model's
loss as `train.compile=true` compiles it, so both norms get kernels generated the same way; kernels of equal
quality). Inductor on the CPU needs a C++ compiler; where compiling fails, the compiled rows say why (`n/a`).

Timings are interleaved (layernorm, rmsnorm, layernorm, ...) in `--repeats` rounds, after warm-up (which includes
compiling); each cell is the median per call with the [min, max] over the rounds. Ratio = rmsnorm time / layernorm
time (> 1: RMSNorm is slower), computed per round (the two were timed back to back) and given as the median
[min, max] over the rounds: the spread shows what the machine's load did.

    python bench/bench_norms.py                    # the finding's shape, 1 thread, eager and compiled
    python bench/bench_norms.py --threads 2 --d-model 512
    python bench/bench_norms.py --modes eager      # without torch.compile
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
MODES = ("eager", "compiled")


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
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="eager and/or compiled")
    return p.parse_args(argv)


def config(args: argparse.Namespace, norm: str) -> ModelConfig:
    return ModelConfig(vocab_size=args.vocab, n_ctx=args.n_ctx, d_model=args.d_model, n_layers=args.layers,
                       n_heads=args.heads, norm_type=norm, dropout=0.0)


def norm_call(args: argparse.Namespace, norm: str, compiled: bool = False) -> Callable[[], None]:
    module = build_norm(config(args, norm))
    forward = torch.compile(module) if compiled else module
    x0 = torch.randn(args.batch, args.n_ctx, args.d_model)  # (B, T, d)

    def call() -> None:
        x = x0.clone().requires_grad_()
        forward(x).sum().backward()

    return call


def step_call(args: argparse.Namespace, norm: str, compiled: bool = False) -> Callable[[], None]:
    torch.manual_seed(0)
    model = build_model(config(args, norm))
    loss = torch.compile(model.loss) if compiled else model.loss  # train.compile compiles the loss module the same way
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, args.vocab, (args.batch, args.n_ctx + 1), generator=g)  # (B, T+1)

    return lambda: train_step(lambda: loss(x[:, :-1], x[:, 1:]), opt)


def timed(calls: dict[str, Callable[[], None]], n: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each, one value per round; rounds interleaved so that background load hits both alike."""
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
    return per_call


def spread(values: list[float], fmt: str) -> str:
    """'median [min, max]' of values, each formatted with fmt."""
    return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}, {max(values):{fmt}}]"


def row(label: str, t: dict[str, list[float]], scale: float, unit: str) -> str:
    """One table row: each norm's time per call and the per-round ratio rmsnorm / layernorm."""
    ratios = [r / ln for r, ln in zip(t["rmsnorm"], t["layernorm"])]
    cells = [f"{spread([v * scale for v in t[norm]], '.1f')} {unit}" for norm in NORMS]
    return f"| {label} | {cells[0]} | {cells[1]} | {spread(ratios, '.2f')}× |"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    shape = f"({args.batch}, {args.n_ctx}, {args.d_model})"
    print(f"torch {torch.__version__}, {args.threads} thread(s); activation {shape}; "
          f"model d_model {args.d_model}, {args.layers} layers, vocab {args.vocab}; {args.repeats} rounds")
    print()
    print("| what | layernorm | rmsnorm | rmsnorm / layernorm |")
    print("|---|---|---|---|")
    rows = (("norm alone, fwd+bwd", norm_call, args.calls or 200, 1e6, "µs"),
            ("model step (fwd+loss+bwd+AdamW)", step_call, args.calls or 10, 1e3, "ms"))
    for mode in args.modes:
        for label, make, n, scale, unit in rows:
            label = f"{mode}: {label}"
            try:
                t = timed({norm: make(args, norm, compiled=mode == "compiled") for norm in NORMS}, n, args.repeats)
            except Exception as exc:  # inductor without a working C++ compiler fails on the first call
                if mode != "compiled":
                    raise
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                print(f"| {label} | n/a | n/a | n/a ({type(exc).__name__}: {why[:200]}) |", flush=True)
                continue
            print(row(label, t, scale, unit), flush=True)


if __name__ == "__main__":
    main()
