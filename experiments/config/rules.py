"""What a config value must be, declared on the schema field it belongs to, and checked once.

A `Rule` describes the allowed values of one field (`Rule("int", lo=1)`: an integer >= 1) and says why a value
is wrong in words (`must be an integer >= 1, got 0`). Schema dataclasses (experiments.config.schema) attach
rules to their fields with `ruled(default, rule)` and inherit `Checked`, whose `__post_init__` checks every
ruled field and raises ConfigError(`<field>: <why>`); the caller that knows where the node sits adds the
prefix (`optim.lr: must be a number > 0, got -1.0`). Choices that live in a registry are given as the registry
itself (a dict or tuple), so a new registry entry is accepted without editing any rule.

Types are OmegaConf's business (a field typed `int` refuses 'abc' when the config is composed); rules add what a
type cannot say: bounds, choices, non-empty strings, list lengths. `describe_type(hint)` words a type hint the
same way, for a value OmegaConf refused (`an integer`, `a number or null`).
Not handled: rules that relate two fields (a node's own `__post_init__` checks those after `super().__post_init__()`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

from experiments.config.errors import ConfigError


@dataclass(frozen=True)
class Rule:
    """What one config value must be: kind in int | number | bool | str | choice | numbers | ints | strs | paths."""

    kind: str
    lo: float | None = None  # bound on the value (int/number) or on each item (numbers/ints)
    hi: float | None = None
    lo_open: bool = False  # True: value > lo (else >=)
    hi_open: bool = False  # True: value < hi (else <=)
    nullable: bool = False
    choices: Collection = ()  # choice: the allowed values (a registry dict's keys count)
    length: int | None = None  # numbers/ints/strs: exact item count

    def check(self, v: Any) -> str | None:
        """None if v is allowed, else why not (no key in it): `must be an integer >= 1, got 'abc'`."""
        if v is None:
            return None if self.nullable else f"must be {self.describe()}, got null"
        if self.kind == "choice":
            return None if v in self.choices else f"unknown value {v!r}; choose from {self._choices()}"
        if self.kind == "paths":  # one file pattern, or a list of them
            ok = isinstance(v, str) and v != "" or isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
            return None if ok else f"must be {self.describe()}, got {v!r}"
        if self.kind in ("numbers", "ints", "strs"):
            item = {"numbers": Rule("number", self.lo, self.hi, self.lo_open, self.hi_open),
                    "ints": Rule("int", self.lo, self.hi, self.lo_open, self.hi_open), "strs": Rule("str")}[self.kind]
            if not isinstance(v, (list, tuple)) or (self.length is not None and len(v) != self.length):
                return f"must be {self.describe()}, got {v!r}"
            return None if all(item.check(x) is None for x in v) else f"must be {self.describe()}, got {v!r}"
        return None if self._ok(v) else f"must be {self.describe()}, got {v!r}"

    def _ok(self, v: Any) -> bool:
        if self.kind == "bool":
            return isinstance(v, bool)
        if self.kind == "str":
            return isinstance(v, str) and v != ""
        if isinstance(v, bool) or not isinstance(v, int if self.kind == "int" else (int, float)):
            return False
        if self.kind == "number" and not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return not (self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi))

    def _choices(self) -> str:
        names = sorted(self.choices, key=str)
        return ", ".join(map(str, names)) + (" or null" if self.nullable else "")

    def describe(self) -> str:
        """`an integer >= 1`, `a number in (0, 1)`, `a list of 2 numbers in [0, 1)`, `true or false`..."""
        if self.kind == "choice":
            return f"one of {self._choices()}"
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "a non-empty string" + (" or null" if self.nullable else "")
        if self.kind == "paths":
            return "a file or glob pattern, or a list of them"
        if self.kind in ("numbers", "ints", "strs"):
            n = f"{self.length} " if self.length is not None else ""
            noun = {"numbers": "numbers", "ints": "integers", "strs": "strings"}[self.kind]
            return f"a list of {n}{noun}{self._range()}"
        noun = "an integer" if self.kind == "int" else "a number"
        return noun + self._range() + (" or null" if self.nullable else "")

    def _range(self) -> str:
        if self.lo is not None and self.hi is not None:
            return f" in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f" {'>' if self.lo_open else '>='} {self.lo:g}"
        if self.hi is not None:
            return f" {'<' if self.hi_open else '<='} {self.hi:g}"
        return ""


POS_INT = Rule("int", lo=1)
POS_INT_OR_NULL = Rule("int", lo=1, nullable=True)
POS_NUMBER = Rule("number", lo=0, lo_open=True)
FRACTION = Rule("number", lo=0, hi=1, lo_open=True, hi_open=True)  # in (0, 1): a share held out
STR = Rule("str")


def choice(names: Collection, nullable: bool = False) -> Rule:
    """A Rule that allows the names of a registry (its keys, for a dict); `nullable` adds null (off)."""
    return Rule("choice", choices=tuple(names), nullable=nullable)


def ruled(default: Any = MISSING, rule: Rule | None = None) -> Any:
    """A dataclass field with a default (MISSING: `???`, the YAML option sets it) and the Rule its values obey."""
    metadata = {"rule": rule} if rule else {}
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_rule(cls: type, name: str) -> Rule | None:
    """The Rule of field `name` of schema class `cls`, or None (no rule, or no such field)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("rule")
    return None


class Checked:
    """Base of the schema dataclasses: construction checks every field that carries a Rule.

    `???` (unset) is not checked here: OmegaConf refuses to build an object with one, naming the key."""

    def __post_init__(self) -> None:
        type(self).check_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})  # type: ignore

    @classmethod
    def check_fields(cls, values: dict[str, Any]) -> None:
        """The values of cls's ruled fields in `values` against their Rules: ConfigError(`<field>: <why>`)."""
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            rule, value = f.metadata.get("rule"), values.get(f.name, MISSING)
            if rule is not None and value != MISSING and (why := rule.check(value)):
                raise ConfigError(f"{f.name}: {why}")


_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def describe_type(hint: Any) -> str:
    """A type hint in words: int -> `an integer`, `float | None` -> `a number or null`, list[int] -> `a list`."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        words = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(words) + (" or null" if type(None) in args else "")
    if typing.get_origin(hint) in (list, tuple) or hint in (list, tuple):
        return "a list"
    if dataclasses.is_dataclass(hint):
        return "a group of keys"
    return _TYPE_WORDS.get(hint, getattr(hint, "__name__", str(hint)))


def _field_hint(cls: Any, name: Any) -> Any:
    try:
        return typing.get_type_hints(cls)[name]
    except (KeyError, TypeError, NameError):
        return None


def describe_field(cls: Any, name: Any) -> str | None:
    """What field `name` of schema class `cls` must be, in words: its Rule's wording, else its type's; None if
    `cls` has no such field."""
    hint = _field_hint(cls, name)
    if hint is None:
        return None
    rule = field_rule(cls, name) if dataclasses.is_dataclass(cls) else None
    return rule.describe() if rule else describe_type(hint)


def close_key(key: str, valid: Collection[str]) -> str:
    """`did you mean train.steps?` for the valid key closest to `key` (difflib), else `` (nothing close)."""
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.6)
    return f"did you mean {near[0]}?" if near else ""


def omegaconf_error(e: Exception, prefix: str = "") -> ConfigError:
    """An OmegaConf error on a schema node as one ConfigError naming the full key (`prefix` + OmegaConf's key):

        missing:       `data.paths: is required but not set (it is ??? in the config); pass data.paths=...`
        unknown key:   `optim.lrr: unknown key; did you mean optim.lr?`
        wrong type:    `seed: must be an integer >= 0, got 'abc'`
    Anything else: `<key>: <OmegaConf's first line>`."""
    inner = getattr(e, "full_key", None) or ""
    key = ".".join(p for p in (prefix, inner) if p) or "config"
    if isinstance(e, MissingMandatoryValue):
        return ConfigError(f"{key}: is required but not set (it is ??? in the config); pass {key}=...")
    cls = getattr(e, "object_type", None)
    if isinstance(e, (ConfigKeyError, ConfigAttributeError)) and dataclasses.is_dataclass(cls):
        parent = key.rsplit(".", 1)[0] + "." if "." in key else ""
        valid = [parent + f.name for f in dataclasses.fields(cls)]
        hint = close_key(key, valid) or f"valid keys here: {', '.join(f.name for f in dataclasses.fields(cls))}"
        return ConfigError(f"{key}: unknown key; {hint}")
    if isinstance(e, ValidationError) and (what := describe_field(cls, getattr(e, "key", None))):
        return ConfigError(f"{key}: must be {what}, got {getattr(e, 'value', None)!r}")
    first = (getattr(e, "msg", None) or str(e)).splitlines()[0]
    if isinstance(e, ValidationError) and (to := re.search(r"could not be converted to (\w+)", first)):
        what = _OMEGACONF_TYPES.get(to.group(1), to.group(1))  # a list item: optim.betas[1]
        return ConfigError(f"{key}: must be {what}, got {getattr(e, 'value', None)!r}")
    return ConfigError(f"{key}: {first}")


_OMEGACONF_TYPES = {"Integer": "an integer", "Float": "a number", "Boolean": "true or false"}
