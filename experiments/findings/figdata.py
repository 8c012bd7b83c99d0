"""What a figure plots, as data: `<name>.plot.json` beside each PNG a finding's doc shows, so that a rebuild of the doc
can be checked figure by figure without comparing PNG bytes (which change with the matplotlib version).

    with capture():                          # every matplotlib figure saved inside the block ...
        build_report(...)                    # ... gets <png>.plot.json beside it
    plotted(fig)                             # the dict written: one entry per axes

Per axes: title, axis labels and scales; each line's label and (x, y) points; each collection's label, offsets
(scatter points) and path vertices (filled bands, error bars); each bar's (x, y, width, height). Numbers are rounded
to DIGITS significant digits, non-finite ones written as null. A figure saved through a temp file (the repo's
atomic_write: `.<name>.<random>.tmp` beside the PNG) is named after its PNG; its JSON is written when the block
ends, once the PNG is in place.
Not handled: texts and annotations, colours and styles, images (imshow), legends drawn outside an axes.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any, Iterator

DIGITS = 6
SUFFIX = ".plot.json"


def plot_json(png: str | os.PathLike) -> Path:
    """The plotted-data file of a PNG: curve_val_loss.png -> curve_val_loss.plot.json."""
    png = Path(png)
    return png.with_name(png.stem + SUFFIX)


def _num(v: Any) -> float | None:
    v = float(v)
    return float(f"{v:.{DIGITS}g}") if math.isfinite(v) else None


def _points(array: Any) -> list[list[float | None]]:
    import numpy as np

    a = np.ma.filled(np.ma.asarray(array, dtype=float), np.nan)
    return [[_num(v) for v in row] for row in a.reshape(len(a), -1)] if a.size else []


def _label(artist: Any) -> str:
    label = str(artist.get_label())
    return "" if label.startswith("_") else label  # matplotlib's unnamed artists: "_child3", "_nolegend_"


def plotted(fig: Any) -> dict[str, Any]:
    """The data a matplotlib figure plots (module docstring)."""
    from matplotlib.patches import Rectangle

    axes = []
    for ax in fig.axes:
        axes.append({
            "title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "lines": [{"label": _label(ln), "xy": _points(ln.get_xydata())} for ln in ax.lines],
            "collections": [{"label": _label(c), "offsets": _points(c.get_offsets()),
                             "paths": [_points(p.vertices) for p in c.get_paths()]} for c in ax.collections],
            "bars": [[_num(p.get_x()), _num(p.get_y()), _num(p.get_width()), _num(p.get_height())]
                     for p in ax.patches if isinstance(p, Rectangle)],
        })
    title = fig._suptitle.get_text() if getattr(fig, "_suptitle", None) is not None else ""
    return {"suptitle": title, "axes": axes}


def _target(fname: Any) -> Path | None:
    """The PNG a savefig call writes: its path, or the PNG an atomic_write temp file will become."""
    name = fname if isinstance(fname, (str, os.PathLike)) else getattr(fname, "name", None)  # a path, or a file
    if not isinstance(name, (str, os.PathLike)):
        return None
    path = Path(name)
    base = path.name
    if base.startswith(".") and base.endswith(".tmp"):
        return path.with_name(base[1:-len(".tmp")].rsplit(".", 1)[0])
    return path


@contextlib.contextmanager
def capture() -> Iterator[list[Path]]:
    """Within the block, every Figure.savefig also records what the figure plots; when the block ends, each saved
    PNG that exists gets its .plot.json (the list yielded fills with their paths)."""
    from matplotlib.figure import Figure

    saved: dict[Path, dict[str, Any]] = {}
    original = Figure.savefig

    def savefig(self: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
        target = _target(fname)
        if target is not None:
            saved[target] = plotted(self)
        return original(self, fname, *args, **kwargs)

    written: list[Path] = []
    Figure.savefig = savefig
    try:
        yield written
    finally:
        Figure.savefig = original
        for png, data in saved.items():
            if png.is_file():
                plot_json(png).write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n")
                written.append(plot_json(png))
