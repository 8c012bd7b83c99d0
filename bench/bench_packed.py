"""Benchmark packed training: member-tokens/s of M members of one model trained as one stacked model, against the
same M members run one after another and as M concurrent processes, on the same device, in the same run.

Not a test: prints a markdown table with ratios. Each member is `model=small` (d_model 128, 4 layers, 4 heads;
arch/presets.py) at n_ctx 256, vocab 4096, batch 8, with its own seed, its own AdamW (own lr) and its own batches. A
step is what the trainer does per member: forward, loss, backward, grad-norm clip, AdamW step. Packed: one
experiments.run.stacked.StackedLoss call for all M members, then each member's clip and step (as
experiments/run/pack.py). One after another: each member's solo step in turn. Concurrent processes: M spawned
processes, each stepping its own member, timed from a shared barrier to the last one done (torch threads per process:
the CPUs / M on the CPU; the GPU is shared as the processes find it). Throughput = M x steps x tokens per step / wall
seconds. CUDA: bf16 autocast, no torch.compile (the packed step runs eager); CPU: fp32, the torch thread count of this
process (or --threads).

    python bench/bench_packed.py                        # members 1, 4, 8, 16 on the default device
    python bench/bench_packed.py --members 1,4 --steps 5 --no-processes
    python bench/bench_packed.py --smoke --json out.json   # seconds on a CPU: checks that the script runs

`--json PATH` writes {"device", "torch", "members", "speedup", "rows": [...]}: `speedup` is packed over one after
another at the largest member count (the figure scripts/gpu_check.py shows). Target (issue 29): >= 8x one-at-a-time
at 16 members on a GPU; on a CPU a small gain or none is the honest expectation (SDPA has no CPU batching rule).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arch import build_model  # noqa: E402
from arch.presets import preset_config  # noqa: E402
from experiments.run.loop import LossModule  # noqa: E402
from experiments.run.stacked import StackedLoss  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--members", default=None, help="comma list of member counts; default 1,4,8,16 (1,2 with --smoke)")
    p.add_argument("--model", default="small", help="a preset of arch/presets.py (default small)")
    p.add_argument("--attention", default="sdpa", choices=["sdpa", "explicit"],
                   help="attention kernel (sdpa falls back to a loop over members under vmap where torch has no "
                        "batching rule for it; explicit is batched matmuls everywhere)")
    p.add_argument("--seq", type=int, default=None, help="n_ctx; default 256 (32 with --smoke)")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--batch", type=int, default=None, help="sequences per member per step; default 8 (2 with --smoke)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per member; default 10 (2 with --smoke)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--device", default=None, help="default cuda if available, else cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads (CPU); default torch's")
    p.add_argument("--no-processes", action="store_true", help="skip the concurrent-processes column")
    p.add_argument("--smoke", action="store_true", help="tiny shapes, members 1,2, no processes: a seconds-long check")
    p.add_argument("--json", default=None, help="write the numbers to this file")
    a = p.parse_args(argv)
    try:
        a.members = [int(x) for x in (a.members or ("1,2" if a.smoke else "1,4,8,16")).split(",")]
    except ValueError:
        p.error(f"--members: a comma list of ints, got {a.members!r}")
    if any(m < 1 for m in a.members):
        p.error("--members: every count must be >= 1")
    a.seq = a.seq or (32 if a.smoke else 256)
    a.batch = a.batch or (2 if a.smoke else 8)
    a.steps = a.steps or (2 if a.smoke else 10)
    if a.smoke:
        a.model, a.vocab, a.no_processes = "tiny", 256, True
    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {a.device}: this machine has no CUDA device")
    for name in ("seq", "batch", "steps", "vocab"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: must be >= 1")
    return a


class Members:
    """M models of one preset (own seed, own AdamW at its own lr, own batch generator) on one device."""

    def __init__(self, a: argparse.Namespace, m: int, first_seed: int = 0) -> None:
        self.a, self.device = a, torch.device(a.device)
        cfg = preset_config(a.model, vocab_size=a.vocab, n_ctx=a.seq, attention=a.attention)
        self.models, self.opts, self.gens = [], [], []
        for i in range(first_seed, first_seed + m):
            torch.manual_seed(i)
            self.models.append(build_model(cfg).to(self.device))
            fused = self.device.type == "cuda"
            self.opts.append(torch.optim.AdamW(self.models[-1].parameters(), lr=1e-3 * (1 + i % 4), fused=fused))
            self.gens.append(torch.Generator().manual_seed(1000 + i))
        self.wrapped = [LossModule(model) for model in self.models]
        self.stacked = StackedLoss(self.wrapped)
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda"
                         else nullcontext())

    def batch(self, j: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(0, self.a.vocab, (self.a.batch, self.a.seq + 1), generator=self.gens[j])
        ids = ids.to(self.device, non_blocking=True)
        return ids[:, :-1], ids[:, 1:]

    def _update(self, j: int) -> None:
        torch.nn.utils.clip_grad_norm_(self.models[j].parameters(), 1.0)
        self.opts[j].step()
        self.opts[j].zero_grad(set_to_none=True)

    def packed_step(self) -> None:
        with self.autocast:
            losses = self.stacked.losses([self.batch(j) for j in range(len(self.models))])
        losses.sum().backward()
        for j in range(len(self.models)):
            self._update(j)

    def solo_step(self, j: int) -> None:
        with self.autocast:
            loss = self.wrapped[j](*self.batch(j))
        loss.backward()
        self._update(j)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step, steps: int, warmup: int, device: torch.device) -> float:
    for _ in range(warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return time.perf_counter() - t0


def _process(a: argparse.Namespace, seed: int, threads: int, barrier, out) -> None:
    torch.set_num_threads(threads)
    member = Members(a, 1, first_seed=seed)
    for _ in range(a.warmup):
        member.solo_step(0)
    _sync(member.device)
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        member.solo_step(0)
    _sync(member.device)
    out.put((t0, time.perf_counter()))


def time_processes(a: argparse.Namespace, m: int) -> float:
    """Wall seconds from the moment all m processes are ready to the last one done."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(m), ctx.Queue()
    threads = max(1, (os.cpu_count() or 1) // m) if a.device == "cpu" else 1
    procs = [ctx.Process(target=_process, args=(a, i, threads, barrier, out)) for i in range(m)]
    for p in procs:
        p.start()
    spans = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def measure(a: argparse.Namespace) -> list[dict]:
    rows = []
    tokens = a.batch * a.seq
    for m in a.members:
        members = Members(a, m)
        device = members.device
        packed = time_steps(members.packed_step, a.steps, a.warmup, device)
        one_by_one = time_steps(lambda: [members.solo_step(j) for j in range(m)], a.steps, a.warmup, device)
        procs = None if a.no_processes else time_processes(a, m)
        work = m * a.steps * tokens
        row = {"members": m, "packed_tok_s": work / packed, "one_by_one_tok_s": work / one_by_one,
               "processes_tok_s": work / procs if procs else None}
        row["packed_vs_one_by_one"] = row["packed_tok_s"] / row["one_by_one_tok_s"]
        row["packed_vs_processes"] = row["packed_tok_s"] / row["processes_tok_s"] if procs else None
        rows.append(row)
        print(f"  members {m}: packed {row['packed_tok_s']:,.0f} tok/s, one after another "
              f"{row['one_by_one_tok_s']:,.0f}, processes {row['processes_tok_s'] or float('nan'):,.0f}", flush=True)
        del members
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def table(rows: list[dict]) -> str:
    def f(x, spec=",.0f"):
        return "n/a" if x is None else format(x, spec)

    lines = ["| members | packed (member-tok/s) | one after another | concurrent processes | packed / one after "
             "another | packed / processes |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['members']} | {f(r['packed_tok_s'])} | {f(r['one_by_one_tok_s'])} | "
                     f"{f(r['processes_tok_s'])} | {f(r['packed_vs_one_by_one'], '.2f')}x | "
                     f"{f(r['packed_vs_processes'], '.2f')}{'x' if r['packed_vs_processes'] else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(f"bench_packed: {a.model} ({a.attention}) n_ctx {a.seq} vocab {a.vocab} batch {a.batch}, {a.steps} timed steps, on "
          f"{a.device} ({name}), torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    rows = measure(a)
    print(table(rows))
    top = rows[-1]
    result = {"device": f"{a.device} ({name})", "torch": torch.__version__, "attention": a.attention,
              "members": top["members"],
              "speedup": top["packed_vs_one_by_one"], "rows": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
