"""experiments.config.precheck: every class of command-line mistake is one `config error:` line naming the key (exit
2, no traceback, nothing written), and a valid command is never refused.

Each class is tested with several members, not one case: what Hydra's parsers cannot read, unknown group options
and keys (added with + or not), values of the wrong type (in a sweep too), run dirs that cannot be used, launcher
plugins that are not installed, resumes that must not rewrite an old run. The expected option lists are spelled out
here (not read from the code under test): they are the YAML files the docs name. The CLI tests check the whole
path: exit 2, exactly one stderr line, no traceback, an old run's files untouched (Hydra would have written
<dir>/.hydra/ over them). They run the command in this process (conftest's train_cli); the two without joblib need
a Python that lacks the plugin, so they start one.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from experiments.config.argv import parse_command
from experiments.config.compose import CONF_DIR
from experiments.config.errors import ConfigError
from experiments.config.precheck import precheck

from .conftest import PYTHON, REPO, TINY, file_bytes
from .test_run_lock import _hold

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


def _refused(argv) -> str:
    with pytest.raises(ConfigError) as e:
        precheck(argv)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize(
    "argv,message",
    [
        (["model/pos=fourier"], f"model/pos: unknown option 'fourier'; choose from {POS}"),
        (["-m", "model/pos=rope,fourier"], f"model/pos: unknown option 'fourier'; choose from {POS}"),
        (["--multirun", "seed=0,1", "model/pos=rope,fourier"], "model/pos: unknown option 'fourier'"),
        (["experiment=nope"], "experiment: unknown option 'nope'; choose from demo, depth_vs_width"),
        (["model=huge"], "model: unknown option 'huge'; choose from "),
        (["experiment=null"], "experiment: a group cannot be set to null on the command line; remove it with "
                              "~experiment"),
        (["model/posx=rope"], "model/posx: unknown config group; did you mean model/pos?"),
        (["trian.steps=3"], "trian.steps: unknown key; did you mean train.steps?"),
        (["+trian.steps=3"], "trian.steps: unknown key; did you mean train.steps?"),
        (["++trian.steps=3"], "trian.steps: unknown key; did you mean train.steps?"),
        (["+optim.lrr=1"], "optim.lrr: unknown key; did you mean optim.lr?"),
        (["+foo=1"], "foo: unknown key"),
        (["model.nrom=post"], "model.nrom: unknown key; did you mean model.norm?"),
        (["-m", "seed=0,1", "optim.lrr=1e-3,2e-3"], "optim.lrr: unknown key; did you mean optim.lr?"),
        (["model.n_encoder_layers=2"], "model.n_encoder_layers: unknown key"),  # a seq2seq key, task=lm
        (["data.path=x.tsv"], "data.path: unknown key"),  # data=embedded has no path
        (["hydra.run.dri=x"], "hydra.run.dri: unknown key; did you mean hydra.run.dir?"),
        (["+seed=1"], "seed: is already in the config; set it without the +: seed=1"),
        (["~seed"], "seed: a key of the run config cannot be removed"),
    ],
)
def test_unknown_names_are_one_line(argv, message):
    assert _refused(argv).startswith(message)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["model.norm=[post"], "model.norm: cannot parse 'model.norm=[post'"),
        (["data=text", "data.paths=[/tmp/a=b.txt]"], "data.paths: cannot parse"),  # an unquoted = in a value
        (["data=text", "data.paths=[/tmp/ä.txt]"], "data.paths: cannot parse"),    # unquoted non-ASCII
        (["optim.betas=[0.9,0.95"], "optim.betas: cannot parse"),                  # a list not closed
        (["train.run_dir=${oops"], "train.run_dir: cannot parse"),                  # an interpolation not closed
        (["seed"], "seed: not an override; write key=value"),
        (["key with spaces"], "key with spaces: not an override"),
        (["'seed=1'"], "seed: cannot parse"),                                    # quotes inside the word
        (["--bogus-flag"], "--bogus-flag: unknown argument; see python -m experiments.train --help"),
        (["seed=1", "-m", "train.steps=2"], "-m: put it before or after all the overrides, not between them"),
        (["seed=1", "--multirun", "train.steps=2,3"], "--multirun: put it before or after all the overrides"),
        (["seed=1", "--cfg", "job", "train.steps=2"], "--cfg: put it before or after all the overrides"),
        (["-m", "seed=1", "-c", "job", "train.steps=2"], "-c: put it before or after all the overrides"),
        (["seed=1", "--bogus-flag", "train.steps=2"], "--bogus-flag: unknown argument"),
        (["--cfg", "bogus"], "argument --cfg/-c: invalid choice: 'bogus'"),
        (["--config-name", "nope"], "--config-name: no config 'nope' in "),
        (["--config-dir", "/nonexistent/conf"], "--config-dir: /nonexistent/conf is not a directory"),
        (["model@model=tiny"], "model@model: Could not override 'model@model'"),
    ],
)
def test_what_hydra_cannot_read_is_one_line(argv, message):
    assert _refused(argv).startswith(message)


@pytest.mark.parametrize("flag", ["-m", "--multirun"])
def test_multirun_flag_before_or_after_the_overrides_is_the_same_sweep(flag):
    """Hydra's own parser takes -m before or after the overrides (not between them: argparse stops reading
    overrides at a flag); both places give the same sweep, and the precheck accepts both."""
    expected = (True, ["model=tiny", "seed=0,1"])
    for argv in ([flag, "model=tiny", "seed=0,1"], ["model=tiny", "seed=0,1", flag]):
        args, overrides = parse_command(argv)
        assert (args.multirun, [o.input_line for o in overrides]) == expected
        precheck(argv)  # no ConfigError


@pytest.mark.parametrize(
    "argv,message",
    [
        (["seed=abc"], "seed: must be an integer >= 0, got 'abc'"),
        (["-m", "seed=0,abc"], "seed: must be an integer >= 0, got 'abc'"),  # each value of a sweep
        (["-m", "optim.lr=1e-3,fast"], "optim.lr: must be a number > 0, got 'fast'"),
        (["train.steps=1.5"], "train.steps: must be an integer >= 1, got 1.5"),
        (["train.progress=maybe"], "train.progress: must be true or false, got 'maybe'"),
        (["optim.betas=[0.9,abc]"], "optim.betas[1]: must be a number, got 'abc'"),
        (["data=text", "data.val_fraction=half"], "data.val_fraction: must be a number, got 'half'"),
        (["model.d_model=wide"], "model.d_model: must be an integer, got 'wide'"),
        (["model.pos=rope"], "model.pos: must be a group of keys"),
        (["seed=null"], "seed: must be an integer >= 0, got None"),
        (["model.shape={n_params:20000,n_layer:1}"], "model.shape.n_layer: unknown key; did you mean "
                                                      "model.shape.n_layers?"),
        (["experiment=depth_vs_width", "model.shape.n_params=many"], "model.shape.n_params: must be an integer"),
    ],
)
def test_values_of_the_wrong_type_are_one_line(argv, message):
    assert _refused(argv).startswith(message)


def test_run_dirs_that_cannot_be_used(a_file, old_run):
    cases = [
        (["hydra.run.dir=" + str(a_file)], "hydra.run.dir: ", "not a directory"),
        (["hydra.run.dir=" + str(a_file / "sub")], "hydra.run.dir: ", "is not a writable directory"),
        (["-m", "hydra.sweep.dir=" + str(a_file)], "hydra.sweep.dir: ", "not a directory"),
        (["train.run_dir=" + str(a_file)], "train.run_dir: ", "not a directory"),
        (["hydra.run.dir=" + str(old_run)], "hydra.run.dir: ", "train.resume=true"),
    ]
    for argv, key, why in cases:
        msg = _refused(argv)
        assert msg.startswith(key) and why in msg, (argv, msg)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (a directory nothing can be made in)")
@pytest.mark.parametrize("argv,key", [(["hydra.run.dir=/proc/archlab/x"], "hydra.run.dir"),
                                      (["-m", "hydra.sweep.dir=/proc/archlab"], "hydra.sweep.dir"),
                                      (["train.run_dir=/proc/archlab"], "train.run_dir")])
def test_a_dir_that_cannot_be_created_is_one_line(argv, key):
    msg = _refused(argv)
    assert msg.startswith(f"{key}: /proc/archlab") and "cannot be created" in msg, msg


@pytest.mark.parametrize(
    "argv",
    [
        [], ["model/pos=rope"], ["-m", "model/pos=rope,alibi", "seed=0,1"], ["model.norm=post"], ["++seed=3"],
        ["~experiment"], ["~model/qk_norm"], ["hydra/launcher=joblib_2"], ["hydra/launcher=submitit_local"],
        ["--cfg", "job"], ["--cfg", "job", "--resolve"], ["--help"], ["--hydra-help"], ["--info", "defaults"],
        ["experiment=depth_vs_width", "model.shape.n_layers=2"], ["data=text", "data.paths=[FILE,'FILE']"],
        ["-m", "seed=range(3)"], ["-m", "optim.lr=interval(1e-4,1e-2)"], ["-m", "model/pos=glob(*)"],
        ["model/pos=rope", "model.pos.rope_base=500"], ["hydra.job.chdir=true"], ["--config-name", "train"],
        ["hydra.run.dir=${now:%H}"], ["train.resume=true", "hydra.run.dir=OLD"], ["train.overwrite=true",
        "hydra.run.dir=OLD"], ["-m", "hydra.run.dir=OLD"], ["--cfg", "job", "hydra.run.dir=OLD"], ["hydra.run.dir=NEW"],
        ["task=seq2seq", "model.n_encoder_layers=3"], ["data=text", "data.paths=FILE"],
        ["model.shape={n_params:20000,n_layers:1,n_heads:2}"],
        ["model/pos=rope", "model.pos.rope_scaling=yarn", "model.n_kv_heads=2", "model.window=64",
         "model/block=parallel", "model/qk_norm=rmsnorm", "model/init=xavier"],
        ["-m", "experiment=finding_rope_vs_learned", "hydra/launcher=basic"],
    ],
)
def test_valid_commands_pass(argv, old_run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Hydra's default run dir (outputs/...) is probed here
    argv = [a.replace("OLD", str(old_run)).replace("NEW", str(tmp_path / "new")).replace("FILE", __file__)
            for a in argv]
    precheck(argv)  # no ConfigError
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""  # prints nothing itself
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]  # and leaves nothing (the dir probes included)


def test_keys_below_a_value_are_one_line():
    with pytest.raises(ConfigError, match=r"^model.shape.n_layers: model.shape is null here; set it whole"):
        precheck(["model.shape.n_layers=2"])
    with pytest.raises(ConfigError, match=r"^seed.x: seed is a single value \(0\), not a group of keys$"):
        precheck(["seed.x=1"])
    with pytest.raises(ConfigError, match=r"^model.shape.n_layer: unknown key; did you mean model.shape.n_layers\?"):
        precheck(["experiment=depth_vs_width", "model.shape.n_layer=2"])
    precheck(["experiment=depth_vs_width", "model.shape.n_layers=2"])  # there shape is a mapping
    precheck(["optim.betas.0=0.8"])  # list index: Hydra's


# -- launcher plugins ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,extra", [
    (["-m", "hydra/launcher=joblib"], "joblib"),
    (["-m", "hydra/launcher=joblib_2"], "joblib"),                # ours, on top of joblib
    (["-m", "experiment=finding_rope_vs_learned"], "joblib"),     # the experiment names joblib_2
    (["-m", "hydra/launcher=submitit_slurm"], "slurm"),
    (["-m", "hydra/launcher=slurm"], "slurm"),
])
def test_a_launcher_plugin_that_is_not_installed_names_its_extra(argv, extra, monkeypatch):
    monkeypatch.setattr("experiments.config.precheck.find_spec", lambda name: None)
    msg = _refused(argv)
    assert msg.startswith(f"hydra/launcher=") and f"pip install 'archlab[{extra}]'" in msg, msg


def test_the_basic_launcher_needs_no_plugin(monkeypatch):
    monkeypatch.setattr("experiments.config.precheck.find_spec", lambda name: None)
    precheck(["-m", "experiment=finding_rope_vs_learned", "hydra/launcher=basic"])
    precheck(["-m", "seed=0,1"])


@pytest.fixture
def no_joblib(tmp_path, cli_env):
    """The environment of a Python without hydra-joblib-launcher: a sitecustomize hides it from imports and from
    Hydra's plugin scan (pkgutil.walk_packages), as if it were not installed."""
    site = tmp_path / "no_joblib"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent('''
        import pkgutil, sys
        HIDDEN = "hydra_plugins.hydra_joblib_launcher"

        class Hide:
            def find_spec(self, name, path=None, target=None):
                if name == HIDDEN or name.startswith(HIDDEN + "."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, Hide())
        walk = pkgutil.walk_packages
        pkgutil.walk_packages = lambda *a, **k: (m for m in walk(*a, **k) if "hydra_joblib_launcher" not in m.name)
    '''))
    return {**cli_env, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}


def test_cli_without_joblib_names_the_extra(no_joblib, tmp_path):
    sweep = tmp_path / "sweep"
    proc = subprocess.run([PYTHON, "-m", "experiments.train", "-m", "hydra/launcher=joblib_2",
                           f"hydra.sweep.dir={sweep}"], cwd=REPO, env=no_joblib, capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0] == ("config error: hydra/launcher=joblib_2: the hydra-joblib-launcher plugin is not installed; "
                        "pip install 'archlab[joblib]' (in a checkout: pip install -e '.[joblib]')")
    assert not sweep.exists()


def test_a_finding_composes_its_sweep_without_joblib(no_joblib, tmp_path):
    """--jobs 1 (the --smoke default) runs Hydra's basic launcher: building and checking its sweep needs no joblib."""
    code = textwrap.dedent(f'''
        from pathlib import Path
        from experiments.findings.cli import check_config, train_argv
        from experiments.findings.registry import get_finding
        from experiments.findings.tuned import is_tuned
        f = get_finding("rope_vs_learned")
        argv = train_argv(f, Path({str(tmp_path / "sweep")!r}), 1, ["seed=0"])
        check_config(f, argv, ["seed=0"])
        print(" ".join(argv))
        print("tuned:", is_tuned(f.experiment), is_tuned(get_finding("rope_vs_learned_v2").experiment))
    ''')
    proc = subprocess.run([PYTHON, "-c", code], cwd=REPO, env=no_joblib, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "hydra/launcher=basic" in proc.stdout
    assert "tuned: False True" in proc.stdout  # both YAMLs name joblib_2; which sweeper is read without it


@pytest.mark.slow
def test_a_finding_smoke_runs_without_joblib(no_joblib, tmp_path):
    out = tmp_path / "sweep"
    proc = subprocess.run([PYTHON, "-m", "experiments.findings", "rope_vs_learned", "--smoke", "--out-dir", str(out),
                           "seed=0"], cwd=tmp_path, env=no_joblib, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "rope_vs_learned.md").is_file()


# -- the CLI: one line, exit 2, nothing written ------------------------------------------------------------------


@pytest.mark.parametrize("argv,starts", [
    (["-m", "model/pos=rope,fourier"], f"config error: model/pos: unknown option 'fourier'; choose from {POS}"),
    (["+trian.steps=3"], "config error: trian.steps: unknown key; did you mean train.steps?"),
    (["data=text", "data.paths=[/tmp/a=b.txt]"], "config error: data.paths: cannot parse"),
    (["seed=1", "-m", "train.steps=2"], "config error: -m: put it before or after all the overrides"),
    (["--config-name", "nope"], "config error: --config-name: no config 'nope'"),
    (["hydra.run.dir=/proc/archlab/x"], "config error: hydra.run.dir: /proc/archlab/x cannot be created"),
    (["-m", "hydra.sweep.dir=/proc/archlab"], "config error: hydra.sweep.dir: /proc/archlab cannot be created"),
])
def test_cli_mistakes_are_one_line_and_write_nothing(argv, starts, train_cli, tmp_path):
    if "/proc" in " ".join(argv) and not Path("/proc/self").is_dir():
        pytest.skip("needs /proc")
    proc = train_cli(*argv, cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(starts), proc.stderr
    assert "Traceback" not in proc.stderr and "HYDRA_FULL_ERROR" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no outputs/, no multirun/, no sweep dir


def test_cli_existing_run_is_not_overwritten(train_cli, old_run):
    before = {p.name: p.read_bytes() for p in old_run.iterdir()}
    proc = train_cli(f"hydra.run.dir={old_run}")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("config error: hydra.run.dir: ")
    assert "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in old_run.iterdir()} == before  # no .hydra/, nothing replaced


@pytest.mark.parametrize("change,why", [
    (["model.d_model=48", "model.n_heads=4"], "config error: train.resume: "),   # another model
    (["optim.lr=-1"], "config error: optim.lr: must be a number > 0"),            # the precheck refusing a value
    (["train.device=cuda:7"], "config error: train.device: "),                    # a device this machine lacks
])
def test_a_refused_resume_rewrites_nothing(change, why, make_cfg, train_cli, tmp_path):
    """A finished run made through Hydra (its .hydra/ included), resumed with a config that cannot continue it:
    refused before Hydra writes .hydra/, so every file keeps its bytes."""
    from experiments.run.train import train

    run = tmp_path / "run"
    train(make_cfg(run_dir=run))
    (run / ".hydra").mkdir()
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run / ".hydra" / name).write_text(f"# the first run's {name}\n")
    before = file_bytes(run)
    proc = train_cli(*TINY, f"hydra.run.dir={run}", "train.resume=true", *change)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(why), proc.stderr
    assert file_bytes(run) == before


def test_a_run_dir_in_use_is_refused_before_hydra_writes_into_it(make_cfg, train_cli, tmp_path):
    """Another live process trains in the dir (it holds the run-dir lock): a resume there is one line, and the dir
    keeps every byte (no .hydra/ written over the live run's)."""
    from experiments.run.train import train

    run = tmp_path / "run"
    train(make_cfg(run_dir=run))
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text("# the live run's\n")
    holder = _hold(run, "stdin")  # another process holds the run dir's lock, as a live trainer does
    try:
        before = file_bytes(run)
        proc = train_cli(*TINY, f"hydra.run.dir={run}", "train.resume=true")
        assert file_bytes(run) == before
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"config error: hydra.run.dir: run dir {run} is in use by another process"), lines


def test_a_resume_of_the_same_model_is_not_refused(make_cfg, cache_dir, tmp_path):
    from experiments.run.train import train

    run = tmp_path / "run"
    train(make_cfg(run_dir=run))
    precheck([*TINY, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}", "train.resume=true"])
