"""Hydra's composition of a run config, done in full once per set of config-group choices in a process.

    install()          # experiments.config.compose does it on import: every composition below goes through it
    with uncached():   # Hydra's own composition, every time (the reference tests/experiments/test_compose_cache.py
        ...            # compares against)

Every composition of a run config (compose_config, `python -m experiments.train`'s own, each job of a sweep: Hydra's
launchers and sweepers compose each job, the basic sweeper twice) is ConfigLoaderImpl.load_configuration. It costs
~0.15 s on a CPU, about as much as a tiny model's training, and most of it goes to merging the defaults, which only
the group overrides (`model=tiny`, `model/pos=rope`, `experiment=X`, `hydra/launcher=joblib`) choose. The value
overrides (`seed=3`, `train.steps=8`, `+data.extra_eval.x=...`, `~train.flops`, `hydra.sweep.dir=...`) Hydra
applies after that merge, with ConfigLoaderImpl._apply_overrides_to_config; a group override is an override whose
key is a config group in the loader's repository and whose value is not a dict (Hydra's defaults_list.Overrides).

So the config of the group overrides alone is composed by Hydra and kept (keyed by the config name, the group
overrides in order, the loader's config sources, and what Hydra records from its state: the cwd, the version_base;
the job's name, which Hydra gives a config that names none, is set at each use), and each composition with the same
group overrides is a copy of it with the value overrides applied by the same Hydra function, then the hydra node's
records of the overrides written as Hydra writes them (hydra.overrides.task / .hydra in the command line's order,
hydra.job.override_dirname). A copy and the overrides take a few ms.
Composed in full instead (Hydra's path, unchanged): a multirun master config, a sweep value (`seed=1,2`), overrides
Hydra's grammar refuses, a value override of hydra.searchpath or hydra.job.env_copy (Hydra reads them while
composing), and any error of the group overrides' composition (Hydra's own error then names the user's overrides).
Errors of the value overrides are Hydra's: the same function raises them, wrapped as load_configuration wraps them.
Hydra's get_mode (each command, before it runs: is this a run or a multirun?) composes the whole config once more,
in MULTIRUN mode with missing defaults skipped, only to read hydra.mode. Without a sweep value the RUN composition,
through this cache, holds the same hydra.mode: the two modes differ only in refusing a missing default (`???`) and
a sweep value, so where the RUN composition fails (or a value sweeps) Hydra's own get_mode answers.
Not handled: a cache across processes (each `python -m experiments.train` composes its group choices once); a YAML
file or a ConfigStore entry changed after a process composed it (the cache keeps the first composition).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections import OrderedDict
from typing import Any, Iterator

from hydra import version
from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra._internal.hydra import Hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobRuntime
from hydra.errors import ConfigCompositionException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

CACHED = 32  # compositions kept (least recently used dropped): a process uses a handful of group choices
_BY_GROUPS: OrderedDict[tuple, tuple[DictConfig, bool]] = OrderedDict()  # key -> (config, its job name is Hydra's)
UNNAMED = "<compose_cache: the job's name at each use>"
_HYDRAS = ConfigLoaderImpl.load_configuration  # Hydra's own
_HYDRAS_MODE = Hydra.get_mode
_state = {"enabled": True}
UNCACHED_KEYS = ("hydra.searchpath", "hydra.job.env_copy")


def install() -> None:
    """Route ConfigLoaderImpl.load_configuration and Hydra.get_mode through the cache (idempotent)."""
    ConfigLoaderImpl.load_configuration = _load_configuration
    Hydra.get_mode = _get_mode


@contextlib.contextmanager
def uncached() -> Iterator[None]:
    """Hydra's own composition (and get_mode) for every load inside the block."""
    before = _state["enabled"]
    _state["enabled"] = False
    try:
        yield
    finally:
        _state["enabled"] = before


def _load_configuration(self: ConfigLoaderImpl, config_name: str | None, overrides: list[str], run_mode: RunMode,
                        from_shell: bool = True, validate_sweep_overrides: bool = True) -> DictConfig:
    def hydras(lines: list[str]) -> DictConfig:
        return _HYDRAS(self, config_name, lines, run_mode, from_shell, validate_sweep_overrides)

    split = _split(self, overrides) if _state["enabled"] and run_mode == RunMode.RUN else None
    if split is None:
        return hydras(overrides)
    parsed, groups, values = split
    key = (config_name, tuple(groups), os.getcwd(), str(version.getbase()),
           tuple((s.provider, s.path) for s in self.get_sources()))
    cached = _BY_GROUPS.get(key)
    if cached is None:
        runtime = JobRuntime().get("name")
        JobRuntime().set("name", UNNAMED)  # the job's name Hydra gives a config that names none: set per use
        try:
            base = hydras(groups)
        except Exception:  # noqa: BLE001 - the full composition raises it with the user's overrides
            return hydras(overrides)
        finally:
            JobRuntime().set("name", runtime)
        if base.hydra.job.env_copy:
            return hydras(overrides)  # env_set is read from the environment at composition
        cached = _BY_GROUPS[key] = (base, base.hydra.job.name == UNNAMED)
        while len(_BY_GROUPS) > CACHED:
            _BY_GROUPS.popitem(last=False)
    _BY_GROUPS.move_to_end(key)
    base, unnamed = cached
    try:  # as load_configuration wraps what _load_configuration_impl raises
        return _with_values(base, parsed, values, JobRuntime().get("name") if unnamed else None)
    except OmegaConfBaseException as e:
        raise ConfigCompositionException().with_traceback(sys.exc_info()[2]) from e


def _get_mode(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
    """Hydra.get_mode's answer (hydra.mode: RUN, MULTIRUN or None) from the RUN composition (module docstring)."""
    if _state["enabled"]:
        try:
            if not any(o.is_sweep_override() for o in OverridesParser.create().parse_overrides(list(overrides))):
                return self.compose_config(config_name=config_name, overrides=list(overrides), run_mode=RunMode.RUN,
                                           with_log_configuration=False).hydra.mode
        except Exception:  # noqa: BLE001 - Hydra's own get_mode decides (it answers None for a config it cannot compose)
            pass
    return _HYDRAS_MODE(self, config_name, overrides)


def _split(loader: ConfigLoaderImpl, overrides: list[str]) -> tuple[list[Any], list[str], list[Any]] | None:
    """(every override parsed, the group overrides' lines, the value overrides parsed), or None where only the full
    composition is sure."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - Hydra's grammar refuses it: its own composition says how
        return None
    if any(o.is_sweep_override() or o.key_or_group.startswith(UNCACHED_KEYS) for o in parsed):
        return None
    repo = loader.repository
    is_group = [not isinstance(o.value(), dict) and repo.group_exists(o.key_or_group) for o in parsed]
    groups = [o.input_line for o, g in zip(parsed, is_group) if g]
    return parsed, groups, [o for o, g in zip(parsed, is_group) if not g]


def _with_values(base: DictConfig, parsed: list[Any], values: list[Any], name: str | None) -> DictConfig:
    """A copy of `base` (the group overrides' config) made into the config of every override in `parsed`: the
    `values` (its value overrides) applied, the records of `parsed` written; `name`: the job's name Hydra gives now
    (None: the config's own)."""
    cfg = copy.deepcopy(base)
    OmegaConf.clear_cache(cfg)
    if name is not None:
        cfg.hydra.job.name = name
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)
    task = [o for o in parsed if not o.is_hydra_override()]
    od = cfg.hydra.job.config.override_dirname
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.overrides.task = [o.input_line for o in task]
        cfg.hydra.overrides.hydra = [o.input_line for o in parsed if o.is_hydra_override()]
        cfg.hydra.job.override_dirname = get_overrides_dirname(overrides=task, kv_sep=od.kv_sep,
                                                               item_sep=od.item_sep, exclude_keys=od.exclude_keys)
    return cfg
