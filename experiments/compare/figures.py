"""Which figures a report gets, the data behind each, and drawing them (through plots.py) into the out dir.

`draw_figures` returns the figures it wrote ({file, title, caption}) and a note for each one it skipped (a figure
that does not apply is a note, never an error). Diverged, interrupted and failed runs (runs.EXCLUDED_STATUSES)
are drawn apart from the means (dashed / ×), never averaged in and never dropped.
Not handled here: the numbers themselves (stats.py), matplotlib details (plots.py), the HTML/markdown.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from experiments.compare import plots
from experiments.compare.coord import COORD, draw_coord
from experiments.compare.grouping import SHAPE_KEYS, Group, format_value, short_key
from experiments.compare.runs import EXCLUDED_STATUSES, Run
from experiments.compare.stats import (
    band,
    ema,
    final_value,
    finite_prefix,
    mean_std,
    num,
    run_by_length,
    run_extrap,
    series,
    stat_runs,
)

LAYER_RE = re.compile(r"grad_norm/layer_(\d+)$")
FIXED_FIGURES = ("extrapolation.png", "exact_match_vs_length.png", "grad_norm_per_layer.png", "aspect_ratio.png", COORD)
LENGTH_METRIC = "val/exact_match"  # seq2seq runs log val/exact_match@len{k} at each eval (experiments/run/eval_seq2seq.py)


def slug(metric: str) -> str:
    """A metric as a file-name part: 'val/loss' -> 'val_loss'."""
    return re.sub(r"[^A-Za-z0-9]+", "_", metric).strip("_")


def figure_names(metric: str) -> list[str]:
    """Every PNG a report on `metric` may write (which ones it does write depends on the runs)."""
    return [f"curve_{slug(k)}.png" for k in dict.fromkeys(["train/loss", metric])] + [f"final_{slug(metric)}.png",
                                                                                       *FIXED_FIGURES]


# ---------------------------------------------------------------- figure data


def extrap_note(runs: list[Run]) -> str:
    """Why the 1× value differs from the table's final val/loss: the two evals score different tokens."""
    keys = ("train.extrap_max_tokens", "train.eval_batches", "train.eval_batch_size")
    cfg = {tuple(r.flat.get(k) for k in keys) for r in runs}
    (limit, batches, batch), = cfg if len(cfg) == 1 else ((None, None, None),)
    first = f"the first {limit:,} tokens" if isinstance(limit, int) else "the first train.extrap_max_tokens tokens"
    spread = (f"{batches} × {batch} windows" if isinstance(batches, int) and isinstance(batch, int)
              else "train.eval_batches × train.eval_batch_size windows")
    return (f"The 1× value is not the tables' final val/loss: it scores {first} of the validation split, while "
            f"val/loss scores {spread} spread over the whole split, so the two differ by sampling.")


def curve_caption(key: str, x: str, points: list[int]) -> str:
    """The caption of a curve figure whose groups have `points` grid points each: lines with bands, points with
    error bars (a metric evaluated once per run), or both."""
    bad = " Dashed lines ending in × are diverged/interrupted/failed runs, excluded from the mean."
    single = [n for n in points if n == 1]
    if single and len(single) == len([n for n in points if n]):
        return (f"{key} was evaluated once per run, so there is no curve: each point is a group's mean over seeds "
                f"at that {x}, the error bar ± 1 std (none with one seed); groups are shifted sideways a little so "
                "equal values stay visible." + bad)
    caption = (f"Mean over seeds (line) ± 1 std (band), linearly interpolated onto a common {x} grid where the runs "
               "overlap.")
    if single:
        caption += " Groups evaluated once per run are points with ± 1 std error bars."
    return caption + bad



def _curve_data(groups: list[Group], key: str, x: str, smooth: float = 0.0) -> list[dict[str, Any]]:
    """Per group: mean ± std band of its good runs, and its bad runs' finite prefixes. With `smooth` > 0 every run
    is EMA-smoothed first (stats.ema over the x span of the whole figure, as wandb smooths over the chart's) and
    `raw` holds the unsmoothed mean on the same grid."""
    curves = [[(r, *series(r, key, x)) for r in g.runs] for g in groups]
    starts_ends = [(xs[0], xs[-1]) for rows in curves for _, xs, _ in rows if len(xs)]
    x_range = max(e for _, e in starts_ends) - min(s for s, _ in starts_ends) if starts_ends else 0.0

    def smoothed(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (xs, ema(xs, ys, smooth, x_range)) if smooth else (xs, ys)

    out = []
    for g, rows in zip(groups, curves):
        good, bad = [], []
        for r, xs, ys in rows:
            if r.status in EXCLUDED_STATUSES or not np.all(np.isfinite(ys)):
                bad.append(finite_prefix(xs, ys))
            else:
                good.append((xs, ys))
        grid, mean, std, n = band([smoothed(*c) for c in good])
        out.append({**g.appearance(), "grid": grid, "mean": mean, "std": std,
                    "raw": band(good)[1] if smooth else None,
                    "n_runs": len(good), "bad": [smoothed(*b) for b in bad if len(b[0])]})
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
        out.append({**g.appearance(), "points": points})
    order = [m for m in ("nonoverlap", "sliding") if m in modes_seen] + [m for m in modes_seen if m not in ("nonoverlap", "sliding")]
    return out, order, notes


def _length_data(groups: list[Group], metric: str = LENGTH_METRIC) -> list[dict[str, Any]]:
    """Per group: [(k, mean, std, n)] of the final `{metric}@len{k}` over the group's runs."""
    out = []
    for g in groups:
        per: dict[int, list[float]] = {}
        for r in stat_runs(g):
            for k, v in run_by_length(r, metric).items():
                per.setdefault(k, []).append(v)
        out.append({**g.appearance(), "points": [(k, *mean_std(vals)) for k, vals in sorted(per.items())]})
    return out


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
                          for lm in (_layer_means(r, limit(r)) for r in g.runs if r.status in EXCLUDED_STATUSES) if lm]
        out.append({**g.appearance(), "layers": layers, "phases": phases, "bad": bad})
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
    series_: dict[tuple[Any, ...], dict[str, Any]] = {}
    budgets = []
    for g in groups:
        if g.index not in shapes:
            continue
        L, d = shapes[g.index]
        m, s, n = mean_std([final_value(r, metric) for r in stat_runs(g)])
        ne = mean_std([num(r, "non_embedding_params") for r in g.runs])[0]
        if math.isfinite(ne):
            budgets.append(ne)
        text = f"L={L}, d={d}" + (f"\n{_eng(ne)} non-emb" if math.isfinite(ne) else "")
        bad = [v for v in (final_value(r, metric) for r in g.runs if r.status in EXCLUDED_STATUSES) if v is not None]
        key = tuple(v for k, v in zip(by, g.values) if k in other)
        bucket = _budget_bucket(ne, budgets)
        label = " ".join(f"{short_key(k)}={format_value(v)}" for k, v in zip(other, key))
        label = (f"same {label}, " if label else "") + (f"≈{_eng(bucket)} non-emb params" if bucket else "shapes")
        series_.setdefault((key, bucket), {"label": label, "points": []})["points"].append(
            {"aspect": d / L, "mean": m, "std": s, "color": g.color, "label": g.label, "text": text, "bad": bad})
    if budgets:
        lo, hi = min(budgets), max(budgets)
        note = f"non-embedding params {_eng(lo)}–{_eng(hi)} ({(hi / lo - 1) * 100:.0f}% spread)" if hi > lo else f"non-embedding params {_eng(lo)}"
    else:
        note = "non-embedding params not recorded"
    return list(series_.values()), note


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


# ---------------------------------------------------------------- drawing


def draw_figures(out: Path, runs: list[Run], groups: list[Group], by: list[str], metric: str,
                 x: str, smooth: float = 0.0) -> tuple[list[dict[str, str]], list[str]]:
    """Write every figure that applies into `out` (names from figure_names); returns (figures, skipped notes).
    `smooth` > 0: the train/loss curves are EMA-smoothed (stats.ema), the raw mean drawn faint behind."""
    figures: list[dict[str, str]] = []  # {file, title, caption}
    notes: list[str] = []
    xl = plots.X_LABELS[x]

    def add(file: str, title: str, caption: str) -> None:
        figures.append({"file": file, "title": title, "caption": caption})

    # curves: train/loss, then the chosen metric
    for key in (["train/loss"] if metric != "train/loss" else []) + [metric]:
        alpha = smooth if key == "train/loss" else 0.0
        data = _curve_data(groups, key, x, alpha)
        if not any(len(d["grid"]) or d["bad"] for d in data):
            notes.append(f"{key} vs {x}: skipped (no run logs {key} with {x})")
            continue
        f = f"curve_{slug(key)}.png"
        title = f"{key} vs {xl}" + (f" (EMA smoothing {alpha:g})" if alpha else "")
        plots.plot_curves(out / f, data, x, key, title)
        caption = curve_caption(key, x, [len(d["grid"]) for d in data])
        if alpha:
            caption += (f" Each run smoothed with wandb's time-weighted EMA (--smooth {alpha:g}) before averaging; "
                        "the faint line is the unsmoothed mean.")
        add(f, title, caption)

    finals = [{**g.appearance(),
               "good": [v for v in (final_value(r, metric) for r in stat_runs(g)) if v is not None],
               "bad": [final_value(r, metric) for r in g.runs if r.status in EXCLUDED_STATUSES],
               "mean": mean_std([final_value(r, metric) for r in stat_runs(g)])[0],
               "std": mean_std([final_value(r, metric) for r in stat_runs(g)])[1]} for g in groups]
    if any(d["good"] or any(v is not None for v in d["bad"]) for d in finals):
        f = f"final_{slug(metric)}.png"
        plots.plot_final(out / f, finals, metric, f"Final {metric} per group")
        add(f, f"Final {metric} per group", "Each dot is one seed; diamond and bar are the group mean ± std; "
            "× marks diverged/interrupted/failed runs (their last finite value).")
    else:
        notes.append(f"final {metric} per group: skipped (no run has a {metric} value)")

    ex, modes, ex_notes = _extrap_data(groups)
    if modes and any(d["points"] for d in ex):
        n_ctx = {r.flat.get("model.n_ctx") for r in runs}
        n_ctx_v = next(iter(n_ctx)) if len(n_ctx) == 1 and isinstance(next(iter(n_ctx)), int) else None
        plots.plot_extrapolation(out / "extrapolation.png", ex, modes, n_ctx_v, "Length extrapolation: val loss vs eval length")
        cap = ("Final eval's loss at 1×, 2×, 4×, 8× the training context, mean ± std over seeds; "
               "nonoverlap = disjoint windows, sliding = every token scored with maximal left context. "
               + extrap_note(runs))
        if ex_notes:
            cap += " N/A points omitted: " + "; ".join(ex_notes) + "."
        add("extrapolation.png", "Length extrapolation", cap)
    else:
        notes.append("length extrapolation: skipped (no run logged extrap/... values)")

    lengths = _length_data(groups)
    if any(d["points"] for d in lengths):
        train_lengths = {tuple(r.flat.get("data.train_lengths") or ()) for r in runs}
        trained = next(iter(train_lengths)) if len(train_lengths) == 1 and len(next(iter(train_lengths))) == 2 else None
        plots.plot_by_length(out / "exact_match_vs_length.png", lengths, "exact match", trained,
                             "Length generalisation: exact match vs test length")
        add("exact_match_vs_length.png", "Exact match vs test length",
            "Greedy exact match of the last eval per task length, mean ± std over seeds"
            + (f"; the shaded band marks the training lengths {trained[0]}–{trained[1]}." if trained else "."))
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

    coord, note = draw_coord(out, runs)  # the coordinate check of a width sweep (coord.py)
    if coord:
        add(**coord)
    else:
        notes.append(note)
    return figures, notes
