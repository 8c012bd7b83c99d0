"""Find run dirs and read them into `Run` records (the report's input): read_run / read_runs.

A run dir's layout, file formats, statuses and readers belong to experiments/rundir/layout.py; this module only finds
run dirs (any dir holding one of `rundir.RUN_MARKERS`: `summary.json` or `metrics.jsonl`) and wraps what
`RunDir` reads. Handled: single run dirs, Hydra sweep dirs (searched recursively), globs, a run still in
progress (no `summary.json` yet -> status `running`; a torn last line of `metrics.jsonl` is skipped), a garbage
`summary.json` (read as no summary), configs only under `.hydra/config.yaml`, runs without any config (a run
that failed before writing one). A failed run's reason is its summary's `error`.
Not handled here: grouping (grouping.py), statistics (stats.py), wandb runs (wandb_pull.py builds the same records).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from experiments.rundir.layout import RUN_MARKERS, RunDir, RunDirError, RunStatus
from experiments.rundir.tracking import flatten_config

# Never searched for runs: a run dir's own subdirs and the report's output.
SKIP_DIRS = {".hydra", "checkpoints", "wandb", "report", "__pycache__", ".git"}
# Statuses whose runs never enter a group's means (they are listed with their reason instead).
EXCLUDED_STATUSES = tuple(s for s in RunStatus if s.ended_early)  # diverged, interrupted, failed


class RunsError(ValueError):
    """Bad input (missing path, no runs, unknown key, unusable --out); the CLI prints it as one line and exits 2."""


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> dotted keys. Example: {"model": {"pos": {"kind": "rope"}}} -> {"model.pos.kind": "rope"}"""
    # lists become tuples: hashable, so they can be group keys
    return {k: tuple(v) if isinstance(v, list) else v for k, v in flatten_config(d, prefix=prefix.rstrip(".")).items()}


@dataclass
class Run:
    """One run: its config (nested; {} when the run wrote none), its summary, and its metric lines (oldest first)."""

    path: Path | None
    config: dict[str, Any]
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    name: str = ""
    source: str = "local"  # "local" or "wandb"
    flat: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.flat = flatten(self.config)
        if not self.name:
            self.name = str(self.summary.get("run_name") or (self.path.name if self.path else "run"))

    @property
    def status(self) -> str:
        """One of rundir's RunStatus values (`running` when there is no summary yet: still running or killed
        early); an unknown status string is kept as is."""
        return str(self.summary.get("status") or RunStatus.RUNNING)

    @property
    def reason(self) -> str:
        """Why a run is not completed, one line: the summary's `error` (failed / interrupted runs), else what the
        summary says (diverged at step N, no summary yet); "" for a completed run."""
        error = self.summary.get("error")
        if error:
            return " ".join(str(error).split())
        status = self.status
        if status == RunStatus.DIVERGED:
            at = self.summary.get("diverged_at_step")
            return f"non-finite loss or grad norm at step {at}" if at is not None else "non-finite loss or grad norm"
        if status == RunStatus.INTERRUPTED:
            steps = self.summary.get("steps")
            return f"stopped at step {steps}" if steps is not None else "stopped before the end"
        if status == RunStatus.RUNNING and not self.summary:
            return "no summary.json yet (still running, or killed)"
        return ""

    @property
    def experiment(self) -> str | None:
        return self.summary.get("experiment") or self.config.get("experiment_name")

    @property
    def seed(self) -> Any:
        return self.summary.get("seed", self.config.get("seed"))

    def metric_keys(self) -> set[str]:
        keys: set[str] = set()
        for line in self.metrics:
            keys.update(k for k, v in line.items() if v is not None)
        return keys


def natural_key(p: Path) -> list[Any]:
    """Sort key that puts job 10 after job 9. Example: sorted(["10", "9"], key=...) -> ["9", "10"]"""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]


def discover_runs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Run dirs under `paths` (run dirs, sweep dirs searched recursively, or globs), naturally sorted."""
    found: set[Path] = set()
    for raw in paths:
        raw = str(raw)
        if any(c in raw for c in "*?["):
            matches = [Path(m) for m in glob.glob(raw, recursive=True)]
            if not matches:
                raise RunsError(f"no path matches {raw!r}")
        else:
            if not Path(raw).exists():
                raise RunsError(f"path not found: {raw}")
            matches = [Path(raw)]
        for m in matches:
            if m.is_file():  # e.g. a glob hitting .../summary.json
                m = m.parent
            if RunDir(m).is_run():
                found.add(m.resolve())
                continue
            for root, dirs, files in os.walk(m):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                if any(f in files for f in RUN_MARKERS):
                    found.add(Path(root).resolve())
                    dirs[:] = []  # a run dir's subdirs are not runs
    return sorted(found, key=natural_key)


def read_run(path: str | os.PathLike) -> Run:
    """One run dir's files as a Run record (the model is experiments.load_run's). Example:
    read_run("multirun/pos_encodings/2026-01-01_00-00-00/0").status -> "completed"."""
    rd = RunDir(path)
    try:
        config = rd.read_config()
    except RunDirError as e:
        raise RunsError(str(e)) from None
    return Run(path=rd.path, config=config or {}, summary=rd.read_summary() or {}, metrics=rd.read_metrics())


def read_runs(paths: Iterable[str | os.PathLike]) -> list[Run]:
    """discover_runs + read_run; raises RunsError when nothing is found."""
    paths = list(paths)
    dirs = discover_runs(paths)
    if not dirs:
        raise RunsError(f"no runs found under {' '.join(map(str, paths))} "
                        f"(looked for dirs with {' or '.join(RUN_MARKERS)})")
    return [read_run(d) for d in dirs]


def check_single_experiment(runs: list[Run]) -> None:
    """Raise when runs come from different experiments (summary `experiment` / config `experiment_name`)."""
    names = sorted({str(r.experiment) for r in runs if r.experiment is not None})
    if len(names) > 1:
        raise RunsError(f"runs come from different experiments ({', '.join(names)}); pass --allow-mixed to compare them anyway")
