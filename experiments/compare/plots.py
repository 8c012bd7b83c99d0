"""The comparison report's figures (matplotlib, Agg backend; no display needed).

Every function takes data already aggregated by figures.py, draws one figure and writes one PNG (atomically,
through rundir.atomic_write: a symlink in its place is replaced, never written through). Group `i` keeps colour
`i`, and in line charts dash and marker `i` (line_style), in every figure: a curve lying exactly on another's still
shows. Where groups share x positions (per-layer, per-length, per-factor and single-evaluation points) each group is
shifted a little sideways (dodge), so equal values with their error bars sit side by side instead of on top of each
other. A group whose metric has a single evaluation is a point with a ± std error bar, not a line. Diverged /
interrupted / failed runs are drawn as thin dashed lines ending in an × (the last finite point), never dropped.
Not handled here: deciding whether a plot applies (figures.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter  # noqa: E402
from mpl_toolkits.axes_grid1 import make_axes_locatable  # noqa: E402

from experiments.rundir.layout import atomic_write  # noqa: E402

DPI = 110
BAD_MARK = dict(marker="x", s=70, linewidths=2.2, zorder=6)
LINESTYLES = ("-", "--", "-.", ":")  # group i: LINESTYLES[i % 4] and MARKERS[i % 9], distinct for 36 groups
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
MARKS = 10  # markers on a long line (a shorter one marks every point)

plt.rcParams.update({
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "axes.titlesize": 12, "axes.titleweight": "bold", "axes.labelsize": 10.5, "legend.fontsize": 9,
    "legend.framealpha": 0.9, "font.size": 10,
})

X_LABELS = {
    "tokens": "training tokens",
    "step": "optimizer step",
    "flops": "training compute (FLOPs)",
    "time": "wall-clock time (s)",
}


def _save(fig: plt.Figure, path: Path, legend: bool = True) -> Path:
    """Legend below the axes (never over the data, same place in every figure), then write the PNG."""
    fig.tight_layout()
    if legend:
        handles, labels = {}, []
        for ax in fig.axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                if lab not in handles and not lab.startswith("_"):
                    handles[lab] = h
                    labels.append(lab)
        if handles:
            ncol = 1 if max(len(lab) for lab in labels) > 60 else min(3, len(labels))
            fig.legend([handles[lab] for lab in labels], labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                       ncol=ncol, frameon=False)
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=DPI, facecolor="white", bbox_inches="tight",
                                             pad_inches=0.15), binary=True)
    plt.close(fig)
    return path


def line_style(index: int, n_points: int) -> dict[str, Any]:
    """Line kwargs of series `index` (group i in every figure, layer i's marker in the attention-entropy panels): its
    dash and marker, the marker on every point of a line of fewer than 2·MARKS points, else on every
    (n_points // MARKS)-th, a quarter step later per series, so the markers of coinciding curves do not cover
    each other.
    Example: line_style(1, 200) -> {"ls": "--", "marker": "s", "markevery": (5, 20)}"""
    step = max(1, n_points // MARKS)
    return {"ls": LINESTYLES[index % len(LINESTYLES)], "marker": MARKERS[index % len(MARKERS)],
            "markevery": (index * max(1, step // 4) % step, step)}


def dodge(position: int, count: int, width: float) -> float:
    """Sideways offset of series `position` of `count` drawn side by side `width` apart, centred on 0.
    Example: [dodge(i, 3, 0.1) for i in range(3)] -> [-0.1, 0.0, 0.1]"""
    return (position - (count - 1) / 2) * width


def plot_curves(path: Path, groups: list[dict[str, Any]], x: str, metric: str, title: str) -> Path:
    """Mean ± std band per group on a common x grid, plus dashed diverged runs ending in ×; with smoothing, the
    unsmoothed mean (`raw`, on the same grid) is a faint line behind the smoothed one. A group with a single grid
    point (one evaluation) is its mean with a ± std error bar, dodged sideways by 1% of the x span per group.

    groups: [{label, color, index, grid, mean, std, raw: mean or None, n_runs, bad: [(xs, ys)]}]."""
    fig, ax = plt.subplots(figsize=(9.5, 5.4))
    finite = []
    ends = [float(v) for g in groups if g["grid"] is not None and len(g["grid"]) for v in g["grid"][[0, -1]]]
    span = ((max(ends) - min(ends)) or abs(max(ends))) if ends else 0.0
    span = span or 1.0  # the x extent single points are dodged across
    for pos, g in enumerate(groups):
        grid, mean, std = g["grid"], g["mean"], g["std"]
        if grid is not None and len(grid) == 1:
            ax.errorbar(grid + dodge(pos, len(groups), 0.01 * span), mean, yerr=np.where(np.isfinite(std), std, 0),
                        color=g["color"], fmt=MARKERS[g["index"] % len(MARKERS)], ms=7, capsize=5, lw=2,
                        label=f"{g['label']} (n={g['n_runs']})")
            finite.append(np.concatenate([mean - np.nan_to_num(std), mean + np.nan_to_num(std)]))
        elif grid is not None and len(grid):
            label = f"{g['label']} (n={g['n_runs']})"
            if g.get("raw") is not None:
                ax.plot(grid, g["raw"], color=g["color"], lw=1, alpha=0.3, zorder=1)
            ax.plot(grid, mean, color=g["color"], lw=2, ms=5, label=label, **line_style(g["index"], len(grid)))
            ok = np.isfinite(std)
            if ok.any():
                ax.fill_between(grid, mean - np.where(ok, std, 0), mean + np.where(ok, std, 0),
                                color=g["color"], alpha=0.18, lw=0, where=ok)
            finite.append(mean[np.isfinite(mean)])
    top = None
    if finite and any(len(f) for f in finite):
        allv = np.concatenate(finite)
        lo, hi = float(np.min(allv)), float(np.percentile(allv, 99.5))
        pad = 0.06 * (hi - lo if hi > lo else abs(hi) + 1e-9)
        top = hi + pad
        ax.set_ylim(lo - pad, top)
    marked = False
    for g in groups:
        for xs, ys in g["bad"]:
            if len(xs) == 0:
                continue
            ax.plot(xs, np.minimum(ys, top) if top is not None else ys, color=g["color"], lw=1, ls="--", alpha=0.8)
            yx = min(ys[-1], top) if top is not None else ys[-1]
            ax.scatter([xs[-1]], [yx], color=g["color"], clip_on=False,
                       label=None if marked else "diverged / interrupted / failed (last finite point)", **BAD_MARK)
            marked = True
    ax.set_xlabel(X_LABELS.get(x, x))
    ax.set_ylabel(metric)
    ax.set_title(title)
    if x in ("tokens", "flops"):
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    return _save(fig, path)


def plot_final(path: Path, groups: list[dict[str, Any]], metric: str, title: str) -> Path:
    """Final metric per run (dots; × for diverged/failed) with each group's mean ± std.

    groups: [{label, color, good: [values], bad: [values], mean, std}]."""
    fig, ax = plt.subplots(figsize=(max(6.5, 1.3 * len(groups) + 3), 4.8))
    rng = np.random.default_rng(0)  # fixed jitter, so reports are reproducible
    for i, g in enumerate(groups):
        good = np.asarray(g["good"], dtype=float)
        if len(good):
            ax.scatter(i + rng.uniform(-0.12, 0.12, len(good)), good, color=g["color"], s=30, alpha=0.75, zorder=4)
        if np.isfinite(g["mean"]):
            err = g["std"] if np.isfinite(g["std"]) else 0.0
            ax.errorbar([i + 0.28], [g["mean"]], yerr=[err], color=g["color"], fmt="D", ms=7, capsize=5, lw=2, zorder=5)
        bad = [v for v in g["bad"] if v is not None and np.isfinite(v)]
        if bad:
            ax.scatter([i - 0.28] * len(bad), bad, color=g["color"], **BAD_MARK)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g["label"].replace(" ", "\n") for g in groups], fontsize=9)
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.scatter([], [], color="grey", s=30, label="one seed")
    ax.errorbar([], [], yerr=[], color="grey", fmt="D", label="mean ± std")
    if any(g["bad"] for g in groups):
        ax.scatter([], [], color="grey", label="diverged / interrupted / failed (last finite value)", **BAD_MARK)
    return _save(fig, path)


def plot_extrapolation(path: Path, groups: list[dict[str, Any]], modes: list[str], n_ctx: int | None, title: str) -> Path:
    """Loss vs eval length (multiples of the training context), one panel per eval mode.

    groups: [{label, color, index, points: {mode: [(k, mean, std, n)]}}]; N/A points are simply absent."""
    fig, axes = plt.subplots(1, len(modes), figsize=(6.2 * len(modes), 4.9), squeeze=False, sharey=True)
    ks_all = sorted({k for g in groups for m in modes for k, *_ in g["points"].get(m, [])})
    for ax, mode in zip(axes[0], modes):
        for pos, g in enumerate(groups):
            pts = g["points"].get(mode, [])
            if not pts:
                continue
            ks, mean, std, _ = (np.asarray(v, dtype=float) for v in zip(*pts))
            ax.errorbar(ks * 2 ** dodge(pos, len(groups), 0.05), mean, yerr=np.where(np.isfinite(std), std, 0),
                        color=g["color"], ms=5, capsize=3, lw=2,
                        label=g["label"], **line_style(g["index"], len(ks)))
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks_all)
        if n_ctx:
            ax.xaxis.set_major_formatter(FuncFormatter(lambda k, _: f"{k:g}×\n({int(k * n_ctx)} tok)"))
        else:
            ax.xaxis.set_major_formatter(FuncFormatter(lambda k, _: f"{k:g}×"))
        ax.minorticks_off()
        ax.set_xlabel("eval length (multiple of training context)")
        ax.set_title(f"{mode} eval")
    axes[0][0].set_ylabel("val loss (nats/token)")
    fig.suptitle(title, fontweight="bold")
    return _save(fig, path)


def plot_by_length(path: Path, groups: list[dict[str, Any]], ylabel: str, trained: tuple[int, int] | None,
                   title: str) -> Path:
    """A metric vs task length, one line per group (mean ± std); the training lengths shaded.

    groups: [{label, color, index, points: [(k, mean, std, n)]}]."""
    fig, ax = plt.subplots(figsize=(7.4, 4.7))
    if trained:
        ax.axvspan(trained[0] - 0.5, trained[1] + 0.5, color="#000000", alpha=0.06, lw=0, label="training lengths")
    for pos, g in enumerate(groups):
        if g["points"]:
            ks, mean, std, _ = (np.asarray(v, dtype=float) for v in zip(*g["points"]))
            ax.errorbar(ks + dodge(pos, len(groups), 0.08), mean, yerr=np.where(np.isfinite(std), std, 0),
                        color=g["color"], ms=4, capsize=3, lw=2,
                        label=g["label"], **line_style(g["index"], len(ks)))
    ax.set_xlabel("task length")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.03, 1.03)
    ax.set_title(title, fontweight="bold")
    return _save(fig, path)


def plot_grad_norms(path: Path, groups: list[dict[str, Any]], panels: list[str], title: str) -> Path:
    """Mean gradient norm per layer index, one line per group; one panel per phase (e.g. early / whole run).

    groups: [{label, color, index, layers, phases: {panel: (mean, std)}, bad: {panel: [per-layer arrays]}}]."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.7), squeeze=False, sharey=True)
    for ax, panel in zip(axes[0], panels):
        for pos, g in enumerate(groups):
            if panel in g["phases"]:
                mean, std = g["phases"][panel]
                ax.errorbar(np.asarray(g["layers"]) + dodge(pos, len(groups), 0.06), mean,
                            yerr=np.where(np.isfinite(std), std, 0), color=g["color"], ms=5,
                            capsize=3, lw=2, label=g["label"], **line_style(g["index"], len(g["layers"])))
            for arr in g["bad"].get(panel, []):
                ax.plot(g["layers"], arr, color=g["color"], ls="--", lw=1, marker="x", ms=6, alpha=0.8)
        ax.set_yscale("log", nonpositive="clip")  # a mean - std below 0 runs off the bottom
        ax.set_xlabel("layer index (0 = nearest the embedding)")
        ax.set_title(panel)
        layers = sorted({i for g in groups for i in g["layers"]})
        ax.set_xticks(layers if len(layers) <= 16 else layers[:: max(1, len(layers) // 12)])
    axes[0][0].set_ylabel("gradient L2 norm (log scale)")
    _plain_log_ticks(axes[0][0].yaxis)  # the panels share y
    if any(g["bad"].get(p) for g in groups for p in panels):
        axes[0][0].plot([], [], color="grey", ls="--", marker="x", label="diverged / interrupted / failed run")
    fig.suptitle(title, fontweight="bold")
    return _save(fig, path)


def _plain_log_ticks(axis: Any) -> None:
    """Plain numbers (0.5, 1, 2) instead of 10^x on a log axis, labelling as many in-between ticks as fit: every
    one when the view spans under a decade, 2/3/5 under 2 decades, 2/5 under 3, only the powers of ten beyond."""
    lo, hi = axis.get_view_interval()
    decades = np.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    subs = (2, 3, 4, 5, 6, 7, 8, 9) if decades < 1 else (2, 3, 5) if decades < 2 else (2, 5) if decades < 3 else ()
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    axis.set_major_locator(LogLocator(base=10))
    axis.set_major_formatter(plain)
    axis.set_minor_locator(LogLocator(base=10, subs=(2, 3, 4, 5, 6, 7, 8, 9)))

    def minor(v: float, _: Any) -> str:
        if v <= 0:
            return ""
        mantissa = v / 10 ** np.floor(np.log10(v))  # 0.2 -> 2.0
        return f"{v:g}" if abs(mantissa - round(mantissa)) < 1e-6 and round(mantissa) in subs else ""

    axis.set_minor_formatter(FuncFormatter(minor) if subs else NullFormatter())


def plot_aspect(path: Path, series: list[dict[str, Any]], metric: str, title: str) -> Path:
    """Final metric vs aspect ratio d_model / n_layers (log x), points annotated with shape and non-embedding
    params; points of one series (same budget and other settings) are joined.

    series: [{label, points: [{aspect, mean, std, color, label, text, bad: [values]}]}]."""
    fig, ax = plt.subplots(figsize=(9.5, 5.4))
    seen: set[str] = set()
    for s in series:
        pts = sorted(s["points"], key=lambda p: p["aspect"])
        good = [p for p in pts if np.isfinite(p["mean"])]
        if len(good) > 1:
            ax.plot([p["aspect"] for p in good], [p["mean"] for p in good], color="0.55", lw=1.3, zorder=2,
                    label=s["label"])
        for p in pts:
            if np.isfinite(p["mean"]):
                ax.errorbar([p["aspect"]], [p["mean"]], yerr=[p["std"] if np.isfinite(p["std"]) else 0],
                            color=p["color"], fmt="o", ms=8, capsize=4, lw=2, zorder=4)
                ax.annotate(p["text"], (p["aspect"], p["mean"]), textcoords="offset points", xytext=(8, 6), fontsize=8.5,
                            color="0.2")
            if p["label"] not in seen:
                ax.scatter([], [], color=p["color"], s=50, label=p["label"])
                seen.add(p["label"])
            for v in p["bad"]:
                ax.scatter([p["aspect"]], [v], color=p["color"], **BAD_MARK)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("aspect ratio d_model / n_layers (log scale; left = deep & narrow, right = shallow & wide)")
    ax.set_ylabel(f"final {metric}")
    ax.set_title(title)
    if any(p["bad"] for s in series for p in s["points"]):
        ax.scatter([], [], color="grey", label="diverged / interrupted / failed run (last finite value)", **BAD_MARK)
    ax.margins(x=0.15, y=0.15)
    return _save(fig, path)


# ---------------------------------------------------------------- the Analysis section (analysis.py)


def _panel_grid(n: int, width: float = 4.6, height: float = 3.6) -> tuple[plt.Figure, list[Any]]:
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols + 1.0, height * rows + 0.8), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def plot_attn_entropy(path: Path, groups: list[dict[str, Any]], x: str, title: str) -> Path:
    """Attention entropy per layer over training: one panel per group, one line (± std band) per layer coloured by
    depth (viridis, dark = layer 0), the uniform-attention ceiling dashed. Panels share the y axis.

    groups: [{label, color, layers: [(i, grid, mean, std)], uniform: float or None}]."""
    fig, axes = _panel_grid(len(groups))
    depth = max((i for g in groups for i, *_ in g["layers"]), default=0) + 1
    cmap = plt.get_cmap("viridis")
    top = max([g["uniform"] for g in groups if g["uniform"] is not None]
              + [float(np.nanmax(m)) for g in groups for _, _, m, _ in g["layers"] if len(m)], default=1.0)
    for ax, g in zip(axes, groups):
        for i, grid, mean, std in g["layers"]:
            color = cmap(0.85 * i / max(1, depth - 1))
            marks = {**line_style(i, len(grid)), "ls": "-"}  # solid: dashed is the uniform ceiling
            ax.plot(grid, mean, color=color, lw=1.8, ms=4, label=f"layer {i}", **marks)
            ok = np.isfinite(std)
            if ok.any():
                ax.fill_between(grid, mean - np.where(ok, std, 0), mean + np.where(ok, std, 0), color=color,
                                alpha=0.15, lw=0, where=ok)
        if g["uniform"] is not None:
            ax.axhline(g["uniform"], color="0.45", ls="--", lw=1.2, label="uniform causal attention")
        ax.set_ylim(0, 1.05 * top)
        ax.set_title(g["label"], color=g["color"], fontsize=11)
        ax.set_xlabel(X_LABELS.get(x, x))
        if x in ("tokens", "flops"):
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes[0].set_ylabel("attention entropy (nats)")
    fig.suptitle(title, fontweight="bold")
    return _save(fig, path)


def plot_logit_lens(path: Path, groups: list[dict[str, Any]], title: str) -> Path:
    """Two panels against the layer read out (0 = embeddings, i = after block i): mean log p(correct next token)
    and top-1 accuracy, one line per group with ± std bars.

    groups: [{label, color, index, n, layers, logp: (mean, std), top1: (mean, std)}]."""
    fig, axes = plt.subplots(1, 2, figsize=(12.4, 4.9))
    depth = max(g["layers"] for g in groups)
    for ax, key, ylabel in ((axes[0], "logp", "mean log p(next token) (nats)"),
                            (axes[1], "top1", "top-1 accuracy")):
        for pos, g in enumerate(groups):
            mean, std = g[key]
            ax.errorbar(np.arange(len(mean)) + dodge(pos, len(groups), 0.06), mean,
                        yerr=np.where(np.isfinite(std), std, 0), color=g["color"], ms=5,
                        capsize=3, lw=2, label=f"{g['label']} (n={g['n']})", **line_style(g["index"], len(mean)))
        ticks = list(range(depth + 1)) if depth <= 16 else list(range(0, depth + 1, max(1, depth // 12)))
        ax.set_xticks(ticks)
        ax.set_xticklabels(["emb" if t == 0 else str(t - 1) for t in ticks])
        ax.set_xlabel("read out after block i (emb = the embeddings, before block 0)")
        ax.set_ylabel(ylabel)
    axes[1].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
    fig.suptitle(title, fontweight="bold")
    return _save(fig, path)


def plot_head_entropy(path: Path, groups: list[dict[str, Any]], title: str) -> Path:
    """Per-head attention entropy as a layer × head heatmap per group, one colour scale for all (viridis) from 0 to
    the largest uniform-attention ceiling; the values are written in the cells when they fit.

    groups: [{label, color, head_entropy: (L, H) array, heads sorted within each layer, uniform: ceiling}]."""
    fig, axes = _panel_grid(len(groups), width=4.2, height=3.4)
    vals = [np.asarray(g["head_entropy"], dtype=float) for g in groups]
    hi = max([float(np.nanmax(v)) for v in vals] + [g["uniform"] for g in groups if g.get("uniform")]) or 1.0
    image = None
    for ax, g, v in zip(axes, groups, vals):
        image = ax.imshow(v, cmap="viridis", vmin=0.0, vmax=hi, aspect="auto", origin="lower")
        L, H = v.shape
        if L * H <= 256:
            for i in range(L):
                for h in range(H):
                    ax.text(h, i, f"{v[i, h]:.2f}", ha="center", va="center", fontsize=7.5,
                            color="black" if v[i, h] / hi > 0.6 else "white")
        ax.set_xticks(range(H) if H <= 16 else range(0, H, max(1, H // 8)))
        ax.set_yticks(range(L) if L <= 16 else range(0, L, max(1, L // 8)))
        ax.set_xlabel("head, sorted by entropy (sharpest first)")
        ax.set_ylabel("layer")
        ax.set_title(g["label"], color=g["color"], fontsize=11)
        ax.grid(False)
    if image is not None:  # one scale for every panel: one colour bar, beside the last panel

        cax = make_axes_locatable(axes[-1]).append_axes("right", size="5%", pad=0.08)
        fig.colorbar(image, cax=cax, label="entropy (nats)")
    fig.suptitle(title, fontweight="bold")
    return _save(fig, path, legend=False)
