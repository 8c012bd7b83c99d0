"""What a tuned sweep declares (`hydra.sweeper.*` of `hydra/sweeper=tuned`), checked before any run starts.

    spec = TuneSpec.declared(tune={"optim.lr": [3e-4, 1e-3, 3e-3, 1e-2]}, tune_seeds=[1000], seeds=[0, 1, 2],
                             tune_fraction=0.25, widen=2)
    arms = spec.arms(parsed_overrides)      # [[("model/pos", "model/pos=learned")], ...] plus the fixed overrides
    horizon_override(train_node, 0.25)      # ("train.steps", 200, 50): the budget key the run uses, scaled
    d = declare(declared_of(sweeper_node), ["model/pos=learned,rope"])   # all of the above: what TunedSweep.plan
    d.set_per_run()                         # and experiments.config.precheck (tune_check.py) read

Refused, each as one TuneError line (`hydra.sweeper.<key>: ...`): a key that is not one of KEYS; a tune node that is not one key with a list of
numbers; fewer than MIN_POINTS points; a point <= 0 or repeated; no tune seeds or no fresh seeds; a seed in both
lists or twice in one; a tune_fraction outside (0, 1]; a widen or confirm_widen that is not an int >= 0; a confirm
that is not true or false (null: false); `seed` or the tuned key
swept or set in `hydra.sweeper.params` or on the command line (the sweeper sets both per run); a sweep that is not a
list of values (interval()); a `proxy` that is not a mapping of keys to single values, sets `seed` or the tuned
key, or leaves a swept key unset (proxy_overrides); `params` that is not a mapping of keys to values.
`declare` is the one place that reads a declaration (hydra.sweeper's keys plus the command line) into a Declaration:
the sweeper checks it when it starts, and the up-front check (tune_check.py) before Hydra starts, where the keys and
values it sets per run (`set_per_run`: the tuned key at every grid point, the proxy's and params' values) are checked
as every command-line override is (`optim.lrr` -> did you mean optim.lr?).
The horizon scales whichever budget the run holds (train.flops > train.tokens > train.steps, as
experiments/run/budget.py reads them): a tuning run trains `tune_fraction` of it, at least one step or token.
Not handled: tuning more than one key at a time (a joint grid), or grids that are not lists (log-uniform ranges).
"""

from __future__ import annotations

import difflib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

from experiments.config.errors import ConfigError

MIN_POINTS = 4
SEED_KEY = "seed"
KEYS = ("params", "tune", "tune_seeds", "seeds", "tune_fraction", "widen", "proxy", "confirm",
        "confirm_widen")  # hydra.sweeper's keys
CONFIRM_WIDEN = 1  # confirm_widen when not declared: one more x2 step beyond a confirm edge
TARGET = "hydra_plugins.archlab_tuned_sweeper.tuned_sweeper.TunedSweeper"  # hydra.sweeper._target_ (conf/hydra/sweeper)


class TuneError(ConfigError):
    """A tuned sweep's declaration that cannot run; one line naming the hydra.sweeper key."""


def unknown_key(key: str) -> str:
    """The message for a hydra.sweeper key the tuned sweeper does not take (a typo, most likely)."""
    close = difflib.get_close_matches(key, KEYS, n=1)
    return (f"hydra.sweeper.{key}: not a key of the tuned sweeper" + (f"; did you mean {close[0]}?" if close else "")
            + f" (its keys: {', '.join(KEYS)})")


def _fmt(values: Sequence[Any]) -> str:
    return ", ".join(str(v) for v in values)


def _number_list(name: str, value: Any, kind: type) -> list:
    """A list of `kind` (int or float) from the plain YAML/CLI value; TuneError naming `name` otherwise."""
    if not isinstance(value, (list, tuple)):
        raise TuneError(f"hydra.sweeper.{name}: must be a list of {kind.__name__}s, got {value!r}")
    for v in value:
        ok = isinstance(v, int) if kind is int else isinstance(v, (int, float))
        if not ok or isinstance(v, bool):
            raise TuneError(f"hydra.sweeper.{name}: must be a list of {kind.__name__}s, got {v!r} in [{_fmt(value)}]")
    return [kind(v) for v in value]


@dataclass(frozen=True)
class TuneSpec:
    key: str                 # the tuned key, e.g. optim.lr
    grid: tuple[float, ...]  # ascending
    tune_seeds: tuple[int, ...]
    seeds: tuple[int, ...]
    fraction: float
    widen: int
    confirm: bool = False    # the confirm phase: best lr, x2 and /2 of it at the full budget on the tune seeds
    confirm_widen: int = CONFIRM_WIDEN  # at most this many more x2 steps per side beyond a confirm edge

    @classmethod
    def declared(cls, *, tune: Any, tune_seeds: Any, seeds: Any, tune_fraction: Any, widen: Any, confirm: Any = None,
                 confirm_widen: Any = None) -> TuneSpec:
        """The checked declaration (module docstring); TuneError for the first thing wrong."""
        if not isinstance(tune, dict) or len(tune) != 1:
            n = len(tune) if isinstance(tune, dict) else "no"
            raise TuneError(f"hydra.sweeper.tune: must name one key and its grid, e.g. {{optim.lr: [3e-4, 1e-3, "
                            f"3e-3, 1e-2]}}; got {n} keys")
        (key, values), = tune.items()
        grid = _number_list(f"tune.{key}", values, float)
        if len(grid) < MIN_POINTS:
            raise TuneError(f"hydra.sweeper.tune.{key}: a log grid needs at least {MIN_POINTS} points (so the best "
                            f"one can be interior), got {len(grid)}: [{_fmt(values)}]")
        if any(not math.isfinite(v) or v <= 0 for v in grid):
            raise TuneError(f"hydra.sweeper.tune.{key}: every point must be a number > 0 (a log grid), got "
                            f"[{_fmt(values)}]")
        if len(set(grid)) != len(grid):
            raise TuneError(f"hydra.sweeper.tune.{key}: a point is repeated: [{_fmt(values)}]")
        tuning, fresh = _number_list("tune_seeds", tune_seeds, int), _number_list("seeds", seeds, int)
        for name, lst in (("tune_seeds", tuning), ("seeds", fresh)):
            if not lst:
                raise TuneError(f"hydra.sweeper.{name}: needs at least one seed")
            if len(set(lst)) != len(lst):
                raise TuneError(f"hydra.sweeper.{name}: a seed is repeated: [{_fmt(lst)}]")
        both = sorted(set(tuning) & set(fresh))
        if both:
            raise TuneError(f"hydra.sweeper.seeds: the final runs need fresh seeds, but {_fmt(both)} "
                            f"{'is' if len(both) == 1 else 'are'} also in tune_seeds")
        if isinstance(tune_fraction, bool) or not isinstance(tune_fraction, (int, float)) \
                or not 0 < tune_fraction <= 1:
            raise TuneError(f"hydra.sweeper.tune_fraction: must be a number in (0, 1] (the share of the run's budget "
                            f"a tuning run trains), got {tune_fraction!r}")
        if isinstance(widen, bool) or not isinstance(widen, int) or widen < 0:
            raise TuneError(f"hydra.sweeper.widen: must be an integer >= 0 (extra points per side), got {widen!r}")
        if confirm is not None and not isinstance(confirm, bool):
            raise TuneError(f"hydra.sweeper.confirm: must be true or false (confirm each arm's best lr at the full "
                            f"budget), got {confirm!r}")
        confirm_widen = CONFIRM_WIDEN if confirm_widen is None else confirm_widen
        if isinstance(confirm_widen, bool) or not isinstance(confirm_widen, int) or confirm_widen < 0:
            raise TuneError(f"hydra.sweeper.confirm_widen: must be an integer >= 0 (extra x2 steps per side beyond a "
                            f"confirm edge), got {confirm_widen!r}")
        return cls(key=str(key), grid=tuple(sorted(grid)), tune_seeds=tuple(tuning), seeds=tuple(fresh),
                   fraction=float(tune_fraction), widen=int(widen), confirm=bool(confirm),
                   confirm_widen=int(confirm_widen))

    def split(self, overrides: list[Override]) -> tuple[list[list[str]], list[tuple[str, str]]]:
        """(arms, fixed): arms = the cartesian product of the sweep overrides (each a list of `key=value`, in the
        order given, as Hydra's basic sweeper builds it), fixed = [(key, `key=value`)] of the other overrides.
        TuneError when `seed` or the tuned key is among them, or for a sweep that is not a list."""
        sweeps: OrderedDict[str, list[str]] = OrderedDict()
        fixed: OrderedDict[str, str] = OrderedDict()
        for o in overrides:
            key = o.get_key_element()
            if key.lstrip("+~") in (SEED_KEY, self.key):
                what = "hydra.sweeper.tune_seeds and seeds" if key.lstrip("+~") == SEED_KEY else "hydra.sweeper.tune"
                raise TuneError(f"{key.lstrip('+~')}: set per run by the tuned sweeper (from {what}); remove "
                                f"{o.input_line or key} from hydra.sweeper.params and the command line")
            if o.is_sweep_override():
                fixed.pop(key, None)
                if not o.is_discrete_sweep():
                    raise TuneError(f"{key}: the tuned sweeper takes lists of values (a,b,c or range()), not "
                                    f"{o.input_line or key}")
                sweeps[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
            else:
                sweeps.pop(key, None)
                fixed[key] = f"{key}={o.get_value_element_as_str()}"
        arms: list[list[str]] = [[]]
        for values in sweeps.values():
            arms = [[*arm, v] for arm in arms for v in values]
        return arms, list(fixed.items())


def proxy_overrides(proxy: Any, tuned_key: str, swept_keys: Sequence[str]) -> list[str] | None:
    """The proxy's overrides (`key=value`: the swept keys in sweep order, then its other keys), or None for no proxy.
    The proxy is one model: it sets every swept key, and may set others (e.g. a narrower model.d_model).
    Example: proxy_overrides({"model.n_layers": 8, "model.d_model": 32}, "optim.lr", ["model.n_layers"])
             -> ["model.n_layers=8", "model.d_model=32"]"""
    if proxy is None:
        return None
    if not isinstance(proxy, dict) or not proxy:
        raise TuneError(f"hydra.sweeper.proxy: must map keys to values (the one arm to tune, e.g. "
                        f"{{model.n_layers: 2}}), got {proxy!r}")
    for key, value in proxy.items():
        if str(key).lstrip("+~") in (SEED_KEY, tuned_key):
            raise TuneError(f"hydra.sweeper.proxy.{key}: set per run by the tuned sweeper; remove it from the proxy")
        if value is None or isinstance(value, (list, dict)):
            raise TuneError(f"hydra.sweeper.proxy.{key}: must be one value (the proxy is one model), got {value!r}")
    missing = [k for k in swept_keys if k not in proxy]
    if missing:
        raise TuneError(f"hydra.sweeper.proxy: sets no value for the swept key {missing[0]} (the proxy is one model: "
                        f"it sets every swept key, {', '.join(swept_keys)})")
    order = [*swept_keys, *(k for k in proxy if k not in swept_keys)]
    return [f"{k}={_plain_value(proxy[k])}" for k in order]


def _plain_value(value: Any) -> str:
    """A YAML scalar as Hydra's override grammar reads it (booleans lower-case)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def horizon_override(train: dict[str, Any], fraction: float) -> tuple[str, float, float]:
    """(key, full, tuning): the budget the run holds (train.flops > train.tokens > train.steps) and `fraction` of
    it: FLOPs as a float, tokens and steps rounded up to an int >= 1.
    Example: horizon_override({"flops": None, "tokens": 100000, "steps": 200}, 0.25) -> ("train.tokens", 100000, 25000)"""
    for name in ("flops", "tokens"):
        if train.get(name):
            full = float(train[name]) if name == "flops" else int(train[name])
            tuning = full * fraction if name == "flops" else _scaled(full, fraction)
            return f"train.{name}", full, tuning
    full = int(train["steps"])
    return "train.steps", full, _scaled(full, fraction)


def _scaled(full: int, fraction: float) -> int:
    """ceil(full * fraction), at least 1, without float noise (400 * 0.1 is 40, not 41)."""
    return max(1, math.ceil(round(full * fraction, 9)))


@dataclass(frozen=True)
class Declaration:
    """A checked tuned sweep: the spec, each arm's overrides (`key=value`, a proxy outside the arms last), the fixed
    overrides [(key, `key=value`)], the proxy's overrides (None: no proxy) and whether it is outside the arms."""

    spec: TuneSpec
    arm_lines: list[list[str]]
    fixed: list[tuple[str, str]]
    proxy: list[str] | None
    proxy_only: bool
    params: list[str]        # hydra.sweeper.params as override lines (the declaration's own arms)

    def set_per_run(self) -> list[tuple[str, str]]:
        """[(where it is declared, `key=v1,v2,...`)]: every key and value the sweep sets on its runs that the command
        line does not show: the tuned key over its grid, the params and the proxy's values."""
        out = [("hydra.sweeper.tune", f"{self.spec.key}={','.join(repr(v) for v in self.spec.grid)}")]
        out += [("hydra.sweeper.params", line) for line in self.params]
        return out + [("hydra.sweeper.proxy", line) for line in self.proxy or []]


def declared_of(node: dict[str, Any]) -> dict[str, Any]:
    """hydra.sweeper's node (plain Python) as TunedSweeper receives it: its KEYS, and `unknown` the others."""
    return {**{k: node.get(k) for k in KEYS}, "unknown": sorted(str(k) for k in node if k not in (*KEYS, "_target_"))}


def _dotted(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """params with nested mappings as dotted keys: `+hydra.sweeper.params.model.d_model='32,64'` is read as
    {"model": {"d_model": "32,64"}}, meant as {"model.d_model": "32,64"}."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, dict) and v:
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def declare(declared: dict[str, Any], arguments: Sequence[str], config_loader: Any = None) -> Declaration:
    """The checked declaration of hydra.sweeper's keys (`declared`, plain Python, `unknown` listing keys it does not
    take) with the command line's overrides (`arguments`, as Hydra hands them to a sweeper); TuneError for the first
    thing wrong. `config_loader` resolves glob() sweeps of config groups."""
    if declared.get("unknown"):
        raise TuneError(unknown_key(declared["unknown"][0]))
    params = declared.get("params") or {}
    if not isinstance(params, dict):
        raise TuneError(f"hydra.sweeper.params: must map keys to values or comma lists (the arms, e.g. "
                        f"{{model/pos: learned,rope}}), got {params!r}")
    lines = [f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in _dotted(params).items()]
    parser = OverridesParser.create(config_loader=config_loader)
    try:
        overrides = parser.parse_overrides([*lines, *arguments])
    except Exception as e:  # noqa: BLE001 - Hydra's grammar refusal, as one line
        raise TuneError(f"hydra.sweeper.params: {str(e).splitlines()[0]}") from None
    spec = TuneSpec.declared(tune=declared.get("tune"), tune_seeds=declared.get("tune_seeds"),
                             seeds=declared.get("seeds"), tune_fraction=declared.get("tune_fraction"),
                             widen=declared.get("widen"), confirm=declared.get("confirm"),
                             confirm_widen=declared.get("confirm_widen"))
    arm_lines, fixed = spec.split(overrides)
    lines_of_proxy = proxy_overrides(declared.get("proxy"), spec.key, [line.split("=", 1)[0] for line in arm_lines[0]])
    if lines_of_proxy is None:
        return Declaration(spec, arm_lines, fixed, None, False, lines)
    try:
        parsed = parser.parse_overrides(lines_of_proxy)
    except Exception as e:  # noqa: BLE001 - Hydra's grammar refusal, as one line
        raise TuneError(f"hydra.sweeper.proxy: {str(e).splitlines()[0]}") from None
    if any(o.is_sweep_override() for o in parsed):
        raise TuneError(f"hydra.sweeper.proxy: must set one value per key (the proxy is one model), got "
                        f"{', '.join(lines_of_proxy)}")
    proxy = [f"{o.get_key_element()}={o.get_value_element_as_str()}" for o in parsed]
    proxy_only = proxy not in arm_lines
    return Declaration(spec, [*arm_lines, proxy] if proxy_only else arm_lines, fixed, proxy, proxy_only, lines)
