"""OmegaConf resolvers used by conf/ (registered on import of experiments.run.train / experiments.config.compose).

`${archlab_dirname:...}` turns Hydra's override string into a directory name that keeps every `key=value`
readable: `model/pos=rope,seed=0` -> `model.pos=rope,seed=0`. A long value is shortened on its own, never by
cutting the name's tail (which used to drop `seed=` off the end): a list of paths becomes its first file name,
`+N` more and a short hash of the whole value (`data.paths=[data/a.txt,data/b.txt,data/c.txt]` ->
`data.paths=a.txt+2-87d429`), any other long value its first characters + a short hash. Characters outside
`A-Za-z0-9._=,+@-` become `_`; `/` in keys becomes `.`. Empty -> `run`.
`${archlab_ratio:x,num,den}` is round(x * num / den) as an int (half to even, Python's round), for a size that
follows another: `model.d_mlp: ${archlab_ratio:${model.d_model},8,3}` is SwiGLU's equal-parameter width (8/3 of
d_model: 85 at 32, 171 at 64, 341 at 128; conf/finding/ffn_v3/swiglu.yaml). Its arguments must be numbers, den != 0.
Not handled: more keys than fit in MAX_NAME even with hash-only values (hundreds of characters of key names);
then the name is cut and ends in a hash of the whole string, so it stays unique but loses the last keys.
"""

from __future__ import annotations

import hashlib
import re

from omegaconf import OmegaConf

_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@-]+")
MAX_VALUE = 24  # a value longer than this (after making it filename-safe) is shortened
MAX_NAME = 200  # the whole name stays under this (filesystems allow 255 bytes per name)


def _short_hash(text: str, n: int = 6) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:n]


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside [...], {...}, (...) and quotes: "a=1,b=[x,y]" -> ["a=1", "b=[x,y]"]."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text) or "_"


def _basename(item: str) -> str:
    return item.strip().strip("'\"").rstrip("/").rsplit("/", 1)[-1]


def short_value(value: str, limit: int = MAX_VALUE) -> str:
    """A readable, filename-safe stand-in for one override value (unchanged when short and safe).

    >>> short_value("rope")
    'rope'
    >>> short_value("[data/a.txt,data/b.txt,data/c.txt]")
    'a.txt+2-87d429'
    """
    safe = _safe(value)
    if len(safe) <= limit and safe == value:
        return safe
    tag = _short_hash(value)
    if value.startswith("[") and value.endswith("]"):
        items = [i for i in _split_top(value[1:-1]) if i.strip()]
        head = _safe(_basename(items[0]))[: limit - 4] if items else "empty"
        return f"{head}+{len(items) - 1}-{tag}" if len(items) > 1 else f"{head}-{tag}"
    if "/" in value:  # a path: its file name + a hash of the whole path (two dirs' tok.json differ)
        safe = _safe(_basename(value))
    return f"{safe[: limit - 7]}-{tag}"


def dirname(overrides: str) -> str:
    """A filesystem-safe directory name for an override string, every key kept.

    >>> dirname("model/pos=rope,seed=0")
    'model.pos=rope,seed=0'
    >>> dirname("data.paths=[a b.txt]")
    'data.paths=a_b.txt-10c3c4'
    """
    overrides = str(overrides)
    if not overrides.strip():
        return "run"
    pairs = []
    for part in _split_top(overrides):
        key, eq, value = part.partition("=")
        pairs.append((_safe(key.replace("/", ".")), value if eq else None))

    def join(shorten) -> str:
        return ",".join(k if v is None else f"{k}={shorten(v)}" for k, v in pairs)

    name = join(short_value)
    if len(name) > MAX_NAME:  # many keys: every value becomes a short hash (still one per key)
        name = join(lambda v: v if _safe(v) == v and len(v) <= 8 else _short_hash(v))
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - 9]}-{_short_hash(overrides, 8)}"
    return name


def ratio(x: float, num: float, den: float) -> int:
    """round(x * num / den): `${archlab_ratio:${model.d_model},8,3}` -> 341 at d_model 128."""
    for name, v in (("x", x), ("num", num), ("den", den)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"archlab_ratio: {name} must be a number, got {v!r}")
    if den == 0:
        raise ValueError("archlab_ratio: den must not be 0")
    return int(round(x * num / den))


def register() -> None:
    OmegaConf.register_new_resolver("archlab_dirname", dirname, replace=True)
    OmegaConf.register_new_resolver("archlab_ratio", ratio, replace=True)


register()
