"""The tuned sweeper's declaration in the up-front check of `python -m experiments.train -m` (and of `python -m
experiments.findings`, which runs the same check): before Hydra starts, nothing written.

    check_sweeper_overrides(point, overrides, check)   # before the config is composed: hydra.sweeper.* overrides
    check_tuned(cfg, overrides, check)                 # after: the declaration, what it sets per run, its plan
    # point: the sweep's first point as override lines; overrides: the parsed command line; cfg: the composed config
    # (hydra node included); check(override): the check each command-line override gets (experiments.config.precheck)

When the composed `hydra.sweeper` is the tuned sweeper (tune_spec.TARGET):
1. each `hydra.sweeper.*` override of the command line, before Hydra merges it into the declaration (where a typo is
   "Key 'optim.lrr' is not in struct"): a key the sweeper does not take (`hydra.sweeper.tune_seed` -> did you mean
   tune_seeds?), and a `tune` that names another key than the declared one (an experiment's `{optim.lr: [...]}`
   takes a new grid from the command line, not a new key): `optim.lrr` -> did you mean optim.lr?;
2. the declaration, read by tune_spec.declare, the function the sweeper itself runs when it starts: everything it
   refuses (a widen of -1, a grid of 3 points, a seed in both lists, ...) is refused here first;
3. each key and value the sweeper sets on its runs that the command line does not show (the tuned key at every grid
   point, the params' and the proxy's values), checked by `check` as if it were on the command line and named by
   where it is declared: `hydra.sweeper.tune: optim.lrr: unknown key; did you mean optim.lr?`;
4. when the sweep dir holds a tuned sweep already (tuning.json), the sweeper's own plan (TunedSweep.plan, from the
   config Hydra's multirun starts from: each arm composed as its jobs will be): without train.resume=true it is
   refused, and a resume whose sweep differs in anything that defines it (`train.steps` 8 after 4, the model, the
   data, the grid, the seeds: tuning_record.TuningRecord.difference) is refused in one line naming the difference,
   before Hydra prints anything.
Each refusal is a ConfigError (one line). Costs nothing more for a new sweep (one composition more when the
command line sets hydra.sweeper.* keys); a sweep dir holding a tuned sweep costs one composition plus one per arm.
Not handled here: values that only a composed job config refuses (each job records its own failure, as in any
sweep).
"""

from __future__ import annotations

from typing import Any, Callable

from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments.config.argv import config_loader, parse_overrides
from experiments.config.compose import composition_error, compose_config
from experiments.config.errors import ConfigError
from experiments.sweep.tune import TunedSweep
from experiments.sweep.tune_spec import KEYS, TARGET, TuneError, declare, declared_of, unknown_key
from experiments.sweep.tuning_record import TuningRecord

PREFIX = "hydra.sweeper."


def check_sweeper_overrides(point: list[str], overrides: list[Any], check: Callable[[Any], None]) -> None:
    """Step 1 (module docstring), before the config is composed with them: each `hydra.sweeper.*` override against
    the tuned sweeper's declaration it would be merged into. Composes the config once, only when there are any."""
    own = [o for o in overrides if o.key_or_group.startswith(PREFIX)]
    if not own:
        return
    declared = _sweeper(compose_config([p for p in point if p and not _key(p).startswith(PREFIX)],
                                       return_hydra_config=True))
    if declared is None:
        return
    tune = declared.get("tune")
    for o in own:
        tune = _check_own(o, tune, check)


def check_tuned(cfg: DictConfig, overrides: list[Any], check: Callable[[Any], None]) -> None:
    """Steps 2 to 4 (module docstring) when `cfg` (composed, hydra node included) holds the tuned sweeper: the
    declaration, each key and value it sets per run, and, when the sweep dir holds a tuned sweep already, the
    sweeper's own plan of the sweep from the config Hydra's multirun starts from. ConfigError (one line)."""
    node = _sweeper(cfg)
    if node is None:
        return
    loader = config_loader()
    arguments = [o.input_line for o in overrides if not o.key_or_group.startswith("hydra")]  # Hydra's task overrides
    for where, line in declare(declared_of(node), arguments, loader).set_per_run():
        _named(where, line, check)
    if not TuningRecord.path(str(OmegaConf.select(cfg, "hydra.sweep.dir"))).is_file():
        return  # a new sweep: the sweeper composes its arms as it starts, before any run
    lines = [o.input_line for o in overrides]
    try:
        master = loader.load_configuration(config_name="train", overrides=lines, run_mode=RunMode.MULTIRUN)
    except Exception as e:  # noqa: BLE001 - what Hydra's composition refuses, as one line naming the key
        raise composition_error(e, lines) from None
    TunedSweep(declared_of(_sweeper(master) or {}), master, loader, launcher=None).plan(arguments)


def _sweeper(cfg: Any) -> dict[str, Any] | None:
    """hydra.sweeper of a composed config as plain Python when it is the tuned sweeper, else None."""
    if OmegaConf.select(cfg, "hydra.sweeper._target_", default=None) != TARGET:
        return None
    try:
        return OmegaConf.to_container(cfg.hydra.sweeper, resolve=True)
    except Exception as e:  # noqa: BLE001 - an interpolation in the declaration that does not resolve
        raise ConfigError(f"hydra.sweeper: {str(e).splitlines()[0]}") from None


def _check_own(o: Any, tune: Any, check: Callable[[Any], None]) -> Any:
    """A `hydra.sweeper.<key>` override against the declaration it is merged into (`tune`: the tune node so far);
    returns the tune node after it (Hydra merges a mapping into a mapping, so a new key would be refused there)."""
    path = o.key_or_group[len(PREFIX):]
    first = path.split(".", 1)[0]
    if first not in KEYS:
        raise TuneError(unknown_key(first))
    value = None if o.is_sweep_override() or o.is_delete() else o.value()
    if path != "tune":
        return tune
    if not isinstance(tune, dict) or not isinstance(value, dict):
        return value
    for key, grid in value.items():
        if key in tune:
            continue
        values = grid if isinstance(grid, list) else [grid]
        _named("hydra.sweeper.tune", f"{key}={','.join(map(str, values)) or 1}", check)  # did you mean ...?
        raise TuneError(f"hydra.sweeper.tune: this sweep tunes {', '.join(tune)}; the command line may give it "
                        f"another grid ({{{next(iter(tune))}: [...]}}), not another key ({key}): declare that in "
                        f"another experiment or on the command line with hydra/sweeper=tuned")
    return {**tune, **value}


def _named(where: str, line: str, check: Callable[[Any], None]) -> None:
    """check(the override `line`), its refusal named by `where` it is declared."""
    try:
        (override,) = parse_overrides([line])
        check(override)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def _key(line: str) -> str:
    return line.split("=", 1)[0].lstrip("+~")
