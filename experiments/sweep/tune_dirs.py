"""Where Hydra's launchers will put each job of a tuned sweep, without composing every job's config twice.

    dirs = JobDirs(compose)                       # compose(overrides) -> the job's DictConfig, hydra node included
    arm_cfg = dirs.arm(["model/pos=rope", "train.steps=8"])           # composed once per arm (the sweeper's plan)
    dirs.job_dir(arm_lines, ["model/pos=rope", "optim.lr=0.01", "seed=1000", "train.steps=2"], idx=7)

A launcher composes each job (ConfigLoader.load_sweep_config: the master's hydra overrides + the job's) and runs it
in hydra.sweep.dir / hydra.sweep.subdir, resolved with hydra.job.num = hydra.job.id = the job's number and
hydra.job.override_dirname = the job's non-hydra overrides (Hydra's get_overrides_dirname). The tuned sweeper needs
every dir before it launches (a resume skips the jobs with a result), and a composition costs about as much as a
small job's training (~0.2 s on a CPU), so the dirs are not found by composing each job a second time:
a job differs from its arm's config only by value overrides (the tuned key, `seed`, a tuning horizon), which Hydra
applies after merging the defaults; they are applied the same way (Hydra's own _apply_overrides_to_config) to a copy
of the arm's composed config, override_dirname is set as Hydra sets it, and the templates are resolved there.
The job is composed instead, as the launcher will, when that could differ: a changed key that is a config group or
a hydra key, dir templates that read a hydra key other than hydra.job.{num,id,override_dirname} (e.g.
hydra.overrides.task), an arm not composed here, or any error on the way.
Not handled: a launcher that names dirs its own way (every Hydra launcher, ours included, uses these two keys).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Callable, Sequence

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

DIR_KEYS = ("hydra.sweep.dir", "hydra.sweep.subdir")
JOB_KEYS = {"hydra.job.num", "hydra.job.id", "hydra.job.override_dirname"}  # what a launcher sets per job


class JobDirs:
    """The dirs of a tuned sweep's jobs (module docstring); `compose(overrides)` composes one job as launchers do."""

    def __init__(self, compose: Callable[[list[str]], DictConfig]) -> None:
        self._compose = compose
        self._arms: dict[tuple[str, ...], DictConfig] = {}
        self._parser = OverridesParser.create()

    def arm(self, overrides: Sequence[str]) -> DictConfig:
        """The arm's composed config (hydra node included), composed once; do not modify it."""
        key = tuple(overrides)
        if key not in self._arms:
            self._arms[key] = self._compose(list(overrides))
        return self._arms[key]

    def job_dir(self, arm: Sequence[str], overrides: Sequence[str], idx: int) -> Path:
        """The dir a launcher gives job `idx` with `overrides`, a job of the arm composed from `arm` (arm())."""
        cfg = self._from_arm(arm, overrides)
        if cfg is None:
            cfg = self._compose(list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
        return Path(str(OmegaConf.select(cfg, DIR_KEYS[0]))) / str(OmegaConf.select(cfg, DIR_KEYS[1]))

    def _from_arm(self, arm: Sequence[str], overrides: Sequence[str]) -> DictConfig | None:
        """A copy of the arm's config made into the job's, or None where only composing the job is sure."""
        base = self._arms.get(tuple(arm))
        if base is None:
            return None
        try:
            parsed, arm_lines, job_lines = self._parser.parse_overrides(list(overrides)), set(arm), set(overrides)
            changed = [o for line, o in zip(overrides, parsed) if line not in arm_lines]
            gone = {o.key_or_group for o in self._parser.parse_overrides([o for o in arm if o not in job_lines])}
            keys, groups = {o.key_or_group for o in changed}, set(base.hydra.runtime.choices.keys())
            if not gone <= keys or any(k.startswith("hydra") or k in groups or "/" in k for k in keys):
                return None  # an arm line dropped (its default comes back), or a group or hydra key changed
            templates = " ".join(str(OmegaConf.to_container(base.hydra.sweep, resolve=False)[k.rsplit(".", 1)[1]])
                                 for k in DIR_KEYS)
            if set(re.findall(r"hydra\.[\w.]+", templates)) - JOB_KEYS:
                return None
            cfg = copy.deepcopy(base)
            ConfigLoaderImpl._apply_overrides_to_config(changed, cfg)
            od = cfg.hydra.job.config.override_dirname
            task = [o for o in parsed if not o.is_hydra_override()]
            with open_dict(cfg):
                cfg.hydra.job.override_dirname = get_overrides_dirname(
                    overrides=task, exclude_keys=list(od.exclude_keys), item_sep=od.item_sep, kv_sep=od.kv_sep)
            return cfg
        except Exception:  # noqa: BLE001 - anything unexpected: compose the job, as the launcher will
            return None
