"""The gradient-norm-per-layer figures of the findings' init measurements (measure_init.py, measure_encdec.py).

    layer_band(ax, grads, color="#d62728", label="post-LN")    # grads (seeds, layers): mean, min–max bars
    finish(fig, axes, path, "Gradient norm ... (mean, min–max over seeds)")

Not handled: what is measured (the measurement modules); matplotlib is imported by the callers (Agg backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def layer_band(ax: Any, grads: Any, **style: Any) -> None:
    """One line: the mean over seeds of grads (seeds, layers) against the layer (1-based), min–max error bars."""
    import numpy as np

    g = np.asarray(grads)  # (seeds, layers)
    mean = g.mean(axis=0)
    layers = np.arange(1, g.shape[1] + 1)
    ax.errorbar(layers, mean, yerr=[mean - g.min(axis=0), g.max(axis=0) - mean], marker="o", ms=3, capsize=2,
                **style)


def finish(fig: Any, axes: Any, path: Path, title: str, titles: list[str]) -> None:
    """Log y, labels, grid, one title per panel, the legend on the last; save to path and close."""
    import matplotlib.pyplot as plt

    for ax, t in zip(axes[0], titles):
        ax.set_yscale("log")
        ax.set_xlabel("layer")
        ax.set_title(t)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("‖∂loss/∂W2‖ at init")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
