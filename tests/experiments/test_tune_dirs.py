"""experiments/sweep/tune_dirs.py: a tuned sweep's job dirs found from its arm's composed config equal the dirs of the
jobs composed one by one (what a launcher does), and every case the module cannot be sure of is composed."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf, open_dict

from experiments.config.compose import compose_config
from experiments.sweep.tune_dirs import JobDirs

ARM = ["model/pos=rope", "train.steps=8", "model.d_model=32"]
JOB = ["model/pos=rope", "model.d_model=32", "optim.lr=0.01", "seed=1000", "train.steps=2"]


def composer(sweep: Path, *hydra: str):
    """compose(overrides) as a launcher composes a job (the master's hydra overrides first), counting its calls."""
    calls = []

    def compose(overrides: list[str]):
        calls.append(list(overrides))
        return compose_config([f"hydra.sweep.dir={sweep}", *hydra, *overrides], return_hydra_config=True)

    return compose, calls


def composed_dir(compose, overrides: list[str], idx: int) -> Path:
    """The reference: the job composed by itself, its number set, the launchers' two keys resolved."""
    cfg = compose(overrides)
    with open_dict(cfg):
        cfg.hydra.job.num = cfg.hydra.job.id = idx
    return Path(OmegaConf.select(cfg, "hydra.sweep.dir")) / OmegaConf.select(cfg, "hydra.sweep.subdir")


@pytest.mark.parametrize("hydra, job, composes", [
    ((), JOB, False),                                                              # tuning: lr, seed, horizon
    ((), ["model/pos=rope", "train.steps=8", "model.d_model=32", "optim.lr=0.1", "seed=3"], False),   # final
    (("hydra.sweep.subdir=${seed}/${optim.lr}/${hydra.job.num}",), JOB, False),   # templates read the job's keys
    (("hydra.sweep.subdir=${experiment_name}_${hydra.job.id}",), JOB, False),
    (("hydra.sweep.subdir=${hydra.job.num}_${hydra.overrides.task}",), JOB, True),  # a hydra key it does not set
    ((), ["model/pos=alibi", "train.steps=8", "model.d_model=32", "seed=1"], True),  # a group changed
    ((), ["model/pos=rope", "train.steps=8", "seed=1"], True),                    # an arm line dropped: its default
    ((), ["model/pos=rope", "train.steps=8", "model.d_model=32", "hydra.job.name=x"], True),  # a hydra override
])
def test_a_jobs_dir_from_its_arm_equals_the_dir_of_the_job_composed(tmp_path, hydra, job, composes):
    compose, calls = composer(tmp_path / "sweep", *hydra)
    dirs = JobDirs(compose)
    dirs.arm(ARM)
    calls.clear()
    got = dirs.job_dir(ARM, job, idx=7)
    assert (len(calls) == 1) == composes, calls
    assert got == composed_dir(compose, job, 7)
    if not hydra:  # the default subdir: <sweep>/7_<the job's overrides>
        assert got.parent == tmp_path / "sweep" and got.name.startswith("7_model.")


def test_the_arm_is_composed_once_and_left_as_it_was(tmp_path):
    compose, calls = composer(tmp_path / "sweep")
    dirs = JobDirs(compose)
    arm = dirs.arm(ARM)
    before = OmegaConf.to_yaml(arm)
    for idx, lr in enumerate([0.001, 0.01, 0.1]):
        dirs.job_dir(ARM, [*ARM, f"optim.lr={lr}", "seed=0"], idx)
    assert dirs.arm(ARM) is arm and len(calls) == 1
    assert OmegaConf.to_yaml(arm) == before


def test_an_arm_it_did_not_compose_is_composed_per_job(tmp_path):
    compose, calls = composer(tmp_path / "sweep")
    got = JobDirs(compose).job_dir(ARM, JOB, 3)
    assert len(calls) == 1 and got == composed_dir(compose, JOB, 3)
