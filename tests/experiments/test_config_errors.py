"""Every value a user can get wrong is one `config error: <key>: <why>` line, before anything is written.

The bad values are generated from the schema (each field's Rule, experiments.config.rules, and its type) but judged
independently: each must make the command-line check (experiments.config.precheck, which composes with Hydra and
then validates) raise one ConfigError whose message starts with the key. The default suite runs, of the 148 values,
every field's own (a bound, a choice, an empty string: its last generated value) and the first field's of each
(rule kind, declared type, wrong-type value) class, e.g. `abc` for one int field: the other fields of that class take
the same path with the same inputs, and run in `make test-all`. The schema's coverage is checked too: every
field of the groups a user sets carries a Rule unless its type says it all (a bool) or it is free text, so a new
field without a rule fails here (data.* values are the loaders' to check: experiments.data.corpus / pairs
check_source, tested with the loaders). A few values go through the CLI (run in this process: conftest's
train_cli): exit 2, one stderr line, no traceback, no run files.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from experiments.config.errors import ConfigError
from experiments.config.precheck import precheck
from experiments.config.rules import Rule
from experiments.config.schema import FIXED_GROUPS, LoadedTokenizer, RunConfig, TrainedTokenizer


# the group overrides that put a schema in the composed config, and the values its required keys need
SETUPS = {
    "run": [], "optim": [], "schedule": [], "train": [], "logger": [], "task": [],
    "tokenizer/train": [], "tokenizer/load": ["tokenizer=load", f"tokenizer.path={__file__}"],
}
SCHEMAS = {"run": RunConfig, **FIXED_GROUPS, "tokenizer/train": TrainedTokenizer, "tokenizer/load": LoadedTokenizer}


def _bad_values(rule: Rule | None, hint) -> list:
    """Values the field's Rule or type forbids (null unless nullable; wrong type; just outside each bound)."""
    if rule is None:  # a bool: its type is the rule
        return ["maybe", 1.5] if hint is bool else []
    out: list = [] if rule.nullable else [None]
    if rule.kind == "int":
        out += ["abc", 1.5] + ([] if rule.lo is None else [int(rule.lo) - 1 if not rule.lo_open else int(rule.lo)])
    elif rule.kind == "number":
        out += ["abc"]
        out += [] if rule.lo is None else [rule.lo if rule.lo_open else rule.lo - 1]
        out += [] if rule.hi is None else [rule.hi if rule.hi_open else rule.hi + 1]
    elif rule.kind == "str":
        out += [""]
    elif rule.kind == "choice":
        out += ["no_such_choice"]
    elif rule.kind in ("numbers", "ints", "strs"):
        out += ["abc", [1.5] if rule.kind == "ints" else [[1]]]
        if rule.length:
            out += [[1] * (rule.length - 1)]
        if rule.hi is not None:
            out += [[rule.hi] * (rule.length or 1)]
        if rule.lo is not None and rule.kind != "numbers":
            out += [[int(rule.lo) - 1] * (rule.length or 1)]
    return out


def _text(value) -> str:
    return "null" if value is None else "''" if value == "" else str(value).replace(" ", "")


WRONG_TYPE = (None, "abc", 1.5, "maybe", "", "no_such_choice", [1.5], [[1]])  # the values _bad_values gives any field


def _cases() -> list:
    """pytest params (key, override, setup); a wrong-type value is `slow` where a field of the same rule kind and
    declared type already has it (see the module docstring)."""
    cases, seen = [], set()
    for setup, cls in SCHEMAS.items():
        prefix = "" if setup == "run" else setup.split("/")[0] + "."
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in ("model", "data", "tokenizer", "optim", "schedule", "train", "logger", "task", "source", "mode"):
                continue  # groups (their own cases), and the discriminators (each option sets them)
            rule = f.metadata.get("rule")
            values = _bad_values(rule, hints[f.name])
            for i, value in enumerate(values):
                override = f"{prefix}{f.name}={_text(value)}"
                kind = (rule.kind if rule else "bool", str(hints[f.name]), _text(value))
                repeat = value in WRONG_TYPE and kind in seen and i < len(values) - 1
                seen.add(kind)
                cases.append(pytest.param(prefix + f.name, override, SETUPS[setup], id=override,
                                          marks=pytest.mark.slow if repeat else ()))
    return cases


CASES = _cases()


def test_every_user_field_has_a_rule():
    """Every field of the groups a user sets has a Rule, unless it is a bool (data.*: the loaders check)."""
    bare = []
    for setup, cls in SCHEMAS.items():
        prefix = "" if setup == "run" else setup.split("/")[0] + "."
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = prefix + f.name
            typed_enough = hints[f.name] is bool or dataclasses.is_dataclass(hints[f.name])
            if "rule" not in f.metadata and not typed_enough and f.name not in ("source", "mode"):
                bare.append(key)
    assert sorted(set(bare)) == []


@pytest.mark.parametrize("key,override,setup", CASES)
def test_bad_value_is_one_error_naming_the_key(key, override, setup, cache_dir, monkeypatch):
    def fail(*a, **k):
        raise AssertionError("data was read before the config error")

    monkeypatch.setattr("experiments.data.corpus.load_corpus", fail)
    monkeypatch.setattr("tokenizer.datasets_source.hub_reachable", lambda timeout=3.0: True)
    with pytest.raises(ConfigError) as e:
        precheck(["logger=disabled", f"data.cache_dir={cache_dir}", f"hydra.run.dir={cache_dir}/run", *setup, override])
    msg = str(e.value)
    assert msg.startswith((f"{key}: ", f"{key}[")) and "\n" not in msg, msg


def test_good_values_pass(cache_dir):
    """The bounds are not too tight: values on the allowed side of each bound pass."""
    precheck(["logger=disabled", f"data.cache_dir={cache_dir}", f"hydra.run.dir={cache_dir}/good", "seed=0",
              "optim.lr=1e-9", "optim.betas=[0.0,0.999]", "optim.weight_decay=0", "schedule.warmup_steps=0",
              "schedule.min_lr_ratio=1", "train.tokens=null", "train.grad_clip=null", "model.dropout=0.0",
              "train.resume=false", "tokenizer.vocab_size=257"])


@pytest.mark.parametrize("override,key", [("seed=abc", "seed"), ("optim.lr=-1", "optim.lr"),
                                           ("optim.betas=[0.9]", "optim.betas"),
                                           ("train.batch_size=0", "train.batch_size"),
                                           ("data.val_fraction=half", "data.val_fraction")])
def test_cli_bad_value_is_one_line(override, key, train_cli, tmp_path):
    run = tmp_path / "run"
    proc = train_cli(override, f"hydra.run.dir={run}")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"config error: {key}: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not run.exists(), sorted(p.name for p in run.iterdir())  # refused before Hydra made the run dir
