"""The command line of `python -m experiments.train`, read the way Hydra will read it, each mistake as one line.

    args, overrides = parse_command(sys.argv[1:])    # argparse Namespace, [hydra Override, ...]

Hydra's own parsers do the reading (its argparse parser, its override grammar, glob() sweeps resolved against
the conf dir), so what passes here is what Hydra accepts. What they refuse becomes one ConfigError naming the
argument, instead of Hydra's usage block or its three lines ending in HYDRA_FULL_ERROR:

* an unknown flag (`--bogus-flag`), `-m` (or any flag) between the overrides (`seed=1 -m train.steps=2`: Hydra
  takes a flag before or after all of them, `-m seed=1 train.steps=2` or `seed=1 train.steps=2 -m`);
* an override the grammar refuses (`model.norm=[post`, an unquoted `=` or non-ASCII character in a value,
  `key` without `=`): `data.paths: cannot parse 'data.paths=[/tmp/a=b.txt]' ...; quote the value`;
* `--config-name` / `--config-dir` naming nothing there.
Not handled: `--config-path` (relative to the app's module; Hydra reports it), `--experimental-rerun` files.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path, get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser

from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError

MULTIRUN_FLAGS = ("-m", "--multirun")


def _is_override(arg: str) -> bool:
    return "=" in arg and not arg.startswith("-")


def _flag_between_overrides(argv: list[str]) -> str | None:
    """The first flag with an override before it and one after it. Example: [seed=1, -m, train.steps=2] -> -m."""
    for i, arg in enumerate(argv):
        if arg.startswith("-") and any(map(_is_override, argv[:i])) and any(map(_is_override, argv[i + 1:])):
            return arg
    return None


def _argparse_error(argv: list[str], message: str) -> ConfigError:
    """argparse's complaint (`unrecognized arguments: x y`) as one line naming the argument. Hydra's argparse reads
    the overrides as one block: a flag goes before or after all of them (`-m a=1 b=2`, `a=1 b=2 -m`); one between
    them (`a=1 -m b=2`) leaves the overrides after it unread."""
    unknown = message.split("unrecognized arguments:", 1)[-1].split() if "unrecognized arguments:" in message else []
    flag = _flag_between_overrides(argv) if unknown and _is_override(unknown[0]) else None
    if flag is not None:
        example = (f" (python -m experiments.train {flag} key=value ..., or key=value ... {flag})"
                   if flag in MULTIRUN_FLAGS else "")
        return ConfigError(f"{flag}: put it before or after all the overrides, not between them{example}")
    if unknown:
        return ConfigError(f"{unknown[0]}: unknown argument; see python -m experiments.train --help")
    return ConfigError(message)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Hydra's argparse Namespace of argv; ConfigError (one line) where argparse would print its usage block."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(io.StringIO()):
            return get_args_parser().parse_args(argv)
    except SystemExit:
        lines = [line for line in out.getvalue().splitlines() if line.strip()]
        message = lines[-1].split("error:", 1)[-1].strip() if lines else "cannot parse the command line"
        raise _argparse_error(argv, message) from None


def config_loader(conf_dir: Path = CONF_DIR) -> ConfigLoaderImpl:
    """Hydra's config loader over the conf dir (what glob() sweeps and config names are resolved against)."""
    return ConfigLoaderImpl(config_search_path=create_config_search_path(str(conf_dir)))


def _parse_error(text: str, e: Exception) -> ConfigError:
    key = text.split("=", 1)[0].strip("'\" ").lstrip("+~") if "=" in text else text
    why = str(e).splitlines()[0]
    if "=" not in text:
        return ConfigError(f"{key}: not an override; write key=value (group=option, +key=value to add)")
    return ConfigError(f"{key}: cannot parse {text!r} ({why}); quote a value that holds = , spaces, brackets or "
                       f"non-ASCII characters: '{key}=\"...\"' (a list: '{key}=[\"a=b.txt\"]')")


def parse_overrides(texts: list[str], loader: ConfigLoaderImpl | None = None) -> list[Any]:
    """Hydra's parsed overrides; the first one its grammar refuses raises ConfigError naming its key."""
    parser = OverridesParser.create(config_loader=loader or config_loader())
    parsed = []
    for text in texts:
        try:
            parsed += parser.parse_overrides([text])
        except Exception as e:  # noqa: BLE001 - OverrideParseException, HydraException: Hydra's grammar said no
            raise _parse_error(text, e) from None
    return parsed


def check_config_name(args: argparse.Namespace, loader: ConfigLoaderImpl) -> None:
    """--config-dir must be a directory; --config-name must name a config there (or in conf/)."""
    if args.config_dir and not Path(args.config_dir).is_dir():
        raise ConfigError(f"--config-dir: {args.config_dir} is not a directory")
    if not args.config_name:
        return
    search = config_loader(Path(args.config_dir)) if args.config_dir else loader
    name = args.config_name.removesuffix(".yaml")
    if not search.repository.config_exists(name) and not (CONF_DIR / f"{name}.yaml").is_file():
        where = args.config_dir or CONF_DIR
        primaries = sorted(p.stem for p in Path(where).glob("*.yaml"))
        raise ConfigError(f"--config-name: no config {args.config_name!r} in {where}; "
                          f"choose from {', '.join(primaries) or 'train'}")


def parse_command(argv: list[str]) -> tuple[argparse.Namespace, list[Any]]:
    """(Hydra's args, parsed overrides) of `python -m experiments.train <argv>`; ConfigError for a mistake."""
    args = parse_args(argv)
    loader = config_loader()
    check_config_name(args, loader)
    return args, parse_overrides(list(args.overrides), loader)
