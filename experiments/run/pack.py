"""Packed training: several runs of one model shape trained at once in one process, each exactly as it would run alone.

    summaries = train_packed([rc_a, rc_b, ...])          # RunConfigs (validated); one summary dict per member
    why = unpackable(rc)                                  # None, or the one line that names the knob refusing packing
    key = pack_key(rc)                                    # members of one pack have equal keys

Each member is a whole TrainingRun (experiments/run/loop.py) with its own run dir and the files a solo run writes
(config.yaml, metrics.jsonl, summary.json, checkpoints, its own lock), its own data order (its sampler seeded by its
own seed: the batches its solo run would draw), its own model init (built from its seed as alone), its own optimizer
with its own lr, weight decay and schedule, its own evaluations and checkpoint cadence. Only the forward and backward
are shared: one vmapped call over the stacked members (experiments/run/stacked.py), after which each member clips,
checks and steps on its own (TrainingRun.apply_step). So every member's curve is its solo curve up to the rounding of
batched kernels (tests/experiments/test_pack.py measures it against two solo runs with equivalent kernels).

What may differ inside a pack (FREE): the seed, everything under optim and schedule, model.init, the budget
(train.steps / tokens / flops: a member that finishes leaves the pack), the eval / checkpoint / log cadence, the
logger, the run dir. Everything else (model shape and knobs, data, tokenizer, batch, n_ctx, grad_accum, device,
dtype) is equal within a pack (`pack_key`). A member whose loss or grad norm goes non-finite is recorded `diverged`
and leaves the pack; the others go on. Ctrl-C / SIGTERM: every member finishes its step, checkpoints and records
`interrupted`; `train.resume=true` resumes each member exactly (each restores its own checkpoint). SLURM's SIGUSR2
(hydra/launcher=slurm hydra.launcher.pack=true, one pack per array task): every member finishes its step,
checkpoints and records `requeued` through experiments/sweep/requeue.decide (TrainingRun.interrupt, one decision for
the job), and the requeued task resumes every member.
Refused in one line (`unpackable`): dropout > 0, model.attention=manual, train.compile=true, task=seq2seq, and
DDP (torchrun). Not handled: fp16 members with different loss scales overflow-skipping in one step (each member's
GradScaler skips its own step, as alone).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import Any

import torch

from experiments.config.errors import ConfigError
from experiments.config.schema import RunConfig
from experiments.run import distributed
from experiments.run.interrupt import RunInterrupted, StopRequest, hold_sweep, sweep_stopped
from experiments.run.loop import TrainingRun
from experiments.run.stacked import StackedLoss
from experiments.rundir.layout import RunStatus
from experiments.rundir.lock import RunDirLock
from experiments.sweep.job import sweep_dir
from experiments.sweep.records import record_not_started

log = logging.getLogger(__name__)

# Dotted config keys (a key and everything under it) that may differ between the members of one pack.
FREE = ("seed", "experiment_name", "optim", "schedule", "logger", "model.init",
        "train.steps", "train.tokens", "train.flops", "train.max_epochs", "train.sampler", "train.run_dir",
        "train.resume", "train.overwrite", "train.progress", "train.log_interval", "train.eval_interval",
        "train.eval_batches", "train.eval_batch_size", "train.extrap", "train.extrap_factors",
        "train.extrap_max_tokens", "train.ckpt_interval", "train.keep_last_k", "train.grad_clip")

JobContext = Callable[[int], AbstractContextManager[Any]]  # member index -> the context its setup and steps run in


def unpackable(rc: RunConfig) -> str | None:
    """Why a run with this config cannot be a member of a pack (one line naming the knob), else None."""
    if rc.task.kind != "lm":
        return f"task={rc.task.kind} cannot be packed: its members' batches differ in length (task=lm packs)"
    if rc.model.dropout:
        return (f"model.dropout={rc.model.dropout} cannot be packed: a packed member cannot draw its solo run's "
                f"dropout masks; use model.dropout=0 or another launcher")
    if rc.model.attention == "manual":
        return ("model/attention=manual cannot be packed: its hand-written autograd.Function has no vmap rule; "
                "use model/attention=sdpa or explicit")
    if rc.train.compile:
        return "train.compile=true cannot be packed: the stacked step runs eager; use train.compile=false"
    return None


def _drop(tree: dict[str, Any], dotted: str) -> None:
    head, _, rest = dotted.partition(".")
    if head in tree:
        if rest and isinstance(tree[head], dict):
            _drop(tree[head], rest)
        elif not rest:
            del tree[head]


def pack_key(rc: RunConfig) -> str:
    """What must be equal for two runs to share a pack: the config without its FREE keys, as canonical JSON."""
    tree = rc.to_dict()
    for key in FREE:
        _drop(tree, key)
    return json.dumps(tree, sort_keys=True, default=str)


def train_packed(rcs: Sequence[RunConfig], job_context: JobContext | None = None) -> list[dict[str, Any] | Exception]:
    """Train the members together; returns, per member, its summary dict or the exception that ended it before its
    loop (a ConfigError for a run dir that holds another run, the setup error otherwise: that member's summary.json
    says so where a solo run's would). Raises ConfigError before anything is written when the members cannot share a
    pack, and RunInterrupted after a Ctrl-C / SIGTERM (every member checkpointed, `interrupted`)."""
    if not rcs:
        return []
    job_context = job_context or (lambda i: nullcontext())
    for rc in rcs:
        if why := unpackable(rc):
            raise ConfigError(why)
    keys = {pack_key(rc) for rc in rcs}
    if len(keys) > 1:
        raise ConfigError("packed members must differ only in seed, optim, schedule, model.init, budget and cadence")
    info = distributed.env_info()
    if info.enabled:
        raise ConfigError("packed training runs in one process; start it without torchrun (no DDP)")
    sweep = sweep_dir()
    if sweep is not None:
        hold_sweep(sweep)
        if why := sweep_stopped(sweep):
            summaries = []
            for i, rc in enumerate(rcs):
                with job_context(i):
                    summaries.append(record_not_started(rc.to_dict(), why))
            raise RunInterrupted(f"not started: the sweep was stopped by {why}", summaries[0], started=False)
    device = distributed.pick_device(rcs[0].train.device, info)
    threads_before = torch.get_num_threads()
    try:
        runs = []
        for i, rc in enumerate(rcs):
            with job_context(i):
                runs.append(TrainingRun(rc, info, device))
        return PackedRuns(runs, job_context, sweep).run()
    finally:
        torch.set_num_threads(threads_before)


class PackedRuns:
    """The members' TrainingRuns and their shared step. Setup per member (as TrainingRun.run), then one loop."""

    def __init__(self, runs: list[TrainingRun], job_context: JobContext, sweep: str | None) -> None:
        self.runs, self.job_context, self.sweep = runs, job_context, sweep
        self.outcome: list[dict[str, Any] | Exception | None] = [None] * len(runs)
        self.stacked: StackedLoss | None = None
        self.threads: int | None = None  # torch's thread count, once the first member has chosen it

    def run(self) -> list[dict[str, Any] | Exception]:
        with ExitStack() as held, StopRequest(self.sweep) as stop:
            live = [i for i in range(len(self.runs)) if self._setup(i, stop, held)]
            if live:
                self._loop(live, stop)
        assert None not in self.outcome  # each member's is set by _setup, _end or the loop's stop paths
        return self.outcome  # type: ignore[return-value]

    def _setup(self, i: int, stop: StopRequest, held: ExitStack) -> bool:
        """Member i through TrainingRun.run's setup; False (outcome recorded) when it cannot train."""
        run = self.runs[i]
        with self.job_context(i):
            try:
                # a dir holding another run: ConfigError, nothing written. Torch's thread count is the process's:
                # the first member to open its dir chooses it (its load probe, or its resume's record), the rest keep it
                run.open_run_dir(threads=self.threads)
                self.threads = self.threads or torch.get_num_threads()
                held.enter_context(RunDirLock(run.run_dir))
            except ConfigError as e:
                self.outcome[i] = e
                return False
            run.stop, run.packed = stop, True
            try:
                run.setup()
            except Exception as e:  # noqa: BLE001 - setup recorded it in the member's summary.json; the others go on
                self.outcome[i] = e
                return False
        return True

    def _loop(self, live: list[int], stop: StopRequest) -> None:
        runs = self.runs
        self.stacked = StackedLoss([runs[i].loss_module for i in live])
        slot = {i: j for j, i in enumerate(live)}  # member -> its index in the stacked module list
        for i in live:
            with self.job_context(i):
                runs[i].begin_loop()
        active = [i for i in live if runs[i].step < runs[i].budget.total_steps]
        for i in live:
            if i not in active:  # a resumed member that had already finished
                self._end(i, RunStatus.COMPLETED)
        log.info("packed: %d member(s) in one stacked model (%s)", len(active), ", ".join(runs[i].run_name
                                                                                          for i in active))
        try:
            while active:
                if stop.requested is not None:
                    self._interrupt(active)
                t0 = time.perf_counter()
                lrs = [runs[i].set_lr() for i in active]
                losses = self._forward_backward(active, [slot[i] for i in active])
                still = []
                for i, lr, loss in zip(active, lrs, losses):
                    run = runs[i]
                    with self.job_context(i):  # its log lines go to its own log
                        diverged_at = run.apply_step(loss, lr, t0)
                        if diverged_at is None:
                            run.after_step()
                    if diverged_at is not None:
                        self._end(i, RunStatus.DIVERGED, diverged_at_step=diverged_at)
                    elif run.step >= run.budget.total_steps:
                        self._end(i, RunStatus.COMPLETED)
                    else:
                        still.append(i)
                active = still
        except RunInterrupted:
            raise
        except KeyboardInterrupt as e:  # a second Ctrl-C: stop now, without new checkpoints
            for i in active:
                runs[i].finish(RunStatus.INTERRUPTED, error=f"{e or 'KeyboardInterrupt'} at step {runs[i].step}; "
                                                            f"not checkpointed since the last checkpoint")
                self.outcome[i] = runs[i].result.to_dict()
            raise RunInterrupted("interrupted (no checkpoint at this step)", self.outcome[active[0]]) from None
        except Exception as e:
            for i in active:
                runs[i].finish(RunStatus.FAILED, error=f"{type(e).__name__}: {e}")
                self.outcome[i] = runs[i].result.to_dict()
            raise

    def _forward_backward(self, active: list[int], slots: list[int]) -> list[float]:
        """grad_accum micro-batches of every active member through the stacked module; each member's .grad gets
        the gradient of its own mean loss (scaled by its own fp16 scaler, as alone). Returns the members' losses."""
        runs = [self.runs[i] for i in active]
        accum = runs[0].budget.grad_accum
        device = runs[0].device
        sums = torch.zeros(len(runs), device=device)
        for _ in range(accum):
            batches = [tuple(t.to(device, non_blocking=True) for t in r.task.sampler.next()) for r in runs]
            with runs[0].precision.autocast:
                losses = self.stacked.losses(batches, slots)  # (m,)
            total = sum(r.precision.scaled(losses[j] / accum) for j, r in enumerate(runs))
            total.backward()
            sums += losses.detach().float()
        return (sums / accum).tolist()

    def _end(self, i: int, status: RunStatus, **extra: Any) -> None:
        run = self.runs[i]
        with self.job_context(i):
            run.finish(status, **extra)
            log.info("%s after %d steps (%d tokens): %s", status, run.step, run.tokens, run.run_dir)
        self.outcome[i] = run.result.to_dict()

    def _interrupt(self, active: list[int]) -> None:
        """Every active member checkpoints and records `interrupted` (TrainingRun.interrupt); then one
        RunInterrupted for the pack."""
        first: RunInterrupted | None = None
        for i in active:
            try:
                with self.job_context(i):
                    self.runs[i].interrupt()
            except RunInterrupted as e:
                self.outcome[i] = self.runs[i].result.to_dict()
                with self.job_context(i):  # in its own log, as a solo run's stop is
                    log.info("%s: %s", e, self.runs[i].run_dir)
                first = first or e
        assert first is not None
        raise first
