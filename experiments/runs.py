"""Find run dirs, load them into `Run` records, and group runs by the config keys that differ.

A run dir (docs/design.md) holds `config.yaml`, `metrics.jsonl` and `summary.json`; any dir holding
`summary.json` or `metrics.jsonl` counts as a run. Handled: single run dirs, Hydra sweep dirs (searched
recursively), globs, a run still in progress (no `summary.json` yet -> status `running`; a torn last line of
`metrics.jsonl` is skipped), configs only under `.hydra/config.yaml`.
Not handled here: statistics and plots (compare.py, plots.py), wandb runs (wandb_pull.py builds the same records).

Grouping: `default_group_keys` picks every dotted config key whose value differs between runs, except the
per-run noise in `is_noise_key` (seeds, hydra/logger settings, output paths, run/job names, resume flags).
"""

from __future__ import annotations

import difflib
import glob
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from experiments.tracking import flatten_config

RUN_MARKERS = ("summary.json", "metrics.jsonl")
SKIP_DIRS = {".hydra", "checkpoints", "wandb", "report", "__pycache__", ".git"}
STATUSES = ("completed", "diverged", "failed", "running")

# Per-run noise never used for default grouping (documented in docs/compare.md).
NOISE_TOP_LEVEL = {"hydra", "logger"}
NOISE_LEAVES = {
    "seed", "run_dir", "output_dir", "out_dir", "save_dir", "log_dir", "checkpoint_dir", "ckpt_dir",
    "work_dir", "job_name", "run_name", "run_id", "wandb_id", "resume", "id", "cache_dir", "resolved_path", "num_threads", "progress",
}
SHAPE_KEYS = {"model.n_layers", "model.d_model", "model.n_heads", "model.d_head", "model.d_mlp"}
MISSING = "—"  # shown where a run's config lacks a key


class RunsError(ValueError):
    """Bad input (missing path, no runs, unknown key); the CLI prints it as one line and exits 2."""


@dataclass
class Run:
    """One run: its config (nested), its summary, and its metric lines (oldest first)."""

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
        status = self.summary.get("status") or "running"  # no summary yet: still running or killed early
        return status if status in STATUSES else str(status)

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


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> dotted keys. Example: {"model": {"pos": {"kind": "rope"}}} -> {"model.pos.kind": "rope"}"""
    # lists become tuples: hashable, so they can be group keys
    return {k: tuple(v) if isinstance(v, list) else v for k, v in flatten_config(d, prefix=prefix.rstrip(".")).items()}


def is_noise_key(key: str) -> bool:
    """Per-run noise: `seed`, `*.seed`, `hydra.*`, `logger.*`, output/cache paths, run/job names, resume flags,
    thread counts and progress bars (NOISE_LEAVES)."""
    parts = key.split(".")
    return parts[0] in NOISE_TOP_LEVEL or parts[-1] in NOISE_LEAVES


def _natural_key(p: Path) -> list[Any]:
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
            if any((m / f).is_file() for f in RUN_MARKERS):
                found.add(m.resolve())
                continue
            for root, dirs, files in os.walk(m):
                dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
                if any(f in files for f in RUN_MARKERS):
                    found.add(Path(root).resolve())
                    dirs[:] = []  # a run dir's subdirs are not runs
    return sorted(found, key=_natural_key)


def _read_config(path: Path) -> dict[str, Any]:
    for candidate in (path / "config.yaml", path / ".hydra" / "config.yaml"):
        if candidate.is_file():
            try:
                data = yaml.safe_load(candidate.read_text())
            except yaml.YAMLError as e:
                raise RunsError(f"cannot parse {candidate}: {str(e).splitlines()[0]}") from None
            if candidate.parent.name == ".hydra":
                data = _resolve_hydra_config(candidate, data)
            return data if isinstance(data, dict) else {}
    return {}


def _resolve_hydra_config(path: Path, data: Any) -> Any:
    """`.hydra/config.yaml` keeps ${...} interpolations; resolve them when OmegaConf can."""
    try:
        from omegaconf import OmegaConf

        return OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception:  # noqa: BLE001 - unresolvable (e.g. ${hydra:...} outside Hydra): keep the raw values
        return data


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    f = path / "metrics.jsonl"
    if not f.is_file():
        return []
    lines = []
    for raw in f.read_text().splitlines():
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            continue  # a torn line from a run still writing, or killed mid-write
        if isinstance(obj, dict):
            lines.append(obj)
    return lines


def load_run(path: str | os.PathLike) -> Run:
    """Load one run dir. Example: load_run("multirun/pos_encodings/2026-01-01_00-00-00/0").status -> "completed"."""
    path = Path(path)
    summary: dict[str, Any] = {}
    if (path / "summary.json").is_file():
        try:
            summary = json.loads((path / "summary.json").read_text())
        except json.JSONDecodeError:
            summary = {}
    return Run(path=path, config=_read_config(path), summary=summary, metrics=_read_metrics(path))


def load_runs(paths: Iterable[str | os.PathLike]) -> list[Run]:
    """discover_runs + load_run; raises RunsError when nothing is found."""
    paths = list(paths)
    dirs = discover_runs(paths)
    if not dirs:
        raise RunsError(f"no runs found under {' '.join(map(str, paths))} (looked for dirs with summary.json or metrics.jsonl)")
    return [load_run(d) for d in dirs]


def check_single_experiment(runs: list[Run]) -> None:
    """Raise when runs come from different experiments (summary `experiment` / config `experiment_name`)."""
    names = sorted({str(r.experiment) for r in runs if r.experiment is not None})
    if len(names) > 1:
        raise RunsError(f"runs come from different experiments ({', '.join(names)}); pass --allow-mixed to compare them anyway")


def all_config_keys(runs: list[Run]) -> list[str]:
    """Union of dotted config keys, in order of first appearance."""
    keys: dict[str, None] = {}
    for r in runs:
        keys.update(dict.fromkeys(r.flat))
    return list(keys)


def differing_keys(runs: list[Run], include_noise: bool = False) -> list[str]:
    """Dotted config keys whose value is not the same in every run (a missing key counts as a value)."""
    out = []
    for k in all_config_keys(runs):
        values = {_hashable(r.flat.get(k, MISSING)) for r in runs}
        if len(values) > 1 and (include_noise or not is_noise_key(k)):
            out.append(k)
    return out


def default_group_keys(runs: list[Run]) -> list[str]:
    """Every config key that differs between runs, minus per-run noise (see is_noise_key)."""
    return differing_keys(runs)


def check_keys(runs: list[Run], keys: list[str]) -> None:
    """Raise for a --by key that no run's config has, naming close matches."""
    known = all_config_keys(runs)
    for k in keys:
        if k in known:
            continue
        close = [c for c in known if c.endswith("." + k)] + difflib.get_close_matches(k, known, n=5, cutoff=0.6)
        close = list(dict.fromkeys(close))[:5]
        hint = f"; close matches: {', '.join(close)}" if close else "; see config.yaml of any run for the keys"
        raise RunsError(f"--by key {k!r} is not in the run configs{hint}")


def _hashable(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


@dataclass
class Group:
    """Runs sharing the values of the group keys."""

    values: tuple[Any, ...]
    runs: list[Run]
    label: str = ""
    color: str = "#1f77b4"
    index: int = 0

    def by_status(self, *statuses: str) -> list[Run]:
        return [r for r in self.runs if r.status in statuses]


# Colour-blind-friendly palette (Okabe-Ito, then tab10 extras); group i always gets colour i in every plot.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442",
           "#8c564b", "#7f7f7f", "#bcbd22", "#17becf"]


def short_key(key: str) -> str:
    """Display name of a dotted key: the last part, or its parent for generic leaves (model.pos.kind -> pos)."""
    parts = key.split(".")
    if len(parts) > 1 and parts[-1] in {"kind", "name", "type", "_name_"}:
        return parts[-2]
    return parts[-1]


def label_keys(runs: list[Run], keys: list[str], max_keys: int = 4) -> list[str]:
    """The keys worth showing in a legend label: a minimal subset that already separates the groups, then
    (up to `max_keys`) the other keys every run has. Keys missing in some runs come last in the minimal pass,
    so model.pos.kind wins over model.pos.num_buckets."""
    if not keys:
        return []
    missing = {k: sum(k not in r.flat for r in runs) for k in keys}
    order = sorted(keys, key=lambda k: (missing[k], keys.index(k)))
    target = len({tuple(_hashable(r.flat.get(k, MISSING)) for k in keys) for r in runs})
    chosen: list[str] = []
    parts = 1
    for k in order:
        n = len({tuple(_hashable(r.flat.get(c, MISSING)) for c in chosen + [k]) for r in runs})
        if n > parts:
            chosen.append(k)
            parts = n
        if parts == target:
            break
    for k in keys:
        if len(chosen) >= max_keys:
            break
        if k not in chosen and missing[k] == 0:
            chosen.append(k)
    # config order, but the architecture choices before the n_layers × d_model shape
    return sorted((k for k in keys if k in chosen), key=lambda k: (k in SHAPE_KEYS, keys.index(k)))


def format_value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    return str(v)


def group_runs(runs: list[Run], keys: list[str]) -> list[Group]:
    """Partition runs by their values of `keys`; groups keep the order of their first run."""
    groups: dict[tuple[Any, ...], Group] = {}
    for r in runs:
        values = tuple(_hashable(r.flat.get(k, MISSING)) for k in keys)
        groups.setdefault(values, Group(values=values, runs=[])).runs.append(r)
    shown = label_keys(runs, keys)
    names = {k: short_key(k) for k in shown}
    if len(set(names.values())) < len(names):  # ambiguous short names: use the full dotted keys
        names = {k: k for k in shown}
    out = list(groups.values())
    for i, g in enumerate(out):
        values = dict(zip(keys, g.values))
        parts = [f"{names[k]}={format_value(values[k])}" for k in shown if values[k] != MISSING]
        g.label = " ".join(parts) if parts else ("all runs" if not keys else "(defaults)")
        g.index = i
        g.color = PALETTE[i % len(PALETTE)]
    return out
