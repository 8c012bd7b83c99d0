"""archlab against nanoGPT's own shakespeare_char CPU job, side by side in one run (issue 29 section 3).

    python bench/bench_nanogpt.py --nanogpt ~/nanoGPT --text input.txt              # 2000 iters, ~8 min on 1 core
    python bench/bench_nanogpt.py --nanogpt ~/nanoGPT --text input.txt --iters 250  # a quick look
    python bench/bench_nanogpt.py ... --variants eager,compile --seeds 0,1,2        # more archlab rows; seed spread

What runs. nanoGPT's job is its README's CPU command, run by its own `train.py` from the checkout `--nanogpt DIR`
(`git clone https://github.com/karpathy/nanoGPT`; measured at the commit printed in the output):

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 --log_interval=1
        --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000
        --dropout=0.0

with `--out_dir` in a temp dir, `--always_save_checkpoint=True` (so the weights after exactly `--iters` updates
are on disk for the common evaluation below) and `--max_iters` / `--lr_decay_iters` set to `--iters`. Its data is
what `data/shakespeare_char/prepare.py` writes, built here from `--text` (tinyshakespeare's input.txt) in the
temp dir: characters sorted into a vocab of 65, the first 90% of the text for train.bin and the rest for val.bin,
uint16, meta.pkl. The same token files feed archlab.

archlab's job is its own trainer, `experiments.run.train.train(cfg)`, on the same model, data and optimizer,
composed from conf/ with Hydra (see `archlab_overrides`): 4 layers, d_model 128, 4 heads, n_ctx 64, vocab 65,
learned positions, pre-LN LayerNorm without bias (nanoGPT's `bias = False`), exact GELU (`nn.GELU()`), tied
embeddings, dropout 0, GPT-2 init; batch 12, AdamW lr 1e-3 betas (0.9, 0.99) weight decay 0.1 on every >= 2-D
tensor (`optim.decay_embeddings=true`, nanoGPT's grouping), grad clip 1.0, 100 warmup steps then cosine to 1e-4,
random windows, 20 eval batches every 250 steps. The trainer's data step is swapped for the char-level token files
(its `experiments.data.cache.prepare_data`, patched in the worker process: archlab's own tokenizers are byte-level,
vocab >= 256, so the char vocab of 65 has no tokenizer there); the rest of the loop is the trainer's (sampling,
lr schedule, clipping, per-layer grad norms and a metrics.jsonl line every step, evals, checkpoints).

How it is timed. Both trainers run as separate processes with the same torch threads (`--threads`; nanoGPT gets
OMP_NUM_THREADS, archlab train.num_threads), started together and run in alternating rounds: every `--slice`
seconds the running process is paused (SIGSTOP) and the next one resumed (SIGCONT), round-robin over nanoGPT and
every archlab variant, so load from other work on the machine falls on all of them alike. A step's time is the
wall time between the ends of consecutive iterations, as nanoGPT's log line `iter N: loss X, time Y ms` reports
it (archlab: consecutive `time` values in metrics.jsonl); everything in a loop iteration counts (data, eval at
the eval steps, logging). The first `--skip` iterations are dropped; a step that spans a pause is inflated by it
(one per round per process), which the median and min ignore; the mean leaves out as many of the longest steps
as the job had pauses. The headline is CPU ms per iteration: at every pause the job's CPU seconds (/proc, all
threads) and the iterations it has completed are read, and CPU ms/iter = Δ CPU / Δ iterations from the first
pause after iteration `--skip` to the last one; time other processes take from the core does not count (on a
shared machine wall times swing with the load, CPU time much less). Ratios are nanoGPT's time / archlab's (the
step speed of archlab relative to nanoGPT's: > 1 is faster). Each job's total CPU seconds (rusage, start-up
included) are printed too.

Equal validation loss. After both finish, the weights each trainer holds after `--iters` updates are evaluated
here with the same code on the whole val split (every full window of 64 tokens, not overlapping: 1742 windows,
111,488 scored tokens), nanoGPT's through its own model.py from the checkout. The trainers' own 20-batch estimates
are printed too. With several `--seeds` (archlab only: nanoGPT's train.py fixes its seed at 1337) the spread of
archlab's final val loss over seeds is measured, and "equal" means |archlab - nanoGPT| <= 2 x that standard
deviation; with one seed the tolerance is `--tol`.

Bad input (no checkout at --nanogpt, a checkout without train.py / the config, no --text file) is one line and
exit status 2. Not a test: prints a markdown table (and `--json` writes the numbers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NANOGPT_FILES = ("train.py", "model.py", "configurator.py", "config/train_shakespeare_char.py")
NANOGPT_URL = "https://github.com/karpathy/nanoGPT"
EVAL_INTERVAL = 250  # config/train_shakespeare_char.py's eval_interval
SHAPE = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "batch_size": 12}  # the README's CPU overrides

# archlab variants: name -> overrides on top of archlab_overrides (each is one more process in the rounds)
VARIANTS: dict[str, list[str]] = {
    "eager": [],
    "compile": ["train.compile=true"],
}

ITER_RE = re.compile(r"^iter (\d+): loss ([-+0-9.eEnaif]+), time ([0-9.]+)ms")
EVAL_RE = re.compile(r"^step (\d+): train loss ([-+0-9.eEnaif]+), val loss ([-+0-9.eEnaif]+)")


class BenchError(Exception):
    """Bad input: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------------------------- data


def prepare_char_data(text_path: Path, out_dir: Path) -> dict[str, Any]:
    """nanoGPT's data/shakespeare_char/prepare.py on a local file: train.bin / val.bin (uint16 char ids, the first
    90% of the text / the rest) and meta.pkl (vocab_size, itos, stoi) in out_dir. Returns the meta + counts."""
    try:
        data = text_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BenchError(f"--text {text_path}: cannot read it ({e.__class__.__name__}: {e})") from None
    chars = sorted(set(data))
    if len(data) < 1000 or len(chars) > 65535:
        raise BenchError(f"--text {text_path}: {len(data)} characters, {len(chars)} distinct: not a usable corpus")
    stoi = {ch: i for i, ch in enumerate(chars)}
    n = len(data)
    train = np.array([stoi[c] for c in data[: int(n * 0.9)]], dtype=np.uint16)
    val = np.array([stoi[c] for c in data[int(n * 0.9) :]], dtype=np.uint16)
    out_dir.mkdir(parents=True, exist_ok=True)
    train.tofile(out_dir / "train.bin")
    val.tofile(out_dir / "val.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    with open(out_dir / "meta.pkl", "wb") as f:
        pickle.dump(meta, f)
    return {"vocab_size": len(chars), "train_tokens": len(train), "val_tokens": len(val),
            "sha256": hashlib.sha256(data.encode("utf-8")).hexdigest()}


# ---------------------------------------------------------------------------------------------- nanoGPT


def check_nanogpt(path: Path | None) -> Path:
    """The checkout, resolved; BenchError (one line saying how to get it) if it is missing or incomplete."""
    how = f"get it with: git clone {NANOGPT_URL} && pass --nanogpt <that dir> (or set NANOGPT_DIR)"
    if path is None:
        raise BenchError(f"--nanogpt DIR is required: nanoGPT's checkout; {how}")
    path = path.expanduser().resolve()
    if not path.is_dir():
        raise BenchError(f"--nanogpt {path}: no such directory; {how}")
    missing = [f for f in NANOGPT_FILES if not (path / f).is_file()]
    if missing:
        raise BenchError(f"--nanogpt {path}: not a nanoGPT checkout (missing {', '.join(missing)}); {how}")
    return path


def nanogpt_revision(path: Path) -> str:
    """`git rev-parse HEAD` of the checkout, or (not a git checkout) a sha256 of its train.py, model.py and config."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", out.stdout.strip()):
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    h = hashlib.sha256()
    for f in NANOGPT_FILES:
        h.update((path / f).read_bytes())
    return f"not a git checkout; files sha256 {h.hexdigest()[:16]}"


def nanogpt_command(nanogpt: Path, iters: int, out_dir: Path) -> list[str]:
    """nanoGPT README's CPU command (shakespeare_char), max_iters / lr_decay_iters = iters, out_dir in the temp dir."""
    return [
        sys.executable, "-u", str(nanogpt / "train.py"), str(nanogpt / "config/train_shakespeare_char.py"),
        "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1",
        *(f"--{k}={v}" for k, v in SHAPE.items()),
        f"--max_iters={iters}", f"--lr_decay_iters={iters}", "--dropout=0.0",
        f"--out_dir={out_dir}", "--always_save_checkpoint=True", f"--eval_interval={eval_interval(iters)}",
    ]  # fmt: skip


def eval_interval(iters: int) -> int:
    """250 (the config's), or `iters` when 250 does not divide it: the last iteration is always evaluated."""
    return EVAL_INTERVAL if iters % EVAL_INTERVAL == 0 else iters


def parse_nanogpt_log(text: str) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """nanoGPT's stdout -> ({iter: step ms}, {iter: train loss}, {eval step: val loss})."""
    times, losses, vals = {}, {}, {}
    for line in text.splitlines():
        m = ITER_RE.match(line)
        if m:
            it = int(m.group(1))
            times[it], losses[it] = float(m.group(3)), float(m.group(2))
            continue
        m = EVAL_RE.match(line)
        if m:
            vals[int(m.group(1))] = float(m.group(3))
    return times, losses, vals


# ---------------------------------------------------------------------------------------------- archlab


def archlab_overrides(iters: int, seed: int, threads: int, run_dir: Path) -> list[str]:
    """archlab's trainer set up as nanoGPT's job (see the module docstring)."""
    return [
        "experiment_name=nanogpt_shakespeare_char", f"seed={seed}", "logger=disabled",
        "model.d_model=128", "model.n_layers=4", "model.n_heads=4", "model.bias=false", "model.dropout=0.0",
        "model/pos=learned", "model/norm=pre", "model/norm_type=layernorm", "model/activation=gelu_exact",
        "model/attention=sdpa", "model.tie_embeddings=true", "model/init=gpt2",
        "optim.lr=1e-3", "optim.betas=[0.9,0.99]", "optim.weight_decay=0.1", "optim.decay_embeddings=true",
        "schedule=cosine", "schedule.warmup_steps=100", "schedule.min_lr_ratio=0.1",
        "train.n_ctx=64", "train.batch_size=12", f"train.steps={iters}", "train.tokens=null", "train.grad_clip=1.0",
        "train.log_interval=1", f"train.eval_interval={eval_interval(iters)}", "train.eval_batches=20",
        "train.extrap=never", f"train.ckpt_interval={iters}", "train.progress=false", f"train.num_threads={threads}",
        "train.device=cpu", "train.dtype=fp32", f"train.run_dir={run_dir}",
    ]  # fmt: skip


class CharTokenizer:
    """The char vocab of meta.pkl, as much of archlab's Tokenizer as the trainer uses (vocab_size, fingerprint,
    save)."""

    def __init__(self, itos: dict[int, str]) -> None:
        self.itos = itos
        self.vocab_size = len(itos)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps([self.itos[i] for i in range(self.vocab_size)]).encode()).hexdigest()

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.write_text(json.dumps({"char_vocab": [self.itos[i] for i in range(self.vocab_size)]}))
        return path


def char_prepared_data(data_dir: Path):
    """experiments.data.cache.PreparedData over nanoGPT's train.bin / val.bin / meta.pkl."""
    from experiments.data.cache import PreparedData, TokenData

    with open(data_dir / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    tok = CharTokenizer(meta["itos"])
    splits = {s: np.memmap(data_dir / f"{s}.bin", dtype=np.uint16, mode="r") for s in ("train", "val")}

    def sidecar(ids: np.ndarray) -> dict[str, Any]:  # chars: bytes = UTF-8 length of each char (all 1 here)
        counts = np.bincount(ids, minlength=tok.vocab_size)
        nbytes = sum(len(tok.itos[i].encode("utf-8")) * int(n) for i, n in enumerate(counts))
        return {"count": len(ids), "n_bytes": nbytes, "tokenizer_fingerprint": tok.fingerprint()}

    digest = hashlib.sha256((data_dir / "train.bin").read_bytes() + (data_dir / "val.bin").read_bytes()).hexdigest()
    data = TokenData(train=splits["train"], val=splits["val"], train_meta=sidecar(splits["train"]),
                     val_meta=sidecar(splits["val"]), path=data_dir, fingerprint=digest)
    return PreparedData(tokenizer=tok, tokenizer_info={"path": str(data_dir / "meta.pkl"), "cached": True,
                                                       "train_seconds": 0.0}, data=data, name="shakespeare_char")


def archlab_worker(argv: list[str]) -> int:
    """`--archlab-worker`: one archlab training run (a child process of the benchmark)."""
    p = argparse.ArgumentParser(prog="bench_nanogpt.py --archlab-worker")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--src", type=Path, default=REPO, help="the archlab tree to import (another commit's worktree)")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args(argv)
    sys.path.insert(0, str(a.src.resolve()))
    os.chdir(a.src)
    from experiments.config.compose import compose_config
    from experiments.data import cache
    from experiments.run.train import train

    prepared = char_prepared_data(a.data)
    cache.prepare_data = lambda *args, **kwargs: prepared  # the one data step swapped (see the module docstring)
    summary = train(compose_config(archlab_overrides(a.iters, a.seed, a.threads, a.run_dir) + a.overrides))
    print(f"archlab worker: {summary['status']} after {summary['steps']} steps", flush=True)
    return 0 if summary["status"] == "completed" else 1


def parse_archlab_metrics(text: str) -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
    """metrics.jsonl -> ({step: step ms}, {step: train loss}, {step: val loss}). Step k's time is the `time` of
    its train line minus step k-1's (step 1's has no predecessor and is left out), the same span as nanoGPT's
    `time` of iteration k-1 (iterations count from 0 there, steps from 1 here)."""
    train_time, losses, vals = {}, {}, {}
    for line in text.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        step = int(row["step"])
        if "train/loss" in row:
            train_time[step], losses[step] = float(row["time"]), float(row["train/loss"])
        if "val/loss" in row:
            vals[step] = float(row["val/loss"])
    times = {s - 1: 1e3 * (t - train_time[s - 1]) for s, t in train_time.items() if s - 1 in train_time}
    return times, {s - 1: v for s, v in losses.items()}, vals


def nanogpt_progress(log: Path) -> int:
    """Iterations nanoGPT has completed: 1 + the last `iter N:` line of its log (0 before the first)."""
    its = [int(m.group(1)) for m in map(ITER_RE.match, log.read_text().splitlines()[-50:]) if m]
    return its[-1] + 1 if its else 0


def archlab_progress(metrics: Path) -> int:
    """Steps archlab has completed: the last train line of its metrics.jsonl (0 before the first)."""
    if not metrics.is_file():
        return 0
    for line in reversed(metrics.read_text().splitlines()):
        if '"train/loss"' in line:
            return int(json.loads(line)["step"])
    return 0


# ---------------------------------------------------------------------------------------------- rounds


@dataclass
class Job:
    """One trainer process in the rounds."""

    name: str
    cmd: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    returncode: int | None = None
    cpu_s: float = 0.0  # rusage user + system of the process (all threads), at exit
    wall_s: float = 0.0  # from start to exit, pauses included
    pauses: int = 0  # times it was paused after having run: at most this many of its step times span a pause
    progress: Callable[[], int] | None = None  # iterations completed so far (read from the job's log)
    samples: list[tuple[int, float]] = field(default_factory=list)  # (iterations done, CPU s) at each pause
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.returncode is None


def run_in_rounds(jobs: list[Job], slice_s: float, say=print) -> None:
    """Start every job paused, then give each `slice_s` seconds of running in turn (SIGSTOP / SIGCONT) until all
    have exited; records each job's return code, CPU seconds (os.wait4's rusage) and wall seconds."""
    t0 = time.perf_counter()
    for job in jobs:
        job.proc = subprocess.Popen(job.cmd, stdout=open(job.log, "w"), stderr=subprocess.STDOUT, env=job.env,
                                    cwd=job.extra.get("cwd"))
        os.kill(job.proc.pid, signal.SIGSTOP)
    try:
        turn = 0
        while any(j.alive for j in jobs):
            live = [j for j in jobs if j.alive]
            job = live[turn % len(live)]
            turn += 1
            os.kill(job.proc.pid, signal.SIGCONT)
            end = time.perf_counter() + slice_s
            while (time.perf_counter() < end or len(live) == 1) and _reap(job, t0) is None:
                time.sleep(0.02)  # the last job left runs to its end unpaused
            if job.alive:
                os.kill(job.proc.pid, signal.SIGSTOP)
                job.pauses += 1
                _sample(job)
            else:
                say(f"  {job.name}: exited {job.returncode} after {job.wall_s:.0f} s ({job.cpu_s:.0f} CPU s)")
    finally:
        for job in jobs:
            if job.alive:  # interrupted: end our own children
                os.kill(job.proc.pid, signal.SIGCONT)
                job.proc.kill()
                _reap(job, t0, block=True)


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process, all threads (/proc/<pid>/stat; None where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: fields 14, 15


def _sample(job: Job) -> None:
    """(iterations done, CPU s) of a paused job: nothing moves while it is stopped."""
    cpu = process_cpu_s(job.proc.pid)
    if job.progress is not None and cpu is not None:
        try:
            job.samples.append((job.progress(), cpu))
        except (OSError, ValueError):
            pass


def cpu_ms_per_iter(samples: list[tuple[int, float]], skip: int, iters: int) -> float:
    """CPU ms per iteration between the first pause after iteration `skip` and the last pause before `iters`:
    Δ CPU / Δ iterations over the whole steady stretch (evals and logging included; start-up and the first
    iterations left out). Preemption by other processes does not count; nan with fewer than 2 such samples."""
    inside = [(it, c) for it, c in samples if skip <= it < iters]
    if len(inside) < 2 or inside[-1][0] == inside[0][0]:
        return math.nan
    return 1e3 * (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _reap(job: Job, t0: float, block: bool = False) -> int | None:
    pid, status, usage = os.wait4(job.proc.pid, 0 if block else os.WNOHANG)
    if pid == 0:
        return None
    job.returncode = os.waitstatus_to_exitcode(status)
    job.proc.returncode = job.returncode  # reaped here: Popen must not wait for it again
    job.cpu_s = usage.ru_utime + usage.ru_stime
    job.wall_s = time.perf_counter() - t0
    return job.returncode


# ---------------------------------------------------------------------------------------------- numbers


def step_stats(times: dict[int, float], skip: int, iters: int | None = None, pauses: int = 0) -> dict[str, float]:
    """Median / min ms over the iterations numbered skip .. iters - 1 (nanoGPT runs one past max_iters), and the
    mean over them without the `pauses` longest (a pause of a round is seconds, longer than any step, eval steps
    included: what is left is the job's own time per step, evals and logging included)."""
    ts = [t for it, t in sorted(times.items()) if it >= skip and (iters is None or it < iters)]
    kept = sorted(ts)[: max(0, len(ts) - pauses)]
    if not kept:
        return {"n": 0, "median_ms": math.nan, "min_ms": math.nan, "mean_ms": math.nan}
    return {"n": len(ts), "median_ms": statistics.median(ts), "min_ms": min(ts), "mean_ms": statistics.fmean(kept)}


def speed_ratio(ref_ms: float, ms: float) -> float:
    """Step speed of `ms` relative to `ref_ms` (nanoGPT's): ref / ms, > 1 is faster."""
    return ref_ms / ms if ms > 0 else math.nan


def equal_within(a: float, b: float, spread: list[float], tol: float) -> tuple[bool, float]:
    """(|a - b| <= tolerance, tolerance): 2 x the sample std of `spread` (>= 2 values), else `tol`."""
    limit = 2 * statistics.stdev(spread) if len(spread) >= 2 else tol
    return abs(a - b) <= limit, limit


def full_val_loss(loss_fn, val: np.ndarray, block: int = 64, batch: int = 64) -> tuple[float, int]:
    """Mean next-token loss over every full non-overlapping window of `block` tokens of val (inputs at 0, block,
    2 block, ...; a window needs block + 1 tokens). loss_fn(x, y) -> mean loss of the batch. Returns (loss, tokens)."""
    import torch

    ids = torch.from_numpy(val.astype(np.int64))
    starts = list(range(0, len(ids) - block, block))
    total, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(starts), batch):
            s = starts[i : i + batch]
            x = torch.stack([ids[j : j + block] for j in s])
            y = torch.stack([ids[j + 1 : j + block + 1] for j in s])
            total += float(loss_fn(x, y)) * y.numel()
            n += y.numel()
    return total / n, n


def nanogpt_final_loss(nanogpt: Path, ckpt: Path, val: np.ndarray, iters: int) -> float:
    """Whole-split val loss of nanoGPT's checkpoint after `iters` updates, through the checkout's model.py."""
    import torch

    nanogpt_model = nanogpt_module(nanogpt)
    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    if int(state["iter_num"]) != iters:
        raise BenchError(f"nanoGPT's checkpoint is from iteration {state['iter_num']}, expected {iters}")
    model = nanogpt_model.GPT(nanogpt_model.GPTConfig(**state["model_args"]))
    sd = {k.removeprefix("_orig_mod."): v for k, v in state["model"].items()}
    model.load_state_dict(sd)
    model.eval()
    return full_val_loss(lambda x, y: model(x, y)[1], val)[0]


def nanogpt_module(nanogpt: Path):
    """nanoGPT's model.py from the checkout, as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def archlab_model_config(vocab_size: int):
    """The arch.ModelConfig archlab_overrides resolve to (composed through conf/, as the trainer does)."""
    from experiments.config.check import to_plain
    from experiments.config.compose import compose_config
    from experiments.config.model_schema import model_config

    cfg = compose_config(archlab_overrides(100, 0, 1, Path("unused")))
    return model_config(to_plain(cfg)["model"], vocab_size=vocab_size)


def same_function(nanogpt: Path, vocab_size: int = 65, seed: int = 0) -> float:
    """Copy a nanoGPT model's weights (its own init) into archlab's model of archlab_overrides' config and return
    max |loss difference| over a few random batches: ~1e-7 when the two compute the same function."""
    import torch

    import arch

    ng = nanogpt_module(nanogpt)
    torch.manual_seed(seed)
    shape = {k: SHAPE[k] for k in ("n_layer", "n_head", "n_embd", "block_size")}
    ref = ng.GPT(ng.GPTConfig(vocab_size=vocab_size, dropout=0.0, bias=False, **shape))
    ours = arch.build_model(archlab_model_config(vocab_size))
    names = {"transformer.wte.weight": "wte.weight", "transformer.wpe.weight": "pos.wpe.weight",
             "transformer.ln_f.weight": "ln_f.weight"}  # fmt: skip
    sd = {}
    for k, v in ref.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied to wte in both
        sd[names.get(k) or k.replace("transformer.h.", "blocks.")] = v
    missing, unexpected = ours.load_state_dict(sd, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        raise BenchError(f"nanoGPT's parameters do not map onto archlab's: missing {missing}, extra {unexpected}")
    g = torch.Generator().manual_seed(seed)
    worst = 0.0
    with torch.no_grad():
        for _ in range(3):
            x = torch.randint(0, vocab_size, (4, SHAPE["block_size"]), generator=g)
            y = torch.randint(0, vocab_size, (4, SHAPE["block_size"]), generator=g)
            worst = max(worst, abs(float(ref(x, y)[1]) - float(ours.loss(x, y))))
    return worst


def archlab_final_loss(run_dir: Path, val: np.ndarray, iters: int) -> float:
    """Whole-split val loss of the archlab run's last checkpoint (step `iters`)."""
    import arch
    from experiments.rundir.checkpoint import Checkpoints

    ckpts = Checkpoints(run_dir / "checkpoints")
    path = ckpts.latest()
    state = ckpts.load_state(path)
    if int(state["step"]) != iters:
        raise BenchError(f"archlab's last checkpoint is from step {state['step']}, expected {iters}")
    model = arch.build_model(arch.ModelConfig.from_dict(state["model_config"]))
    ckpts.load_model_weights(model, path, state)
    model.eval()
    return full_val_loss(model.loss, val)[0]


# ---------------------------------------------------------------------------------------------- step A/B


def step_rows(nanogpt: Path, vocab_size: int = 65) -> list[tuple[str, Any]]:
    """(label, make) for the in-process step comparison: make() -> (loss_fn, model, optimizer) of nanoGPT's
    model.py (its own configure_optimizers) and of archlab's model in each candidate setting."""
    import torch

    import arch
    from experiments.run.loop import LossModule
    from experiments.run.optim import param_groups

    def nano():
        ng = nanogpt_module(nanogpt)
        torch.manual_seed(0)
        model = ng.GPT(ng.GPTConfig(vocab_size=vocab_size, dropout=0.0, bias=False,
                                    **{k: SHAPE[k] for k in ("n_layer", "n_head", "n_embd", "block_size")}))
        return (lambda x, y: model(x, y)[1]), model, model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")

    def ours(fused: bool, compiled: bool):
        def make():
            torch.manual_seed(0)
            model = arch.build_model(archlab_model_config(vocab_size))
            opt = torch.optim.AdamW(param_groups(model, 0.1, decay_embeddings=True), lr=1e-3, betas=(0.9, 0.99),
                                    fused=fused)
            loss = torch.compile(LossModule(model)) if compiled else model.loss  # as train.compile=true does
            return loss, model, opt
        return make

    return [("nanoGPT model.py, AdamW for-loop (its CPU default)", nano),
            ("archlab, AdamW for-loop (before)", ours(False, False)),
            ("archlab, fused AdamW (the CPU default now)", ours(True, False)),
            ("archlab compiled (train.compile=true), AdamW for-loop", ours(False, True)),
            ("archlab compiled, fused AdamW", ours(True, True))]


def step_ab(nanogpt: Path, steps: int, threads: int, warmup: int = 5) -> list[dict[str, Any]]:
    """Forward + loss + backward + clip + AdamW step of each step_rows entry on one random (12, 64) batch, the rows
    interleaved step by step; process CPU ms per step (median, min) and nanoGPT's median / each row's."""
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 65, (SHAPE["batch_size"], SHAPE["block_size"]), generator=g) for _ in range(2))
    runs = []
    for label, make in step_rows(nanogpt):
        loss_fn, model, opt = make()

        def step(loss_fn=loss_fn, model=model, opt=opt) -> float:
            c0 = time.process_time()
            loss = loss_fn(x, y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            return time.process_time() - c0

        for _ in range(warmup):  # torch.compile compiles here
            step()
        runs.append((label, step, []))
    for _ in range(steps):
        for _, step, times in runs:
            times.append(step())
    ref = statistics.median(runs[0][2])
    return [{"row": label, "cpu_ms_median": 1e3 * statistics.median(ts), "cpu_ms_min": 1e3 * min(ts),
             "speed_vs_nanogpt": ref / statistics.median(ts)} for label, _, ts in runs]


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nanogpt", type=Path, default=os.environ.get("NANOGPT_DIR") or None,
                   help=f"nanoGPT checkout (git clone {NANOGPT_URL}); default $NANOGPT_DIR")
    p.add_argument("--text", type=Path, default=None, help="tinyshakespeare's input.txt (what prepare.py downloads)")
    p.add_argument("--step-ab", type=int, default=0, metavar="N",
                   help="instead of the jobs: N interleaved model steps in this process, nanoGPT's model vs archlab's "
                        "candidates (fused AdamW, compile), process CPU time")  # fmt: skip
    p.add_argument("--iters", type=int, default=2000, help="training iterations of each job (the README's 2000)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of every job (OMP_NUM_THREADS for nanoGPT)")
    p.add_argument("--variants", default="eager", help=f"comma list of archlab variants: {', '.join(VARIANTS)}")
    p.add_argument("--archlab-src", action="append", default=[], metavar="LABEL=DIR",
                   help="also run archlab's eager variant from another tree (e.g. a worktree of an older commit)")
    p.add_argument("--seeds", default="0", help="archlab seeds (comma list); the first is timed against nanoGPT, "
                   "the others run after it and give the seed spread of the final val loss")  # fmt: skip
    p.add_argument("--slice", type=float, default=2.0, help="seconds each process runs per round")
    p.add_argument("--skip", type=int, default=10, help="iterations left out of the step statistics")
    p.add_argument("--tol", type=float, default=0.02, help="val-loss tolerance (nats) when only one seed runs")
    p.add_argument("--keep", type=Path, default=None, help="keep the temp dir's runs here (default: deleted)")
    p.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    a = p.parse_args(argv)
    a.variants = [v for v in a.variants.split(",") if v]
    bad = [v for v in a.variants if v not in VARIANTS]
    if bad:
        raise BenchError(f"--variants: unknown {', '.join(bad)}; choose from {', '.join(VARIANTS)}")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",") if s]
    except ValueError:
        raise BenchError(f"--seeds must be a comma list of integers, got {a.seeds!r}") from None
    srcs = {}
    for spec in a.archlab_src:
        label, sep, d = spec.partition("=")
        if not sep or not label or not (Path(d) / "experiments").is_dir():
            raise BenchError(f"--archlab-src {spec!r}: expected LABEL=DIR with DIR an archlab tree")
        srcs[label] = Path(d).resolve()
    a.archlab_src = srcs
    if a.iters < 20 or a.threads < 1 or a.slice <= 0 or not a.seeds:
        raise BenchError("--iters must be >= 20, --threads >= 1, --slice > 0, --seeds non-empty")
    if a.step_ab < 0:
        raise BenchError("--step-ab must be >= 0")
    if not a.step_ab and (a.text is None or not a.text.is_file()):
        what = "--text is required" if a.text is None else f"--text {a.text}: no such file"
        raise BenchError(f"{what} (tinyshakespeare's input.txt, which nanoGPT's data/shakespeare_char/prepare.py "
                         f"downloads)")
    a.nanogpt = check_nanogpt(a.nanogpt)
    return a


def thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    env.pop("NANOGPT_DIR", None)
    return env


def archlab_job(name: str, work: Path, data: Path, args: argparse.Namespace, seed: int,
                src: Path = REPO, overrides: list[str] | None = None) -> Job:
    run_dir = work / f"archlab_{name}"
    cmd = [sys.executable, "-u", str(Path(__file__).resolve()), "--archlab-worker", "--data", str(data),
           "--run-dir", str(run_dir), "--iters", str(args.iters), "--seed", str(seed), "--threads", str(args.threads),
           "--src", str(src), *(overrides or [])]  # fmt: skip
    return Job(name, cmd, work / f"{name}.log", thread_env(args.threads), extra={"run_dir": run_dir, "seed": seed},
               progress=lambda: archlab_progress(run_dir / "metrics.jsonl"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--archlab-worker"]:
        return archlab_worker(argv[1:])
    try:
        args = parse_args(argv)
    except BenchError as e:
        print(f"bench_nanogpt: error: {e}", file=sys.stderr)
        return 2
    import torch

    if args.step_ab:
        print(f"# bench_nanogpt --step-ab: nanoGPT {nanogpt_revision(args.nanogpt)}; torch {torch.__version__}, "
              f"{args.threads} thread(s); {args.step_ab} interleaved steps per row, batch 12 x 64, vocab 65\n")
        print("| model step (forward + loss + backward + clip + AdamW) | CPU ms median (min) | step speed vs nanoGPT |")
        print("|---|---:|---:|")
        for r in step_ab(args.nanogpt, args.step_ab, args.threads):
            print(f"| {r['row']} | {r['cpu_ms_median']:.1f} ({r['cpu_ms_min']:.1f}) | {r['speed_vs_nanogpt']:.2f}x |")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench_nanogpt_"))
    try:
        return run(args, work, torch.__version__)
    except BenchError as e:
        print(f"bench_nanogpt: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_nanogpt: interrupted; the trainers were stopped", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            shutil.copytree(work, args.keep, dirs_exist_ok=True)
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path, torch_version: str) -> int:
    ng_work = work / "nanogpt"
    data = ng_work / "data" / "shakespeare_char"  # train.py reads data/<dataset> relative to its cwd
    info = prepare_char_data(args.text, data)
    shutil.copy(args.nanogpt / "configurator.py", ng_work / "configurator.py")  # train.py exec()s it from its cwd
    rev = nanogpt_revision(args.nanogpt)
    load = os.getloadavg()
    print(f"# bench_nanogpt: nanoGPT {rev} ({args.nanogpt}); torch {torch_version}, {os.cpu_count()} CPUs, "
          f"{args.threads} torch thread(s) per job; load average {load[0]:.2f} at the start")
    print(f"data: {args.text} (sha256 {info['sha256'][:16]}), vocab {info['vocab_size']}, "
          f"{info['train_tokens']:,} train / {info['val_tokens']:,} val tokens; {args.iters} iterations each; "
          f"rounds of {args.slice:g} s\n")

    same = same_function(args.nanogpt, info["vocab_size"])
    print(f"same model: nanoGPT's weights loaded into archlab's model give the same loss (max |diff| {same:.1e} "
          f"over 3 random batches)\n")
    if same > 1e-4:
        raise BenchError(f"archlab's model does not compute nanoGPT's function (loss differs by {same:.3g})")
    ng = Job("nanoGPT", nanogpt_command(args.nanogpt, args.iters, ng_work / "out"), work / "nanogpt.log",
             thread_env(args.threads), extra={"cwd": ng_work}, progress=lambda: nanogpt_progress(work / "nanogpt.log"))
    seed0, more_seeds = args.seeds[0], args.seeds[1:]
    jobs = [ng] + [archlab_job(v, work, data, args, seed0, overrides=VARIANTS[v]) for v in args.variants]
    jobs += [archlab_job(label, work, data, args, seed0, src=src) for label, src in args.archlab_src.items()]
    print("timed, in rounds: " + ", ".join(j.name for j in jobs))
    run_in_rounds(jobs, args.slice)
    extra_jobs = [archlab_job(f"eager_seed{s}", work, data, args, s) for s in more_seeds]
    if extra_jobs:
        print("seed spread (not timed against nanoGPT): " + ", ".join(j.name for j in extra_jobs))
        run_in_rounds(extra_jobs, args.slice)
    for j in jobs + extra_jobs:
        if j.returncode != 0:
            tail = j.log.read_text(errors="replace").splitlines()[-5:]
            raise BenchError(f"{j.name} exited {j.returncode}: {' | '.join(tail)}")

    val = np.memmap(data / "val.bin", dtype=np.uint16, mode="r")
    rows = []
    for j in jobs + extra_jobs:
        if j is ng:
            times, _, vals = parse_nanogpt_log(j.log.read_text())
            final = nanogpt_final_loss(args.nanogpt, ng_work / "out" / "ckpt.pt", val, args.iters)
        else:
            times, _, vals = parse_archlab_metrics((j.extra["run_dir"] / "metrics.jsonl").read_text())
            final = archlab_final_loss(j.extra["run_dir"], val, args.iters)
        rows.append({"name": j.name, "timed": j not in extra_jobs, "seed": j.extra.get("seed", 1337),
                     **step_stats(times, args.skip, args.iters, j.pauses), "cpu_s": j.cpu_s, "wall_s": j.wall_s,
                     "cpu_ms": cpu_ms_per_iter(j.samples, args.skip, args.iters),
                     "own_val_loss": vals.get(args.iters, math.nan), "val_loss": final})  # fmt: skip
    ref = rows[0]
    # the seed spread: archlab's eager runs of this tree (seed 0 timed, the others after it)
    archlab_seed_losses = [r["val_loss"] for r in rows if r["name"] == "eager" or r["name"].startswith("eager_seed")]
    print("\n| trainer | CPU ms/iter | step speed vs nanoGPT (CPU) | wall ms/step median (min) | mean "
          "| vs nanoGPT: median (min) | by mean | job CPU s | val loss, whole split | own 20-batch estimate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["timed"]:
            for key, col in (("median", "median_ms"), ("min", "min_ms"), ("mean", "mean_ms"), ("cpu", "cpu_ms")):
                r[f"ratio_{key}"] = speed_ratio(ref[col], r[col])
            cpu = f"{r['ratio_cpu']:.2f}x"
            speed = f"{r['ratio_median']:.2f}x ({r['ratio_min']:.2f}x) | {r['ratio_mean']:.2f}x"
        else:
            speed, cpu = "(not timed) | -", "-"
        label = r["name"] if r is ref else f"archlab {r['name']} (seed {r['seed']})"
        print(f"| {label} | {r['cpu_ms']:.1f} | {cpu} | {r['median_ms']:.1f} ({r['min_ms']:.1f}) | {r['mean_ms']:.1f} "
              f"| {speed} | {r['cpu_s']:.1f} | {r['val_loss']:.4f} | {r['own_val_loss']:.4f} |")
    verdicts = {}
    for r in rows[1:]:
        ok, limit = equal_within(r["val_loss"], ref["val_loss"], archlab_seed_losses, args.tol)
        verdicts[r["name"]] = {"equal": ok, "delta": r["val_loss"] - ref["val_loss"], "tolerance": limit}
    seeds = ", ".join(f"{v:.4f}" for v in archlab_seed_losses)
    how = f"2 x std of archlab's eager seeds {seeds}" if len(archlab_seed_losses) >= 2 else f"--tol {args.tol}"
    print(f"\nval loss vs nanoGPT's {ref['val_loss']:.4f} (tolerance {how}): " + "; ".join(
        f"{n} {v['delta']:+.4f} ({'equal' if v['equal'] else 'NOT equal'} within {v['tolerance']:.4f})"
        for n, v in verdicts.items()))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"nanogpt": str(args.nanogpt), "nanogpt_revision": rev, "torch": torch_version,
                                         "threads": args.threads, "iters": args.iters, "data": info, "rows": rows,
                                         "val_loss_verdicts": verdicts, "command": sys.argv}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
