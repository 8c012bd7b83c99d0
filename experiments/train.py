"""One training run: corpus -> tokenizer -> token memmaps -> model -> metrics, checkpoints and a summary.

    python -m experiments.train model=small model/pos=rope train.tokens=1e6        # one run
    python -m experiments.train -m experiment=pos_encodings                         # a sweep
    torchrun --nproc_per_node 2 -m experiments.train ...                            # DDP
    from experiments.train import train; summary = train(cfg)                       # tests, notebooks

`train(cfg)` validates the whole config first (experiments.config_check: one ConfigError before any data is
read), then trains for `train.tokens` tokens (or `train.steps` steps) and leaves in its run dir `config.yaml`
(resolved, with the real model shape and vocab_size), `metrics.jsonl`, `summary.json` and `checkpoints/last.pt`
(see docs/design.md). A NaN/inf loss or grad norm ends the run with status `diverged` and train() returns
normally, so the other jobs of a sweep go on. `train.resume=true` continues bit-exactly (on the CPU) from the
last checkpoint in the same run dir. Under torchrun each rank samples its own windows (seeded per rank), the
logged loss is the mean over ranks, and only rank 0 evaluates, logs and checkpoints.
Not handled: gradient accumulation across DDP ranks with uneven batches, FSDP, evaluation on all ranks.
"""

from __future__ import annotations

import logging
import math
import os
import random
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from experiments import distributed, resolvers  # noqa: F401  (resolvers registers ${archlab_dirname:...})
from experiments.checkpoint import last_checkpoint, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from experiments.config_check import model_config, validate
from experiments.errors import ConfigError

log = logging.getLogger(__name__)


class _LossModule(nn.Module):
    """model.loss as a forward(), so DDP's gradient hooks (and torch.compile) see the whole training step."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.model.loss(ids, targets)


# ---------------------------------------------------------------------------------------------------------------
# run setup helpers


def _hydra_runtime() -> Any | None:
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get()
    except (ImportError, ValueError):
        return None


def resolve_run_dir(c: dict[str, Any]) -> Path:
    """train.run_dir, else Hydra's output dir, else outputs/<experiment_name>/<time> (train() outside Hydra)."""
    if c["train"].get("run_dir"):
        return Path(os.path.expanduser(str(c["train"]["run_dir"])))
    hc = _hydra_runtime()
    if hc is not None:
        return Path(hc.runtime.output_dir)
    return Path("outputs") / str(c["experiment_name"]) / time.strftime("%Y-%m-%d_%H-%M-%S")


def run_identity(run_dir: Path) -> tuple[str, list[str]]:
    """(run name, overrides): Hydra's job overrides when run through Hydra, else the run dir's name.

    The name leaves out the keys the sweep dir names leave out (`hydra.job.config.override_dirname.exclude_keys`:
    experiment, logger, ...), so a pos_encodings job is `model/pos=rope,seed=1`; `overrides` keeps them all.
    """
    hc = _hydra_runtime()
    if hc is None:
        return run_dir.name, []
    overrides = [str(o) for o in hc.overrides.task if not o.startswith(("hydra.", "hydra/"))]
    exclude = set(OmegaConf.select(hc, "job.config.override_dirname.exclude_keys", default=None) or [])
    named = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in exclude]
    return (",".join(named) or run_dir.name), overrides


def resolve_num_threads(requested: int | None, info: distributed.DistInfo) -> int | None:
    """Torch CPU threads: `requested`, else cpu_count / (parallel sweep jobs x local ranks) when either is > 1."""
    if requested:
        return int(requested)
    parallel = info.local_world_size
    hc = _hydra_runtime()
    if hc is not None:
        n_jobs = hc.launcher.get("n_jobs") if "launcher" in hc and hc.launcher is not None else None
        if isinstance(n_jobs, int) and n_jobs != 1:
            parallel *= n_jobs if n_jobs > 0 else (os.cpu_count() or 1)
    if parallel <= 1:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // parallel)


def _autocast(device: torch.device, dtype: str):
    use_bf16 = dtype == "bf16" or (dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16) if use_bf16 else nullcontext()


def _write_config(run_dir: Path, c: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=run_dir, prefix=".config.", suffix=".yaml.tmp")
    os.close(fd)
    OmegaConf.save(OmegaConf.create(c), tmp)
    os.replace(tmp, run_dir / "config.yaml")


def layer_grad_norms(blocks: nn.ModuleList) -> dict[str, float]:
    """grad_norm/layer_{i}: the L2 norm of all gradients in block i (before clipping).

    Logged every `log_interval` steps, so it is kept cheap: one fused norm over every gradient (the kernel
    clip_grad_norm_ uses), then a scatter-add of the squares per layer and a single host transfer.
    """
    grads, layer_of = [], []
    for i, block in enumerate(blocks):
        for p in block.parameters():
            if p.grad is not None:
                grads.append(p.grad.detach())
                layer_of.append(i)
    sums = torch.zeros(len(blocks), dtype=torch.float64)
    if grads:
        per_param = torch.stack([n.float().cpu() for n in torch._foreach_norm(grads)])  # (n_params,)
        sums.index_add_(0, torch.tensor(layer_of), per_param.double() ** 2)
    return {f"grad_norm/layer_{i}": v for i, v in enumerate(sums.sqrt().tolist())}


def _history(run_dir: Path | None) -> dict[str, Any]:
    """best / last eval values from an existing metrics.jsonl (after a resume truncated it); None: empty."""
    from experiments.tracking import read_metrics

    h: dict[str, Any] = {"best_val_loss": None, "best_val_bpb": None, "final_val_loss": None, "final_val_bpb": None,
                         "final_train_loss": None, "extrap": {}}
    for row in read_metrics(run_dir) if run_dir is not None else []:
        if "val/loss" in row:
            _record_eval(h, row)
        if "train/loss" in row:
            h["final_train_loss"] = row["train/loss"]
    return h


def _record_eval(h: dict[str, Any], row: dict[str, Any]) -> None:
    """Fold one eval row into the summary's final / best val values and last extrap values (in place)."""
    h["final_val_loss"], h["final_val_bpb"] = row["val/loss"], row.get("val/bpb")
    for key in ("val_loss", "val_bpb"):
        v = row.get(key.replace("_", "/"))
        if v is not None:
            h[f"best_{key}"] = v if h[f"best_{key}"] is None else min(h[f"best_{key}"], v)
    extrap = {k: v for k, v in row.items() if k.startswith("extrap/")}
    if extrap:
        h["extrap"] = extrap


# ---------------------------------------------------------------------------------------------------------------
# train


def train(cfg: DictConfig | dict) -> dict[str, Any]:
    """Train one model as configured; returns the summary dict (also written to <run dir>/summary.json).

    Raises ConfigError (before any data is read) for a config that cannot run.
    """
    c = validate(cfg)
    info = distributed.env_info()
    device = distributed.pick_device(str(c["train"]["device"]), info)
    distributed.setup(info, device)
    threads_before = torch.get_num_threads()  # train.num_threads is per run, not for the rest of the process
    try:
        return _train(c, info, device)
    finally:
        torch.set_num_threads(threads_before)
        distributed.teardown()


def _train(c: dict[str, Any], info: distributed.DistInfo, device: torch.device) -> dict[str, Any]:
    from arch import build_model, count_params, flops_per_token
    from experiments import flops as flops_lib
    from experiments.data import WindowSampler, rank_seed
    from experiments.evaluate import evaluate_model, length_extrapolation
    from experiments.optim import build_optimizer
    from experiments.schedule import lr_at
    from experiments.tokenize_cache import prepare_data
    from experiments.tracking import Tracker

    tc, seed = c["train"], int(c["seed"])
    threads = resolve_num_threads(tc.get("num_threads"), info)
    if threads:
        torch.set_num_threads(threads)
    run_dir = Path(distributed.broadcast_object(str(resolve_run_dir(c))))
    run_dir.mkdir(parents=True, exist_ok=True)
    is_main = info.is_main
    progress = bool(tc["progress"]) and is_main

    # -- data: corpus -> tokenizer -> token memmaps (content-hash cached; ranks share the entries) --------------
    cache_dir = c["data"]["cache_dir"]
    prepared = prepare_data(c["data"], c["tokenizer"], cache_dir, progress=progress)
    tok, tok_info, data = prepared.tokenizer, prepared.tokenizer_info, prepared.data
    if is_main:
        log.info("corpus %s: %d train / %d val tokens, vocab %d (%s)", prepared.name, len(data.train), len(data.val),
                 tok.vocab_size, "cached" if tok_info["cached"] else f"trained in {tok_info['train_seconds']:.1f}s")

    B, T, accum = int(tc["batch_size"]), int(tc["n_ctx"]), int(tc["grad_accum"])
    generator = torch.Generator().manual_seed(rank_seed(seed, info.rank))
    sampler = WindowSampler(data.train, T, B, generator)  # a training split shorter than n_ctx: ConfigError
    if len(data.val) < T + 1:  # before the model is built (a huge n_ctx must not cost an allocation first)
        raise ConfigError(f"the validation split has {len(data.val)} tokens, fewer than n_ctx + 1; raise data.val_fraction")

    # -- model: vocab_size from the tokenizer, shape solved if model.shape is set --------------------------------
    mcfg = model_config(c["model"], vocab_size=tok.vocab_size)
    resolved_model = {**mcfg.to_dict(), "shape": c["model"].get("shape")}
    c = {**c, "model": resolved_model, "tokenizer": {**c["tokenizer"], "resolved_path": tok_info["path"]}}
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # same init on every rank (DDP also broadcasts rank 0's weights)
    model = build_model(mcfg).to(device)
    torch.manual_seed(rank_seed(seed, info.rank))  # dropout masks differ per rank
    optimizer = build_optimizer(model, c["optim"], device)

    tokens_per_step = B * T * accum * info.world_size
    total_steps = math.ceil(int(tc["tokens"]) / tokens_per_step) if tc.get("tokens") else int(tc["steps"])

    # -- resume ---------------------------------------------------------------------------------------------------
    step, tokens, elapsed, resumed = 0, 0, 0.0, False
    ckpt_path = last_checkpoint(run_dir)
    if tc["resume"]:
        if ckpt_path.exists():
            ckpt = load_checkpoint(ckpt_path, map_location=device)
            if ckpt["model_config"] != mcfg.to_dict():
                diff = sorted(k for k, v in mcfg.to_dict().items() if ckpt["model_config"].get(k) != v)
                raise ConfigError(f"train.resume=true but {ckpt_path} holds a different model (differs in {diff}); "
                                  f"resume with the run's original overrides or start a new run dir")
            model.load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
            step, tokens, elapsed = int(ckpt["step"]), int(ckpt["tokens"]), float(ckpt["elapsed"])
            if ckpt["world_size"] == info.world_size:
                states = ckpt["rng"][info.rank]
                set_rng_state(states)
                generator.set_state(states["data"])
            else:
                log.warning("resume: checkpoint from %d rank(s), now %d; data order re-seeded", ckpt["world_size"], info.world_size)
                generator.manual_seed(rank_seed(seed * 1_000_003 + step, info.rank))
            resumed = True
            del ckpt
            if is_main:
                log.info("resumed from %s at step %d (%d tokens)", ckpt_path, step, tokens)
        elif is_main:
            log.warning("train.resume=true but %s does not exist; starting from scratch", ckpt_path)

    loss_module: nn.Module = _LossModule(model)
    if tc["compile"]:
        loss_module = torch.compile(loss_module)
    if info.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        loss_module = DDP(loss_module, device_ids=[device.index] if device.type == "cuda" else None)
    amp = _autocast(device, tc["dtype"])

    # -- tracking (rank 0) ----------------------------------------------------------------------------------------
    run_name, overrides = run_identity(run_dir)
    params, non_emb = count_params(mcfg), count_params(mcfg, non_embedding=True)
    fpt = flops_per_token(mcfg, seq_len=T)
    tracker = None
    if is_main:
        _write_config(run_dir, c)
        lg = c["logger"]
        tracker = Tracker(run_dir, c, logger=lg["kind"], project=lg.get("project", "archlab"), group=lg.get("group"),
                          name=run_name, tags=list(lg.get("tags") or []), job_type=lg.get("job_type", "train"),
                          resume_from_step=step if resumed else None)
    hist = _history(run_dir if (is_main and resumed) else None)
    peak = flops_lib.peak_flops(device, cache_dir=cache_dir) if is_main else 1.0

    def summary(status: str, **extra: Any) -> dict[str, Any]:
        wall = time.perf_counter() - t_start
        return {
            "status": status, "experiment": c["experiment_name"], "run_name": run_name, "overrides": overrides,
            "seed": seed, "final_val_loss": hist["final_val_loss"], "best_val_loss": hist["best_val_loss"],
            "final_val_bpb": hist["final_val_bpb"], "best_val_bpb": hist["best_val_bpb"],
            "final_train_loss": hist["final_train_loss"], "params": params, "non_embedding_params": non_emb,
            "tokens": tokens, "steps": step, "wall_time_s": wall, "tokens_per_s": tokens / wall if wall > 0 else None,
            "mfu": (fpt * tokens / wall / info.world_size / peak) if wall > 0 else None, "extrap": hist["extrap"],
            "run_dir": str(run_dir), "device": str(device), "world_size": info.world_size,
            "num_threads": torch.get_num_threads(), **extra,
        }

    def evaluate(final: bool) -> None:
        row: dict[str, Any] = {"tokens": tokens, "flops": fpt * tokens}
        with amp:
            row.update(evaluate_model(model, data.val, n_ctx=T, batch_size=int(tc["eval_batch_size"]),
                                      max_batches=int(tc["eval_batches"]), bytes_per_token=data.bytes_per_token,
                                      device=device))
            if tc["extrap"] == "every_eval" or (tc["extrap"] == "end" and final):
                row.update(length_extrapolation(model, data.val, n_ctx=T, factors=tuple(tc["extrap_factors"]),
                                                max_tokens=int(tc["extrap_max_tokens"]), device=device,
                                                batch_size=int(tc["eval_batch_size"])))
        row["time"] = time.perf_counter() - t_start
        tracker.log(row, step=step)
        _record_eval(hist, row)

    def checkpoint() -> None:
        states = distributed.gather_objects({**rng_state(), "data": generator.get_state()})
        if is_main:
            save_checkpoint(ckpt_path, {
                "version": 1, "step": step, "tokens": tokens, "elapsed": time.perf_counter() - t_start,
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": states,
                "world_size": info.world_size, "model_config": mcfg.to_dict(), "config": c,
            })
        distributed.barrier()

    # -- the loop -------------------------------------------------------------------------------------------------
    t_start = time.perf_counter() - elapsed
    status, extra = "completed", {}
    if tracker is not None:
        tracker.write_summary(summary("running"))
    try:
        from tqdm.auto import tqdm

        bar = tqdm(total=total_steps, initial=step, disable=not progress, desc=run_name[:40], unit="step", leave=False)
        window_tokens, window_time = 0, 0.0
        model.train()
        while step < total_steps:
            t0 = time.perf_counter()
            lr = lr_at(step, name=c["schedule"]["name"], base_lr=float(c["optim"]["lr"]), total_steps=total_steps,
                       warmup_steps=int(c["schedule"]["warmup_steps"]), min_lr_ratio=float(c["schedule"]["min_lr_ratio"]))
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=device)
            for micro in range(accum):
                x, y = sampler.next()
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                no_sync = loss_module.no_sync() if info.enabled and micro < accum - 1 else nullcontext()
                with no_sync:
                    with amp:
                        loss = loss_module(x, y)
                    (loss / accum).backward()
                loss_sum += loss.detach().float()
            train_loss = distributed.mean_across_ranks(float(loss_sum.item()) / accum, device)
            log_now = is_main and ((step + 1) % int(tc["log_interval"]) == 0 or step + 1 == total_steps)
            layer_norms = layer_grad_norms(model.blocks) if log_now or not math.isfinite(train_loss) else {}
            clip = tc.get("grad_clip")
            grad_norm = float(nn.utils.clip_grad_norm_(model.parameters(), float(clip) if clip else float("inf")))
            if not (math.isfinite(train_loss) and math.isfinite(grad_norm)):
                status, extra = "diverged", {"diverged_at_step": step + 1}
                if tracker is not None:
                    tracker.log({"tokens": tokens, "flops": fpt * tokens, "time": time.perf_counter() - t_start,
                                 "train/loss": train_loss, "lr": lr, "grad_norm": grad_norm, **layer_norms}, step=step + 1)
                    log.warning("non-finite loss/grad norm at step %d (loss %s, grad_norm %s): run diverged",
                                step + 1, train_loss, grad_norm)
                break
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            tokens += tokens_per_step
            hist["final_train_loss"] = train_loss
            window_tokens += tokens_per_step
            window_time += time.perf_counter() - t0
            bar.update(1)
            if log_now:
                tps = window_tokens / window_time if window_time > 0 else 0.0
                tracker.log({"tokens": tokens, "flops": fpt * tokens, "time": time.perf_counter() - t_start,
                             "train/loss": train_loss, "lr": lr, "grad_norm": grad_norm, **layer_norms,
                             "tokens_per_s": tps, "mfu": fpt * tps / info.world_size / peak}, step=step)
                bar.set_postfix(loss=f"{train_loss:.3f}")
                window_tokens, window_time = 0, 0.0
            if step % int(tc["eval_interval"]) == 0 or step == total_steps:
                if is_main:
                    evaluate(final=step == total_steps)
                distributed.barrier()
            if step % int(tc["ckpt_interval"]) == 0 or step == total_steps:
                checkpoint()
        bar.close()
    except Exception as e:
        if tracker is not None:
            tracker.write_summary(summary("failed", error=f"{type(e).__name__}: {e}"))
            tracker.finish("failed")
        raise
    result = summary(status, **extra)
    if tracker is not None:
        tracker.write_summary(result)
        tracker.finish(status)
        log.info("%s after %d steps (%d tokens): %s", status, step, tokens, run_dir)
    return result


# ---------------------------------------------------------------------------------------------------------------
# CLI


def _is_multirun() -> bool:
    hc = _hydra_runtime()
    try:
        from hydra.types import RunMode

        return hc is not None and hc.mode == RunMode.MULTIRUN
    except ImportError:  # pragma: no cover
        return False


@hydra.main(version_base="1.3", config_path=str(__import__("experiments.compose").compose.CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    """CLI entry: train(cfg); a ConfigError is one line on stderr (exit 2 for a single run; in a sweep the
    other jobs go on). In a sweep any other exception is logged (the run's summary.json says `failed`) and the
    sweep goes on: re-raised, Hydra's sweeper would stop at it after the batch, skipping the status list and
    the report. Returns the final val loss (for Hydra sweepers that optimise it)."""
    try:
        summary = train(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr, flush=True)
        if _is_multirun():
            return None
        sys.exit(2)
    except Exception:
        if not _is_multirun():
            raise
        log.exception("run failed; the sweep goes on")
        return None
    return summary.get("final_val_loss")


if __name__ == "__main__":
    from experiments.cli_precheck import precheck_or_exit

    precheck_or_exit(sys.argv[1:])
    main()
