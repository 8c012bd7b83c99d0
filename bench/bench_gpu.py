"""GPT-2 124M training step on a GPU: tokens/s, peak memory and MFU of archlab's model, HF GPT2LMHeadModel beside it.

Not a test: prints a markdown table (and `--json PATH` writes the numbers; scripts/gpu_check.py reads them).
What one step is, for both models: forward + cross-entropy + backward + fused AdamW step (lr 6e-4, betas
(0.9, 0.95), weight decay 0.1 on every parameter), bf16 autocast, torch.compile'd (the loss inside the compiled
module), batch B x 1024 random tokens. The shape is GPT-2 small: 12 layers, d_model 768, 12 heads, n_ctx 1024,
vocab 50257 (not padded to 50304), tied embeddings, dropout 0.
* archlab: `build_model(cfg)`, `model.loss(ids, targets)` (what the trainer calls), attention forced to the flash
  SDPA kernel (torch.nn.attention.sdpa_kernel(FLASH_ATTENTION); the step fails loudly where flash cannot run).
* HF: `GPT2LMHeadModel` with attn_implementation="sdpa" (torch picks the kernel), loss F.cross_entropy on its
  logits, same batch, same optimizer.
The models run one after the other, not at once (two 124M models with their activations would not fit an 80 GB
GPU at B=16): each gets `--warmup` steps (compilation happens in the first), then `--steps` timed steps
(torch.cuda.synchronize around each; tokens/s from the median step), and its own peak memory
(torch.cuda.max_memory_allocated, reset before it).

MFU = flops_per_token x tokens/s / peak, with flops_per_token = arch.flops_per_token(cfg, 1024) = 6N + 12·L·H·D·T
(N: the matmul parameters, the tied unembedding counted once as a matmul; T = 1024). Two peaks:
* measured: the best bf16 dense matmul rate of this GPU in this run (8192^3, best of 10 timed with CUDA events,
  before and after the models; the better of the two), the figure MFU is judged by (target: >= 50%);
* spec: the datasheet dense bf16 peak (experiments.run.flops.PEAK_BF16_FLOPS by device name: H100 SXM / H200
  989 TFLOP/s, A100 312, ...), "unknown" for a GPU not in the table.

    python bench/bench_gpu.py                      # B=16 (fits 80 GB); ~2 min on an H200, compilation included
    python bench/bench_gpu.py --batch 8 --json out/bench_gpu.json
    python bench/bench_gpu.py --smoke              # tiny shape on whatever device there is (the CPU: seconds)

--smoke: 2 layers, d_model 64, 4 heads, n_ctx 64, vocab 512, batch 2, 1 warmup + 2 timed steps, no compile,
256^3 matmuls (fp32 on the CPU, whose bf16 matmul is no peak), on CUDA if there is one else the CPU: it checks the
script, its figures mean nothing. Without CUDA and without --smoke the script says so in one line (exit 2).
Not handled: several GPUs (one device, one process), fp8, CUDA graphs, a real dataset (random tokens: the speed
of a step does not depend on them).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arch import ModelConfig, PosConfig, build_model, flops_per_token  # noqa: E402
from experiments.run.flops import lookup_peak  # noqa: E402
from experiments.run.loop import LossModule  # noqa: E402

GPT2 = dict(n_layers=12, d_model=768, n_heads=12, seq=1024, vocab=50257)
SMOKE = dict(n_layers=2, d_model=64, n_heads=4, seq=64, vocab=512)
MFU_TARGET = 0.5  # of the measured peak
GIB = 2**30


class Refused(Exception):
    """Bad input or a machine that cannot run the benchmark: one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse prints usage + error; one line is the house style
        raise Refused(message)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = OneLineParser(prog="bench_gpu.py", description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=None, help="sequences per step; default 16 (2 with --smoke)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps, compilation included; default 3")
    p.add_argument("--steps", type=int, default=None, help="timed steps per model; default 20 (2 with --smoke)")
    p.add_argument("--no-compile", action="store_true", help="eager steps (default: torch.compile)")
    p.add_argument("--no-hf", action="store_true", help="skip HF GPT2LMHeadModel")
    p.add_argument("--smoke", action="store_true", help="tiny shape on whatever device there is: tests the script")
    p.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    a = p.parse_args(argv)
    a.batch = a.batch if a.batch is not None else (2 if a.smoke else 16)
    a.warmup = a.warmup if a.warmup is not None else (1 if a.smoke else 3)
    a.steps = a.steps if a.steps is not None else (2 if a.smoke else 20)
    a.compile = not (a.no_compile or a.smoke)
    for name in ("batch", "steps"):
        if getattr(a, name) < 1:
            raise Refused(f"--{name} must be >= 1, got {getattr(a, name)}")
    if a.warmup < 0:
        raise Refused(f"--warmup must be >= 0, got {a.warmup}")
    if a.json is not None and not a.json.parent.is_dir():
        raise Refused(f"--json {a.json}: folder {a.json.parent} does not exist")
    a.shape = SMOKE if a.smoke else GPT2
    if torch.cuda.is_available():
        a.device = torch.device("cuda")
    elif a.smoke:
        a.device = torch.device("cpu")
    else:
        raise Refused("no CUDA device here (torch.cuda.is_available() is False); --smoke runs a tiny shape on the CPU")
    return a


# ---------------------------------------------------------------------------------------------- arithmetic


def mfu(flops_per_tok: float, tokens_per_s: float, peak_flops: float | None) -> float | None:
    """Model-FLOPs utilisation: flops_per_tok x tokens_per_s / peak_flops (None when the peak is unknown)."""
    return None if not peak_flops else flops_per_tok * tokens_per_s / peak_flops


def spec_peak(device_name: str) -> float | None:
    """Datasheet dense bf16 FLOP/s for a CUDA device name (experiments.run.flops's table), None if unknown."""
    return lookup_peak(device_name)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak(device: torch.device, n: int, dtype: torch.dtype, reps: int = 10) -> float:
    """Best FLOP/s of one (n, n) @ (n, n) matmul (2 n^3 FLOPs) over `reps` timed runs after 3 warm-up runs."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device, dtype)
    b = torch.randn(n, n, generator=g).to(device, dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


# ---------------------------------------------------------------------------------------------- models


def config(shape: dict) -> ModelConfig:
    """archlab's config of the GPT-2 shape `shape` (GPT2 or SMOKE)."""
    return ModelConfig(vocab_size=shape["vocab"], n_ctx=shape["seq"], d_model=shape["d_model"],
                       n_layers=shape["n_layers"], n_heads=shape["n_heads"], pos=PosConfig(kind="learned"), dropout=0.0)


def ours(shape: dict) -> tuple[torch.nn.Module, ModelConfig]:
    cfg = config(shape)
    torch.manual_seed(0)
    return build_model(cfg), cfg


def hf(shape: dict) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=shape["vocab"], n_positions=shape["seq"], n_embd=shape["d_model"],
                     n_layer=shape["n_layers"], n_head=shape["n_heads"], resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, activation_function="gelu_new", bos_token_id=None, eos_token_id=None,
                     attn_implementation="sdpa")
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg)


class HFLoss(torch.nn.Module):
    """HF's step as a module, as LossModule is ours: (ids, targets) (B, T) each -> mean cross-entropy."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.model(ids).logits  # (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def measure(name: str, loss_module: torch.nn.Module, args: argparse.Namespace, flash: bool) -> dict:
    """Warm-up + timed steps of one model on args.device; its row (tokens/s, step ms, peak memory)."""
    dev = args.device
    loss_module = loss_module.to(dev).train()
    opt = torch.optim.AdamW(loss_module.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    step_fn = torch.compile(loss_module) if args.compile else loss_module
    g = torch.Generator().manual_seed(0)
    vocab, seq = args.shape["vocab"], args.shape["seq"]
    ids = torch.randint(0, vocab, (args.batch, seq + 1), generator=g).to(dev)  # (B, T+1)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16) if dev.type == "cuda" else nullcontext()

    def kernel():
        if not flash:
            return nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)

    def step() -> torch.Tensor:
        with kernel(), autocast:
            loss = step_fn(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    sync(dev)
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync(dev)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    tokens = args.batch * seq
    return {"model": name, "params": sum(p.numel() for p in loss_module.parameters()), "step_ms": 1e3 * med,
            "step_ms_min": 1e3 * min(times), "tokens_per_s": tokens / med, "warmup_s": warmup_s,
            "peak_mem_gib": torch.cuda.max_memory_allocated(dev) / GIB if dev.type == "cuda" else None,
            "final_loss": float(loss.detach())}


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> dict:
    t_start = time.perf_counter()
    dev = args.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    n = 256 if args.smoke else 8192
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    peak_before = matmul_peak(dev, n, dtype)
    model, cfg = ours(args.shape)
    fpt = flops_per_token(cfg, seq_len=args.shape["seq"])
    rows = [measure("archlab", LossModule(model), args, flash=dev.type == "cuda")]  # the trainer's step module
    del model
    free(dev)
    if not args.no_hf:
        try:
            hf_model = hf(args.shape)
        except ImportError:
            print("note: transformers is not installed; the HF row is skipped (pip install transformers)")
        else:
            rows.append(measure("HF GPT2LMHeadModel (sdpa)", HFLoss(hf_model), args, flash=False))
            del hf_model
            free(dev)
    measured = max(peak_before, matmul_peak(dev, n, dtype))
    spec = spec_peak(name) if dev.type == "cuda" else None
    ours_row = rows[0]
    hf_row = rows[1] if len(rows) > 1 else None
    for r in rows:
        r["mfu_measured_peak"] = mfu(fpt, r["tokens_per_s"], measured)
        r["mfu_spec_peak"] = mfu(fpt, r["tokens_per_s"], spec)
    result = {
        "device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
        "smoke": args.smoke, "compile": args.compile, "batch": args.batch, "seq": args.shape["seq"],
        "shape": args.shape, "warmup": args.warmup, "steps": args.steps, "flops_per_token": fpt,
        "tokens_per_s": ours_row["tokens_per_s"], "step_ms": ours_row["step_ms"],
        "mfu_measured_peak": ours_row["mfu_measured_peak"], "mfu_spec_peak": ours_row["mfu_spec_peak"],
        "measured_peak_tflops": measured / 1e12, "spec_peak_tflops": spec / 1e12 if spec else None,
        "measured_peak_dtype": str(dtype).removeprefix("torch."), "peak_mem_gib": ours_row["peak_mem_gib"],
        "hf_tokens_per_s": hf_row["tokens_per_s"] if hf_row else None,
        "hf_peak_mem_gib": hf_row["peak_mem_gib"] if hf_row else None,
        "ratio_vs_hf": ours_row["tokens_per_s"] / hf_row["tokens_per_s"] if hf_row else None,
        "mfu_target": MFU_TARGET, "rows": rows, "elapsed_s": time.perf_counter() - t_start,
    }
    # the names scripts/gpu_check.py was first written to read: the same numbers
    result.update(mfu=result["mfu_measured_peak"], mfu_spec=result["mfu_spec_peak"],
                  peak_tflops_measured=result["measured_peak_tflops"], peak_tflops_spec=result["spec_peak_tflops"])
    return result


def _pct(x: float | None) -> str:
    return "unknown" if x is None else f"{100 * x:.1f}%"


def report(r: dict) -> str:
    spec = "unknown" if r["spec_peak_tflops"] is None else f"{r['spec_peak_tflops']:.0f}"
    lines = [
        f"# bench_gpu: {r['device']}, torch {r['torch']}, CUDA {r['cuda']}"
        + (" (smoke: figures mean nothing)" if r["smoke"] else ""),
        f"shape: {r['shape']['n_layers']} layers, d_model {r['shape']['d_model']}, {r['shape']['n_heads']} heads, "
        f"n_ctx {r['seq']}, vocab {r['shape']['vocab']}; batch {r['batch']} x {r['seq']}; "
        f"{'compiled' if r['compile'] else 'eager'}; {r['warmup']} warmup + {r['steps']} timed steps",
        f"peak {r['measured_peak_dtype']} matmul: measured {r['measured_peak_tflops']:.1f} TFLOP/s, spec {spec} "
        f"TFLOP/s; FLOPs/token (6N + 12LHDT) {r['flops_per_token']:.4g}",
        "",
        "| model | tokens/s | step ms (min) | peak mem GiB | MFU of measured peak | MFU of spec peak | vs HF |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in r["rows"]:
        mem = "-" if row["peak_mem_gib"] is None else f"{row['peak_mem_gib']:.1f}"
        vs = "-" if r["hf_tokens_per_s"] is None else f"{row['tokens_per_s'] / r['hf_tokens_per_s']:.2f}x"
        lines.append(f"| {row['model']} | {row['tokens_per_s']:,.0f} | {row['step_ms']:.1f} ({row['step_ms_min']:.1f}) "
                     f"| {mem} | {_pct(row['mfu_measured_peak'])} | {_pct(row['mfu_spec_peak'])} | {vs} |")
    met = r["mfu_measured_peak"] is not None and r["mfu_measured_peak"] >= MFU_TARGET
    lines += ["", f"target: MFU >= {100 * MFU_TARGET:.0f}% of the measured peak: {'met' if met else 'not met'}; "
                  f"{r['elapsed_s']:.0f} s in all"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        result = run(args)
    except Refused as e:
        print(f"bench_gpu.py: error: {e}", file=sys.stderr)
        return 2
    except torch.cuda.OutOfMemoryError:
        print(f"bench_gpu.py: error: out of GPU memory at --batch {args.batch}; try --batch {max(1, args.batch // 2)}",
              file=sys.stderr)
        return 1
    print(report(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
