"""Command-line checks that must happen before Hydra starts: one `config error: ...` line instead of a page.

`precheck_or_exit(sys.argv[1:])` is called by `python -m experiments.train` before `@hydra.main`. It parses the
arguments with Hydra's own argument parser and override grammar and refuses, with one line on stderr and exit 2:

* an unknown option of a config group, also inside a sweep (`model/pos=rope,fourier`):
  `config error: model/pos: unknown option 'fourier'; choose from alibi, learned, none, relative, rope, sinusoidal`
  (options are the YAML file names under the conf dir, experiments.config.compose.CONF_DIR: one source);
* an unknown group (`model/posx=rope`) and an unknown key (`trian.steps=3` -> `did you mean train.steps?`), or
  a key below a null or scalar value (`model.shape.n_layers=2` where `shape: null`), judged against the config
  composed with the command's own group choices;
* a `hydra.run.dir` / `hydra.sweep.dir` / `train.run_dir` that exists and is not a directory, or cannot be
  written (experiments.rundir.layout.RunDir.check_can_start);
* a single run's bad value (`seed=abc`, `optim.lr=-1`: experiments.config.check.check_values), so Hydra does not
  create an empty run dir for a run that cannot start;
* a single run whose `hydra.run.dir=D` already holds a run, without `train.resume=true` / `train.overwrite=true`
  (Hydra would otherwise write D/.hydra/ over the old run's files before train() could refuse).

Not handled here (left to Hydra, which accepts or reports them itself): anything it does not parse, `+key=v`,
`~key`, `key@pkg=v`, `hydra/...` groups (plugins add options), `--config-path/--config-name/--config-dir`,
`--help`, glob()/interval() sweeps, list indices (`optim.betas.0=0.8`).
Values are checked later by experiments.config.check.validate (same one-line shape).
"""

from __future__ import annotations

import contextlib
import difflib
import io
import sys
from pathlib import Path
from typing import Any

from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError

RUN_DIR_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "train.run_dir")


def group_options(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """{"model": ["gpt2-small", ...], "model/pos": ["alibi", ...], ...}: every conf/<group>/ holding YAML files
    (hydra/... excluded: plugins add options that have no file here)."""
    groups: dict[str, list[str]] = {}
    for path in sorted(conf_dir.rglob("*.yaml")):
        group = path.parent.relative_to(conf_dir).as_posix()
        if group != "." and not group.startswith("hydra"):
            groups.setdefault(group, []).append(path.stem)
    return groups


def _parse(argv: list[str]) -> tuple[Any, list] | None:
    """(Hydra's parsed args, parsed overrides), or None when either parser refuses (Hydra will say why)."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if "--version" in argv:
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = get_args_parser().parse_args(argv)  # argparse prints its own usage on an error: Hydra will
        return args, OverridesParser.create().parse_overrides(args.overrides)
    except (SystemExit, Exception):
        return None


def _values(o) -> list[Any] | None:
    """The override's values as strings/None (a,b,c sweeps and range() expanded); None for glob()/interval()."""
    if o.is_sweep_override():
        return list(o.sweep_string_iterator()) if o.is_discrete_sweep() else None
    return [o.value()]


def _check_group(group: str, values: list[Any], groups: dict[str, list[str]]) -> None:
    for v in values:
        if v is not None and v != "null" and (not isinstance(v, str) or v not in groups[group]):
            raise ConfigError(f"{group}: unknown option {v!r}; choose from {', '.join(groups[group])}")


def _flat_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return []
    out = []
    for k, v in node.items():
        out.append(f"{prefix}{k}")
        out += _flat_keys(v, f"{prefix}{k}.")
    return out


def _check_keys(keys: list[str], group_overrides: list[str]) -> None:
    """Each dotted key must exist in conf/train.yaml composed with the command's group choices."""
    from omegaconf import OmegaConf

    from experiments.config.compose import compose_config

    try:
        cfg = OmegaConf.to_container(compose_config(group_overrides), resolve=False)
    except Exception:
        return  # Hydra reports it
    finally:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
    for key in keys:
        node: Any = cfg
        for i, part in enumerate(key.split(".")):
            if isinstance(node, list):
                break  # optim.betas.0=...: Hydra indexes lists itself
            if not isinstance(node, dict):
                where = ".".join(key.split(".")[:i])
                if node is None:
                    raise ConfigError(f"{key}: {where} is null here; set it whole, e.g. '{where}={{{part}: ...}}'")
                raise ConfigError(f"{key}: {where} is a single value ({node!r}), not a group of keys")
            if part not in node:
                same_depth = [k for k in _flat_keys(cfg) if k.count(".") == key.count(".")]
                near = difflib.get_close_matches(key, same_depth, n=1, cutoff=0.8)
                where = ".".join(key.split(".")[:i]) or "the config"
                hint = f"did you mean {near[0]}?" if near else f"{where} has no {part!r} (a new key: +{key}=...)"
                raise ConfigError(f"{key}: unknown key; {hint}")
            node = node[part]


def _check_values(plain_overrides: list[str]) -> None:
    """A single run's values against experiments.config.check's table (seed=abc, optim.lr=-1, ...), so a bad value
    is refused before Hydra creates the run dir; the same check runs again in train() (it reads no data)."""
    from experiments.config.compose import compose_config
    from experiments.config.check import check_values, to_plain

    try:
        plain = to_plain(compose_config(plain_overrides))
    except Exception:  # noqa: BLE001 - Hydra, or validate() inside train(), reports what composing cannot
        return
    finally:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
    check_values(plain)


def _check_run_dirs(paths: dict[str, Any], *, multirun: bool, resume: bool, overwrite: bool) -> None:
    from experiments.rundir.layout import RunDir, RunDirError

    for key, value in paths.items():
        if not isinstance(value, str) or "${" in value or (key == "hydra.run.dir" and multirun) \
                or (key == "hydra.sweep.dir" and not multirun):
            continue
        # a fresh single run must not land on an old one (Hydra writes .hydra/ there first); a sweep dir only
        # has to be a writable directory
        fresh = key == "hydra.run.dir" or (key == "train.run_dir" and not multirun)
        try:
            RunDir(Path(value).expanduser()).check_can_start(resume=resume or not fresh, overwrite=overwrite and fresh)
        except RunDirError as e:
            raise ConfigError(f"{key}: {e}") from None


def _flag(overrides: list, key: str) -> bool:
    return any(o.key_or_group == key and not o.is_sweep_override() and o.value() in (True, "true") for o in overrides)


def precheck(argv: list[str]) -> None:
    """Raise ConfigError (one line) for the command-line mistakes in the module docstring; else return."""
    parsed = _parse(argv)
    if parsed is None:
        return
    args, overrides = parsed
    if args.help or args.hydra_help or args.shell_completion or args.config_path \
            or args.config_name or args.config_dir or args.experimental_rerun:
        return
    groups = group_options()
    group_overrides, keys, paths = [], [], {}
    for o in overrides:
        key = o.key_or_group
        if o.package is not None or o.is_delete() or key == "hydra" or key.startswith("hydra/"):
            continue
        values = _values(o)
        if key in groups:
            if values is not None:
                _check_group(key, values, groups)
                group_overrides.append(f"{'+' if o.is_add() else ''}{key}={'null' if values[0] is None else values[0]}")
        elif "/" in key:
            near = difflib.get_close_matches(key, list(groups), n=1)
            raise ConfigError(f"{key}: unknown config group{f'; did you mean {near[0]}?' if near else ''}; "
                              f"groups: {', '.join(groups)}")
        elif key in RUN_DIR_KEYS and values is not None:
            paths[key] = values[0]
        elif not o.is_add() and not o.is_force_add() and not key.startswith("hydra."):
            keys.append(key)
    if keys:
        _check_keys(keys, group_overrides)
    if not args.multirun:  # a sweep's values are checked per job (each failed job gets its own summary)
        _check_values([o.input_line for o in overrides if o.input_line and not o.key_or_group.startswith("hydra")])
    if not (args.cfg or args.info):  # --cfg / --info print and exit: nothing is written
        _check_run_dirs(paths, multirun=bool(args.multirun), resume=_flag(overrides, "train.resume"),
                        overwrite=_flag(overrides, "train.overwrite"))


def precheck_or_exit(argv: list[str]) -> None:
    """precheck(argv); a ConfigError is printed as `config error: <msg>` on stderr and the process exits 2."""
    try:
        precheck(argv)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
