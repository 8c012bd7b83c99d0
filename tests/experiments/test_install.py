"""A non-editable install finds conf/: build a wheel from a copy of the sources, unpack it (a pure-Python wheel
is a zip of the installed files), and run `python -m experiments.train --cfg job` and compose_config from a
directory outside the repo with only the unpacked wheel on PYTHONPATH.

Before conf/ was packaged (`experiments/conf` via pyproject's package-dir), the installed code looked for
`<site-packages>/conf` and Hydra failed with "Primary config directory not found". Before every conf/ folder was
listed in pyproject's packages, each build (`pip install -e .`, so `make demo` too) printed ~40 lines of
"Package 'experiments.conf.<group>' is absent from the `packages` configuration" per folder, ~850 in all.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from .conftest import REPO

@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("tokenizer", "arch", "experiments", "conf", "hydra_plugins"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", ".",
                           "-w", str(tmp / "wheel")], cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    build_output = proc.stdout + proc.stderr  # -v: the build backend's own output, its warnings included
    (wheel,) = (tmp / "wheel").glob("archlab-*.whl")
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "experiments" / "conf" / "train.yaml").is_file()
    assert (site / "experiments" / "conf" / "model" / "pos" / "rope.yaml").is_file()
    away = tmp / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    return site, away, env, build_output


def test_the_build_is_quiet_about_conf(installed):
    *_, build_output = installed
    assert "running build_py" in build_output  # the backend's own output is there to judge
    absent = re.findall(r"Package '([\w.]+)' is absent from the `packages` configuration", build_output)
    assert absent == []


def test_every_conf_folder_is_a_listed_package():
    """The folders of conf/ are exactly pyproject's experiments.conf.* packages (a new group needs its line)."""
    import tomllib

    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = {"experiments.conf" + "".join(f".{part}" for part in p.relative_to(REPO / "conf").parts)
               for p in [REPO / "conf", *(REPO / "conf").rglob("*")] if p.is_dir() and p.name != "__pycache__"}
    assert sorted(p for p in packages if p == "experiments.conf" or p.startswith("experiments.conf.")) == sorted(folders)


def test_installed_package_composes_from_its_own_conf(installed):
    site, away, env, _ = installed
    code = ("import experiments, experiments.config.compose as c; print(experiments.__file__); print(c.CONF_DIR); "
            "print(c.compose_config(['model/pos=rope', 'model=small']).model.d_model)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=away, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    module, conf, d_model = proc.stdout.split()
    assert module.startswith(str(site)) and conf == str(site / "experiments" / "conf")  # not the checkout's
    assert d_model == "128"


def test_installed_cli_prints_the_config(installed):
    site, away, env, _ = installed
    proc = subprocess.run([sys.executable, "-m", "experiments.train", "--cfg", "job", "model/pos=alibi"], cwd=away,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "kind: alibi" in proc.stdout and "d_model: 64" in proc.stdout


def test_installed_package_brings_the_tuned_sweeper_plugin(installed):
    """Hydra finds plugins only under the hydra_plugins namespace package: the wheel must put the tuned sweeper
    there (hydra/sweeper=tuned composes and its class is a discovered Sweeper)."""
    site, away, env, _ = installed
    code = ("from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
            "import experiments.config.compose as c; "
            "print(c.compose_config(['hydra/sweeper=tuned'], return_hydra_config=True).hydra.sweeper._target_); "
            "print(*sorted(f'{k.__module__}.{k.__name__}' for k in Plugins.instance().discover(Sweeper))); "
            "import hydra_plugins.archlab_tuned_sweeper as p; print(p.__file__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=away, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    target, found, module = proc.stdout.splitlines()
    assert module.startswith(str(site))  # the wheel's copy, not the checkout's
    assert target == "hydra_plugins.archlab_tuned_sweeper.tuned_sweeper.TunedSweeper" and target in found.split()
    assert not (site / "hydra_plugins" / "__init__.py").exists()  # a namespace package, shared with other plugins


def test_installed_package_brings_the_finding_registrations(installed):
    """A full finding run checks its setup against its registration: an installed copy without the records would
    refuse every finding."""
    site, _, _, _ = installed
    records = sorted(p.name for p in (REPO / "experiments" / "findings" / "registered").glob("*.json"))
    assert records and sorted(p.name for p in (site / "experiments" / "findings" / "registered").glob("*.json")) == records
