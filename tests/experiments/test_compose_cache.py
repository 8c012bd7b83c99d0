"""experiments/config/compose_cache.py: a config built from the cached config of its group choices plus its value
overrides equals Hydra's full composition of the same overrides: the same keys and values (the hydra node included:
its records of the overrides, override_dirname, choices, cwd), the same flags, the same error; through compose_config
and through Hydra's load_sweep_config (a sweep's jobs, as its launchers compose them).

The reference is the same call inside compose_cache.uncached() (Hydra's composition every time); the overrides are
a table of the kinds users write, then hypothesis draws mixes of group choices and value overrides, bad ones
included.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.config import compose_cache
from experiments.config.compose import compose_config
from experiments.config.errors import ConfigError


def _full(overrides: list[str], hydra: bool) -> DictConfig:
    with compose_cache.uncached():
        return compose_config(overrides, return_hydra_config=hydra)


def _flags(cfg: DictConfig) -> list:
    nodes = [cfg, *([cfg.hydra] if "hydra" in cfg else [])]
    return [(OmegaConf.is_struct(n), OmegaConf.is_readonly(n), OmegaConf.get_type(n)) for n in nodes]


def _outcome(make, overrides: list[str], hydra: bool):
    try:
        cfg = make(overrides, hydra)
    except ConfigError as e:
        return "error", str(e)
    return OmegaConf.to_container(cfg, resolve=False), _flags(cfg)


def _cached(overrides: list[str], hydra: bool) -> DictConfig:
    return compose_config(overrides, return_hydra_config=hydra)


def assert_same(overrides: list[str], hydra: bool) -> None:
    want = _outcome(_full, overrides, hydra)
    assert _outcome(_cached, overrides, hydra) == want  # the group choices composed (or found) here
    assert _outcome(_cached, overrides, hydra) == want  # and found in the cache


CASES = [
    [],
    ["seed=3"],
    ["model=tiny", "seed=3", "train.steps=7", "optim.lr=0.01"],
    ["train.steps=7", "model=tiny", "model/pos=alibi", "seed=1"],  # values before groups: the records keep the order
    ["experiment=pos_encodings", "model/pos=rope", "seed=2"],
    ["experiment=finding_rope_vs_learned_v3", "train.tokens=64000"],
    ["experiment=tuned_pos", "hydra.sweep.dir=/tmp/x", "hydra.job.config.override_dirname.exclude_keys=[seed]",
     "seed=5"],
    ["model=tiny", "+data.extra_eval.held=some/file.txt"],
    ["model=tiny", "model.dropout=0.1", "logger=disabled", "hydra/launcher=joblib"],
    ["model={d_model: 48}"],  # a dict value for a group key is a value override (Hydra's rule)
    ["seed=abc"],  # errors: the same one line
    ["trian.steps=3"],
    ["model=tiny", "optim.lr=-1", "train.steps=x"],
    ["+seed=4"],
    ["model=nosuch", "seed=1"],
    ["seed=1,2"],  # a sweep value: Hydra refuses it in a composition
    ["seed=[1"],  # Hydra's grammar refuses it
]


@pytest.mark.parametrize("hydra", [False, True])
@pytest.mark.parametrize("overrides", CASES, ids=lambda o: " ".join(o) or "defaults")
def test_the_cached_composition_is_hydras(overrides, hydra):
    assert_same(overrides, hydra)


GROUP_LINES = ["model=tiny", "model=small", "model/pos=rope", "model/pos=alibi", "model/norm=post",
               "logger=disabled", "experiment=norm_placement", "tokenizer=train", "optim=adamw"]
VALUE_LINES = ["seed=0", "seed=9", "train.steps=3", "train.steps=-3", "optim.lr=0.003", "optim.lr=abc",
               "model.d_model=64", "model.n_heads=3", "train.tokens=100000", "train.eval_interval=2", "+x=1",
               "~train.flops", "++train.steps=4", "hydra.run.dir=out/here", "hydra.job.name=other", "data.name=foo"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=st.lists(st.sampled_from(GROUP_LINES), max_size=3), values=st.lists(st.sampled_from(VALUE_LINES),
       max_size=4), hydra=st.booleans(), seed=st.randoms(use_true_random=False))
def test_any_mix_of_group_choices_and_values_composes_as_hydra_does(groups, values, hydra, seed):
    lines = [*groups, *values]
    seed.shuffle(lines)
    assert_same(lines, hydra)


def test_the_job_name_is_the_one_hydra_sets_at_each_composition():
    """Hydra sets the job's name (its log file's) before composing; a config cached under another name (e.g.
    experiments.train's precheck composes before @hydra.main names the job) must not lend its own."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from experiments.config.compose import CONF_DIR

    for name in ("first", "train", "first"):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name=name):
            assert compose("train", ["model=tiny", "seed=2"], return_hydra_config=True).hydra.job.name == name


def test_the_cache_is_bounded_and_keyed_by_the_cwd(tmp_path, monkeypatch):
    compose_cache._BY_GROUPS.clear()
    for seed in range(3):
        compose_config(["model=tiny", f"seed={seed}"])
    assert len(compose_cache._BY_GROUPS) == 1  # one composition for the three
    here = compose_config(["model=tiny", "seed=1"], return_hydra_config=True).hydra.runtime.cwd
    monkeypatch.chdir(tmp_path)
    assert compose_config(["model=tiny", "seed=1"], return_hydra_config=True).hydra.runtime.cwd == str(tmp_path) != here
    for n in range(compose_cache.CACHED + 5):
        compose_config([f"hydra.run.dir=d{n}", "model=tiny", "logger=disabled" if n % 2 else "logger=wandb",
                        f"model.n_layers={n + 1}"])
    assert len(compose_cache._BY_GROUPS) <= compose_cache.CACHED


def test_a_returned_config_is_the_callers_own():
    a = compose_config(["model=tiny", "seed=1"])
    with open_dict(a):
        a.train.steps = 999
        a.extra = 1
    b = compose_config(["model=tiny", "seed=1"])
    assert b.train.steps != 999 and "extra" not in b


@pytest.mark.parametrize("master, jobs", [
    (["experiment=pos_encodings", "hydra.sweep.dir=/tmp/s"],
     [["model/pos=rope", "seed=0"], ["model/pos=alibi", "seed=1"], ["model/pos=rope", "seed=1"]]),
    (["experiment=tuned_pos", "hydra/launcher=basic", "hydra.sweep.subdir=${seed}/${optim.lr}/${hydra.job.num}"],
     [["model/pos=rope", "optim.lr=0.01", "seed=1000", "train.steps=2"], ["model/pos=rope", "seed=1"],
      ["model/pos=alibi", "train.steps=8", "optim.lr=0.1", "seed=3"], ["model/pos=rope", "hydra.job.name=x"]]),
    (["experiment=tuned_pos", "hydra/launcher=basic"],
     [["model/pos=learned", "optim.lr=0.01", "seed=1000", "train.steps=2"],
      ["model/pos=learned", "optim.lr=0.02", "seed=1000", "train.steps=2"], ["model/pos=learned", "optim.lr=x"]]),
])
def test_a_sweeps_jobs_compose_as_hydras_launchers_compose_them(master, jobs):
    """ConfigLoader.load_sweep_config (each job of a sweep: the master's hydra overrides + the job's), cached and not."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    from experiments.config.compose import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        sweep = loader.load_configuration("train", master, RunMode.MULTIRUN)

        def job(overrides):
            try:
                cfg = loader.load_sweep_config(sweep, list(overrides))
            except Exception as e:  # noqa: BLE001 - Hydra's error, as the launcher would meet it
                return type(e).__name__, str(e), str(e.__cause__)
            return OmegaConf.to_container(cfg, resolve=False), _flags(cfg)

        for overrides in jobs:
            with compose_cache.uncached():
                want = job(overrides)
            assert job(overrides) == want
            assert job(overrides) == want


# (overrides, whether Hydra's own get_mode must answer: a sweep value, or a config the RUN composition refuses)
MODE_CASES = [
    ([], False), (["seed=3"], False), (["model=tiny", "train.steps=2", "logger=disabled"], False),
    (["experiment=pos_encodings"], False), (["hydra.mode=MULTIRUN"], False), (["seed=1", "hydra.mode=RUN"], False),
    (["model=tiny", "hydra.mode=MULTIRUN", "seed=2"], False),
    (["seed=1,2"], True), (["model/pos=rope,alibi", "hydra.mode=RUN"], True),
    (["model=nosuch"], True), (["seed=[1"], True), (["seed=abc"], True), (["trian.steps=3"], True),
]


@pytest.mark.parametrize("overrides, hydras_own", MODE_CASES, ids=lambda c: " ".join(c) if isinstance(c, list) else "")
def test_the_mode_of_a_command_is_the_one_hydras_get_mode_reads(overrides, hydras_own, monkeypatch):
    """Hydra.get_mode (run or multirun?, asked once per command) answers what Hydra's own MULTIRUN composition
    answers, and without a sweep value it composes nothing more than the command's own run will."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from experiments.config.compose import CONF_DIR

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        hydra = GlobalHydra.instance().hydra
        with compose_cache.uncached():
            want = hydra.get_mode(config_name="train", overrides=list(overrides))
        calls, real = [], compose_cache._HYDRAS_MODE
        monkeypatch.setattr(compose_cache, "_HYDRAS_MODE", lambda *a: (calls.append(a), real(*a))[1])
        assert hydra.get_mode(config_name="train", overrides=list(overrides)) == want
    assert bool(calls) == hydras_own, calls  # Hydra's full MULTIRUN composition only where needed
    if "hydra.mode=MULTIRUN" in overrides:
        assert str(want) == "RunMode.MULTIRUN"
