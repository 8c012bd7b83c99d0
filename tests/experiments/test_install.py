"""A non-editable install finds conf/: build a wheel from a copy of the sources, unpack it (a pure-Python wheel
is a zip of the installed files), and run `python -m experiments.train --cfg job` and compose_config from a
directory outside the repo with only the unpacked wheel on PYTHONPATH.

Before conf/ was packaged (`experiments/conf` via pyproject's package-dir), the installed code looked for
`<site-packages>/conf` and Hydra failed with "Primary config directory not found".
"""

from __future__ import annotations

import os
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
    for name in ("tokenizer", "arch", "experiments", "conf"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", ".",
                           "-w", str(tmp / "wheel")], cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp / "wheel").glob("archlab-*.whl")
    site = tmp / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert (site / "experiments" / "conf" / "train.yaml").is_file()
    assert (site / "experiments" / "conf" / "model" / "pos" / "rope.yaml").is_file()
    away = tmp / "elsewhere"
    away.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    return site, away, env


def test_installed_package_composes_from_its_own_conf(installed):
    site, away, env = installed
    code = ("import experiments, experiments.config.compose as c; print(experiments.__file__); print(c.CONF_DIR); "
            "print(c.compose_config(['model/pos=rope', 'model=small']).model.d_model)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=away, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    module, conf, d_model = proc.stdout.split()
    assert module.startswith(str(site)) and conf == str(site / "experiments" / "conf")  # not the checkout's
    assert d_model == "128"


def test_installed_cli_prints_the_config(installed):
    site, away, env = installed
    proc = subprocess.run([sys.executable, "-m", "experiments.train", "--cfg", "job", "model/pos=alibi"], cwd=away,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "kind: alibi" in proc.stdout and "d_model: 64" in proc.stdout
