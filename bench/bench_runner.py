"""Runner benchmarks (issue 4): what the training loop adds on top of the model step, and sweep parallelism.

    python bench/bench_runner.py                  # both parts, CPU; ~10 min on an idle 2-core machine
    python bench/bench_runner.py --part overhead  # or --part sweep; --device cuda for the GPU numbers

1. Overhead. `experiments.run.train.train(cfg)` on a tiny config (composed with Hydra's compose API; log every
   step, eval and checkpoint only at the end) against a bare step: forward + backward + optimizer step of the
   same model (resolved ModelConfig from the run's config.yaml, experiments.run.optim.build_optimizer, same
   autocast) on one fixed batch of the same shape, with the same torch threads (1 by default).
   Overhead = train step / bare step - 1 covers data sampling, grad clipping, per-layer grad norms, the lr
   schedule, metric assembly and logging (metrics.jsonl, plus wandb offline for `logger=wandb`). Measured as
   (a) process CPU time per step, the difference between a long and a short train() run over the step
   difference (setup, final eval and checkpoint cancel) -- the headline on CPU, since it does not count time
   other processes take on a shared machine -- and (b) wall time per step, the median interval of consecutive
   `time` values in metrics.jsonl -- the headline with --device cuda. Target: <= 5%. On CPU it also prints
   a breakdown: CPU ms/step of each piece of the loop (data, model, clip, layer grad norms, log), timed one
   by one, which is steadier than the difference of two noisy totals.
2. Sweep. The same 4-point sweep (model/pos=learned,sinusoidal,alibi,rope) as
   `python -m experiments.train -m ...`, once with Hydra's basic launcher (sequential, in one process) and
   once with `hydra/launcher=joblib hydra.launcher.n_jobs=2`; wall time of each command, speedup = seq / par.
   With train.num_threads=null each parallel job gets cpu_count // n_jobs threads; the sequential sweep runs
   twice: with num_threads=null (all cores per job, what a user gets by default) and with num_threads=1 (the
   same per-job threads as the parallel side, so the ratio is the process parallelism alone). The tokenizer
   and token caches are warmed first, so no side pays for tokenizer training. Target: >= 1.6x.
The machine may be shared: each measurement is repeated `--repeats` times; reported are the medians of the
overhead repeats and the fastest repeat of each sweep side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from experiments.rundir.layout import RunStatus

REPO = Path(__file__).resolve().parents[1]
POS = "learned,sinusoidal,alibi,rope"


def tiny_overrides(run_dir: Path, steps: int, device: str, logger: str, threads: int | None) -> list[str]:
    return [
        "model=tiny",
        "model/pos=rope",
        f"logger={logger}",
        f"train.steps={steps}",
        "train.tokens=null",
        "train.log_interval=1",
        "train.eval_interval=1000000",  # one eval, at the end (the same in the short and the long run)
        "train.eval_batches=2",
        "train.extrap=never",
        "train.ckpt_interval=1000000",  # one checkpoint, at the end
        "train.progress=false",
        f"train.device={device}",
        f"train.run_dir={run_dir}",
        f"train.num_threads={'null' if threads is None else threads}",
    ]


def train_step_times(run_dir: Path, warmup: int) -> list[float]:
    """Wall time between consecutive train lines of metrics.jsonl (log_interval=1), after `warmup` steps."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = {row["step"]: row["time"] for row in rows if "train/loss" in row}
    steps = sorted(train)
    return [train[b] - train[a] for a, b in zip(steps, steps[1:]) if b == a + 1 and a >= warmup]


def timed_train(cfg) -> tuple[float, float]:
    """(process CPU seconds, wall seconds) of one train(cfg) call."""
    from experiments.run.train import train

    c0, w0 = time.process_time(), time.perf_counter()
    summary = train(cfg)
    if summary["status"] != RunStatus.COMPLETED:
        raise SystemExit(f"train() ended with status {summary['status']!r}")
    return time.process_time() - c0, time.perf_counter() - w0


def run_model_and_optimizer(run_dir: Path, device: str):
    """(saved config, model, optimizer, B, T, device) rebuilt from a run's resolved config.yaml, seeded as train()."""
    import torch
    from omegaconf import OmegaConf

    from arch import ModelConfig, build_model
    from experiments.config.schema import OptimConfig
    from experiments.run.optim import build_optimizer

    saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True)
    model_cfg = {k: v for k, v in saved["model"].items() if k != "shape"}
    B, T = int(saved["train"]["batch_size"]), int(saved["train"]["n_ctx"])
    dev = torch.device(device)
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict(model_cfg)).to(dev)
    model.train()
    opt = build_optimizer(model, OptimConfig(**saved["optim"]), dev)
    return saved, model, opt, B, T, dev


def bare_steps(run_dir: Path, steps: int, warmup: int, device: str) -> tuple[float, float]:
    """(CPU s/step, median wall s/step) of forward + backward + optimizer step, as train() builds them.

    Same ModelConfig (from the run's resolved config.yaml), same optimizer builder, one fixed batch of the
    same shape, same autocast.
    """
    import torch

    saved, model, opt, B, T, dev = run_model_and_optimizer(run_dir, device)
    gen = torch.Generator().manual_seed(0)
    batch = torch.randint(0, model.cfg.vocab_size, (B, T + 1), generator=gen).to(dev)
    x, y = batch[:, :-1], batch[:, 1:]
    use_bf16 = dev.type == "cuda" and saved["train"]["dtype"] in ("auto", "bf16")
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if use_bf16 else contextlib.nullcontext()
    walls = []
    for i in range(warmup + steps):
        if i == warmup:
            c0 = time.process_time()
        t0 = time.perf_counter()
        with amp:
            loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()  # train() syncs on the loss every step too
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            walls.append(time.perf_counter() - t0)
    return (time.process_time() - c0) / steps, statistics.median(walls)


def breakdown(run_dir: Path, steps: int, warmup: int, device: str) -> dict[str, float]:
    """Process CPU ms per step of each piece of train()'s loop, timed one by one on the run's model and data.

    Pieces: data (WindowSampler.next + .to(device)), model (forward + backward + optimizer step), clip
    (clip_grad_norm_), layer_norms (grad_norm/layer_{i}), log (Tracker.log of a train line to metrics.jsonl).
    """
    import numpy as np
    import torch

    from experiments.data.corpus import WindowSampler
    from experiments.rundir.tracking import Tracker
    from experiments.run.grad_norms import layer_grad_norms

    saved, model, opt, B, T, dev = run_model_and_optimizer(run_dir, device)
    tokens = np.random.default_rng(0).integers(0, model.cfg.vocab_size, 1_000_000).astype(np.uint16)
    sampler = WindowSampler(tokens, T, B, torch.Generator().manual_seed(0))
    tracker = Tracker(run_dir.parent / "breakdown", saved, logger="disabled")
    parts = dict.fromkeys(["data", "model", "clip", "layer_norms", "log"], 0.0)
    clock = time.process_time
    for i in range(warmup + steps):
        t0 = clock()
        x, y = sampler.next()
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        t1 = clock()
        loss = model.loss(x, y)
        loss.backward()
        train_loss = loss.item()
        t2 = clock()
        norms = layer_grad_norms(model.blocks)
        t3 = clock()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        t4 = clock()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t5 = clock()
        tracker.log({"tokens": i * B * T, "flops": 1.0 * i, "time": t5, "train/loss": train_loss, "lr": 1e-3,
                     "grad_norm": grad_norm, **norms, "tokens_per_s": 1.0, "mfu": 0.1}, step=i)
        t6 = clock()
        if i >= warmup:
            for key, dt in zip(parts, (t1 - t0, (t2 - t1) + (t5 - t4), t4 - t3, t3 - t2, t6 - t5)):
                parts[key] += dt
    tracker.finish(RunStatus.COMPLETED)
    return {k: 1e3 * v / steps for k, v in parts.items()}


def bench_overhead(args: argparse.Namespace, work: Path) -> dict:
    """Per-step cost of train() over the bare step, two ways:

    * CPU time (the headline on CPU, robust to other processes on a shared machine): the difference of the
      process CPU time of train() with `--steps` and with `--steps // 3` steps, over the step difference
      (setup, the final eval and checkpoint cancel), against the bare step's CPU time per step. Single-threaded
      by default (--threads 1), so no thread pool spins in the numbers.
    * wall time: median step interval in metrics.jsonl against the bare step's median wall time.
    """
    import torch

    from experiments.config.compose import compose_config

    threads = args.threads
    # warm-up: tokenizer training / token caching and lazy imports happen here, not in the timed runs
    timed_train(compose_config(tiny_overrides(work / "overhead_warmup", 2, args.device, "disabled", threads)))
    results = {}
    for logger in args.loggers:
        timed_train(compose_config(tiny_overrides(work / f"overhead_warmup_{logger}", 2, args.device, logger, threads)))
        if logger != "disabled":
            print(f"[overhead] logger={logger}: WANDB_MODE={os.environ.get('WANDB_MODE', '(unset)')}", flush=True)
        reps = []
        for rep in range(args.repeats):
            long_steps, short_steps = args.steps, max(args.warmup + 2, args.steps // 3)
            long_dir, short_dir = work / f"overhead_{logger}_{rep}_long", work / f"overhead_{logger}_{rep}_short"
            cpu_short, wall_short = timed_train(compose_config(tiny_overrides(short_dir, short_steps, args.device, logger, threads)))
            cpu_long, wall_long = timed_train(compose_config(tiny_overrides(long_dir, long_steps, args.device, logger, threads)))
            train_cpu = (cpu_long - cpu_short) / (long_steps - short_steps)
            train_wall = statistics.median(train_step_times(long_dir, args.warmup))
            torch.set_num_threads(threads or torch.get_num_threads())
            bare_cpu, bare_wall = bare_steps(long_dir, long_steps - args.warmup, args.warmup, args.device)
            reps.append({"train_cpu_ms": 1e3 * train_cpu, "bare_cpu_ms": 1e3 * bare_cpu,
                         "overhead_cpu": train_cpu / bare_cpu - 1, "train_wall_ms": 1e3 * train_wall,
                         "bare_wall_ms": 1e3 * bare_wall, "overhead_wall": train_wall / bare_wall - 1})
            r = reps[-1]
            print(f"[overhead] logger={logger:8s} rep {rep}: CPU/step train() {r['train_cpu_ms']:.2f} ms vs bare "
                  f"{r['bare_cpu_ms']:.2f} ms -> overhead {100 * r['overhead_cpu']:+.1f}% | wall/step (median) "
                  f"{r['train_wall_ms']:.2f} vs {r['bare_wall_ms']:.2f} ms -> {100 * r['overhead_wall']:+.1f}%",
                  flush=True)
        med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
        results[logger] = med
        if logger == args.loggers[0] and args.device == "cpu":
            torch.set_num_threads(threads or torch.get_num_threads())
            parts = breakdown(long_dir, args.steps - args.warmup, args.warmup, args.device)
            results["breakdown_cpu_ms"] = parts
            print("[overhead] breakdown, CPU ms/step: " + ", ".join(
                f"{k} {v:.2f} ({100 * v / parts['model']:.1f}% of model)" for k, v in parts.items()), flush=True)
        key = "overhead_cpu" if args.device == "cpu" else "overhead_wall"
        print(f"[overhead] logger={logger:8s} medians of {len(reps)} (per column): CPU/step {med['train_cpu_ms']:.2f} vs "
              f"{med['bare_cpu_ms']:.2f} ms, wall/step {med['train_wall_ms']:.2f} vs {med['bare_wall_ms']:.2f} ms; "
              f"overhead {100 * med[key]:+.1f}% ({'CPU time' if args.device == 'cpu' else 'wall time'}; "
              f"target <= 5%; threads={threads})", flush=True)
    return results


def run_sweep(sweep_dir: Path, steps: int, device: str, extra: list[str], env: dict) -> float:
    cmd = [sys.executable, "-m", "experiments.train", "-m", f"model/pos={POS}", "model=tiny", "logger=disabled",
           f"train.steps={steps}", "train.tokens=null", f"train.eval_interval={steps}", "train.eval_batches=2",
           "train.extrap=never", "train.progress=false", f"train.device={device}", f"hydra.sweep.dir={sweep_dir}", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    summaries = [json.loads(p.read_text()) for p in sweep_dir.rglob("summary.json")]
    statuses = [s.get("status") for s in summaries]
    if sorted(statuses) != [RunStatus.COMPLETED] * 4:
        raise SystemExit(f"expected 4 completed runs under {sweep_dir}, got {statuses}")
    in_jobs = sum(s["wall_time_s"] for s in summaries)
    per_job = ", ".join(f"{x['wall_time_s']:.1f}" for x in summaries)
    print(f"[sweep]   {sweep_dir.name}: {wall:.1f} s wall; train() wall times add up to {in_jobs:.1f} s ({per_job})",
          flush=True)
    return wall


def bench_sweep(args: argparse.Namespace, work: Path) -> dict:
    env = {**os.environ, "WANDB_MODE": "disabled", "ARCHLAB_CACHE": str(work / "cache"), "HYDRA_FULL_ERROR": "1"}
    # warm the tokenizer / token caches with one short run
    subprocess.run([sys.executable, "-m", "experiments.train", "model=tiny", "logger=disabled", "train.steps=2",
                    "train.tokens=null", "train.progress=false", "train.extrap=never", "train.eval_batches=1",
                    f"train.device={args.device}", f"train.run_dir={work / 'warm'}"], cwd=REPO, env=env, check=True,
                   capture_output=True)
    # fixed cost of each launcher: the same sweep with 1 step per job (process start, imports, per-job setup)
    fixed_seq = run_sweep(work / "fixed_seq", 1, args.device, ["train.num_threads=1"], env)
    fixed_par = run_sweep(work / "fixed_par", 1, args.device, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], env)
    print(f"[sweep] fixed cost (4 jobs x 1 step): sequential {fixed_seq:.1f} s, joblib n_jobs=2 {fixed_par:.1f} s "
          f"(worker start-up: the jobs must be long for the parallel sweep to pay off)", flush=True)
    par = []
    seq: dict[str, list[float]] = {t: [] for t in args.seq_threads}
    for rep in range(args.repeats):
        for t in args.seq_threads:
            seq[t].append(run_sweep(work / f"seq{t}_{rep}", args.sweep_steps, args.device, [f"train.num_threads={t}"], env))
        par.append(run_sweep(work / f"par_{rep}", args.sweep_steps, args.device,
                             ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"], env))
        print(f"[sweep] repeat {rep}: " + ", ".join(f"sequential (num_threads={t}) {seq[t][-1]:.1f} s" for t in seq)
              + f", joblib n_jobs=2 {par[-1]:.1f} s", flush=True)
    t_par = min(par)
    out = {"joblib2_s": t_par, "fixed_sequential_s": fixed_seq, "fixed_joblib2_s": fixed_par}
    for t, times in seq.items():
        out[f"sequential_threads_{t}_s"], out[f"speedup_vs_threads_{t}"] = min(times), min(times) / t_par
        print(f"[sweep] 4 runs x {args.sweep_steps} steps: sequential (train.num_threads={t}) {min(times):.1f} s | "
              f"joblib n_jobs=2 (1 thread per job) {t_par:.1f} s | speedup {min(times) / t_par:.2f}x  "
              f"(target >= 1.6x; cpu_count={os.cpu_count()})", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--part", choices=["overhead", "sweep", "all"], default="all")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=150, help="train steps of the long overhead run (the short one: a third)")
    p.add_argument("--warmup", type=int, default=10, help="steps skipped before timing")
    p.add_argument("--sweep-steps", type=int, default=1000,
                   help="train steps per sweep job (1000: ~30 s per job single-threaded on an idle 2-core CPU)")
    p.add_argument("--seq-threads", nargs="+", default=["null", "1"],
                   help="train.num_threads of the sequential sweeps (null: all cores, the default a user gets; "
                        "1: the same threads per job as the parallel sweep)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads for the overhead part")
    p.add_argument("--loggers", nargs="+", default=["disabled", "wandb"], help="conf/logger options to time")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    os.environ.setdefault("WANDB_SILENT", "true")
    import torch

    print(f"[machine] cpu_count={os.cpu_count()} torch={torch.__version__} device={args.device} "
          f"load average at start={os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_runner_") as tmp:
        work = Path(tmp)
        os.environ.setdefault("ARCHLAB_CACHE", str(work / "cache"))
        results = {}
        if args.part in ("overhead", "all"):
            results["overhead"] = bench_overhead(args, work)
        if args.part in ("sweep", "all"):
            results["sweep"] = bench_sweep(args, work)
    print(f"[machine] load average at end={os.getloadavg()[0]:.1f} (above cpu_count: other processes took CPU)",
          flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
