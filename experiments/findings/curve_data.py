"""A run's metrics.jsonl cut to a few dozen points per curve, for a finding's committed data (rundata.py).

    curve = decimate(lines, keys=CURVE_KEYS)   # {"train": {"step": [...], "train/loss": [...]}, "eval": {...}}
    lines = expand(curve)                      # metric lines again, in step order: what experiments.compare reads
    decimate(expand(curve), keys) == curve     # a decimated curve is its own decimation

Kinds: a line holding a `val/...` or `test/...` key is an "eval" line, any other a "train" line; each kind is
stored as columns (one list per key, None where a line lacks the key). Keys: `step` and `tokens` always, then those
matching one of the `keys` patterns (regular expressions, matched whole): CURVE_KEYS by default, train/loss, every
val/ and test/ loss and bits per byte (`test/<corpus>/loss` too), attn_max_logit; a line left with no key beyond
step and tokens is dropped.
Points: a kind with at most MAX_POINTS lines keeps all of them; a longer one keeps its anchors and fills up to
MAX_POINTS with lines evenly spaced (by index) over the rest. Anchors: for every kept key, the lines of its first
and last finite value and, for a loss (a key ending in loss, bpb or ppl), of its minimum: what compare reads as a
run's value at init, final value and best value. Values: an anchor's values are kept exact, every other number is
rounded to ROUND_DIGITS significant digits (kept exact where rounding would take a loss below its minimum, so the
best value stays the best); integers, strings and non-finite numbers (a diverged run's nan / inf) as they are.
Lines come back ordered by step, a train line before the eval line of the same step (as the trainer logs them).
Not handled: keys whose best is a maximum (accuracy, MFU: no max anchor), the time a line was logged (`time` is not
kept unless a pattern asks for it), lines of a third kind.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

MAX_POINTS = 32
ROUND_DIGITS = 6
KINDS = ("train", "eval")
AXES = ("step", "tokens")  # kept in every kind: the x axes of the curves
CURVE_KEYS = (r"train/loss", r"(val|test)(/[^/]+)?/(loss|bpb)", r"attn_max_logit")
LOSS = re.compile(r"(loss|bpb|ppl)$")  # a key whose best value is its minimum
EVAL = re.compile(r"^(val|test)/")


def kind(line: dict[str, Any]) -> str:
    return "eval" if any(EVAL.match(k) for k in line) else "train"


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _rounded(v: Any) -> Any:
    if isinstance(v, float) and math.isfinite(v):
        return float(f"{v:.{ROUND_DIGITS}g}")
    return v


def _kept_keys(lines: Sequence[dict[str, Any]], patterns: Sequence[str]) -> list[str]:
    """step and tokens (where logged), then the keys matching a pattern, sorted."""
    compiled = [re.compile(p) for p in patterns]
    seen = dict.fromkeys(k for line in lines for k in line)
    return [*(a for a in AXES if a in seen),
            *sorted(k for k in seen if k not in AXES and any(p.fullmatch(k) for p in compiled))]


def anchors(columns: dict[str, list[Any]]) -> set[int]:
    """Indices of the lines that hold each key's first and last finite value, and a loss's minimum."""
    out: set[int] = set()
    for key, values in columns.items():
        finite = [i for i, v in enumerate(values) if _finite(v)]
        if not finite:
            continue
        out.update((finite[0], finite[-1]))
        if LOSS.search(key):
            out.add(min(finite, key=lambda i: values[i]))  # the first line at the minimum
    return out


def _pick(n: int, fixed: set[int]) -> list[int]:
    """All of range(n) when n <= MAX_POINTS, else `fixed` plus evenly spaced others up to MAX_POINTS, sorted."""
    if n <= MAX_POINTS:
        return list(range(n))
    rest = [i for i in range(n) if i not in fixed]
    room = max(MAX_POINTS - len(fixed), 0)
    if room >= len(rest):
        return sorted(fixed | set(rest))
    spaced = {rest[round(j * (len(rest) - 1) / (room - 1))] for j in range(room)} if room > 1 else (
        {rest[0]} if room == 1 else set())
    return sorted(fixed | spaced)


def _decimate_kind(lines: list[dict[str, Any]], keys: list[str]) -> dict[str, list[Any]]:
    keys = [k for k in keys if any(k in line for line in lines)]
    cols = {k: [line.get(k) for line in lines] for k in keys}
    keep = _pick(len(lines), anchors({k: v for k, v in cols.items() if k not in AXES}))
    cols = {k: [v[i] for i in keep] for k, v in cols.items()}
    fixed = anchors({k: v for k, v in cols.items() if k not in AXES})
    out: dict[str, list[Any]] = {}
    for key, values in cols.items():
        finite = [v for v in values if _finite(v)]
        floor = min(finite) if finite and LOSS.search(key) else None
        out[key] = [v if i in fixed or (floor is not None and _finite(v) and _rounded(v) < floor) else _rounded(v)
                    for i, v in enumerate(values)]
    return out


def decimate(lines: Sequence[dict[str, Any]], keys: Sequence[str] = CURVE_KEYS) -> dict[str, dict[str, list[Any]]]:
    """The curve of a run's metric lines (module docstring): {kind: {key: [values]}}; a kind without a line left
    out. Each line is cut to the kept keys before its kind is read, so a curve's lines keep their kind."""
    kept = _kept_keys(lines, keys)
    cut = [{k: line[k] for k in kept if line.get(k) is not None} for line in lines]
    cut = [line for line in cut if any(k not in AXES for k in line)]
    return {k: _decimate_kind(mine, kept) for k in KINDS if (mine := [line for line in cut if kind(line) == k])}


def expand(curve: dict[str, dict[str, list[Any]]]) -> list[dict[str, Any]]:
    """The metric lines of a curve, ordered by step (a train line first at equal steps); None values left out."""
    rows = []
    for rank, k in enumerate(KINDS):
        cols = curve.get(k) or {}
        n = max((len(v) for v in cols.values()), default=0)
        for i in range(n):
            line = {key: values[i] for key, values in cols.items() if i < len(values) and values[i] is not None}
            step = line.get("step")
            rows.append(((step if _finite(step) else -math.inf, rank, i), line))
    return [line for _, line in sorted(rows, key=lambda r: r[0])]
