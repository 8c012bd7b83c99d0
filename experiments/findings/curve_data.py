"""A run's metrics.jsonl cut to a few dozen points per curve, for a finding's committed data (rundata.py).

    curve = decimate(lines)                    # {"train": {"step": [...], "train/loss": [...]}, "eval": {...}}
    lines = expand(curve)                      # metric lines again: what experiments.compare reads
    decimate(expand(curve)) == curve           # a decimated curve is its own decimation (same keys and points)

Kinds: a line holding a `val/...` or `test/...` key is an "eval" line, any other a "train" line; each kind is
stored as columns (one list per key, None where a line lacks the key); `tokens` as {"per_step": k} instead when every
line's tokens is its step times the integer k (a constant batch: the usual case). Keys: `step` and `tokens` always;
as curves, those matching one of the `keys` patterns (regular expressions, matched whole; CURVE_KEYS by default:
train/loss and every val/ and test/ loss, `test/<corpus>/loss` too: what the docs' curve figures draw); as points,
those matching a `points` pattern (POINT_KEYS by default: val/ and test/ bits per byte, attn_max_logit), kept only
at their anchors (below: what compare and the rules read of them), null elsewhere. A null counts as absent; a line
left with no value beyond step and tokens is dropped.
Points: a kind with at most MAX_POINTS lines keeps all of them; a longer one keeps its anchors and fills up to
MAX_POINTS with lines evenly spaced (by index) over the rest. Anchors: for every kept key, the lines of its first
and last finite value and, for a loss (a key ending in loss, bpb or ppl), of its minimum: what compare reads as a
run's value at init, final value and best value. Values: an anchor's values are kept exact, every other number is
rounded to ROUND_DIGITS significant digits (kept exact where rounding would take a loss below its minimum, so the
best value stays the best); integers, strings and non-finite numbers (a diverged run's nan / inf) as they are.
Lines come back in their order within a kind, the two kinds merged by step (a train line before the eval line of the
same step, as the trainer logs them; a resumed run's repeated steps keep their order).
Not handled: keys whose best is a maximum (accuracy, MFU: no max anchor); the other x axes (`flops`, `time`: kept
only when a pattern asks for them; a run's budget is its summary's tokens / flops / steps); lines of a third kind.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

MAX_POINTS = 16
ROUND_DIGITS = 5
KINDS = ("train", "eval")
AXES = ("step", "tokens")  # kept in every kind: the x axes of the curves
CURVE_KEYS = (r"train/loss", r"(val|test)(/[^/]+)?/loss")
POINT_KEYS = (r"(val|test)(/[^/]+)?/bpb", r"attn_max_logit")
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


def _decimate_kind(lines: list[dict[str, Any]], keys: list[str], points: set[str]) -> dict[str, Any]:
    keys = [k for k in keys if any(k in line for line in lines)]
    cols = {k: [line.get(k) for line in lines] for k in keys}
    keep = _pick(len(lines), anchors({k: v for k, v in cols.items() if k not in AXES}))
    cols = {k: [v[i] for i in keep] for k, v in cols.items()}
    fixed = anchors({k: v for k, v in cols.items() if k not in AXES})
    out: dict[str, Any] = {}
    for key, values in cols.items():
        own = anchors({key: values})
        finite = [v for v in values if _finite(v)]
        floor = min(finite) if finite and LOSS.search(key) else None
        out[key] = [(v if i in own else None) if key in points else
                    v if i in fixed or (floor is not None and _finite(v) and _rounded(v) < floor) else _rounded(v)
                    for i, v in enumerate(values)]
    held = [i for i in range(len(keep)) if any(out[k][i] is not None for k in out if k not in AXES)]
    out = {k: [v[i] for i in held] for k, v in out.items()}
    if (k := _per_step(out.get("step"), out.get("tokens"))) is not None:
        out["tokens"] = {"per_step": k}
    return out


def _per_step(steps: list[Any] | None, tokens: list[Any] | None) -> int | None:
    """k when every line's tokens is exactly its step times one integer k (a constant batch), else None."""
    if not steps or not tokens or not all(type(v) is int for v in (*steps, *tokens)):
        return None
    first = next(((s, t) for s, t in zip(steps, tokens) if s != 0), None)
    k = first[1] // first[0] if first else None
    return k if k is not None and all(t == s * k for s, t in zip(steps, tokens)) else None


def _column(cols: dict[str, Any], key: str, n: int) -> list[Any]:
    values = cols[key]
    if isinstance(values, dict):  # {"per_step": k}: step times k
        return [None if s is None else s * values["per_step"] for s in cols.get("step", [None] * n)]
    return values


def decimate(lines: Sequence[dict[str, Any]], keys: Sequence[str] = CURVE_KEYS,
             points: Sequence[str] = POINT_KEYS) -> dict[str, dict[str, Any]]:
    """The curve of a run's metric lines (module docstring): {kind: {key: [values]}}; a kind without a line left
    out. Each line is cut to the kept keys before its kind is read, so a curve's lines keep their kind."""
    kept = _kept_keys(lines, [*keys, *points])
    pointed = set(kept) - set(_kept_keys(lines, keys))  # a key both patterns match is a curve
    cut = [{k: line[k] for k in kept if line.get(k) is not None} for line in lines]
    cut = [line for line in cut if any(k not in AXES for k in line)]
    return {k: _decimate_kind(mine, kept, pointed) for k in KINDS
            if (mine := [line for line in cut if kind(line) == k])}


def expand(curve: dict[str, dict[str, list[Any]]]) -> list[dict[str, Any]]:
    """The metric lines of a curve (None values left out): each kind's lines in their own order, the kinds merged by
    step (a train line first at equal steps), so a log that is in step order comes back in its own order."""
    per_kind = []
    for k in KINDS:
        cols = curve.get(k) or {}
        n = max((len(v) for v in cols.values() if isinstance(v, list)), default=0)
        full = {key: _column(cols, key, n) for key in cols}
        per_kind.append([{key: values[i] for key, values in full.items() if i < len(values) and values[i] is not None}
                         for i in range(n)])
    out: list[dict[str, Any]] = []
    train, evals = per_kind
    i = j = 0
    while i < len(train) or j < len(evals):
        if j >= len(evals) or (i < len(train) and _step(train[i]) <= _step(evals[j])):
            out.append(train[i])
            i += 1
        else:
            out.append(evals[j])
            j += 1
    return out


def _step(line: dict[str, Any]) -> float:
    step = line.get("step")
    return float(step) if _finite(step) else -math.inf
