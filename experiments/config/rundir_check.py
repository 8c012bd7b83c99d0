"""Before Hydra writes into a run dir: can the dir be made, may this run start there, is a resume the same model.

Hydra makes the run dir (or sweep dir) and writes `.hydra/` into it before train() runs, so what would refuse
a dir after that (too late: an old run's .hydra/ already rewritten, or Hydra's own mkdir traceback) is checked
here, by experiments.config.precheck, on the dirs the composed config names (given on the command line, set by an
experiment, or Hydra's defaults):

* a path that exists and is not a directory, or that cannot be created (`/proc/x`: making and removing a
  temporary dir in its nearest existing parent is the test; it leaves nothing behind);
* a fresh single run in a dir that holds a run (experiments.rundir.layout.RunDir.check_can_start), and a single
  run's dir that another live process trains in (experiments.rundir.lock.check_not_in_use, resume or not);
* `train.resume=true` in a dir whose config.yaml holds another model than this command builds (the refusal
  train() would make when it reads the checkpoint; here before .hydra/ is written).
Not handled: a sweep's job dirs (each job checks its own in train()); a resume of a run that never wrote
config.yaml, another tokenizer or other data, a damaged checkpoint (train() decides, after Hydra wrote .hydra/: a
single run that train() refuses gets its dirs put back as they were, experiments/run/keep_dirs.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from arch import config_diff
from experiments.config.errors import ConfigError
from experiments.config.model_schema import encdec_config, model_config
from experiments.config.schema import RunConfig
from experiments.rundir.layout import RunDir, RunDirError
from experiments.rundir.lock import check_not_in_use


def check_creatable(path: Path) -> None:
    """A path that does not exist yet must be creatable: a temporary dir is made (and removed) in its nearest
    existing parent. RunDirError (one line) otherwise."""
    if path.exists():
        return
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is None or not parent.is_dir():
        raise RunDirError(f"{path} cannot be created: {parent} is not a directory")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".archlab-probe-", dir=parent))
    except OSError as e:
        raise RunDirError(f"{path} cannot be created in {parent}: {e.strerror or e}") from None


def _select(cfg: DictConfig, key: str) -> str | None:
    try:
        value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
    except Exception:  # noqa: BLE001 - an interpolation that needs Hydra's runtime: Hydra resolves it itself
        return None
    return str(value) if value not in (None, "") else None


def check_run_dirs(cfg: DictConfig, *, multirun: bool, resume: bool, overwrite: bool) -> Path | None:
    """The run / sweep dirs of a composed config (hydra node included) can be used; returns a single run's own
    dir (train.run_dir, else hydra.run.dir), None for a sweep. ConfigError naming the key otherwise."""
    keys = ("hydra.sweep.dir", "train.run_dir") if multirun else ("hydra.run.dir", "train.run_dir")
    paths = {key: _select(cfg, key) for key in keys}
    for key, value in paths.items():
        if value is None:
            continue
        path = Path(value).expanduser()
        fresh = not multirun  # a sweep dir (and a sweep's shared train.run_dir) only has to be a usable dir
        try:
            RunDir(path).check_can_start(resume=resume or not fresh, overwrite=overwrite and fresh)
            check_creatable(path)
            if fresh:
                check_not_in_use(path)
        except (RunDirError, ConfigError) as e:
            raise ConfigError(f"{key}: {e}") from None
    if multirun:
        return None
    own = paths["train.run_dir"] or paths["hydra.run.dir"]
    return Path(own).expanduser() if own else None


def check_resume(run_dir: Path, rc: RunConfig) -> None:
    """train.resume=true: the run in `run_dir` (its config.yaml) must be of the model this config builds."""
    try:
        old = RunDir(run_dir).read_config() or {}
    except RunDirError as e:
        raise ConfigError(f"train.resume: {e}") from None
    old_model: dict[str, Any] = old.get("model") or {}
    vocab = old_model.get("vocab_size")
    if not isinstance(vocab, int):
        return  # no config.yaml of a run that built its model: train() decides
    if rc.task.kind == "seq2seq":
        new = encdec_config(rc.model, vocab_size=vocab, pad_id=old_model.get("src_pad_id"))
    else:
        new = model_config(rc.model, vocab_size=vocab)
    diff = config_diff({k: v for k, v in old_model.items() if k != "shape"}, new)
    if diff:
        raise ConfigError(f"train.resume: {run_dir} holds a run of another model (differs in {diff}); resume with "
                          f"the run's original overrides, or start a new run dir")
