"""hydra/launcher=slurm's structured config: hydra-submitit-launcher's submitit_slurm keys and archlab's own
(`pack`: one array task per pack of jobs, experiments/run/pack.py; `max_members`: members per pack at most).

A structured config takes no new keys, so conf/hydra/launcher/slurm.yaml merges `archlab_slurm` (a subclass of the
plugin's SlurmQueueConf) after `submitit_slurm`. The subclass is made once Hydra's plugin scan is over (by
ArchlabSlurmConfRegistration, a SearchPathPlugin, which Hydra calls before composing): the scan executes the
plugin's config module again, which makes a new SlurmQueueConf class, and OmegaConf merges only subclasses of the
class the node already has. Importing this module needs hydra-submitit-launcher (the `slurm` extra).
"""

from __future__ import annotations

from dataclasses import field, make_dataclass
from typing import Any, Optional

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.config_store import ConfigStore
from hydra.plugins.search_path_plugin import SearchPathPlugin

TARGET = "hydra_plugins.archlab_slurm_launcher.slurm_launcher.SlurmLauncher"
_MADE: dict[type, Any] = {}  # SlurmQueueConf class -> its archlab subclass


def register() -> Any:
    """Store hydra/launcher/archlab_slurm on the plugin's current SlurmQueueConf; returns the subclass."""
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    if SlurmQueueConf not in _MADE:
        _MADE[SlurmQueueConf] = make_dataclass("ArchlabSlurmConf", [
            ("_target_", str, field(default=TARGET)),
            ("pack", bool, field(default=False)),
            ("max_members", Optional[int], field(default=16)),
        ], bases=(SlurmQueueConf,))
        ConfigStore.instance().store(group="hydra/launcher", name="archlab_slurm", node=_MADE[SlurmQueueConf],
                                     provider="archlab")
    return _MADE[SlurmQueueConf]


class ArchlabSlurmConfRegistration(SearchPathPlugin):
    """Not a search path: Hydra instantiates every SearchPathPlugin after its plugin scan and before composing."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        register()
