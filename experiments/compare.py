"""`python -m experiments.compare`: compare runs grouped by config, as one offline HTML report.

    python -m experiments.compare multirun/pos_encodings/2026-01-01_12-00-00 --by model.pos.kind
    python -m experiments.compare 'outputs/**/run_*' --metric val/bpb --x flops --out report/

Reads only the run dirs (runs.py), so it works offline; `--wandb-group` pulls a wandb group instead
(wandb_pull.py). Writes `report.html` (self-contained), `report.md` and the PNGs (plots.py) to the out dir.
Statistics: mean ± sample std (ddof=1) over the completed runs of a group; diverged / failed / running runs are
counted and shown separately, never averaged in. Curves are linearly interpolated onto a common x grid,
without extrapolating past a run's last point. Not handled: runs whose metrics use other key names.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from experiments.runs import (
    Group,
    Run,
    RunsError,
    check_keys,
    check_single_experiment,
    default_group_keys,
    differing_keys,
    format_value,
    group_runs,
    is_noise_key,
    load_runs,
    MISSING,
    SHAPE_KEYS,
    short_key,
)
from experiments.tracking import flatten_config

X_KEYS = ("tokens", "step", "flops", "time")
BAD_STATUSES = ("diverged", "failed")
EXTRAP_RE = re.compile(r"extrap/(?P<mode>[a-z]+)/loss@(?P<k>\d+(?:\.\d+)?)x$")
LAYER_RE = re.compile(r"grad_norm/layer_(\d+)$")
GRID_POINTS = 200
FIXED_FIGURES = ("extrapolation.png", "grad_norm_per_layer.png", "aspect_ratio.png")


# ---------------------------------------------------------------- numbers


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


SUMMARY_FALLBACK = {"val/loss": ("final_val_loss", "best_val_loss"), "val/bpb": ("final_val_bpb", "best_val_bpb"),
                    "train/loss": ("final_train_loss", None)}


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


def _num(run: Run, key: str) -> float | None:
    v = run.summary.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def stat_runs(group: Group) -> list[Run]:
    """Runs averaged into a group's stats: completed ones (running ones when none has completed)."""
    done = group.by_status("completed")
    return done if done else group.by_status("running")


def count_label(group: Group) -> str:
    """How many runs the stats average, and what else the group holds: '3', '2 (+1 diverged)', '2 running'."""
    counted = stat_runs(group)
    extra: dict[str, int] = {}
    for r in group.runs:
        if r not in counted:
            extra[r.status] = extra.get(r.status, 0) + 1
    head = f"{len(counted)} running" if counted and counted[0].status == "running" else f"{len(counted)}"
    tail = ", ".join(f"+{n} {s}" for s, n in sorted(extra.items()))
    return head + (f" ({tail})" if tail else "")


# ---------------------------------------------------------------- tables


def summarize(groups: list[Group], metric: str = "val/loss") -> list[dict[str, Any]]:
    """One row per group: n, final/best metric (mean, std), params, throughput, wall time."""
    rows = []
    for g in groups:
        rs = stat_runs(g)
        row: dict[str, Any] = {"group": g.label, "color": g.color, "n": len(rs), "runs": count_label(g),
                               "n_diverged": len(g.by_status("diverged")), "n_failed": len(g.by_status("failed"))}
        row["final"] = mean_std([final_value(r, metric) for r in rs])
        row["best"] = mean_std([best_value(r, metric) for r in rs])
        row["final_bpb"] = mean_std([final_value(r, "val/bpb") for r in rs])
        for key in ("params", "non_embedding_params", "tokens", "tokens_per_s", "mfu", "wall_time_s"):
            row[key] = mean_std([_num(r, key) for r in rs])
        rows.append(row)
    return rows


def run_rows(groups: list[Group], metric: str, root: Path | None) -> list[dict[str, Any]]:
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
                         "final": final_value(r, metric), "best": best_value(r, metric),
                         "final_train": final_value(r, "train/loss"), "params": _num(r, "params"),
                         "non_embedding_params": _num(r, "non_embedding_params"), "tokens": _num(r, "tokens"),
                         "steps": _num(r, "steps"), "tokens_per_s": _num(r, "tokens_per_s"), "mfu": _num(r, "mfu"),
                         "wall_time_s": _num(r, "wall_time_s"),
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


# ---------------------------------------------------------------- figure data


def _curve_data(groups: list[Group], key: str, x: str) -> list[dict[str, Any]]:
    out = []
    for g in groups:
        good, bad = [], []
        for r in g.runs:
            xs, ys = series(r, key, x)
            if r.status in BAD_STATUSES or not np.all(np.isfinite(ys)):
                bad.append(finite_prefix(xs, ys))
            else:
                good.append((xs, ys))
        grid, mean, std, n = band(good)
        out.append({"label": g.label, "color": g.color, "grid": grid, "mean": mean, "std": std,
                    "n_runs": len(good), "bad": [b for b in bad if len(b[0])]})
    return out


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


def _extrap_data(groups: list[Group]) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(per-group points, modes, notes on N/A points)."""
    modes_seen: dict[str, None] = {}
    out, notes = [], []
    for g in groups:
        per: dict[tuple[str, float], list[float | None]] = {}
        for r in stat_runs(g):
            for key, v in run_extrap(r).items():
                per.setdefault(key, []).append(v)
                modes_seen[key[0]] = None
        points: dict[str, list[tuple[float, float, float, int]]] = {}
        na: dict[str, list[str]] = {}
        for (mode, k), vals in sorted(per.items()):
            m, s, n = mean_std(vals)
            if n:
                points.setdefault(mode, []).append((k, m, s, n))
            else:
                na.setdefault(mode, []).append(f"{k:g}×")
        for mode, ks in na.items():
            notes.append(f"{g.label}: {mode} loss N/A at {', '.join(ks)} (omitted)")
        out.append({"label": g.label, "color": g.color, "points": points})
    order = [m for m in ("nonoverlap", "sliding") if m in modes_seen] + [m for m in modes_seen if m not in ("nonoverlap", "sliding")]
    return out, order, notes


def _layer_means(run: Run, max_step: float | None) -> dict[int, float]:
    sums: dict[int, list[float]] = {}
    for line in run.metrics:
        if max_step is not None and line.get("step", 0) > max_step:
            continue
        for k, v in line.items():
            m = LAYER_RE.match(k)
            if m and isinstance(v, (int, float)) and math.isfinite(v):
                sums.setdefault(int(m[1]), []).append(float(v))
    return {i: float(np.mean(v)) for i, v in sums.items()}


def _grad_data(groups: list[Group]) -> tuple[list[dict[str, Any]], list[str]]:
    panels = {"first 10% of training": 0.1, "whole run": None}
    out = []
    for g in groups:
        layers = sorted({int(m[1]) for r in g.runs for line in r.metrics for k in line if (m := LAYER_RE.match(k))})
        if not layers:
            continue
        phases, bad = {}, {}
        for panel, frac in panels.items():
            def limit(r: Run) -> float | None:
                steps = [l["step"] for l in r.metrics if isinstance(l.get("step"), (int, float))]
                # at least the first logged step, so very short runs still fill the early panel
                return max(frac * max(steps), min(steps)) if (frac and steps) else None

            per = [_layer_means(r, limit(r)) for r in stat_runs(g)]
            if per:
                stats = [mean_std([p.get(i) for p in per]) for i in layers]
                phases[panel] = (np.array([s[0] for s in stats]), np.array([s[1] for s in stats]))
            bad[panel] = [np.array([lm.get(i, np.nan) for i in layers])
                          for lm in (_layer_means(r, limit(r)) for r in g.runs if r.status in BAD_STATUSES) if lm]
        out.append({"label": g.label, "color": g.color, "layers": layers, "phases": phases, "bad": bad})
    return out, list(panels)


def _aspect_data(groups: list[Group], by: list[str], metric: str) -> tuple[list[dict[str, Any]], str] | None:
    shapes = {}
    for g in groups:
        in_group = {(r.flat.get("model.n_layers"), r.flat.get("model.d_model")) for r in g.runs}
        (L, d), = in_group if len(in_group) == 1 else ((None, None),)  # a group mixing shapes has no one aspect
        if isinstance(L, int) and isinstance(d, int) and L > 0:
            shapes[g.index] = (L, d)
    if len(set(shapes.values())) < 2:
        return None
    other = [k for k in by if k not in SHAPE_KEYS]
    series: dict[tuple[Any, ...], dict[str, Any]] = {}
    budgets = []
    for g in groups:
        if g.index not in shapes:
            continue
        L, d = shapes[g.index]
        m, s, n = mean_std([final_value(r, metric) for r in stat_runs(g)])
        ne = mean_std([_num(r, "non_embedding_params") for r in g.runs])[0]
        if math.isfinite(ne):
            budgets.append(ne)
        text = f"L={L}, d={d}" + (f"\n{_eng(ne)} non-emb" if math.isfinite(ne) else "")
        bad = [v for v in (final_value(r, metric) for r in g.runs if r.status in BAD_STATUSES) if v is not None]
        key = tuple(v for k, v in zip(by, g.values) if k in other)
        bucket = _budget_bucket(ne, budgets)
        label = " ".join(f"{short_key(k)}={format_value(v)}" for k, v in zip(other, key))
        label = (f"same {label}, " if label else "") + (f"≈{_eng(bucket)} non-emb params" if bucket else "shapes")
        series.setdefault((key, bucket), {"label": label, "points": []})["points"].append(
            {"aspect": d / L, "mean": m, "std": s, "color": g.color, "label": g.label, "text": text, "bad": bad})
    if budgets:
        lo, hi = min(budgets), max(budgets)
        note = f"non-embedding params {_eng(lo)}–{_eng(hi)} ({(hi / lo - 1) * 100:.0f}% spread)" if hi > lo else f"non-embedding params {_eng(lo)}"
    else:
        note = "non-embedding params not recorded"
    return list(series.values()), note


def _budget_bucket(ne: float, seen: list[float]) -> float | None:
    """Shapes within 1.5× of each other count as one parameter budget; returns the bucket's first budget."""
    if not math.isfinite(ne):
        return None
    for b in sorted(seen):
        if max(b, ne) / min(b, ne) <= 1.5:
            return b
    return ne


def _eng(v: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.3g}"


def _slug(metric: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")


# ---------------------------------------------------------------- report


def available_metrics(runs: list[Run]) -> list[str]:
    """Logged metric keys (per-layer keys collapsed to `.../layer_{i}`)."""
    keys: set[str] = set()
    for r in runs:
        keys |= r.metric_keys()
    keys -= set(X_KEYS)
    return sorted({re.sub(r"layer_\d+$", "layer_{i}", k) for k in keys})


def _check_metric(runs: list[Run], metric: str, x: str) -> None:
    has_metric = any(metric in r.metric_keys() for r in runs) or any(
        final_value(r, metric) is not None for r in runs)
    if not has_metric:
        avail = available_metrics(runs)
        raise RunsError(f"metric {metric!r} is not in any run; available: {', '.join(avail) if avail else '(no metrics logged)'}")
    if not any(x in r.metric_keys() for r in runs) and any(r.metrics for r in runs):
        raise RunsError(f"x axis {x!r} is not logged in any run's metrics.jsonl; try --x step")


def default_out_dir(runs: list[Run]) -> Path:
    """`<common dir of the runs>/report`, or ./report when the runs share no useful common dir."""
    paths = [str(r.path) for r in runs if r.path is not None]
    if not paths:
        return Path("report")
    common = Path(os.path.commonpath(paths))
    if len(common.parts) <= 1:
        return Path("report")
    return common / "report"


def build_report(run_paths: Sequence[str | os.PathLike] | None, out_dir: str | os.PathLike | None = None,
                 by: Sequence[str] | None = None, metric: str = "val/loss", x: str = "tokens",
                 allow_mixed: bool = False, runs: list[Run] | None = None, command: str | None = None) -> Path:
    """Load runs, group them, write report.html / report.md / PNGs into out_dir; returns report.html's path.

    Example: build_report(["multirun/pos_encodings/2026-01-01_00-00-00"], None, by=["model.pos.kind"])
    Raises RunsError on bad input (no runs, mixed experiments, unknown metric or --by key)."""
    from experiments import plots
    from experiments.report_html import write_html, write_markdown

    if x not in X_KEYS:
        raise RunsError(f"--x must be one of {', '.join(X_KEYS)}, got {x!r}")
    runs = list(runs or []) + (load_runs(run_paths) if run_paths else [])
    if not runs:
        raise RunsError("no runs to compare")
    if not allow_mixed:
        check_single_experiment(runs)
    by = list(by) if by else default_group_keys(runs)
    check_keys(runs, by)
    _check_metric(runs, metric, x)
    out = Path(out_dir) if out_dir is not None else default_out_dir(runs)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("curve_*.png"), *out.glob("final_*.png"), *(out / f for f in FIXED_FIGURES)]:
        stale.unlink(missing_ok=True)  # an earlier build's figure that this build may skip
    groups = group_runs(runs, by)
    paths = [r.path for r in runs if r.path is not None]
    root = Path(os.path.commonpath([str(p) for p in paths])) if paths else None

    figures: list[dict[str, str]] = []  # {file, title, caption}
    notes: list[str] = []
    xl = plots.X_LABELS[x]

    def add(file: str, title: str, caption: str) -> None:
        figures.append({"file": file, "title": title, "caption": caption})

    # curves: train/loss, then the chosen metric
    for key in (["train/loss"] if metric != "train/loss" else []) + [metric]:
        data = _curve_data(groups, key, x)
        if not any(len(d["grid"]) or d["bad"] for d in data):
            notes.append(f"{key} vs {x}: skipped (no run logs {key} with {x})")
            continue
        f = f"curve_{_slug(key)}.png"
        plots.plot_curves(out / f, data, x, key, f"{key} vs {xl}")
        add(f, f"{key} vs {xl}", f"Mean over seeds (line) ± 1 std (band), linearly interpolated onto a common {x} grid "
            "where the runs overlap. Dashed lines ending in × are diverged/failed runs, excluded from the mean.")

    f = f"final_{_slug(metric)}.png"
    plots.plot_final(out / f, [{"label": g.label, "color": g.color,
                                "good": [v for v in (final_value(r, metric) for r in stat_runs(g)) if v is not None],
                                "bad": [final_value(r, metric) for r in g.runs if r.status in BAD_STATUSES],
                                "mean": mean_std([final_value(r, metric) for r in stat_runs(g)])[0],
                                "std": mean_std([final_value(r, metric) for r in stat_runs(g)])[1]} for g in groups],
                     metric, f"Final {metric} per group")
    add(f, f"Final {metric} per group", "Each dot is one seed; diamond and bar are the group mean ± std; × marks diverged runs.")

    ex, modes, ex_notes = _extrap_data(groups)
    if modes and any(d["points"] for d in ex):
        n_ctx = {r.flat.get("model.n_ctx") for r in runs}
        n_ctx_v = next(iter(n_ctx)) if len(n_ctx) == 1 and isinstance(next(iter(n_ctx)), int) else None
        plots.plot_extrapolation(out / "extrapolation.png", ex, modes, n_ctx_v, "Length extrapolation: val loss vs eval length")
        cap = ("Final eval's loss at 1×, 2×, 4×, 8× the training context, mean ± std over seeds; "
               "nonoverlap = disjoint windows, sliding = every token scored with maximal left context.")
        if ex_notes:
            cap += " N/A points omitted: " + "; ".join(ex_notes) + "."
        add("extrapolation.png", "Length extrapolation", cap)
    else:
        notes.append("length extrapolation: skipped (no run logged extrap/... values)")

    gd, panels = _grad_data(groups)
    if gd:
        plots.plot_grad_norms(out / "grad_norm_per_layer.png", gd, panels, "Mean gradient norm per layer")
        add("grad_norm_per_layer.png", "Gradient norm per layer",
            "Mean of grad_norm/layer_{i} over the logged train steps (left: first 10% of steps, i.e. around warmup; "
            "right: whole run), mean ± std over seeds. Post-LN typically shows larger gradients near the output early on.")
    else:
        notes.append("per-layer gradient norms: skipped (no grad_norm/layer_{i} keys logged)")

    asp = _aspect_data(groups, by, metric)
    if asp:
        series_, budget_note = asp
        plots.plot_aspect(out / "aspect_ratio.png", series_, metric, f"Depth vs width: final {metric} vs aspect ratio")
        add("aspect_ratio.png", "Depth vs width",
            f"Final {metric} against d_model / n_layers, mean ± std over seeds; {budget_note}.")
    else:
        notes.append("depth vs width (aspect ratio): skipped (fewer than two distinct n_layers × d_model shapes "
                     "among groups of a single shape; group by model.n_layers model.d_model)")

    keys, cells, noise = config_diff(runs, groups)
    ctx = {
        "title": f"archlab comparison: {', '.join(sorted({str(r.experiment) for r in runs if r.experiment})) or 'runs'}",
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command or "", "metric": metric, "x": x, "by": by, "n_runs": len(runs),
        "status_counts": {s: sum(r.status == s for r in runs) for s in dict.fromkeys(r.status for r in runs)},
        "groups": summarize(groups, metric), "runs": run_rows(groups, metric, root), "root": str(root) if root else "",
        "diff_keys": keys, "diff_cells": cells, "diff_groups": [g.label for g in groups], "noise_keys": noise,
        "figures": figures, "notes": notes, "out": out,
    }
    write_markdown(out / "report.md", ctx)
    return write_html(out / "report.html", ctx)


# ---------------------------------------------------------------- CLI


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2) instead of usage + error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"compare: error: {message} (see --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="python -m experiments.compare",
                                description="Compare archlab runs grouped by config; writes an offline report.html.")
    p.add_argument("paths", nargs="*", help="run dirs, sweep dirs (searched recursively) or globs")
    p.add_argument("--by", nargs="+", metavar="KEY", help="dotted config keys to group by "
                   "(default: every key that differs between runs, except seeds and per-run noise)")
    p.add_argument("--metric", default="val/loss", help="metric for curves and final/best tables (default val/loss)")
    p.add_argument("--x", default="tokens", choices=X_KEYS, help="x axis of the curves (default tokens)")
    p.add_argument("--out", help="output dir (default <common sweep dir>/report or ./report)")
    p.add_argument("--allow-mixed", action="store_true", help="allow runs of different experiments")
    p.add_argument("--wandb-group", help="also pull the runs of this wandb group (needs network + login)")
    p.add_argument("--wandb-project", help="wandb project (entity/project or project) for --wandb-group")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 2 bad input)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0)
    try:
        runs: list[Run] = []
        if args.wandb_group:
            from experiments.wandb_pull import pull_runs

            runs = pull_runs(args.wandb_group, args.wandb_project)
        elif args.wandb_project:
            raise RunsError("--wandb-project needs --wandb-group")
        if not args.paths and not runs:
            raise RunsError("give at least one run dir, sweep dir or glob (or --wandb-group)")
        cmd = "python -m experiments.compare " + " ".join(argv if argv is not None else sys.argv[1:])
        report = build_report(args.paths, args.out, by=args.by, metric=args.metric, x=args.x,
                              allow_mixed=args.allow_mixed, runs=runs, command=cmd)
    except RunsError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
