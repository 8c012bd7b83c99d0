"""experiments.config.precheck: Hydra's multi-line command-line errors become one `config error:` line, and a valid
command is never refused.

The expected option lists are spelled out here (not read from the code under test): they are the YAML files the
docs name. The CLI tests check the whole path: exit 2, exactly one stderr line, no traceback, an old run's files
untouched (Hydra would have written <dir>/.hydra/ over them).
"""

from __future__ import annotations

import subprocess

import pytest

from experiments.config.precheck import precheck
from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError

from .conftest import PYTHON, REPO

POS = "alibi, learned, none, relative, rope, sinusoidal"


@pytest.fixture
def old_run(tmp_path):
    d = tmp_path / "old"
    d.mkdir()
    (d / "summary.json").write_text('{"status": "completed"}')
    (d / "metrics.jsonl").write_text('{"step": 1}\n')
    return d


@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    return f


@pytest.mark.parametrize(
    "argv,message",
    [
        (["model/pos=fourier"], f"model/pos: unknown option 'fourier'; choose from {POS}"),
        (["-m", "model/pos=rope,fourier"], f"model/pos: unknown option 'fourier'; choose from {POS}"),
        (["--multirun", "seed=0,1", "model/pos=rope,fourier"], "model/pos: unknown option 'fourier'"),
        (["experiment=nope"], "experiment: unknown option 'nope'; choose from demo, depth_vs_width"),
        (["model=huge"], "model: unknown option 'huge'; choose from "),
        (["model/posx=rope"], "model/posx: unknown config group; did you mean model/pos?"),
        (["trian.steps=3"], "trian.steps: unknown key; did you mean train.steps?"),
        (["model.nrom=post"], "model.nrom: unknown key; did you mean model.norm?"),
        (["-m", "seed=0,1", "optim.lrr=1e-3,2e-3"], "optim.lrr: unknown key; did you mean optim.lr?"),
    ],
)
def test_unknown_names_are_one_line(argv, message):
    with pytest.raises(ConfigError) as e:
        precheck(argv)
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_run_dirs_that_cannot_be_used(a_file, old_run):
    cases = [
        (["hydra.run.dir=" + str(a_file)], "hydra.run.dir: ", "not a directory"),
        (["hydra.run.dir=" + str(a_file / "sub")], "hydra.run.dir: ", "is not a writable directory"),
        (["-m", "hydra.sweep.dir=" + str(a_file)], "hydra.sweep.dir: ", "not a directory"),
        (["train.run_dir=" + str(a_file)], "train.run_dir: ", "not a directory"),
        (["hydra.run.dir=" + str(old_run)], "hydra.run.dir: ", "train.resume=true"),
    ]
    for argv, key, why in cases:
        with pytest.raises(ConfigError) as e:
            precheck(argv)
        assert str(e.value).startswith(key) and why in str(e.value), (argv, str(e.value))


@pytest.mark.parametrize(
    "argv",
    [
        [], ["model/pos=rope"], ["-m", "model/pos=rope,alibi", "seed=0,1"], ["model.norm=post"], ["+foo=1"],
        ["~seed"], ["model@model=tiny"], ["hydra/launcher=joblib_2"], ["hydra/launcher=submitit_local"],
        ["--cfg", "job"], ["--cfg", "job", "--resolve"], ["--help"], ["--hydra-help"], ["--info", "defaults"],
        ["experiment=depth_vs_width", "model.shape.n_layers=2"], ["data=text", "data.paths=[a.txt,'b c.txt']"],
        ["experiment=null"], ["-m", "seed=range(3)"], ["-m", "optim.lr=interval(1e-4,1e-2)"],
        ["model/pos=rope", "model.pos.rope_base=500"], ["hydra.job.chdir=true"], ["--config-name", "other"],
        ["hydra.run.dir=${now:%H}"], ["train.resume=true", "hydra.run.dir=OLD"], ["train.overwrite=true",
        "hydra.run.dir=OLD"], ["-m", "hydra.run.dir=OLD"], ["--cfg", "job", "hydra.run.dir=OLD"], ["hydra.run.dir=NEW"],
        ["'seed=1'"], ["key with spaces"], ["--bogus-flag"],
        ["model/pos=rope", "model.pos.rope_scaling=yarn", "model.n_kv_heads=2", "model.window=64",
         "model/block=parallel", "model/qk_norm=rmsnorm", "model/init=xavier"],
    ],
)
def test_valid_or_unknown_commands_are_left_to_hydra(argv, old_run, tmp_path, capsys):
    argv = [a.replace("OLD", str(old_run)).replace("NEW", str(tmp_path / "new")) for a in argv]
    if "train.overwrite=true" in argv and "overwrite:" not in (CONF_DIR / "train" / "default.yaml").read_text():
        pytest.skip("train.overwrite is not a key of conf/train/default.yaml yet")
    precheck(argv)  # no ConfigError
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # prints nothing itself


def _cli(argv, cli_env):
    return subprocess.run([PYTHON, "-m", "experiments.train", *argv], cwd=REPO, env=cli_env, capture_output=True,
                          text=True, timeout=120)


def test_cli_unknown_option_in_a_sweep_is_one_line(cli_env, tmp_path):
    proc = _cli(["-m", "model/pos=rope,fourier", f"hydra.sweep.dir={tmp_path}/sweep"], cli_env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and lines == [f"config error: model/pos: unknown option 'fourier'; choose from {POS}"]
    assert not (tmp_path / "sweep").exists()


def test_cli_existing_run_is_not_overwritten(cli_env, old_run):
    before = {p.name: p.read_bytes() for p in old_run.iterdir()}
    proc = _cli([f"hydra.run.dir={old_run}"], cli_env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("config error: hydra.run.dir: ")
    assert "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in old_run.iterdir()} == before  # no .hydra/, nothing replaced


def test_keys_below_a_value_are_one_line():
    with pytest.raises(ConfigError, match=r"^model.shape.n_layers: model.shape is null here; set it whole"):
        precheck(["model.shape.n_layers=2"])
    with pytest.raises(ConfigError, match=r"^seed.x: seed is a single value \(0\), not a group of keys$"):
        precheck(["seed.x=1"])
    precheck(["experiment=depth_vs_width", "model.shape.n_layers=2"])  # there shape is a mapping
    precheck(["optim.betas.0=0.8"])  # list index: Hydra's
