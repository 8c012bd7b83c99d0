"""The report's numbers: metric series, interpolation onto a common grid, mean ± std bands, per-group and per-run
tables, EMA smoothing, which training budget the runs share.

Statistics are mean ± sample std (ddof=1) over the runs `stat_runs` picks: the completed runs of a group (its
running ones when none has completed). Diverged, interrupted and failed runs (runs.EXCLUDED_STATUSES) are never
averaged in: they are counted (`count_label`) and listed with their reason (`run_rows`). Curves are linearly
interpolated onto a common x grid, without extrapolating past a run's last point; `ema` smooths a curve the way
wandb's default (TWEMA) does. Group-vs-baseline tests are significance.py / comparison.py.
Not handled here: figures (figures.py, plots.py), writing files (report.py).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.compare.grouping import MISSING, Group, differing_keys, format_value, is_noise_key
from experiments.compare.runs import Run
from experiments.rundir.layout import RunStatus
from experiments.rundir.tracking import flatten_config

GRID_POINTS = 200
EXTRAP_RE = re.compile(r"extrap/(?P<mode>[a-z]+)/loss@(?P<k>\d+(?:\.\d+)?)x$")
# summary.json keys to fall back on when metrics.jsonl lacks a metric: (final, best)
SUMMARY_FALLBACK = {"val/loss": ("final_val_loss", "best_val_loss"), "val/bpb": ("final_val_bpb", "best_val_bpb"),
                    "train/loss": ("final_train_loss", None)}
EMA_VIEWPORT = 1000  # wandb's TWEMA measures x steps in thousandths of the plotted x range
# A run's training budget: (name, summary key, logged key, config key); the first one found is used.
BUDGETS = (("tokens", "tokens", "tokens", "train.tokens"), ("train FLOPs", "flops", "flops", "train.flops"),
           ("steps", "steps", "step", "train.steps"))
BUDGET_RTOL = 0.01  # budgets within 1% of each other count as equal


def higher_is_better(metric: str) -> bool:
    """Losses, perplexities and bits/byte go down; accuracy, MFU and throughput go up."""
    return bool(re.search(r"acc|mfu|tokens_per_s|throughput", metric))


def mean_std(values: Sequence[float | None]) -> tuple[float, float, int]:
    """Mean, sample std (ddof=1; nan when n < 2) and n over the finite values. Example: [1, 3] -> (2.0, 1.414.., 2)"""
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if len(v) == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else math.nan, len(v)


def series(run: Run, key: str, x: str = "tokens") -> tuple[np.ndarray, np.ndarray]:
    """(xs, ys) of the metric lines that have both keys, sorted by x; ys may hold inf/nan after a divergence."""
    pts = [(line[x], line[key]) for line in run.metrics
           if line.get(x) is not None and line.get(key) is not None and isinstance(line[key], (int, float))]
    if not pts:
        return np.empty(0), np.empty(0)
    xs, ys = (np.asarray(v, dtype=float) for v in zip(*pts))
    order = np.argsort(xs, kind="stable")
    return xs[order], ys[order]


def finite_prefix(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points before the first non-finite value (a diverged run's curve up to the divergence)."""
    bad = ~np.isfinite(ys)
    end = int(np.argmax(bad)) if bad.any() else len(ys)
    return xs[:end], ys[:end]


def interpolate(xs: np.ndarray, ys: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Linear interpolation onto `grid`; nan outside [xs[0], xs[-1]] (no extrapolation).
    Repeated x values keep the last y. Example: xs=[0, 10], ys=[1, 3], grid=[5, 20] -> [2, nan]"""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    out = np.full(len(grid), np.nan)
    if len(xs) == 0:
        return out
    # keep the last y of repeated x's (e.g. a resumed run re-logging a step)
    rev_unique, idx = np.unique(xs[::-1], return_index=True)
    xs_u, ys_u = rev_unique, ys[::-1][idx]
    inside = (grid >= xs_u[0]) & (grid <= xs_u[-1])
    out[inside] = np.interp(grid[inside], xs_u, ys_u)
    return out


def ema(xs: np.ndarray, ys: np.ndarray, alpha: float, x_range: float | None = None) -> np.ndarray:
    """wandb's time-weighted EMA with debiasing (its default line-plot smoothing, slider value `alpha` in [0, 1)).

    w = min(√alpha, 0.999); each point decays the running sums by w^Δ, Δ = 1000 · (x_i - x_{i-1}) / x_range:
        num_i = num_{i-1} · w^Δ + y_i,   den_i = den_{i-1} · w^Δ + 1,   smoothed_i = num_i / den_i
    so unevenly spaced points are weighted by x distance, not by count. `x_range` is the plot's x span (default:
    this curve's own); alpha = 0 returns ys unchanged. xs sorted, ys finite.
    Example: xs=[0, 1, 2], ys=[1, 2, 4], alpha=0.5 ** (1 / 250) (w^Δ = 0.5 per step) -> [1, 5/3, 3]"""
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    span = x_range if x_range else (float(xs[-1] - xs[0]) if len(xs) else 0.0)
    if alpha <= 0 or span <= 0:
        return ys.copy()
    w = min(math.sqrt(alpha), 0.999)
    decay = w ** (EMA_VIEWPORT * np.diff(xs, prepend=xs[0]) / span)  # (n,) decay before adding point i; 1 at i=0
    out = np.empty(len(ys))
    num_, den = 0.0, 0.0
    for i, (d, y) in enumerate(zip(decay, ys)):
        num_, den = num_ * d + y, den * d + 1.0
        out[i] = num_ / den
    return out


def band(curves: list[tuple[np.ndarray, np.ndarray]], n_points: int = GRID_POINTS) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean ± std of several curves on a common grid spanning all of them.
    Returns (grid, mean, std, n): at each grid point, over the curves that cover it; std is nan where n < 2."""
    curves = [(x, y) for x, y in curves if len(x)]
    if not curves:
        e = np.empty(0)
        return e, e, e, e
    lo = min(float(x[0]) for x, _ in curves)
    hi = max(float(x[-1]) for x, _ in curves)
    grid = np.linspace(lo, hi, n_points) if hi > lo else np.array([lo])
    stack = np.vstack([interpolate(x, y, grid) for x, y in curves])
    n = np.isfinite(stack).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, np.nansum(stack, axis=0) / np.maximum(n, 1), np.nan)
        sq = np.nansum((stack - mean) ** 2, axis=0)
        std = np.where(n > 1, np.sqrt(sq / np.maximum(n - 1, 1)), np.nan)
    keep = n > 0
    return grid[keep], mean[keep], std[keep], n[keep]


def final_value(run: Run, metric: str) -> float | None:
    """Last finite logged value of `metric` (summary's final_* when the metrics don't have it)."""
    _, ys = series(run, metric, "step")
    ys = ys[np.isfinite(ys)]
    if len(ys):
        return float(ys[-1])
    key = SUMMARY_FALLBACK.get(metric, (None, None))[0]
    v = run.summary.get(key) if key else None
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def best_value(run: Run, metric: str) -> float | None:
    """Best finite logged value (min, or max for higher-is-better metrics)."""
    _, ys = series(run, metric, "step")
    ys = ys[np.isfinite(ys)]
    if len(ys):
        return float(ys.max() if higher_is_better(metric) else ys.min())
    key = SUMMARY_FALLBACK.get(metric, (None, None))[1]
    v = run.summary.get(key) if key else None
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else final_value(run, metric)


LENGTH_RE = re.compile(r"(?P<metric>.+)@len(?P<k>\d+)$")


def run_by_length(run: Run, metric: str) -> dict[int, float]:
    """{task length k: value} of `{metric}@len{k}` keys (seq2seq runs: val/exact_match@len12, ...) from the last
    eval line that has them; {} when the run logged none."""
    for line in reversed(run.metrics):
        found = {int(m["k"]): float(v) for key, v in line.items()
                 if (m := LENGTH_RE.match(key)) and m["metric"] == metric and isinstance(v, (int, float))}
        if found:
            return found
    return {}


def run_extrap(run: Run) -> dict[tuple[str, float], float | None]:
    """{(mode, k): loss or None} from the summary's `extrap`, else the last eval line that has extrap keys."""
    source: dict[str, Any] = {}
    ex = run.summary.get("extrap")
    if isinstance(ex, dict) and ex:
        source = {(k if k.startswith("extrap/") else f"extrap/{k}"): v for k, v in flatten_config(ex, sep="/").items()}
    else:
        for line in reversed(run.metrics):
            if any(k.startswith("extrap/") for k in line):
                source = line
                break
    out = {}
    for k, v in source.items():
        m = EXTRAP_RE.match(k)
        if m:
            out[(m["mode"], float(m["k"]))] = float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None
    return out


def num(run: Run, key: str) -> float | None:
    """A finite number from the run's summary, else None."""
    v = run.summary.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def budget_value(run: Run, summary_key: str, logged_key: str, config_key: str) -> float | None:
    """A run's budget: the summary's number, else the largest logged value, else the config's; None if none."""
    v = num(run, summary_key)
    if v is None:
        logged = [line[logged_key] for line in run.metrics if isinstance(line.get(logged_key), (int, float))
                  and not isinstance(line[logged_key], bool) and math.isfinite(line[logged_key])]
        v = float(max(logged)) if logged else None
    c = run.flat.get(config_key)
    if v is None and isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c):
        v = float(c)
    return v


def budgets(groups: list[Group]) -> dict[str, Any]:
    """Which budgets the runs in the means share: {"n_runs", "equal": [(name, value)], "differ": [(name, lo, hi)]}.
    A budget some run lacks is in neither list; values within BUDGET_RTOL count as equal."""
    runs = [r for g in groups for r in stat_runs(g)]
    equal, differ = [], []
    for name, *keys in BUDGETS:
        vals = [budget_value(r, *keys) for r in runs]
        if len(runs) < 2 or any(v is None for v in vals):
            continue
        lo, hi = min(vals), max(vals)
        if hi - lo <= BUDGET_RTOL * abs(hi):
            equal.append((name, hi))
        else:
            differ.append((name, lo, hi))
    return {"n_runs": len(runs), "equal": equal, "differ": differ}


def stat_runs(group: Group) -> list[Run]:
    """Runs averaged into a group's stats: completed ones (running ones when none has completed)."""
    done = group.by_status(RunStatus.COMPLETED)
    return done if done else group.by_status(RunStatus.RUNNING)


def count_label(group: Group) -> str:
    """How many runs the stats average, and what else the group holds: '3', '2 (+1 diverged)', '2 running',
    '0 (+3 failed)'."""
    counted = stat_runs(group)
    extra: dict[str, int] = {}
    for r in group.runs:
        if r not in counted:
            extra[r.status] = extra.get(r.status, 0) + 1
    head = f"{len(counted)} running" if counted and counted[0].status == RunStatus.RUNNING else f"{len(counted)}"
    tail = ", ".join(f"+{n} {s}" for s, n in sorted(extra.items()))
    return head + (f" ({tail})" if tail else "")


def summarize(groups: list[Group], metric: str = "val/loss") -> list[dict[str, Any]]:
    """One row per group: n, final/best metric (mean, std), params, throughput, wall time."""
    rows = []
    for g in groups:
        rs = stat_runs(g)
        row: dict[str, Any] = {"group": g.label, "color": g.color, "n": len(rs), "runs": count_label(g),
                               "n_diverged": len(g.by_status(RunStatus.DIVERGED)),
                               "n_failed": len(g.by_status(RunStatus.FAILED)),
                               "n_interrupted": len(g.by_status(RunStatus.INTERRUPTED))}
        row["final"] = mean_std([final_value(r, metric) for r in rs])
        row["best"] = mean_std([best_value(r, metric) for r in rs])
        row["final_bpb"] = mean_std([final_value(r, "val/bpb") for r in rs])
        for key in ("params", "non_embedding_params", "tokens", "tokens_per_s", "mfu", "wall_time_s"):
            row[key] = mean_std([num(r, key) for r in rs])
        rows.append(row)
    return rows


def run_rows(groups: list[Group], metric: str, root: Path | None) -> list[dict[str, Any]]:
    """One row per run, in group order: status, reason (why it is not completed), numbers, run dir."""
    rows = []
    for g in groups:
        for r in g.runs:
            path = r.path
            if path is not None and root is not None:
                try:
                    path = path.relative_to(root)
                except ValueError:
                    pass
            rows.append({"run": r.name, "group": g.label, "color": g.color, "seed": r.seed, "status": r.status,
                         "reason": r.reason,
                         "final": final_value(r, metric), "best": best_value(r, metric),
                         "final_train": final_value(r, "train/loss"), "params": num(r, "params"),
                         "non_embedding_params": num(r, "non_embedding_params"), "tokens": num(r, "tokens"),
                         "steps": num(r, "steps"), "tokens_per_s": num(r, "tokens_per_s"), "mfu": num(r, "mfu"),
                         "wall_time_s": num(r, "wall_time_s"),
                         "path": str(path) if path is not None else f"{r.name} ({r.source})"})
    return rows


def config_diff(runs: list[Run], groups: list[Group]) -> tuple[list[str], list[list[str]], list[str]]:
    """(keys, cells[key][group], ignored_noise_keys): every non-noise config key that differs between runs,
    with its value per group ('a | b' when it varies inside a group)."""
    keys = differing_keys(runs)
    cells = []
    for k in keys:
        row = []
        for g in groups:
            vals = list(dict.fromkeys(format_value(r.flat[k]) if k in r.flat else MISSING for r in g.runs))
            row.append(" | ".join(vals))
        cells.append(row)
    noise = [k for k in differing_keys(runs, include_noise=True) if is_noise_key(k)]
    return keys, cells, noise
