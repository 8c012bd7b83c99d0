"""Every value a user can get wrong is one `config error: <key>: <why>` line, before any data is read.

The bad values are generated from the rule table (experiments.config.check.rules) but judged independently:
each must make validate() raise a ConfigError whose message starts with `<key>: `. The table's own coverage is
checked against the keys of conf/ (every user-settable key of optim, schedule, train, model, tokenizer, logger has
a rule), so a new key without a rule fails here. A few values go through the real CLI: exit 2, one stderr line,
no traceback, no run files.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.config.compose import compose_config
from experiments.config.check import Rule, rules, validate
from experiments.config.errors import ConfigError

from .conftest import PYTHON, REPO

def _bad_values(rule: Rule) -> list:
    """Values the rule's own description forbids (null unless nullable; wrong type; just outside each bound)."""
    out: list = [] if rule.nullable else [None]
    if rule.kind == "int":
        out += ["abc", 1.5]
        out += [] if rule.lo is None else [int(rule.lo) - 1 if not rule.lo_open else int(rule.lo)]
    elif rule.kind == "number":
        out += ["abc"]
        out += [] if rule.lo is None else [rule.lo if rule.lo_open else rule.lo - 1]
        out += [] if rule.hi is None else [rule.hi if rule.hi_open else rule.hi + 1]
    elif rule.kind == "bool":
        out += ["yes", 1]
    elif rule.kind == "str":
        out += [""]
    elif rule.kind == "choice":
        out += ["no_such_choice"]
    else:  # lists
        out += ["abc", [1.5] if rule.kind == "ints" else [1]]
        if rule.length:
            out += [[0.5] * (rule.length - 1)]
        if rule.hi is not None:
            out += [[rule.hi] * (rule.length or 1)]
        if rule.lo is not None and rule.kind != "numbers":
            out += [[int(rule.lo) - 1] * (rule.length or 1)]
    return out


def _override(key: str, value, present: bool) -> str:
    """`optim.betas=[0.9]`, `seed=abc`, `train.tokens=null`, `experiment_name=''`; `+key=...` for a key the
    composed config lacks (a rule for an optional key, e.g. train.overwrite)."""
    text = "null" if value is None else "''" if value == "" else str(value).replace(" ", "")
    return f"{'' if present else '+'}{key}={text}"


def _key_options() -> dict[str, list[str]]:
    """dotted key -> the group overrides that put it in the config ([] for the default config)."""
    keys: dict[str, list[str]] = {}

    def walk(node, prefix, extra):
        for k, v in node.items():
            if isinstance(v, dict) and k != "shape":
                walk(v, f"{prefix}{k}.", extra)
            else:
                keys.setdefault(f"{prefix}{k}", extra)

    for extra in [[], ["model/pos=relative"], ["model/pos=rope"], ["model/pos=sinusoidal"],
                  ["tokenizer=load", "tokenizer.path=x"]]:
        walk(OmegaConf.to_container(compose_config(["logger=disabled", *extra]), resolve=False), "", extra)
    return keys


KEY_OPTIONS = _key_options()
CASES = [(key, v) for key, rule in rules().items() for v in _bad_values(rule)]


def test_every_conf_key_has_a_rule():
    """Every key of conf/'s optim, schedule, train, model, tokenizer, logger groups (and seed) is in the table."""
    sections = ("optim.", "schedule.", "train.", "model.", "tokenizer.", "logger.")
    keys = [k for k in KEY_OPTIONS if k.startswith(sections) or k in ("seed", "experiment_name")]
    assert sorted(k for k in keys if k not in rules() and k != "model.shape") == []


@pytest.mark.parametrize("key,value", CASES, ids=[f"{k}={v!r}" for k, v in CASES])
def test_bad_value_is_one_error_naming_the_key(key, value, cache_dir, monkeypatch):
    def fail(*a, **k):
        raise AssertionError("data was read before the config error")

    monkeypatch.setattr("experiments.data.corpus.load_corpus", fail)
    extra = KEY_OPTIONS.get(key, [])
    cfg = compose_config(["logger=disabled", f"data.cache_dir={cache_dir}", *extra,
                          _override(key, value, key in KEY_OPTIONS)])
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    msg = str(e.value)
    assert msg.startswith(f"{key}: ") and "\n" not in msg, msg


def test_good_values_pass(cache_dir):
    """The bounds are not too tight: values on the allowed side of each bound validate."""
    c = validate(compose_config(["logger=disabled", f"data.cache_dir={cache_dir}", "seed=0", "optim.lr=1e-9",
                                 "optim.betas=[0.0,0.999]", "optim.weight_decay=0", "schedule.warmup_steps=0",
                                 "schedule.min_lr_ratio=1", "train.tokens=null", "train.grad_clip=null",
                                 "model.dropout=0.0", "train.resume=false"]))
    assert c["optim"]["betas"] == [0.0, 0.999]


@pytest.mark.parametrize("override,key", [("seed=abc", "seed"), ("optim.lr=-1", "optim.lr"),
                                           ("optim.betas=[0.9]", "optim.betas"),
                                           ("train.batch_size=0", "train.batch_size")])
def test_cli_bad_value_is_one_line(override, key, cli_env, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.run([PYTHON, "-m", "experiments.train", override, f"hydra.run.dir={run}"],
                          cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith(f"config error: {key}: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not run.exists(), sorted(p.name for p in run.iterdir())  # refused before Hydra made the run dir
