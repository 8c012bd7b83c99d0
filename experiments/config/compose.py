"""Where the Hydra configs live (CONF_DIR, the one place), and conf/train.yaml composed with Hydra's compose API.

CONF_DIR is what `@hydra.main` in experiments/run/train.py, compose_config, experiments.config.precheck, the tests and
the docs use. In a source checkout (and an editable install) it is the repo's `conf/`; a non-editable install
ships the same files as the data package `experiments/conf` (pyproject.toml maps conf/ there), found first.

compose_config: the demo, the benchmarks and the tests build run configs this way: no output dir is made and the
cwd is not changed. Importing this module registers what conf/ needs besides its files: the typed schemas
(experiments.config.schema.register: `run_schema`, `schema/...`) and the `${archlab_dirname:...}` resolver, so
`@hydra.main(config_path=CONF_DIR)` in experiments/run/train.py composes the same config.
Whatever Hydra refuses while composing (a value of the wrong type, a key outside the schema, a missing option)
is raised as one ConfigError naming the key (`train.flops: must be a number > 0 or null, got 'abc'`).
Importing it also installs experiments.config.compose_cache: each composition in the process (this one, Hydra's for
`python -m experiments.train` and for each job of a sweep) merges the defaults once per set of group choices.
Without the hydra node (return_hydra_config=False) the launcher is irrelevant, so an experiment whose defaults name a
launcher plugin (hydra/launcher: joblib_2) composes with Hydra's basic launcher unless the overrides choose one:
composing a finding's config needs no hydra-joblib-launcher.
Not handled: multirun sweeps (`-m`), which need the Hydra entry point `python -m experiments.train`.
"""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from experiments.config import compose_cache
from experiments.config import resolvers  # noqa: F401  (registers ${archlab_dirname:...} on import)
from experiments.config.errors import ConfigError
from experiments.config.rules import omegaconf_error
from experiments.config.schema import register


def conf_dir() -> Path:
    """The config dir: `experiments/conf` inside an installed package, else `<repo>/conf` (source checkout)."""
    package = Path(__file__).resolve().parents[1]  # experiments/
    installed = package / "conf"
    return installed if (installed / "train.yaml").is_file() else package.parent / "conf"


CONF_DIR = conf_dir()


def compose_config(overrides: list[str], *, return_hydra_config: bool = False) -> DictConfig:
    """compose_config(["model/pos=rope", "train.steps=3"]) -> the composed DictConfig of conf/train.yaml."""
    overrides = list(overrides)
    if not return_hydra_config and not any(o.lstrip("+~").startswith("hydra/launcher=") for o in overrides):
        overrides.append("hydra/launcher=basic")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name="train", overrides=overrides, return_hydra_config=return_hydra_config)
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors: each becomes one line
        raise composition_error(e, overrides) from None


def composition_error(e: Exception, overrides: list[str]) -> ConfigError:
    """Hydra's refusal as one ConfigError: OmegaConf's cause names its key (`seed: must be an integer >= 0, got
    'abc'`); otherwise Hydra's first line, after the key of the override it names, if one does."""
    cause: BaseException | None = e
    while cause is not None:
        if getattr(cause, "full_key", None):
            return omegaconf_error(cause)
        cause = cause.__cause__
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    named = next((k for k in keys if f"'{k}'" in first or f"override {k}=" in first), None)
    return ConfigError(f"{named + ': ' if named else ''}{first}")


register()
compose_cache.install()
