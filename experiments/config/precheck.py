"""Command-line checks that must happen before Hydra starts: one `config error: ...` line instead of a page.

`precheck_or_exit(sys.argv[1:])` is called by `python -m experiments.train` before `@hydra.main`. Everything it
refuses is one line on stderr and exit 2, and nothing is written (Hydra has not made a dir or .hydra/ yet):

* what Hydra cannot read (experiments.config.argv): an unknown flag, `-m` between the overrides, an override its
  grammar refuses, a --config-name / --config-dir that names nothing;
* an unknown option of a config group, also inside a sweep (`model/pos=rope,fourier`), and an unknown group
  (options are the YAML files under the conf dir, experiments.config.compose.CONF_DIR: one source);
* a launcher plugin that is not installed (`hydra/launcher=joblib_2`, or an experiment that names one), with the
  extra that installs it: `pip install 'archlab[joblib]'`;
* a key outside the schema, added with `+` or not (`trian.steps=3` -> `did you mean train.steps?`), a key below a
  null or single value, and a value of the wrong type (`seed=abc`), each value of a sweep included;
* anything else Hydra's composition refuses, as its first line naming the key;
* a run dir or sweep dir (given or Hydra's default) that is not a directory or cannot be created (`/proc/x`);
* a budget given twice (`experiment=X train.steps=20` where X sets train.tokens; experiments.run.budget), a bad
  ARCHLAB_MAX_STEPS, and a missing data file of the run or of a sweep's first point, named with how to get it
  when it is a findings' pre-registered file (experiments.config.data_files);
* a sweep on hydra/launcher=slurm: its values (`hydra.launcher.timeout_min=-5`) and sbatch/srun/squeue on PATH
  (experiments.sweep.slurm_check);
* a sweep on hydra/sweeper=tuned: its declaration (hydra.sweeper.*), and each key and value it sets on its runs
  checked as the command line's are (`hydra.sweeper.tune={optim.lrr: [...]}` -> did you mean optim.lr?;
  experiments.sweep.tune_check);
* a single run: every value check of experiments.config.check.validate (`optim.lr=-1`, a missing tokenizer.path);
  a dir that holds a run, without train.resume=true / train.overwrite=true; a resume whose dir holds a run of
  another model (Hydra would write .hydra/ over the old run's before train() refused).
Not handled (left to Hydra or to each job): `--help`, `--info`, `--cfg` run dirs, `--config-path`, a custom
--config-name / --config-dir (its keys are its own), list indices (`optim.betas.0=0.8`), a sweep's value ranges
(each job that cannot run records `failed`, and the others go on).
"""

from __future__ import annotations

import copy
import difflib
import sys
from functools import partial
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.config.argv import parse_command
from experiments.config.check import validate
from experiments.config.compose import CONF_DIR, compose_config
from experiments.config.data_files import check_data_files
from experiments.config.errors import ConfigError
from experiments.config.rules import close_key, omegaconf_error
from experiments.config.rundir_check import check_resume, check_run_dirs
from experiments.run.budget import check_budget_given_once, max_steps_cap
from experiments.sweep.slurm_check import check_launcher as check_slurm_launcher
from experiments.sweep.tune_check import check_sweeper_overrides, check_tuned

# launcher plugin config -> (its module, the archlab extra that installs it)
LAUNCHER_PLUGINS = {
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "joblib"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "slurm"),
}


def group_options(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """{"model": ["gpt2-small", ...], "model/pos": ["alibi", ...], ...}: every conf/<group>/ holding YAML files
    (hydra/... excluded: plugins add options that have no file here)."""
    groups: dict[str, list[str]] = {}
    for path in sorted(conf_dir.rglob("*.yaml")):
        group = path.parent.relative_to(conf_dir).as_posix()
        if group != "." and not group.startswith("hydra"):
            groups.setdefault(group, []).append(path.stem)
    return groups


def _values(o) -> list[Any] | None:
    """The override's values (a,b,c / range() / glob() sweeps expanded); None for interval() sweeps."""
    if o.is_sweep_override():
        return list(o.sweep_iterator()) if o.is_discrete_sweep() else None
    return [o.value()]


def _check_group(group: str, values: list[Any], groups: dict[str, list[str]]) -> None:
    for v in values:
        if v is None:  # Hydra: "Config group override must be a string or a list. Got NoneType" (a traceback)
            raise ConfigError(f"{group}: a group cannot be set to null on the command line; remove it with ~{group}")
        if not isinstance(v, str) or v not in groups[group]:
            raise ConfigError(f"{group}: unknown option {v!r}; choose from {', '.join(groups[group])}")


def _launcher_plugin(name: str) -> str:
    """Our launcher option (conf/hydra/launcher/<name>.yaml) -> the plugin config it extends; else name itself."""
    path = CONF_DIR / "hydra" / "launcher" / f"{name}.yaml"
    if not path.is_file():
        return name
    defaults = (yaml.safe_load(path.read_text()) or {}).get("defaults") or []
    return next((d for d in defaults if isinstance(d, str) and d != "_self_"), name)


def launcher_choice(overrides: list, groups: dict[str, list[str]]) -> str:
    """hydra/launcher as this command chooses it: its own override, else its experiment's, else basic."""
    for o in overrides:
        if o.key_or_group == "hydra/launcher" and not o.is_sweep_override():
            return str(o.value())
    for o in overrides:
        if o.key_or_group == "experiment" and not o.is_sweep_override() and o.value() in groups.get("experiment", []):
            text = (CONF_DIR / "experiment" / f"{o.value()}.yaml").read_text()
            for d in (yaml.safe_load(text) or {}).get("defaults") or []:
                if isinstance(d, dict) and "override /hydra/launcher" in d:
                    return str(d["override /hydra/launcher"])
    return "basic"


def check_launcher(name: str) -> None:
    """The launcher's plugin must be importable; else one line naming the extra that installs it."""
    plugin = _launcher_plugin(name)
    if plugin not in LAUNCHER_PLUGINS:
        return
    module, extra = LAUNCHER_PLUGINS[plugin]
    try:
        installed = find_spec(module) is not None
    except ModuleNotFoundError:  # hydra_plugins itself is absent
        installed = False
    if not installed:
        package = module.split(".")[-1].replace("_", "-")
        raise ConfigError(f"hydra/launcher={name}: the {package} plugin is not installed; "
                          f"pip install 'archlab[{extra}]' (in a checkout: pip install -e '.[{extra}]')")


def _flat_keys(node: Any, prefix: str = "") -> list[str]:
    if not isinstance(node, dict):
        return []
    out = []
    for k, v in node.items():
        out.append(f"{prefix}{k}")
        out += _flat_keys(v, f"{prefix}{k}.")
    return out


def check_key(key: str, plain: dict[str, Any]) -> None:
    """`key` must be a key of the composed config `plain` (every schema field is there)."""
    node: Any = plain
    for i, part in enumerate(key.split(".")):
        if isinstance(node, list):
            return  # optim.betas.0=...: Hydra indexes lists itself
        where = ".".join(key.split(".")[:i])
        if not isinstance(node, dict):
            if node is None:
                raise ConfigError(f"{key}: {where} is null here; set it whole, e.g. '{where}={{{part}: ...}}'")
            raise ConfigError(f"{key}: {where} is a single value ({node!r}), not a group of keys")
        if part not in node:
            same_depth = [k for k in _flat_keys(plain) if k.count(".") == key.count(".")]
            hint = close_key(key, same_depth) or f"{where or 'the config'} has no {part!r}"
            raise ConfigError(f"{key}: unknown key; {hint}")
        node = node[part]


def _new_mapping_key(key: str, base: DictConfig) -> bool:
    """`key` is not yet in its parent, and the parent is a mapping field of the schema (declared `dict[str, ...]`,
    e.g. data.extra_eval), which takes new keys; a group of fixed keys such as model.shape does not."""
    parent, _, last = key.rpartition(".")
    node = OmegaConf.select(base, parent) if parent else None
    return (isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict and node._metadata.key_type is str
            and last not in node)


def check_value(base: DictConfig, key: str, value: Any) -> None:
    """`key=value` on the composed config `base`, as Hydra would apply it: a wrong type raises ConfigError."""
    cfg = copy.deepcopy(base)
    try:
        OmegaConf.update(cfg, key, value, merge=True)
    except Exception as e:  # noqa: BLE001 - OmegaConf's validation errors, any other refusal
        raise omegaconf_error(e) from None


def check_override(o, groups: dict[str, list[str]], base: DictConfig, plain: dict[str, Any]) -> None:
    """One override's option (a group) or key and every value, as the command line's own are checked."""
    if o.key_or_group in groups:
        _check_group(o.key_or_group, _values(o) or [], groups)
        return
    check_key(o.key_or_group, plain)
    for value in _values(o) or []:
        check_value(base, o.key_or_group, value)


def _flag(overrides: list, key: str) -> bool:
    return any(o.key_or_group == key and not o.is_sweep_override() and o.value() in (True, "true") for o in overrides)


def _first_point(o) -> str:
    """The override with its first sweep value (a sweep's first job)."""
    if not o.is_sweep_override():
        return o.input_line
    value = _values(o)
    prefix = "+" if o.is_add() else "++" if o.is_force_add() else ""
    return f"{prefix}{o.key_or_group}={'null' if not value or value[0] is None else value[0]}" if value else ""


def precheck(argv: list[str]) -> None:
    """Raise ConfigError (one line) for the command-line mistakes in the module docstring; else return."""
    if "--version" in argv:
        return
    args, overrides = parse_command(argv)
    if args.help or args.hydra_help or args.shell_completion or args.info or args.config_path \
            or args.config_name or args.config_dir or args.experimental_rerun:
        return
    groups = group_options()
    group_overrides, keyed = [], []
    for o in overrides:
        key = o.key_or_group
        if o.is_delete() and key not in groups and not key.startswith("hydra"):
            raise ConfigError(f"{key}: a key of the run config cannot be removed (its schema has it); set it "
                              f"instead: {key}=...")
        if o.package is not None or o.is_delete():
            continue
        if key == "hydra/launcher" or (key in groups and _values(o) is not None):
            if key in groups:
                _check_group(key, _values(o), groups)
            group_overrides.append(_first_point(o))
        elif "/" in key and not key.startswith("hydra/"):
            near = difflib.get_close_matches(key, list(groups), n=1)
            raise ConfigError(f"{key}: unknown config group{f'; did you mean {near[0]}?' if near else ''}; "
                              f"groups: {', '.join(groups)}")
        elif key not in groups and not key.startswith("hydra"):
            keyed.append(o)
    check_launcher(launcher_choice(overrides, groups))

    base = compose_config(group_overrides, return_hydra_config=True)  # its hydra node: the group choices of `point`
    with open_dict(base):  # below, composed once for both (experiments.config.compose_cache)
        del base["hydra"]
    plain = OmegaConf.to_container(base, resolve=False)
    for o in keyed:
        if _new_mapping_key(o.key_or_group, base):  # +data.extra_eval.NAME=PATH: a key added to a mapping field
            if not (o.is_add() or o.is_force_add()):
                raise ConfigError(f"{o.key_or_group}: unknown key; add it to the mapping with a +: "
                                  f"+{o.input_line.lstrip('+')}")
            continue
        if o.is_add():  # Hydra: "Could not append to config. An item is already at 'seed'."
            check_key(o.key_or_group, plain)
            raise ConfigError(f"{o.key_or_group}: is already in the config; set it without the +: "
                              f"{o.input_line.lstrip('+')}")
        check_override(o, groups, base, plain)
    point = [_first_point(o) for o in overrides]
    check = partial(check_override, groups=groups, base=base, plain=plain)  # also for what a tuned sweeper sets
    if args.multirun:  # hydra.sweeper.* overrides, before Hydra merges them into a tuned sweeper's declaration
        check_sweeper_overrides(point, overrides, check)
    cfg = compose_config([p for p in point if p], return_hydra_config=True)
    if args.cfg:
        return  # --cfg prints the config and exits: nothing is written
    experiment = next((str(o.value()) for o in overrides if o.key_or_group == "experiment"
                       and not o.is_sweep_override()), None)
    check_budget_given_once([(o.key_or_group, _values(o) or []) for o in keyed], cfg.train, experiment)
    max_steps_cap()
    check_data_files(cfg, experiment)
    resume, overwrite = _flag(overrides, "train.resume"), _flag(overrides, "train.overwrite")
    run_dir = check_run_dirs(cfg, multirun=bool(args.multirun), resume=resume, overwrite=overwrite)
    if args.multirun:
        check_slurm_launcher(cfg.hydra.launcher)  # hydra/launcher=slurm: its values, sbatch/srun on PATH
        check_tuned(cfg, overrides, check)  # hydra/sweeper=tuned: its declaration, what it sets per run, its plan
        return  # a sweep's values are checked per job (each job that cannot run records its own summary)
    run_config = validate(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]))
    if resume and run_dir is not None:
        check_resume(run_dir, run_config)


def precheck_or_exit(argv: list[str]) -> None:
    """precheck(argv); a ConfigError is printed as `config error: <msg>` on stderr and the process exits 2."""
    try:
        precheck(argv)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
