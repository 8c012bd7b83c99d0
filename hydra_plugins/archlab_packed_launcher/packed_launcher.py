"""PackedLauncher: the jobs of a sweep that share a model shape train as one stacked model in one process.

Hydra imports every module under `hydra_plugins` at startup, so this one stays thin: it keeps its parameters and
hands each batch of jobs to experiments.sweep.packed_launch.launch_packed.
"""

from __future__ import annotations

from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class PackedLauncher(Launcher):
    """hydra.launcher: max_members (members per pack at most; null: no limit)."""

    def __init__(self, max_members: Any = None, **unknown: Any) -> None:
        self.max_members = max_members
        self.unknown = sorted(unknown)  # refused in one line by launch_packed, not as a TypeError
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.config: DictConfig | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context, self.task_function, self.config = hydra_context, task_function, config

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from experiments.sweep.packed_launch import launch_packed  # lazy: Hydra imports this module at every start

        assert self.hydra_context is not None and self.task_function is not None and self.config is not None
        return launch_packed(self, job_overrides, initial_job_idx)
