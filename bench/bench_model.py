"""Benchmark archlab's model against Hugging Face `GPT2LMHeadModel` of the same shape: CPU training steps.

Not a test: prints markdown tables with ratios. In one process, interleaved step by step (so background load
hits every model alike), it measures:

1. training-step throughput (forward + backward + AdamW step, tokens/s) of `build_model(cfg)` and of HF
   `GPT2LMHeadModel` (attn_implementation "sdpa" and "eager") at a GPT-2 shape: 6 layers, d_model 384,
   6 heads, n_ctx 256, vocab 50257 (GPT-2's), batch 8 x 256 tokens, fp32, dropout 0, same AdamW. Ours runs
   `model.loss(ids, targets)` (what the trainer calls); HF runs `F.cross_entropy` on its logits (its `labels=`
   path would add a shifted copy of the logits). Ratio = ours / HF tokens/s, from median step times; also
   from the least-contended (min) step, and from the median process CPU time per step (all threads), which
   preemption by other processes does not inflate: the steadiest view on a shared machine.
2. achieved FLOP/s = `arch.flops_per_token(cfg, seq_len)` x tokens/s, as a fraction of the machine's
   measured fp32 matmul peak (best of several 2048^3 matmuls, same threads, same run).
3. forward + backward time of each attention kernel (explicit / sdpa / manual) alone on q, k, v of the
   model's shape (B, H, T, D), plain causal and with a float (H, T, T) bias (the relative / ALiBi path).

    python bench/bench_model.py                   # full: batch 8, 3 warmup + 10 timed steps per model
    python bench/bench_model.py --quick           # batch 4, 1 warmup + 3 timed steps
    python bench/bench_model.py --vocab 8192 --threads 2 --ours-attention sdpa,explicit,manual
    python bench/bench_model.py --profile         # + torch.profiler top ops of one step, ours vs HF sdpa
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arch import ModelConfig, PosConfig, build_model, count_params, flops_per_token  # noqa: E402
from arch.components.attention import ATTENTION  # noqa: E402
from bench.timing import timed_train_step  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="batch 4, 1 warmup + 3 timed steps, fewer kernel reps")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--seq", type=int, default=256, help="sequence length = n_ctx")
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, default=None, help="default 8 (4 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per model; default 10 (3 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads; default os.cpu_count()")
    p.add_argument("--ours-attention", default="sdpa", help="comma list of archlab attention impls to train")
    p.add_argument("--hf", default="sdpa,eager", help="comma list of HF attn_implementation ('' for none)")
    p.add_argument("--skip-kernels", action="store_true", help="skip part 3")
    p.add_argument("--profile", action="store_true", help="print torch.profiler top ops for ours vs HF sdpa")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args(argv)
    a.batch = a.batch or (4 if a.quick else 8)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 3)
    a.steps = a.steps or (3 if a.quick else 10)
    a.threads = a.threads or os.cpu_count()
    return a


# ---------------------------------------------------------------------------------------------- models


def ours(args: argparse.Namespace, attention: str) -> tuple[torch.nn.Module, ModelConfig]:
    cfg = ModelConfig(
        vocab_size=args.vocab, n_ctx=args.seq, d_model=args.d_model, n_layers=args.layers, n_heads=args.heads,
        pos=PosConfig(kind="learned"), attention=attention, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    return build_model(cfg), cfg


def hf(args: argparse.Namespace, impl: str) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=args.vocab, n_positions=args.seq, n_embd=args.d_model, n_layer=args.layers, n_head=args.heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new",
        bos_token_id=args.vocab - 1, eos_token_id=args.vocab - 1, attn_implementation=impl,
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    assert model.config._attn_implementation == impl, model.config._attn_implementation
    return model


class Runner:
    """One model + its AdamW; `step()` runs forward + loss + backward + optimizer step, returns seconds."""

    def __init__(self, name: str, model: torch.nn.Module, is_hf: bool, ids: torch.Tensor, targets: torch.Tensor):
        self.name, self.model, self.is_hf, self.ids, self.targets = name, model.train(), is_hf, ids, targets
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        self.times: list[float] = []  # wall seconds per timed step
        self.cpu_times: list[float] = []  # process CPU seconds (all threads) per timed step
        self.params = sum(p.numel() for p in model.parameters())

    def loss(self) -> torch.Tensor:
        if not self.is_hf:
            return self.model.loss(self.ids, self.targets)  # what the trainer calls
        logits = self.model(self.ids).logits  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), self.targets.view(-1))

    def step(self) -> tuple[float, float]:
        """One training step; returns (wall seconds, process CPU seconds)."""
        return timed_train_step(self.loss, self.opt)


# ---------------------------------------------------------------------------------------------- parts


def matmul_peak(n: int = 2048, reps: int = 6) -> float:
    """Best fp32 GFLOP/s of an n x n @ n x n matmul (2 n^3 FLOPs)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


def train_throughput(args: argparse.Namespace) -> tuple[list[dict], ModelConfig]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    runners, cfg = [], None
    for impl in [s for s in args.ours_attention.split(",") if s]:
        model, cfg = ours(args, impl)
        runners.append(Runner(f"archlab ({impl})", model, False, ids, targets))
    for impl in [s for s in args.hf.split(",") if s]:
        runners.append(Runner(f"HF GPT2LMHeadModel ({impl})", hf(args, impl), True, ids, targets))
    if cfg is None:
        cfg = ours(args, "sdpa")[1]
    for r in runners:  # same shape: same parameter count (ours in closed form, HF by numel)
        if r.params != count_params(cfg):
            print(f"warning: {r.name} has {r.params:,} params, closed form says {count_params(cfg):,}")
    for _ in range(args.warmup):
        for r in runners:
            r.step()
    for _ in range(args.steps):  # interleaved: background load hits every model alike
        for r in runners:
            wall, cpu = r.step()
            r.times.append(wall)
            r.cpu_times.append(cpu)
    tokens = args.batch * args.seq
    fpt = flops_per_token(cfg, seq_len=args.seq)
    rows = []
    for r in runners:
        med = statistics.median(r.times)
        rows.append({
            "model": r.name, "params": r.params, "step_ms_median": 1e3 * med, "step_ms_min": 1e3 * min(r.times),
            "cpu_s_median": statistics.median(r.cpu_times),
            "tokens_per_s": tokens / med, "gflops_per_s": fpt * tokens / med / 1e9,
        })  # fmt: skip
    return rows, cfg


def kernel_times(args: argparse.Namespace) -> list[dict]:
    B, H, T = args.batch, args.heads, args.seq
    D = args.d_model // H
    reps = 5 if args.quick else 20
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g, requires_grad=True) for _ in range(3))
    causal = torch.full((T, T), float("-inf")).triu(1)
    bias = torch.randn(H, T, T, generator=g) * 0.1 + causal  # relative / ALiBi style: mask folded in
    dz = torch.randn(B, H, T, D, generator=g)
    masks = {"causal": None, "bias (H,T,T)": bias}
    times: dict[tuple[str, str], list[float]] = {(m, name): [] for m in masks for name in ATTENTION}
    for i in range(reps + 2):  # interleaved over masks and kernels; the first 2 rounds are warm-up
        for (label, name), ts in times.items():
            q.grad = k.grad = v.grad = None
            t0 = time.perf_counter()
            z = ATTENTION[name](q, k, v, masks[label], 0.0, 1.0 / D**0.5)
            z.backward(dz)
            if i >= 2:
                ts.append(time.perf_counter() - t0)
    rows = [{"kernel": name, "mask": label, "fwd_bwd_ms": 1e3 * statistics.median(ts)} for (label, name), ts in times.items()]
    return rows


def profile(args: argparse.Namespace) -> None:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    for name, model, is_hf in (("archlab (sdpa)", ours(args, "sdpa")[0], False), ("HF (sdpa)", hf(args, "sdpa"), True)):
        r = Runner(name, model, is_hf, ids, ids)
        r.step()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            r.step()
        print(f"\n### profile: {name}\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


# ---------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"# bench_model: torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}")  # fmt: skip
    print(f"shape: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, n_ctx {args.seq}, "
          f"vocab {args.vocab}, batch {args.batch} x {args.seq}; {args.warmup} warmup + {args.steps} timed steps\n")  # fmt: skip

    peak_before = matmul_peak()
    rows, cfg = train_throughput(args)
    peak = max(peak_before, matmul_peak())
    ref = next((r for r in rows if r["model"].startswith("HF") and "(sdpa)" in r["model"]), None)
    print(f"fp32 matmul peak (2048^3, best of 6, before/after): {peak:.1f} GFLOP/s; "
          f"FLOPs/token (6N + 12LHDT, N = {count_params(cfg, non_embedding=True) + cfg.vocab_size * cfg.d_model:,}): "
          f"{flops_per_token(cfg, seq_len=args.seq):.4g}\n")  # fmt: skip
    print("| model | params | step ms median (min) | tokens/s | vs HF sdpa: median (min) | CPU s/step | vs HF (CPU) "
          "| GFLOP/s | of matmul peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        r["fraction_of_peak"] = r["gflops_per_s"] / peak
        ratio = cpu_ratio = "-"
        if ref:  # min step time: the least contended step, a second view when the machine is shared
            r["ratio_median"] = ref["step_ms_median"] / r["step_ms_median"]
            r["ratio_min"] = ref["step_ms_min"] / r["step_ms_min"]
            r["ratio_cpu"] = ref["cpu_s_median"] / r["cpu_s_median"]  # CPU time: insensitive to preemption
            ratio = f"{r['ratio_median']:.2f}x ({r['ratio_min']:.2f}x)"
            cpu_ratio = f"{r['ratio_cpu']:.2f}x"
        print(f"| {r['model']} | {r['params']:,} | {r['step_ms_median']:.0f} ({r['step_ms_min']:.0f}) | "
              f"{r['tokens_per_s']:.0f} | {ratio} | {r['cpu_s_median']:.2f} | {cpu_ratio} | {r['gflops_per_s']:.1f} | "
              f"{100 * r['fraction_of_peak']:.0f}% |")  # fmt: skip
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "torch": torch.__version__, "threads": torch.get_num_threads(), "matmul_peak_gflops": peak,
              "flops_per_token": flops_per_token(cfg, seq_len=args.seq), "train": rows}  # fmt: skip

    if not args.skip_kernels:
        krows = kernel_times(args)
        B, H, T, D = args.batch, args.heads, args.seq, args.d_model // args.heads
        print(f"\nattention kernels alone, forward + backward, q/k/v ({B}, {H}, {T}, {D}):\n")
        print("| kernel | causal ms | bias (H,T,T) ms |")
        print("|---|---:|---:|")
        for name in ATTENTION:
            c, b = (next(r["fwd_bwd_ms"] for r in krows if r["kernel"] == name and r["mask"] == m)
                    for m in ("causal", "bias (H,T,T)"))  # fmt: skip
            print(f"| {name} | {c:.1f} | {b:.1f} |")
        result["kernels"] = krows
    if args.profile:
        profile(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
