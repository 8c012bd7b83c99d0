"""Write synthetic run dirs in the exact format of docs/design.md, for the compare tests.

`write_sweep(root)` lays out a Hydra-style multirun sweep (`root/multirun.yaml`, `root/<job>/{config.yaml,
metrics.jsonl, summary.json, .hydra/}`): 5 groups × 3 seeds that differ in position encoding, norm placement and
n_layers × d_model shape (same ~0.8M non-embedding budget), with the post-LN seed 2 run diverged (NaN loss
from step 120). Curves are deterministic functions of (group, seed), so tests can recompute expected values.
`write_unfinished_run` writes a failed / interrupted run the way train.py leaves one (summary `error`, maybe no
config and no metrics). Not a model of real training dynamics; only the shapes and keys are realistic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml

STEPS = 200
TRAIN_EVERY = 10
EVAL_EVERY = 50
BATCH_TOKENS = 8 * 128
N_CTX = 128

GROUPS: list[dict[str, Any]] = [
    {"pos": "learned", "norm": "pre", "n_layers": 4, "d_model": 128, "floor": 3.30},
    {"pos": "rope", "norm": "pre", "n_layers": 4, "d_model": 128, "floor": 3.10},
    {"pos": "alibi", "norm": "post", "n_layers": 4, "d_model": 128, "floor": 3.20},
    {"pos": "rope", "norm": "pre", "n_layers": 2, "d_model": 192, "floor": 3.25},
    {"pos": "rope", "norm": "pre", "n_layers": 8, "d_model": 96, "floor": 3.15},
]
DIVERGED = (2, 2)  # (group index, seed): post-LN seed 2
DIVERGE_STEP = 120


def make_config(g: dict[str, Any], seed: int, experiment: str = "arch_sweep", out_dir: str = "") -> dict[str, Any]:
    """A resolved config with the top-level keys of docs/design.md."""
    return {
        "experiment_name": experiment,
        "seed": seed,
        "model": {"vocab_size": 512, "n_ctx": N_CTX, "d_model": g["d_model"], "n_layers": g["n_layers"], "n_heads": 4,
                  "d_head": None, "d_mlp": None, "activation": "gelu",
                  "pos": {"kind": g["pos"], "num_buckets": 32, "max_distance": 128, "rope_base": 10000.0},
                  "norm": g["norm"], "norm_type": "layernorm", "bias": True, "dropout": 0.0, "tie_embeddings": True,
                  "attention": "sdpa", "init": "gpt2", "layer_norm_eps": 1e-5},
        "data": {"name": "embedded", "n_ctx": N_CTX, "batch_size": 8},
        "tokenizer": {"vocab_size": 512, "pattern": "gpt2"},
        "optim": {"lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]},
        "schedule": {"warmup": 20, "decay": "cosine"},
        "train": {"steps": STEPS, "eval_every": EVAL_EVERY, "out_dir": out_dir, "resume": False, "device": "cpu"},
        "logger": {"kind": "off", "project": "archlab", "name": f"{g['pos']}-{g['norm']}-s{seed}", "group": experiment},
    }


def val_loss(g: dict[str, Any], seed: int, tokens: float) -> float:
    """The synthetic validation curve: floor + power-law decay + a seed offset, mostly shared by every group (the
    noise pairing by seed removes) plus a little of the group's own (so paired differences still have a spread)."""
    return g["floor"] + 3.0 * (1 + tokens / 2e4) ** -0.7 + 0.02 * (seed - 1) + 0.004 * math.sin(10 * g["floor"] + seed)


def non_embedding_params(g: dict[str, Any]) -> int:
    return 12 * g["n_layers"] * g["d_model"] ** 2


def write_run(run_dir: Path, config: dict[str, Any], metrics: list[dict[str, Any]], summary: dict[str, Any] | None) -> Path:
    """One run dir: config.yaml (+ .hydra/config.yaml), metrics.jsonl, summary.json (omitted when None)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra").mkdir(exist_ok=True)
    text = yaml.safe_dump(config, sort_keys=False)
    (run_dir / "config.yaml").write_text(text)
    (run_dir / ".hydra" / "config.yaml").write_text(text)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for line in metrics:
            f.write(json.dumps(line) + "\n")  # NaN is written as the NaN token, as json.dumps does in train.py
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return run_dir


def make_metrics(g: dict[str, Any], seed: int, diverge_at: int | None = None, extrap: bool = True) -> list[dict[str, Any]]:
    rng = np.random.default_rng(1000 * seed + int(g["floor"] * 100) + g["n_layers"])
    lines: list[dict[str, Any]] = []
    post = g["norm"] == "post"
    for step in range(0, STEPS + 1, TRAIN_EVERY):
        tokens = step * BATCH_TOKENS
        base = {"step": step, "tokens": tokens, "flops": 6.0 * non_embedding_params(g) * tokens, "time": 0.05 * step}
        diverged = diverge_at is not None and step >= diverge_at
        loss = math.nan if diverged else val_loss(g, seed, tokens) + 0.05 + float(rng.normal(0, 0.02))
        line = {**base, "train/loss": loss, "lr": 3e-3 * min(1.0, (step + 1) / 20), "grad_norm": 1.0,
                "tokens_per_s": 2.0e4 - 1e3 * g["n_layers"], "mfu": 0.02 * g["n_layers"] / 4}
        frac = step / STEPS
        for i in range(g["n_layers"]):
            depth = (i + 1) / g["n_layers"]
            # post-LN: large gradients near the output early on; pre-LN: mild, decaying with depth
            gn = (0.5 + 3.0 * depth * math.exp(-5 * frac)) if post else (0.8 - 0.3 * depth) * (1 + 0.5 * math.exp(-5 * frac))
            line[f"grad_norm/layer_{i}"] = math.inf if diverged else gn * (1 + 0.05 * seed)
        lines.append(line)
        if step % EVAL_EVERY == 0 and step > 0:
            v = math.nan if diverged else val_loss(g, seed, tokens)
            ev = {**base, "val/loss": v, "val/ppl": math.exp(v) if math.isfinite(v) else math.nan,
                  "val/bpb": v / math.log(2) / 4.2}
            ev.update({f"attn_entropy/layer_{i}": 1.5 for i in range(g["n_layers"])})
            if extrap:
                ev.update(extrap_values(g, v))
            lines.append(ev)
    return lines


def extrap_values(g: dict[str, Any], v: float) -> dict[str, float | None]:
    """Learned positions are N/A past the training context; rope degrades, alibi stays flat."""
    out: dict[str, float | None] = {}
    slope = {"learned": 0.0, "rope": 0.35, "alibi": 0.02}.get(g["pos"], 0.2)
    for mode, bonus in (("nonoverlap", 0.0), ("sliding", -0.05)):
        for k in (1, 2, 4, 8):
            if g["pos"] == "learned" and k > 1:
                out[f"extrap/{mode}/loss@{k}x"] = None
            else:
                out[f"extrap/{mode}/loss@{k}x"] = v + bonus + slope * math.log2(k) if math.isfinite(v) else None
    return out


def make_summary(g: dict[str, Any], seed: int, metrics: list[dict[str, Any]], status: str, experiment: str, name: str) -> dict[str, Any]:
    vals = [m["val/loss"] for m in metrics if "val/loss" in m and math.isfinite(m["val/loss"])]
    bpbs = [m["val/bpb"] for m in metrics if "val/bpb" in m and math.isfinite(m["val/bpb"])]
    trains = [m["train/loss"] for m in metrics if "train/loss" in m and math.isfinite(m["train/loss"])]
    last_eval = [m for m in metrics if "val/loss" in m][-1]
    ne = non_embedding_params(g)
    return {
        "status": status, "experiment": experiment, "run_name": name,
        "overrides": [f"model/pos={g['pos']}", f"model.norm={g['norm']}", f"seed={seed}"], "seed": seed,
        "final_val_loss": vals[-1], "best_val_loss": min(vals), "final_val_bpb": bpbs[-1], "best_val_bpb": min(bpbs),
        "final_train_loss": trains[-1], "params": ne + 512 * g["d_model"], "non_embedding_params": ne,
        "tokens": metrics[-1]["tokens"], "steps": metrics[-1]["step"], "wall_time_s": metrics[-1]["time"],
        "tokens_per_s": 2.0e4 - 1e3 * g["n_layers"], "mfu": 0.02 * g["n_layers"] / 4,
        "extrap": {k: v for k, v in last_eval.items() if k.startswith("extrap/")},
    }


def write_sweep(root: Path, groups: list[dict[str, Any]] | None = None, seeds: tuple[int, ...] = (0, 1, 2),
                experiment: str = "arch_sweep", diverged: tuple[int, int] | None = DIVERGED, extrap: bool = True,
                grad_layers: bool = True) -> list[Path]:
    """A Hydra-like multirun dir at `root`; returns the job dirs in job order."""
    groups = GROUPS if groups is None else groups
    root.mkdir(parents=True, exist_ok=True)
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}, "experiment_name": experiment}))
    dirs = []
    job = 0
    for gi, g in enumerate(groups):
        for seed in seeds:
            run_dir = root / str(job)
            is_div = diverged == (gi, seed)
            metrics = make_metrics(g, seed, DIVERGE_STEP if is_div else None, extrap=extrap)
            if not grad_layers:
                metrics = [{k: v for k, v in m.items() if not k.startswith("grad_norm/layer_")} for m in metrics]
            name = f"pos={g['pos']},norm={g['norm']},L={g['n_layers']},d={g['d_model']},seed={seed}"
            summary = make_summary(g, seed, metrics, "diverged" if is_div else "completed", experiment, name)
            write_run(run_dir, make_config(g, seed, experiment, out_dir=str(run_dir)), metrics, summary)
            dirs.append(run_dir)
            job += 1
    return dirs


def write_unfinished_run(run_dir: Path, status: str, error: str | None, g: dict[str, Any] | None = None, seed: int = 0,
                         steps: int = 0, experiment: str = "arch_sweep") -> Path:
    """A run that stopped early: `status` failed|interrupted|diverged, summary `error` (omitted when None).
    With `g`, it has a config and `steps` steps of train metrics; without, only summary.json (a run that failed
    before writing its config)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = [m for m in make_metrics(g, seed) if m["step"] <= steps and "train/loss" in m] if g and steps else []
    summary: dict[str, Any] = {"status": status, "experiment": experiment, "seed": seed, "steps": steps}
    if error is not None:
        summary["error"] = error
    if g is None:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return run_dir
    return write_run(run_dir, make_config(g, seed, experiment, out_dir=str(run_dir)), metrics, summary)
