"""The docs list every option of the model knobs: docs/experiments.md's config-group table against the option files
in conf/model/<knob>/, and docs/design.md's ModelConfig field list against arch.config's registries.

Only the `model/<knob>` rows and the ModelConfig choice lists are checked (other rows summarize on purpose).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arch import config as arch_config

REPO = Path(__file__).resolve().parents[2]
KNOBS = sorted(p.name for p in (REPO / "conf" / "model").iterdir() if p.is_dir())


def _table_options(knob: str) -> set[str]:
    """The backticked options of the `model/<knob>` row of docs/experiments.md's config-group table."""
    for line in (REPO / "docs" / "experiments.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == f"`model/{knob}`":
            return set(re.findall(r"`([^`]+)`", cells[1]))
    raise AssertionError(f"docs/experiments.md has no row for model/{knob}")


@pytest.mark.parametrize("knob", KNOBS)
def test_experiments_md_lists_every_option_of_each_model_knob(knob):
    files = {p.stem for p in (REPO / "conf" / "model" / knob).glob("*.yaml")}
    assert _table_options(knob) == files


@pytest.mark.parametrize("field, registry", [
    ("activation", arch_config.ACTIVATIONS), ("norm", arch_config.NORM_PLACEMENTS),
    ("norm_type", arch_config.NORM_TYPES), ("attention", arch_config.ATTENTION_IMPLS),
    ("init", arch_config.INIT_SCHEMES), ("block", arch_config.BLOCK_KINDS), ("kind", arch_config.POS_KINDS),
])
def test_design_md_lists_every_choice_of_model_config(field, registry):
    text = " ".join((REPO / "docs" / "design.md").read_text().split())  # line breaks inside the list do not matter
    m = re.search(rf"\b{field}:? \(?(\w+(?:\|\w+)+)", text)  # "activation (a|b)" or "kind: a|b"
    assert m, f"docs/design.md lists no choices for {field}"
    assert set(m.group(1).split("|")) == set(registry)


def _train_yaml_options(knob: str) -> set[str]:
    """The options conf/train.yaml's defaults-list comment names for `model/<knob>`: "# what: a | b (note) | c"."""
    for line in (REPO / "conf" / "train.yaml").read_text().splitlines():
        entry, _, comment = line.partition("#")
        if entry.strip().startswith(f"- model/{knob}:"):
            plain = re.sub(r"\([^)]*\)", "", comment)  # notes in parentheses are not options
            m = re.search(r"\w+(?:\s*\|\s*\w+)+", plain)
            assert m, f"conf/train.yaml's model/{knob} line lists no options: {line.strip()}"
            return {o.strip() for o in m.group(0).split("|")}
    raise AssertionError(f"conf/train.yaml's defaults list has no model/{knob} entry")


@pytest.mark.parametrize("knob", KNOBS)
def test_train_yaml_comments_list_every_option_of_each_model_knob(knob):
    files = {p.stem for p in (REPO / "conf" / "model" / knob).glob("*.yaml")}
    assert _train_yaml_options(knob) == files
