"""Group runs by the config keys that differ between them, and name and colour the groups.

`default_group_keys` picks every dotted config key whose value differs between runs, except the per-run noise
in `is_noise_key` (seeds, hydra/logger settings, output paths, run/job names, resume flags). A run without any
config (one that failed before writing config.yaml) does not make every key "differ": keys are compared over the
runs that have a config, and such a run lands in a group labelled `(no config)`.
Not handled here: loading runs (runs.py), statistics (stats.py).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from experiments.compare.runs import Run, RunsError

# Per-run noise never used for default grouping (documented in docs/compare.md).
NOISE_TOP_LEVEL = {"hydra", "logger"}
NOISE_LEAVES = {
    "seed", "run_dir", "output_dir", "out_dir", "save_dir", "log_dir", "checkpoint_dir", "ckpt_dir",
    "work_dir", "job_name", "run_name", "run_id", "wandb_id", "resume", "id", "cache_dir", "resolved_path", "num_threads", "progress",
}
SHAPE_KEYS = {"model.n_layers", "model.d_model", "model.n_heads", "model.d_head", "model.d_mlp"}
MISSING = "—"  # shown where a run's config lacks a key

# Colour-blind-friendly palette (Okabe-Ito, then tab10 extras); group i always gets colour i in every plot.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000", "#F0E442",
           "#8c564b", "#7f7f7f", "#bcbd22", "#17becf"]


def is_noise_key(key: str) -> bool:
    """Per-run noise: `seed`, `*.seed`, `hydra.*`, `logger.*`, output/cache paths, run/job names, resume flags,
    thread counts and progress bars (NOISE_LEAVES)."""
    parts = key.split(".")
    return parts[0] in NOISE_TOP_LEVEL or parts[-1] in NOISE_LEAVES


def _configured(runs: list[Run]) -> list[Run]:
    """The runs that have a config (all of them when none has)."""
    return [r for r in runs if r.flat] or runs


def all_config_keys(runs: list[Run]) -> list[str]:
    """Union of dotted config keys, in order of first appearance."""
    keys: dict[str, None] = {}
    for r in runs:
        keys.update(dict.fromkeys(r.flat))
    return list(keys)


def differing_keys(runs: list[Run], include_noise: bool = False) -> list[str]:
    """Dotted config keys whose value is not the same in every run that has a config (a missing key counts as a
    value)."""
    runs = _configured(runs)
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

    def appearance(self) -> dict[str, Any]:
        """{label, color, index}: how every figure tells the group apart (index picks its dash and marker,
        plots.line_style), the start of each group's figure data."""
        return {"label": self.label, "color": self.color, "index": self.index}


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
    runs = _configured(runs)
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
        if not r.flat and any(x.flat for x in runs):
            values = ("(no config)",) * max(1, len(keys))  # never merged with runs that lack only the keys
        groups.setdefault(values, Group(values=values, runs=[])).runs.append(r)
    shown = label_keys(runs, keys)
    names = {k: short_key(k) for k in shown}
    if len(set(names.values())) < len(names):  # ambiguous short names: use the full dotted keys
        names = {k: k for k in shown}
    out = list(groups.values())
    for i, g in enumerate(out):
        values = dict(zip(keys, g.values))
        parts = [f"{names[k]}={format_value(values[k])}" for k in shown if values[k] != MISSING]
        if not any(r.flat for r in g.runs):
            g.label = "(no config)"
        else:
            g.label = " ".join(parts) if parts else ("all runs" if not keys else "(defaults)")
        g.index = i
        g.color = PALETTE[i % len(PALETTE)]
    return out
