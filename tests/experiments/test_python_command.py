"""Commands printed for the user name an interpreter that has this project (experiments/python_command.py): `make
demo` runs .venv/bin/python without activating the venv, and its last line said `python -m experiments.compare ...`,
which outside the venv is the system's Python (ModuleNotFoundError: matplotlib). The reference is a shell: the
printed interpreter, run by bash with the PATH the user has, imports what the command needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.python_command import python_command

VENV_BIN = Path(sys.executable).parent
BARE_PATH = "/usr/local/bin:/usr/bin:/bin"  # a shell that has not activated the venv


@pytest.mark.parametrize("path,cwd,expect", [
    (f"{VENV_BIN}{os.pathsep}{BARE_PATH}", None, "python"),  # activated: `python` is this interpreter
    (BARE_PATH, "above", "relative"),  # `make demo` from the repo root: .venv/bin/python
    (BARE_PATH, "elsewhere", "absolute"),
    ("", "above", "relative"),
])
def test_the_printed_interpreter_works_as_printed_with_the_users_path(monkeypatch, tmp_path, path, cwd, expect):
    monkeypatch.setenv("PATH", path)
    where = VENV_BIN.parent.parent if cwd == "above" else tmp_path
    monkeypatch.chdir(where)
    shown = python_command()
    if expect == "python":
        assert shown == "python"
    elif expect == "relative":
        assert not shown.startswith("/") and (where / shown).resolve() == Path(sys.executable).resolve()
    else:
        assert shown == str(Path(os.path.abspath(sys.executable)))
    r = subprocess.run(["bash", "-c", f"{shown} -c 'import matplotlib, experiments.compare'"], cwd=where,
                       env={**os.environ, "PATH": path or BARE_PATH}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_system_python_on_path_is_not_taken_for_the_venvs(monkeypatch, tmp_path):
    """A `python` elsewhere on PATH that resolves to the same base interpreter (a venv's python is a symlink to it)
    is not this venv: the path is printed."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python").symlink_to(Path(sys.executable).resolve())
    monkeypatch.setenv("PATH", str(fake_bin))
    monkeypatch.chdir(tmp_path)
    assert python_command() != "python"
