"""One training run: corpus -> tokenizer -> token memmaps -> model -> metrics, checkpoints and a summary.

    python -m experiments.train model=small model/pos=rope train.tokens=1e6        # one run
    python -m experiments.train -m experiment=pos_encodings                         # a sweep
    torchrun --nproc_per_node 2 -m experiments.train ...                            # DDP
    from experiments.run.train import train; summary = train(cfg)                       # tests, notebooks

`train(cfg)` validates the whole config first (experiments.config.check: one ConfigError before any data is
read), then trains for `train.flops` FLOPs, else `train.tokens` tokens, else `train.steps` steps, and leaves in its run dir `config.yaml`
(resolved, with the real model shape and vocab_size), `metrics.jsonl`, `summary.json` and `checkpoints/last.pt`
(the layout belongs to experiments/rundir/layout.py). The steps of a run are the methods of `TrainingRun`: open the run
dir, load data, build the model, restore a checkpoint, start tracking, loop (train_step / evaluate / checkpoint).

What happens to a run, and what summary.json then says:
* a dir that already holds a run is refused (ConfigError naming `train.resume=true` and `train.overwrite=true`)
  before any data is read; `train.overwrite=true` removes exactly the files a run writes, nothing else;
* a NaN/inf loss or grad norm: `diverged`; train() returns normally, so the other jobs of a sweep go on;
* Ctrl-C / SIGTERM: the step in progress finishes, a checkpoint is saved, `interrupted`, RunInterrupted is raised
  (the CLI prints one line with the resume command and exits 130); `train.resume=true` then finishes the run
  exactly as if it had never stopped (bit-exact on the CPU); in a sweep (any launcher) the request holds for the
  whole sweep: later jobs record `interrupted` without starting, and `train.resume=true` on the same multirun
  resumes it (experiments/run/interrupt.py, experiments/sweep/callbacks.py);
* an exception or a config error, during setup or in the loop: `failed` with the reason in `error` (a failed
  resume leaves the earlier run's files untouched); a damaged checkpoint is one ConfigError naming the file;
* SIGKILL: summary.json keeps `running`; `train.resume=true` continues from the last atomic checkpoint.
Under torchrun each rank samples its own windows (seeded per rank), the
logged loss is the mean over ranks, and only rank 0 evaluates, logs and checkpoints.
Not handled: gradient accumulation across DDP ranks with uneven batches, FSDP, evaluation on all ranks.
"""

from __future__ import annotations

import logging
import math
import os
import random
import shlex
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from experiments.config import resolvers  # noqa: F401  (registers ${archlab_dirname:...})
from experiments.config.compose import CONF_DIR
from experiments.run import distributed
from experiments.rundir.checkpoint import CheckpointError, Checkpoints, rng_state, save_weights, set_rng_state
from experiments.config.check import encdec_config, model_config, task_kind, to_plain, validate
from experiments.config.errors import ConfigError
from experiments.run.interrupt import EXIT_CODE, RunInterrupted, StopRequest, hold_sweep, sweep_stopped
from experiments.rundir.layout import RunDir, RunDirError

log = logging.getLogger(__name__)


class _LossModule(nn.Module):
    """model.loss as a forward(), so DDP's gradient hooks (and torch.compile) see the whole training step."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *batch: torch.Tensor) -> torch.Tensor:
        return self.model.loss(*batch)  # (ids, targets) | seq2seq (src, tgt_in, tgt_out)


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


def training_budget(tc: dict[str, Any], flops_per_token: float) -> dict[str, Any]:
    """What a run's length is held equal to across a sweep, and the tokens that makes for this model:

    `train.flops` (total training FLOPs, 6N + attention per token; each shape trains for flops / its own
    FLOPs-per-token tokens, so shapes compare at equal compute) > `train.tokens` > `train.steps`.
    Returns {"held": "flops" | "tokens" | "steps", "tokens": token budget or None (steps)}.
    """
    if tc.get("flops"):
        return {"held": "flops", "tokens": float(tc["flops"]) / flops_per_token}
    if tc.get("tokens"):
        return {"held": "tokens", "tokens": int(tc["tokens"])}
    return {"held": "steps", "tokens": None}


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """The residual blocks, input side first: a decoder-only model's blocks; an encoder-decoder's encoder blocks
    then decoder blocks (grad_norm/layer_{i} counts through both stacks)."""
    if hasattr(model, "blocks"):
        return list(model.blocks)
    return [*model.encoder.blocks, *model.decoder.blocks]


def layer_grad_norms(blocks: list[nn.Module] | nn.ModuleList) -> dict[str, float]:
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
    h: dict[str, Any] = {"best_val_loss": None, "best_val_bpb": None, "final_val_loss": None, "final_val_bpb": None,
                         "final_train_loss": None, "extrap": {}}
    for row in RunDir(run_dir).read_metrics() if run_dir is not None else []:
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

    Raises ConfigError (before any data is read) for a config that cannot run, RunInterrupted after a
    Ctrl-C / SIGTERM (checkpoint saved, summary `interrupted`), and any other exception as it came (summary
    `failed` with the reason). See the module docstring for what is written where.
    """
    info = distributed.env_info()
    try:
        c = validate(cfg)
    except ConfigError as e:
        if info.is_main:
            record_config_error(cfg, e)
        raise
    sweep = sweep_dir()
    if sweep is not None:  # a sweep job: keep the sweep's stop handlers between jobs too (interrupt.hold_sweep)
        hold_sweep(sweep)
        if why := sweep_stopped(sweep):
            raise RunInterrupted(f"not started: the sweep was stopped by {why}",
                                 record_not_run(cfg, "interrupted", f"not started: the sweep was stopped by {why} "
                                                "before this job began; resume the sweep with train.resume=true"))
    device = distributed.pick_device(str(c["train"]["device"]), info)
    distributed.setup(info, device)
    threads_before = torch.get_num_threads()  # train.num_threads is per run, not for the rest of the process
    try:
        return TrainingRun(c, info, device).run()
    finally:
        torch.set_num_threads(threads_before)
        distributed.teardown()


def record_config_error(cfg: DictConfig | dict, error: ConfigError) -> None:
    """A sweep job (or a train() call with train.run_dir) whose config is refused still leaves summary.json
    `failed` with the reason in its own run dir, when that dir holds no run yet (never over another run's files).
    A single CLI run leaves nothing: its one-line error says it all."""
    record_not_run(cfg, "failed", f"config error: {error}")


def record_not_run(cfg: DictConfig | dict, status: str, error: str) -> dict[str, Any]:
    """summary.json with `status` and `error` for a job that never reached its loop (a refused config, a sweep
    stopped before the job began), in its own run dir when that dir holds no run yet; returns the summary written,
    else the dir's own summary ({} if none). Nothing for a single CLI run (its one line says it all)."""
    raw = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)

    def select(key: str) -> Any:
        try:
            return OmegaConf.select(raw, key, default=None, throw_on_resolution_failure=False)
        except Exception:  # noqa: BLE001 - the config is broken: record what can be read
            return None

    explicit, hc = select("train.run_dir"), _hydra_runtime()
    if hc is not None and not _is_multirun():
        return {}  # a single CLI run: the one-line error is the whole story, no dir is left behind for it
    path = Path(os.path.expanduser(str(explicit))) if explicit else (Path(hc.runtime.output_dir) if hc else None)
    if path is None:
        return {}  # train() outside Hydra without a run dir: nothing of the user's names a place for it
    rd = RunDir(path)
    try:
        rd.check_can_start(resume=False, overwrite=False)
    except RunDirError:
        return rd.read_summary() or {}
    run_name, overrides = run_identity(path)
    seed = select("seed")
    summary = {"status": status, "error": error, "experiment": select("experiment_name"), "run_name": run_name,
               "overrides": overrides, "seed": seed if isinstance(seed, int) else None, "steps": 0, "tokens": 0,
               "run_dir": str(path)}
    rd.write_summary(summary)
    return summary


def _kept_args(argv: list[str] | None, drop: tuple[str, ...]) -> list[str]:
    """This command's arguments (sys.argv[1:] by default, `python -c ... args` too) without train.resume,
    train.overwrite, the multirun flag and the `drop` prefixes: what a resume command repeats."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["-c"]:  # python -c "...main()" args...
        argv = argv[1:]
    return [a for a in argv if not a.startswith(("train.resume=", "train.overwrite=", "-m", "--multirun", *drop))]


def resume_command(run_dir: Path, argv: list[str] | None = None) -> str:
    """The command that continues an interrupted run: this command's overrides with train.resume=true, and the
    run dir pinned (hydra.run.dir) when the command did not name one."""
    keep = _kept_args(argv, ())
    if not any(a.startswith(("hydra.run.dir=", "train.run_dir=")) for a in keep):
        keep.append(f"hydra.run.dir={run_dir}")
    return shlex.join(["python", "-m", "experiments.train", *keep, "train.resume=true"])


def sweep_resume_command(sweep: str | Path, argv: list[str] | None = None) -> str:
    """The command that continues a stopped sweep: the same multirun with its sweep dir pinned and
    train.resume=true (interrupted jobs continue, jobs that never started start, completed ones stay completed)."""
    keep = _kept_args(argv, ("hydra.sweep.dir=",))
    return shlex.join(["python", "-m", "experiments.train", "-m", *keep, f"hydra.sweep.dir={sweep}",
                       "train.resume=true"])


class TrainingRun:
    """One run, step by step: open the run dir, load data, build the model, restore a checkpoint, track, loop.

    Each method is one named step of `run()`; the state they share (model, optimizer, counters) lives on self.
    Only rank 0 (`self.is_main`) writes files.
    """

    def __init__(self, c: dict[str, Any], info: distributed.DistInfo, device: torch.device) -> None:
        self.c, self.info, self.device = c, info, device
        self.tc, self.seed = c["train"], int(c["seed"])
        self.task = task_kind(c)  # lm | seq2seq
        self.is_main = info.is_main
        self.progress = bool(self.tc["progress"]) and self.is_main
        self.rd = RunDir(distributed.broadcast_object(str(resolve_run_dir(c))))
        self.run_dir = self.rd.path
        self.fresh = True  # the dir holds no earlier run of ours: a setup failure may write its summary
        self.tracker = None
        self.step, self.tokens, self.elapsed, self.resumed = 0, 0, 0.0, False
        self.t_start = time.perf_counter()
        self.hist = _history(None)
        self.stop: StopRequest | None = None

    # -- the steps ------------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.open_run_dir()  # a dir holding another run, or an unwritable one: ConfigError, nothing written
        with StopRequest(sweep_dir()) as self.stop:
            try:
                self.load_data()
                self.build_model()
                if self.tc["resume"]:
                    self.restore()
                self.start_tracking()
            except BaseException as e:
                self.record_setup_failure(e)
                raise
            return self.loop()

    def open_run_dir(self) -> None:
        tc = self.tc
        try:
            self.rd.check_can_start(resume=bool(tc["resume"]), overwrite=bool(tc.get("overwrite")))
        except RunDirError as e:
            raise ConfigError(str(e)) from None
        self.fresh = not (tc["resume"] and self.rd.holds_run())
        distributed.barrier()  # every rank checked before rank 0 removes anything
        if self.is_main and tc.get("overwrite"):
            removed = self.rd.remove_run_outputs()
            if removed:
                log.info("train.overwrite=true: removed %s from %s", ", ".join(p.name for p in removed), self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        threads = resolve_num_threads(tc.get("num_threads"), self.info)
        if threads:
            torch.set_num_threads(threads)

    def load_data(self) -> None:
        """corpus -> tokenizer -> token memmaps (content-hash cached; ranks share the entries) -> window sampler."""
        from experiments.data import cache as tokenize_cache  # via the module: tests patch prepare_data

        if self.is_main:  # the first thing a job says, before a tokenizer trains or a corpus is read
            log.info("run dir %s: preparing data (data=%s, tokenizer=%s)", self.run_dir, self.c["data"].get("source"),
                     self.c["tokenizer"].get("mode"))
        if self.task == "seq2seq":
            return self.load_pairs()
        from experiments.data.corpus import WindowSampler, rank_seed

        prepared = tokenize_cache.prepare_data(self.c["data"], self.c["tokenizer"], self.c["data"]["cache_dir"],
                                               progress=self.progress)
        self.tok, self.tok_info, self.data = prepared.tokenizer, prepared.tokenizer_info, prepared.data
        if self.is_main:
            log.info("corpus %s: %d train / %d val tokens, vocab %d (%s)", prepared.name, len(self.data.train),
                     len(self.data.val), self.tok.vocab_size,
                     "cached" if self.tok_info["cached"] else f"trained in {self.tok_info['train_seconds']:.1f}s")
        T = int(self.tc["n_ctx"])
        self.generator = torch.Generator().manual_seed(rank_seed(self.seed, self.info.rank))
        self.sampler = WindowSampler(self.data.train, T, int(self.tc["batch_size"]), self.generator)  # too short: ConfigError
        if len(self.data.val) < T + 1:  # before the model is built (a huge n_ctx must not cost an allocation first)
            raise ConfigError(f"the validation split has {len(self.data.val)} tokens, fewer than n_ctx + 1; "
                              f"raise data.val_fraction")

    def load_pairs(self) -> None:
        """task=seq2seq: pairs -> tokenizer -> ids -> a seeded random batcher of padded (src, tgt_in, tgt_out)."""
        from experiments.data.corpus import rank_seed
        from experiments.data.pairs import PairBatcher, prepare_pairs

        p = prepare_pairs(self.c["data"], self.c["tokenizer"], self.c["data"]["cache_dir"], progress=self.progress)
        self.pairs, self.tok, self.tok_info = p, p.tokenizer, p.tokenizer_info
        longest = max(max(map(len, rows)) for rows in (p.train.src, p.train.tgt_in, p.test.src, p.test.tgt_in))
        if self.is_main:
            log.info("pairs %s: %d train / %d test, vocab %d, longest sequence %d tokens", p.name, len(p.train.src),
                     len(p.test.src), self.tok.vocab_size, longest)
        self.generator = torch.Generator().manual_seed(rank_seed(self.seed, self.info.rank))
        self.sampler = PairBatcher(p.train, int(self.tc["batch_size"]), p.pad_id, self.generator)

    def build_model(self) -> None:
        """The model (vocab_size from the tokenizer, shape solved if model.shape is set), optimizer, step function."""
        import arch  # via the module: tests patch arch.build_model
        from experiments.run.optim import build_optimizer

        c, tc, info = self.c, self.tc, self.info
        if self.task == "seq2seq":
            self.mcfg = encdec_config(c["model"], vocab_size=self.tok.vocab_size, pad_id=self.pairs.pad_id)
        else:
            self.mcfg = model_config(c["model"], vocab_size=self.tok.vocab_size)
        resolved_model = {**self.mcfg.to_dict(), "shape": c["model"].get("shape")}
        self.c = c = {**c, "model": resolved_model, "tokenizer": {**c["tokenizer"], "resolved_path": self.tok_info["path"]}}
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)  # same init on every rank (DDP also broadcasts rank 0's weights)
        self.model = arch.build_model(self.mcfg).to(self.device)
        from experiments.data.corpus import rank_seed

        torch.manual_seed(rank_seed(self.seed, info.rank))  # dropout masks differ per rank
        self.optimizer = build_optimizer(self.model, c["optim"], self.device)

        B, T, accum = int(tc["batch_size"]), int(tc["n_ctx"]), int(tc["grad_accum"])
        self.accum = accum
        if self.task == "seq2seq":  # tokens = decoder tokens (mean target length); FLOPs per decoder token
            T = max(1, round(self.pairs.mean_target_tokens))
            self.fpt = arch.flops_per_token(self.mcfg, seq_len=T, src_len=max(1, round(self.pairs.mean_source_tokens)))
        else:
            self.fpt = arch.flops_per_token(self.mcfg, seq_len=T)
        self.tokens_per_step = B * T * accum * info.world_size
        self.budget = training_budget(tc, self.fpt)
        self.total_steps = math.ceil(self.budget["tokens"] / self.tokens_per_step) if self.budget["tokens"] else int(tc["steps"])
        self.params = arch.count_params(self.mcfg)
        self.non_emb = arch.count_params(self.mcfg, non_embedding=True)

        loss_module: nn.Module = _LossModule(self.model)
        if tc["compile"]:
            loss_module = torch.compile(loss_module)
        if info.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            loss_module = DDP(loss_module, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.loss_module = loss_module
        self.amp = _autocast(self.device, tc["dtype"])

    def restore(self) -> None:
        """Continue from checkpoints/last.pt: weights, optimizer, counters, every random state (bit-exact on CPU)."""
        from experiments.data.corpus import rank_seed

        ckpts = Checkpoints(self.rd.checkpoint_dir)
        path = ckpts.latest()
        if path is None:
            if self.is_main:
                log.warning("train.resume=true but %s holds no checkpoint; starting from scratch", ckpts.dir)
            return
        try:
            ckpt = ckpts.load_state(path, map_location=self.device)
            if ckpt["model_config"] == self.mcfg.to_dict():
                ckpts.load_model_weights(self.model, path, ckpt, self.device)
        except CheckpointError as e:
            raise ConfigError(f"cannot resume: {e}; delete it to restart this run from step 0 (train.resume=true), "
                              f"or replace the whole run with train.overwrite=true") from None
        if ckpt["model_config"] != self.mcfg.to_dict():
            diff = sorted(k for k, v in self.mcfg.to_dict().items() if ckpt["model_config"].get(k) != v)
            raise ConfigError(f"train.resume=true but {path} holds a different model (differs in {diff}); "
                              f"resume with the run's original overrides or start a new run dir")
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.step, self.tokens, self.elapsed = int(ckpt["step"]), int(ckpt["tokens"]), float(ckpt["elapsed"])
        if ckpt["world_size"] == self.info.world_size:
            states = ckpt["rng"][self.info.rank]
            set_rng_state(states)
            self.generator.set_state(states["data"])
        else:
            log.warning("resume: checkpoint from %d rank(s), now %d; data order re-seeded", ckpt["world_size"],
                        self.info.world_size)
            self.generator.manual_seed(rank_seed(self.seed * 1_000_003 + self.step, self.info.rank))
        self.resumed = True
        if self.is_main:
            log.info("resumed from %s at step %d (%d tokens)", path, self.step, self.tokens)

    def start_tracking(self) -> None:
        """config.yaml, the tracker (metrics.jsonl, summary.json, wandb) and the eval history of a resumed run."""
        from experiments.run import flops as flops_lib
        from experiments.rundir.tracking import Tracker

        self.run_name, self.overrides = run_identity(self.run_dir)
        if self.is_main:
            self.rd.write_config(self.c)
            self.tok.save(self.rd.tokenizer_path)
            lg = self.c["logger"]
            self.tracker = Tracker(self.run_dir, self.c, logger=lg["kind"], project=lg.get("project", "archlab"),
                                   group=lg.get("group"), name=self.run_name, tags=list(lg.get("tags") or []),
                                   job_type=lg.get("job_type", "train"),
                                   resume_from_step=self.step if self.resumed else None)
            self.fresh = True  # from here on the dir holds this run, whatever it held before
        self.hist = _history(self.run_dir if (self.is_main and self.resumed) else None)
        self.peak = flops_lib.peak_flops(self.device, cache_dir=self.c["data"]["cache_dir"]) if self.is_main else 1.0

    def loop(self) -> dict[str, Any]:
        """Train until the budget is spent, the loss diverges, or a signal asks to stop."""
        from tokenizer.progress import progress_bar

        self.t_start = time.perf_counter() - self.elapsed
        status, extra = "completed", {}
        if self.tracker is not None:
            self.tracker.write_summary(self.summary("running"))
        if self.is_main:
            log.info("training %s: %d steps of %d tokens (%s budget), %s params (%s non-embedding)%s", self.run_name,
                     self.total_steps, self.tokens_per_step, self.budget["held"], f"{self.params:,}",
                     f"{self.non_emb:,}", f", resuming at step {self.step}" if self.resumed else "")
        bar = progress_bar(self.progress, total=self.total_steps, initial=self.step, desc=self.run_name[:40],
                           unit="step", leave=False)
        self.window_tokens, self.window_time = 0, 0.0
        self.model.train()
        try:
            while self.step < self.total_steps:
                if self._stop_requested():
                    bar.close()
                    self.interrupt()
                diverged_at = self.train_step()
                if diverged_at is not None:
                    status, extra = "diverged", {"diverged_at_step": diverged_at}
                    break
                bar.update(1)
                if self.step % int(self.tc["log_interval"]) == 0:
                    bar.set_postfix(loss=f"{self.hist['final_train_loss']:.3f}")
                if self.step % int(self.tc["eval_interval"]) == 0 or self.step == self.total_steps:
                    if self.is_main:
                        self.evaluate(final=self.step == self.total_steps)
                    distributed.barrier()
                if self.step % int(self.tc["ckpt_interval"]) == 0 or self.step == self.total_steps:
                    self.checkpoint()
        except RunInterrupted:
            raise
        except KeyboardInterrupt as e:  # a second Ctrl-C: stop now, without a new checkpoint
            self.finish("interrupted", error=f"{e or 'KeyboardInterrupt'} at step {self.step}; not checkpointed "
                                             f"since the last checkpoint")
            raise RunInterrupted(f"interrupted at step {self.step} (no checkpoint at this step)", self.result) from None
        except Exception as e:
            self.finish("failed", error=f"{type(e).__name__}: {e}")
            raise
        finally:
            bar.close()
        self.finish(status, **extra)
        if self.is_main:
            log.info("%s after %d steps (%d tokens): %s", status, self.step, self.tokens, self.run_dir)
        return self.result

    # -- one step, eval, checkpoint, the end ----------------------------------------------------------------------

    def train_step(self) -> int | None:
        """One optimizer step (grad_accum micro-batches); logs every log_interval. Returns the step number at which
        the loss or grad norm went non-finite (the update is then skipped), else None."""
        from experiments.run.schedule import lr_at

        c, tc, info, device = self.c, self.tc, self.info, self.device
        t0 = time.perf_counter()
        lr = lr_at(self.step, name=c["schedule"]["name"], base_lr=float(c["optim"]["lr"]), total_steps=self.total_steps,
                   warmup_steps=int(c["schedule"]["warmup_steps"]), min_lr_ratio=float(c["schedule"]["min_lr_ratio"]))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=device)
        for micro in range(self.accum):
            batch = tuple(t.to(device, non_blocking=True) for t in self.sampler.next())  # (x, y) | (src, tgt_in, tgt_out)
            no_sync = self.loss_module.no_sync() if info.enabled and micro < self.accum - 1 else nullcontext()
            with no_sync:
                with self.amp:
                    loss = self.loss_module(*batch)
                (loss / self.accum).backward()
            loss_sum += loss.detach().float()
        train_loss = distributed.mean_across_ranks(float(loss_sum.item()) / self.accum, device)
        log_now = self.is_main and ((self.step + 1) % int(tc["log_interval"]) == 0 or self.step + 1 == self.total_steps)
        layer_norms = layer_grad_norms(model_blocks(self.model)) if log_now or not math.isfinite(train_loss) else {}
        clip = tc.get("grad_clip")
        grad_norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), float(clip) if clip else float("inf")))

        def row() -> dict[str, Any]:
            return {"tokens": self.tokens, "flops": self.fpt * self.tokens, "time": time.perf_counter() - self.t_start,
                    "train/loss": train_loss, "lr": lr, "grad_norm": grad_norm, **layer_norms}

        if not (math.isfinite(train_loss) and math.isfinite(grad_norm)):
            if self.tracker is not None:
                self.tracker.log(row(), step=self.step + 1)
                log.warning("non-finite loss/grad norm at step %d (loss %s, grad_norm %s): run diverged",
                            self.step + 1, train_loss, grad_norm)
            return self.step + 1
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += self.tokens_per_step
        self.hist["final_train_loss"] = train_loss
        self.window_tokens += self.tokens_per_step
        self.window_time += time.perf_counter() - t0
        if log_now:
            tps = self.window_tokens / self.window_time if self.window_time > 0 else 0.0
            self.tracker.log({**row(), "tokens_per_s": tps, "mfu": self.fpt * tps / info.world_size / self.peak},
                             step=self.step)
            self.window_tokens, self.window_time = 0, 0.0
        return None

    def evaluate(self, final: bool) -> None:
        row: dict[str, Any] = {"tokens": self.tokens, "flops": self.fpt * self.tokens}
        with self.amp:
            row.update(self.eval_seq2seq(final) if self.task == "seq2seq" else self.eval_lm(final))
        row["time"] = time.perf_counter() - self.t_start
        self.tracker.log(row, step=self.step)
        best = self.hist["best_val_loss"]
        if math.isfinite(row["val/loss"]) and (best is None or row["val/loss"] < best):
            save_weights(Checkpoints(self.rd.checkpoint_dir).best, self.model, self.mcfg.to_dict(), step=self.step,
                         tokens=self.tokens, val_loss=row["val/loss"])
        _record_eval(self.hist, row)

    def eval_lm(self, final: bool) -> dict[str, Any]:
        """val/loss, val/ppl, val/bpb, attention entropy; length extrapolation per train.extrap."""
        from experiments.run.eval_lm import evaluate_model, length_extrapolation

        tc, T = self.tc, int(self.tc["n_ctx"])
        row = evaluate_model(self.model, self.data.val, n_ctx=T, batch_size=int(tc["eval_batch_size"]),
                             max_batches=int(tc["eval_batches"]), bytes_per_token=self.data.bytes_per_token,
                             device=self.device)
        if tc["extrap"] == "every_eval" or (tc["extrap"] == "end" and final):
            row.update(length_extrapolation(self.model, self.data.val, n_ctx=T, factors=tuple(tc["extrap_factors"]),
                                            max_tokens=int(tc["extrap_max_tokens"]), device=self.device,
                                            batch_size=int(tc["eval_batch_size"])))
        return row

    def eval_seq2seq(self, final: bool) -> dict[str, Any]:
        """val/loss, val/ppl, val/token_acc, val/exact_match(@len{k}) on the test split: a sample of
        eval_batches x eval_batch_size pairs at intermediate evals, all of it at the last one."""
        from experiments.run.eval_seq2seq import evaluate_seq2seq

        tc, p = self.tc, self.pairs
        row = evaluate_seq2seq(self.model, p.test, pad_id=p.pad_id, bos_id=p.bos_id, eos_id=p.eos_id,
                               batch_size=int(tc["eval_batch_size"]), device=self.device, prefix="val",
                               max_pairs=None if final else int(tc["eval_batches"]) * int(tc["eval_batch_size"]))
        return {**row, "val/ppl": math.exp(min(row["val/loss"], 700.0))}

    def checkpoint(self) -> None:
        states = distributed.gather_objects({**rng_state(), "data": self.generator.get_state()})
        if self.is_main:
            Checkpoints(self.rd.checkpoint_dir).save(self.step, self.model, {
                "version": 2, "step": self.step, "tokens": self.tokens, "elapsed": time.perf_counter() - self.t_start,
                "optimizer": self.optimizer.state_dict(), "rng": states, "world_size": self.info.world_size,
                "model_config": self.mcfg.to_dict(), "config": self.c,
            }, self.mcfg.to_dict(), keep_last_k=int(self.tc.get("keep_last_k") or 1))
        distributed.barrier()

    def _stop_requested(self) -> bool:
        requested = self.stop is not None and self.stop.requested is not None
        return distributed.any_across_ranks(requested, self.device) if self.info.enabled else requested

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM between steps: checkpoint, summary `interrupted`, raise RunInterrupted."""
        self.checkpoint()
        signame = (self.stop.requested if self.stop else None) or "signal"
        self.finish("interrupted", error=f"{signame} at step {self.step}; checkpoint saved, resume with train.resume=true")
        raise RunInterrupted(f"interrupted at step {self.step}", self.result)

    def summary(self, status: str, **extra: Any) -> dict[str, Any]:
        wall = time.perf_counter() - self.t_start
        h, tokens = self.hist, self.tokens
        return {
            "status": status, "experiment": self.c["experiment_name"], "run_name": self.run_name,
            "overrides": self.overrides, "seed": self.seed, "final_val_loss": h["final_val_loss"],
            "best_val_loss": h["best_val_loss"], "final_val_bpb": h["final_val_bpb"], "best_val_bpb": h["best_val_bpb"],
            "final_train_loss": h["final_train_loss"], "params": self.params, "non_embedding_params": self.non_emb,
            "tokens": tokens, "steps": self.step, "flops": self.fpt * tokens, "budget": self.budget["held"],
            "wall_time_s": wall,
            "tokens_per_s": tokens / wall if wall > 0 else None,
            "mfu": (self.fpt * tokens / wall / self.info.world_size / self.peak) if wall > 0 else None,
            "extrap": h["extrap"], "run_dir": str(self.run_dir), "device": str(self.device),
            "world_size": self.info.world_size, "num_threads": torch.get_num_threads(), **extra,
        }

    def finish(self, status: str, **extra: Any) -> None:
        """Write the final summary.json (rank 0) and close the tracker; the summary is kept as self.result."""
        self.result = self.summary(status, **extra)
        if self.tracker is not None:
            self.tracker.write_summary(self.result)
            self.tracker.finish(status)

    def record_setup_failure(self, e: BaseException) -> None:
        """A failure before the loop still leaves summary.json, with status and reason, in a dir that held no
        other run (a failed resume leaves the earlier run's files as they were)."""
        if not self.is_main:
            return
        interrupted = isinstance(e, KeyboardInterrupt)
        error = f"config error: {e}" if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
        if self.tracker is not None:
            self.tracker.finish("interrupted" if interrupted else "failed")
        if not self.fresh:
            return
        run_name, overrides = run_identity(self.run_dir)
        self.rd.write_summary({"status": "interrupted" if interrupted else "failed", "error": " ".join(error.split()),
                               "experiment": self.c["experiment_name"], "run_name": run_name, "overrides": overrides,
                               "seed": self.seed, "steps": self.step, "tokens": self.tokens, "run_dir": str(self.run_dir)})


# ---------------------------------------------------------------------------------------------------------------
# CLI


def _is_multirun() -> bool:
    hc = _hydra_runtime()
    try:
        from hydra.types import RunMode

        return hc is not None and hc.mode == RunMode.MULTIRUN
    except ImportError:  # pragma: no cover
        return False


def sweep_dir() -> str | None:
    """The sweep dir of the multirun job this process is running, else None."""
    return str(_hydra_runtime().sweep.dir) if _is_multirun() else None


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def main(cfg: DictConfig) -> float | None:
    """CLI entry: train(cfg). Every outcome but success is one line on stderr:

    * a ConfigError: `config error: ...`, exit 2 (in a sweep the job's summary says `failed` and the others go on);
    * Ctrl-C / SIGTERM: `interrupted at step N; ... resume with: <command>`, exit 130; in a sweep the job returns,
      the later jobs record themselves `interrupted` without starting, and the sweep's callback prints the
      command that resumes them all and exits 130 (experiments.sweep.callbacks.SweepStop);
    * any other exception: a single run keeps its traceback (a bug should show where); in a sweep it is logged,
      the job's summary.json says `failed` with the reason, and the sweep goes on (the sweep callback then
      exits 1). Re-raised, Hydra's sweeper would stop at it after the batch, skipping the report.

    Returns the final val loss (for Hydra sweepers that optimise it)."""
    try:
        summary = train(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr, flush=True)
        if _is_multirun():
            return None
        sys.exit(2)
    except KeyboardInterrupt as e:
        run_dir = Path((getattr(e, "summary", None) or {}).get("run_dir") or resolve_run_dir(to_plain(cfg)))
        how = str(e) if isinstance(e, RunInterrupted) else "interrupted"
        if _is_multirun():  # the other jobs record themselves; the sweep's last line says how to resume them all
            print(f"{how}; {run_dir}: summary.json says interrupted", file=sys.stderr, flush=True)
            return None
        print(f"{how}; {run_dir}: summary.json says interrupted; resume with: {resume_command(run_dir)}",
              file=sys.stderr, flush=True)
        sys.exit(EXIT_CODE)
    except Exception:
        if not _is_multirun():
            raise
        log.exception("run failed; the sweep goes on")
        return None
    return summary.get("final_val_loss")


def cli() -> None:
    """`python -m experiments.train ...`: the argument checks Hydra cannot do (one line each), then main()."""
    from experiments.config.precheck import precheck_or_exit

    precheck_or_exit(sys.argv[1:])
    try:
        main()
    except KeyboardInterrupt:  # a sweep's launcher got a second Ctrl-C / SIGTERM: its jobs were stopped at once
        from experiments.sweep.callbacks import stopped_at_once

        stopped_at_once()


if __name__ == "__main__":
    cli()
