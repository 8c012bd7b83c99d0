"""One training run, step by step: `TrainingRun(rc, info, device).run()` -> the summary dict (rc: a RunConfig).

    run():  open_run_dir -> load_data -> build_model -> restore (train.resume) -> start_tracking -> loop
    loop(): train_step (grad_accum micro-batches, clip, optimizer step) | evaluate | checkpoint | interrupt

What differs between a language model and seq2seq (data, model config, cost of a step, eval metrics) is the task's
(run/tasks.py); how long the run trains is its Budget (run/budget.py). Only rank 0 (`is_main`) writes files; every
rank steps. What each outcome leaves in summary.json: run/train.py; jobs that never reach the loop: sweep/records.py.
Not handled: gradient accumulation across DDP ranks with uneven batches, FSDP, evaluation on all ranks.
"""

from __future__ import annotations

import logging
import math
import random
import time
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import arch  # via the module: tests patch arch.build_model
from experiments.config.errors import ConfigError
from experiments.config.schema import RunConfig
from experiments.data.corpus import rank_seed
from experiments.run import distributed, schedule  # schedule via the module: tests patch schedule.lr_at
from experiments.run.budget import Budget, check_epochs
from experiments.run.flops import peak_flops
from experiments.run.grad_norms import layer_grad_norms, model_blocks
from experiments.run.history import EvalHistory
from experiments.run.interrupt import RunInterrupted, StopRequest
from experiments.run.loss_module import LossModule
from experiments.run.optim import build_optimizer
from experiments.run.precision import Precision
from experiments.run.restore import restore_from_checkpoint
from experiments.run.tasks import TASKS, Task
from experiments.rundir.checkpoint import Checkpoints, rng_state, save_weights
from experiments.rundir.layout import RunDir, RunDirError, RunResults, RunStatus, RunSummary
from experiments.rundir.tracking import Tracker
from experiments.sweep import requeue
from experiments.sweep.job import num_threads, progress_label, resolve_run_dir, run_identity, sweep_dir
from experiments.sweep.records import record_setup_failure, setup_failure_status
from tokenizer.progress import progress_bar

log = logging.getLogger(__name__)


class TrainingRun:
    """One run: the state its steps share is all declared in __init__. Only rank 0 (`is_main`) writes files."""

    def __init__(self, rc: RunConfig, info: distributed.DistInfo, device: torch.device) -> None:
        # the config and this process
        self.rc, self.info, self.device = rc, info, device
        self.tc, self.seed = rc.train, rc.seed
        self.config: dict[str, Any] = {}  # what config.yaml holds (the real model shape): set by build_model
        self.is_main = info.is_main
        self.progress = self.tc.progress and self.is_main
        self.task: Task = TASKS[rc.task.kind](rc, is_main=self.is_main, progress=self.progress, rank=info.rank,
                                              world_size=info.world_size)
        # the run dir and how the run is named (run_identity, set by start_tracking)
        self.rd = RunDir(distributed.broadcast_object(str(resolve_run_dir(rc))))
        self.run_dir = self.rd.path
        self.fresh = True  # the dir holds no earlier run of ours: a setup failure may write its summary
        self.run_name, self.overrides = self.run_dir.name, []
        # what build_model makes
        self.generator = torch.Generator()  # this rank's data order: seeded by load_data, restored by restore
        self.mcfg: arch.ModelConfig | arch.EncDecConfig | None = None
        self.model: nn.Module | None = None
        self.loss_module: nn.Module | None = None  # LossModule, compiled / DDP-wrapped as configured
        self.optimizer: torch.optim.Optimizer | None = None
        self.precision = Precision(device, self.tc.dtype)
        self.budget: Budget | None = None
        self.params = self.non_emb = 0
        self.epoch_tokens: int | None = None  # tokens one pass over the train split gives (None: seq2seq)
        # progress: counters (restored on resume), the eval history, throughput since the last log line
        self.step, self.tokens, self.elapsed, self.resumed = 0, 0, 0.0, False
        self.t_start = time.perf_counter()
        self.hist = EvalHistory()
        self.window_tokens, self.window_time = 0, 0.0
        # tracking and stopping
        self.tracker: Tracker | None = None  # rank 0 only
        self.peak = 1.0                      # the device's peak FLOP/s, for MFU (rank 0)
        self.stop: StopRequest | None = None
        self.result: RunSummary | None = None  # the final summary, set by finish()
        self.packed = False  # a member of a pack (run/pack.py): other runs of this process are live at the same time

    # -- the steps ------------------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        self.open_run_dir()  # a dir holding another run, or an unwritable one: ConfigError, nothing written
        with StopRequest(sweep_dir()) as self.stop:
            self.setup()
            return self.loop()

    def setup(self) -> None:
        """Data, model, checkpoint (train.resume), tracking; a failure is recorded in summary.json, then raised."""
        try:
            self.load_data()
            self.build_model()
            if self.tc.resume:
                self.restore()
            self.start_tracking()
        except BaseException as e:
            self.record_setup_failure(e)
            raise

    def open_run_dir(self, threads: int | None = None) -> None:
        """Check and claim the run dir; set torch's threads to `threads` (a count this process already uses: a
        pack's later members) or else to choose_threads()."""
        tc = self.tc
        try:
            self.rd.check_can_start(resume=tc.resume, overwrite=tc.overwrite)
        except RunDirError as e:
            raise ConfigError(str(e)) from None
        self.fresh = not (tc.resume and self.rd.holds_run())
        distributed.barrier()  # every rank checked before rank 0 removes anything
        if self.is_main and tc.overwrite:
            removed = self.rd.remove_run_outputs()
            if removed:
                log.info("train.overwrite=true: removed %s from %s", ", ".join(p.name for p in removed), self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        threads = threads or self.choose_threads()
        if threads:
            torch.set_num_threads(threads)

    def choose_threads(self) -> int | None:
        """train.num_threads, else a resumed run's own count from its summary.json (the load-aware default may pick
        another, and 1 and 2 threads round differently: the curve would not stay exact), else sweep/job.num_threads
        (None: torch's default)."""
        tc = self.tc
        if not tc.num_threads and not self.fresh:
            recorded = (self.rd.read_summary() or {}).get("num_threads")
            if recorded:
                return int(recorded)
        return num_threads(tc.num_threads, self.info.local_world_size)

    def load_data(self) -> None:
        if self.is_main:  # the first thing a job says, before a tokenizer trains or a corpus is read
            log.info("run dir %s: preparing data (data=%s, tokenizer=%s)", self.run_dir, self.rc.data.source,
                     self.rc.tokenizer.mode)
        self.generator.manual_seed(rank_seed(self.seed, self.info.rank))
        self.task.load(self.generator)

    def build_model(self) -> None:
        """The model (vocab_size from the tokenizer, shape solved if model.shape is set), optimizer, budget."""
        self.mcfg = self.task.model_config()
        plain = self.rc.to_dict()
        self.config = {**plain, "model": {**self.mcfg.to_dict(), "shape": plain["model"]["shape"]},
                       "tokenizer": {**plain["tokenizer"], "resolved_path": self.task.tokenizer_info["path"]}}
        random.seed(self.seed)
        np.random.seed(self.seed)
        torch.manual_seed(self.seed)  # same init on every rank (DDP also broadcasts rank 0's weights)
        self.model = arch.build_model(self.mcfg).to(self.device)
        torch.manual_seed(rank_seed(self.seed, self.info.rank))  # dropout masks differ per rank
        self.optimizer = build_optimizer(self.model, self.rc.optim, self.device, say=self.is_main)
        self.budget = Budget.plan(self.tc, flops_per_token=self.task.flops_per_token(self.mcfg),
                                  tokens_per_sequence=self.task.tokens_per_sequence(), world_size=self.info.world_size)
        self.epoch_tokens = self.task.epoch_tokens()
        check_epochs(self.tc, self.budget, self.epoch_tokens, warn=self.is_main)
        self.params = arch.count_params(self.mcfg)
        self.non_emb = arch.count_params(self.mcfg, non_embedding=True)
        loss_module: nn.Module = LossModule(self.model)
        if self.tc.compile:
            loss_module = torch.compile(loss_module)
        if self.info.enabled:
            loss_module = DistributedDataParallel(loss_module, device_ids=[self.device.index]
                                                  if self.device.type == "cuda" else None)
        self.loss_module = loss_module

    def restore(self) -> None:
        """Continue from the latest checkpoint (experiments/run/restore.py)."""
        restore_from_checkpoint(self)

    def start_tracking(self) -> None:
        """config.yaml, the tracker (metrics.jsonl, summary.json, wandb) and the eval history of a resumed run."""
        self.run_name, self.overrides = run_identity(self.run_dir)
        if self.is_main:
            self.rd.write_config(self.config)
            self.task.tokenizer.save(self.rd.tokenizer_path)
            lg = self.rc.logger
            self.tracker = Tracker(self.run_dir, self.config, logger=lg.kind, project=lg.project, group=lg.group,
                                   name=self.run_name, tags=list(lg.tags), job_type=lg.job_type,
                                   resume_from_step=self.step if self.resumed else None, concurrent=self.packed)
            self.fresh = True  # from here on the dir holds this run, whatever it held before
            if self.resumed:
                self.hist = EvalHistory.from_metrics(self.rd.read_metrics())
            self.peak = peak_flops(self.device)  # measured in this process (flops.py), never a cached maximum

    # -- the loop -------------------------------------------------------------------------------------------------

    def loop(self) -> dict[str, Any]:
        """Train until the budget is spent, the loss diverges, or a signal asks to stop."""
        tc, total = self.tc, self.budget.total_steps
        status, extra = RunStatus.COMPLETED, {}
        self.begin_loop()
        bar = progress_bar(self.progress, total=total, initial=self.step, desc=progress_label(self.run_dir),
                           unit="step", leave=False)
        try:
            while self.step < total:
                if self._stop_requested():
                    bar.close()
                    self.interrupt()
                diverged_at = self.train_step()
                if diverged_at is not None:
                    status, extra = RunStatus.DIVERGED, {"diverged_at_step": diverged_at}
                    break
                bar.update(1)
                if self.step % tc.log_interval == 0:
                    bar.set_postfix(loss=f"{self.hist.final_train_loss:.3f}")
                self.after_step()
        except RunInterrupted:
            raise
        except KeyboardInterrupt as e:  # a second Ctrl-C: stop now, without a new checkpoint
            self.finish(RunStatus.INTERRUPTED, error=f"{e or 'KeyboardInterrupt'} at step {self.step}; not "
                                                     f"checkpointed since the last checkpoint")
            raise RunInterrupted(f"interrupted at step {self.step} (no checkpoint at this step)",
                                 self.result.to_dict()) from None
        except Exception as e:
            self.finish(RunStatus.FAILED, error=f"{type(e).__name__}: {e}")
            raise
        finally:
            bar.close()
        self.finish(status, **extra)
        if self.is_main:
            log.info("%s after %d steps (%d tokens): %s", status, self.step, self.tokens, self.run_dir)
        return self.result.to_dict()

    def begin_loop(self) -> None:
        """Before the first step of this process: the clock, a `running` summary, the run's one-line plan."""
        self.t_start = time.perf_counter() - self.elapsed
        if self.tracker is not None:
            self.tracker.write_summary(self.summary(RunStatus.RUNNING))
        if self.is_main:
            log.info("training %s: %d steps of %d tokens (%s budget), %s params (%s non-embedding)%s", self.run_name,
                     self.budget.total_steps, self.budget.tokens_per_step, self.budget.held, f"{self.params:,}",
                     f"{self.non_emb:,}", f", resuming at step {self.step}" if self.resumed else "")
        self.window_tokens, self.window_time = 0, 0.0
        self.model.train()

    def after_step(self) -> None:
        """Evaluate every eval_interval, checkpoint every ckpt_interval, both at the last step."""
        tc, total = self.tc, self.budget.total_steps
        if self.step % tc.eval_interval == 0 or self.step == total:
            if self.is_main:
                self.evaluate(final=self.step == total)
            distributed.barrier()
        if self.step % tc.ckpt_interval == 0 or self.step == total:
            self.checkpoint()

    def forward_backward(self) -> float:
        """grad_accum micro-batches forward and backward (gradients summed); their mean loss over every rank."""
        accum = self.budget.grad_accum
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(accum):
            batch = tuple(t.to(self.device, non_blocking=True) for t in self.task.sampler.next())
            # batch: (x, y) each (B, T) | seq2seq (src, tgt_in, tgt_out) each (B, longest)
            last = micro == accum - 1
            with self.loss_module.no_sync() if self.info.enabled and not last else nullcontext():
                with self.precision.autocast:
                    loss = self.loss_module(*batch)
                self.precision.backward(loss / accum)
            loss_sum += loss.detach().float()
        return distributed.mean_across_ranks(float(loss_sum.item()) / accum, self.device)

    def train_step(self) -> int | None:
        """One optimizer step; logs every log_interval. Returns the step number at which the loss or grad norm
        went non-finite (the update is then skipped), else None."""
        t0 = time.perf_counter()
        lr = self.set_lr()
        return self.apply_step(self.forward_backward(), lr, t0)

    def set_lr(self) -> float:
        """The schedule's lr for this step, set in every param group; returns it."""
        sched = self.rc.schedule
        lr = schedule.lr_at(self.step, name=sched.name, base_lr=self.rc.optim.lr, total_steps=self.budget.total_steps,
                            warmup_steps=sched.warmup_steps, warmup_ratio=sched.warmup_ratio,
                            min_lr_ratio=sched.min_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_mult", 1.0)  # μP's per-group multiplier (experiments/run/optim.py)
        return lr

    def apply_step(self, train_loss: float, lr: float, t0: float) -> int | None:
        """After the backward (also a pack's shared one, run/pack.py): unscale, clip, check, step, counters, log row.
        Returns the step at which it diverged (no update), else None."""
        tc = self.tc
        self.precision.unscale(self.optimizer)  # fp16: the true gradients, for the norms and clipping
        log_now = self.is_main and ((self.step + 1) % tc.log_interval == 0
                                    or self.step + 1 == self.budget.total_steps)
        layer_norms = layer_grad_norms(model_blocks(self.model)) if log_now or not math.isfinite(train_loss) else {}
        grad_norm = float(nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip or float("inf")))
        fpt = self.budget.flops_per_token

        def row() -> dict[str, Any]:
            return {"tokens": self.tokens, "flops": fpt * self.tokens, "time": time.perf_counter() - self.t_start,
                    "train/loss": train_loss, "lr": lr, "grad_norm": grad_norm, **layer_norms}

        # fp16: a non-finite grad norm is an overflow of the scaled backward; precision.step skips it, lowers the scale
        grad_ok = math.isfinite(grad_norm) or self.precision.skips_overflow
        if not (math.isfinite(train_loss) and grad_ok):
            if self.tracker is not None:
                self.tracker.log(row(), step=self.step + 1)
                log.warning("non-finite loss/grad norm at step %d (loss %s, grad_norm %s): run diverged",
                            self.step + 1, train_loss, grad_norm)
            return self.step + 1
        self.precision.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += self.budget.tokens_per_step
        self.hist.final_train_loss = train_loss
        self.window_tokens += self.budget.tokens_per_step
        self.window_time += time.perf_counter() - t0
        if log_now:
            tps = self.window_tokens / self.window_time if self.window_time > 0 else 0.0
            self.tracker.log({**row(), "tokens_per_s": tps, "mfu": fpt * tps / self.info.world_size / self.peak},
                             step=self.step)
            self.window_tokens, self.window_time = 0, 0.0
        return None

    def evaluate(self, final: bool) -> None:
        row: dict[str, Any] = {"tokens": self.tokens, "flops": self.budget.flops_per_token * self.tokens}
        with self.precision.autocast:
            row.update(self.task.evaluate(self.model, self.device, final))
        row["time"] = time.perf_counter() - self.t_start
        self.tracker.log(row, step=self.step)
        best = self.hist.best_val_loss
        if math.isfinite(row["val/loss"]) and (best is None or row["val/loss"] < best):
            save_weights(Checkpoints(self.rd.checkpoint_dir).best, self.model, self.mcfg.to_dict(), step=self.step,
                         tokens=self.tokens, val_loss=row["val/loss"])
        self.hist.record_eval(row)

    def checkpoint(self) -> None:
        states = distributed.gather_objects({**rng_state(), "data": self.generator.get_state()})
        if self.is_main:
            Checkpoints(self.rd.checkpoint_dir).save(self.step, self.model, {
                "version": 2, "step": self.step, "tokens": self.tokens, "elapsed": time.perf_counter() - self.t_start,
                "optimizer": self.optimizer.state_dict(), "rng": states, "world_size": self.info.world_size,
                "model_config": self.mcfg.to_dict(), "config": self.config, "inputs": self.task.inputs,
                **({"grad_scaler": self.precision.state_dict()} if self.precision.scaler is not None else {}),
            }, self.mcfg.to_dict(), keep_last_k=self.tc.keep_last_k)
        distributed.barrier()

    # -- stopping and the end -------------------------------------------------------------------------------------

    def _stop_requested(self) -> bool:
        requested = self.stop is not None and self.stop.requested is not None
        return distributed.any_across_ranks(requested, self.device) if self.info.enabled else requested

    def interrupt(self) -> None:
        """Ctrl-C / SIGTERM between steps: checkpoint, `interrupted` (SLURM's SIGUSR2: `requeued` if sweep/requeue.py
        says the job may be requeued), raise RunInterrupted."""
        self.checkpoint()
        status, signame = RunStatus.INTERRUPTED, (self.stop.requested if self.stop else None) or "signal"
        error = f"{signame} at step {self.step}; checkpoint saved, resume with train.resume=true"
        if self.stop is not None and self.stop.requeue:
            status, error = requeue.decide(self.step).outcome
        self.finish(status, error=error)
        raise RunInterrupted(f"{status} at step {self.step}", self.result.to_dict())

    def summary(self, status: RunStatus, *, error: str | None = None,
                diverged_at_step: int | None = None) -> RunSummary:
        wall, h, tokens, fpt = time.perf_counter() - self.t_start, self.hist, self.tokens, self.budget.flops_per_token
        results = RunResults(
            final_val_loss=h.final_val_loss, best_val_loss=h.best_val_loss, final_val_bpb=h.final_val_bpb,
            best_val_bpb=h.best_val_bpb, final_train_loss=h.final_train_loss, params=self.params,
            non_embedding_params=self.non_emb, flops=fpt * tokens, budget=self.budget.held,
            epochs=tokens / self.epoch_tokens if self.epoch_tokens else None, wall_time_s=wall,
            tokens_per_s=tokens / wall if wall > 0 else None,
            mfu=(fpt * tokens / wall / self.info.world_size / self.peak) if wall > 0 else None,
            extrap=h.extrap, device=str(self.device), world_size=self.info.world_size,
            num_threads=torch.get_num_threads(), test=h.test or None,
            evaluation=self.task.held_out_record() or None)
        return RunSummary(status, experiment=self.rc.experiment_name, run_name=self.run_name,
                          overrides=self.overrides, seed=self.seed, steps=self.step, tokens=tokens,
                          run_dir=str(self.run_dir), error=error, diverged_at_step=diverged_at_step, results=results)

    def finish(self, status: RunStatus, **extra: Any) -> None:
        """Write the final summary.json (rank 0) and close the tracker; the summary is kept as self.result."""
        self.result = self.summary(status, **extra)
        if self.tracker is not None:
            self.tracker.write_summary(self.result)
            self.tracker.finish(status)

    def record_setup_failure(self, e: BaseException) -> None:
        """A failure before the loop still leaves summary.json, with status and reason, in a dir that held no
        other run (a failed resume leaves the earlier run's files as they were): experiments/sweep/records.py."""
        if not self.is_main:
            return
        if self.tracker is not None:
            self.tracker.finish(setup_failure_status(e))
        if self.fresh:
            record_setup_failure(self.run_dir, e, experiment=self.rc.experiment_name, seed=self.seed,
                                 steps=self.step, tokens=self.tokens)
