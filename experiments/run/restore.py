"""Resume: a TrainingRun continues from its latest checkpoint, exactly where it stopped.

    restore_from_checkpoint(run)      # after run.build_model(): weights, optimizer, fp16 scaler, counters, random states

What is restored: the model's weights, the optimizer state, the grad scaler (fp16), step / tokens / elapsed, every
random state of this rank and its data generator (bit-exact on CPU); with another world size than the checkpoint's,
the data order is re-seeded from (seed, step, rank). Refused in one ConfigError: a damaged checkpoint, another model
(arch.config_diff), another tokenizer or other data than the run's (rundir/checkpoint.check_same_inputs); nothing
of the run dir is written before these checks, and the CLI puts back what Hydra wrote into it (run/keep_dirs.py). No
checkpoint: a warning, and the run starts from step 0. Used by TrainingRun.restore (run/loop.py), for a solo run and
for each member of a pack (run/pack.py).
"""

from __future__ import annotations

import logging
from typing import Any

import arch
from experiments.config.errors import ConfigError
from experiments.data.corpus import rank_seed
from experiments.rundir.checkpoint import CheckpointError, Checkpoints, check_same_inputs, recorded_inputs, set_rng_state

log = logging.getLogger(__name__)


def restore_from_checkpoint(run: Any) -> None:
    """`run` (a TrainingRun, run/loop.py, after build_model) continues from its latest checkpoint: weights, optimizer,
    counters, every random state (bit-exact on CPU)."""
    ckpts = Checkpoints(run.rd.checkpoint_dir)
    path = ckpts.latest()
    if path is None:
        if run.is_main:
            log.warning("train.resume=true but %s holds no checkpoint; starting from scratch", ckpts.dir)
        return
    try:
        ckpt = ckpts.load_state(path, map_location=run.device)
        diff = arch.config_diff(ckpt["model_config"], run.mcfg)  # a field added since: its default
        if not diff:
            ckpts.load_model_weights(run.model, path, ckpt, run.device)
    except CheckpointError as e:
        raise ConfigError(f"cannot resume: {e}; delete it to restart this run from step 0 (train.resume=true), "
                          f"or replace the whole run with train.overwrite=true") from None
    check_same_inputs(ckpts.dir, recorded_inputs(ckpt, run.rd.tokenizer_path), run.task.inputs)
    if diff:
        raise ConfigError(f"train.resume=true but {path} holds a different model (differs in {diff}); "
                          f"resume with the run's original overrides or start a new run dir")
    run.optimizer.load_state_dict(ckpt["optimizer"])
    run.precision.load_state_dict(ckpt.get("grad_scaler") or {})
    run.step, run.tokens, run.elapsed = int(ckpt["step"]), int(ckpt["tokens"]), float(ckpt["elapsed"])
    if ckpt["world_size"] == run.info.world_size:
        states = ckpt["rng"][run.info.rank]
        set_rng_state(states)
        run.generator.set_state(states["data"])
    else:
        log.warning("resume: checkpoint from %d rank(s), now %d; data order re-seeded", ckpt["world_size"],
                    run.info.world_size)
        run.generator.manual_seed(rank_seed(run.seed * 1_000_003 + run.step, run.info.rank))
    run.task.resume_at(run.step * run.budget.grad_accum)
    run.resumed = True
    if run.is_main:
        log.info("resumed from %s at step %d (%d tokens)", path, run.step, run.tokens)
