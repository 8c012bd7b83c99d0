"""Run names (experiments.config.resolvers.dirname, the sweep subdir) keep every swept key=value visible.

Properties over random override sets shaped like Hydra's override_dirname (`k=v` joined by `,`): every key
appears as `key=` in the name, the name is a safe filename (the characters the docs promise) under 200
characters, and two sets that differ in one value get different names. Before the fix the name was cut at 120
characters, so `seed=` fell off the end of a long `data.paths=[...]`.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config.resolvers import dirname

SAFE = re.compile(r"[A-Za-z0-9._=,+@-]+")
segment = st.from_regex(r"[a-z_][a-z0-9_]{0,9}", fullmatch=True)
key = st.builds(lambda parts, sep: sep.join(parts), st.lists(segment, min_size=1, max_size=3),
                st.sampled_from([".", "/"]))
scalar = st.one_of(
    st.integers(-10**12, 10**12).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.text(st.characters(blacklist_characters="[](){}'\",=\\", blacklist_categories=("Cs", "Cc")), min_size=1,
            max_size=80),
)
path = st.lists(segment, min_size=1, max_size=6).map(lambda p: "/" + "/".join(p) + ".txt")
value = st.one_of(scalar, path, st.lists(path, min_size=1, max_size=8).map(lambda ps: "[" + ",".join(ps) + "]"))
override_sets = st.dictionaries(key, value, min_size=1, max_size=6)


def hydra_string(d: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(d.items()))


@settings(max_examples=100, deadline=None)
@given(override_sets)
def test_every_key_kept_and_name_is_safe(d):
    name = dirname(hydra_string(d))
    assert SAFE.fullmatch(name) and len(name) <= 200, name
    fields = name.split(",")
    for k in d:
        safe_key = k.replace("/", ".")
        assert any(f.startswith(safe_key + "=") for f in fields), (k, name)


@settings(max_examples=75, deadline=None)
@given(override_sets, st.data())
def test_a_different_value_gives_a_different_name(d, data):
    k = data.draw(st.sampled_from(sorted(d)))
    other = data.draw(value.filter(lambda v: v != d[k]))
    assert dirname(hydra_string(d)) != dirname(hydra_string({**d, k: other}))


def test_seed_survives_a_long_path_list():
    paths = ",".join(f"/data/corpora/shard_{i:03d}.txt" for i in range(20))
    name = dirname(f"data.paths=[{paths}],model/pos=rope,seed=2")
    assert name.startswith("data.paths=shard_000.txt+19-") and name.endswith(",model.pos=rope,seed=2")


def test_short_names_unchanged():
    assert dirname("model/pos=rope,seed=0") == "model.pos=rope,seed=0"
    assert dirname("model.shape.n_layers=16,schedule.warmup_steps=100,seed=2") == \
        "model.shape.n_layers=16,schedule.warmup_steps=100,seed=2"
    assert dirname("") == "run"
