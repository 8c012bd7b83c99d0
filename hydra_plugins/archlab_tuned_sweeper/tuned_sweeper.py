"""TunedSweeper: the Hydra Sweeper that hands a tuned sweep to experiments.sweep.tune.TunedSweep.

Hydra imports every module under `hydra_plugins` at startup (single runs too), so this module stays thin and
cheap: it keeps the declaration, builds the launcher as Hydra's basic sweeper does, and delegates `sweep`.
"""

from __future__ import annotations

from typing import Any, Sequence

from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from experiments.sweep.tune import TunedSweep


def _plain(value: Any) -> Any:
    """An OmegaConf node as plain Python (the declaration is checked on lists, dicts and numbers)."""
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


class TunedSweeper(Sweeper):
    """hydra.sweeper: params (the arms), tune, tune_seeds, seeds, tune_fraction, widen, proxy, confirm, confirm_widen
    (docs/tuning.md)."""

    def __init__(self, params: Any = None, tune: Any = None, tune_seeds: Any = None, seeds: Any = None,
                 tune_fraction: Any = None, widen: Any = None, proxy: Any = None, confirm: Any = None,
                 confirm_widen: Any = None, **unknown: Any) -> None:
        super().__init__()
        self.declared = {"params": _plain(params), "tune": _plain(tune), "tune_seeds": _plain(tune_seeds),
                         "seeds": _plain(seeds), "tune_fraction": tune_fraction, "widen": widen,
                         "proxy": _plain(proxy), "confirm": confirm, "confirm_widen": confirm_widen,
                         "unknown": sorted(unknown)}  # refused in one line by TunedSweep.run, not as a TypeError
        self.hydra_context: HydraContext | None = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        assert self.config is not None and self.hydra_context is not None
        return TunedSweep(self.declared, self.config, self.hydra_context.config_loader, self.launcher).run(arguments)
