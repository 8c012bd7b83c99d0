"""The report is its own subpackage, experiments/compare/, reading run dirs only through experiments/rundir.py.

Before the move, compare.py / runs.py / plots.py / report_html.py / wandb_pull.py sat at experiments/ top level
beside the training app, and runs.py had its own readers and constants for the run-dir files.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import experiments.compare as compare
from experiments import rundir
from experiments.compare import runs as compare_runs
from tests.experiments.synthetic_runs import GROUPS, make_config, write_run

REPO = Path(__file__).resolve().parents[2]
OLD = ("experiments.runs", "experiments.plots", "experiments.report_html", "experiments.wandb_pull")


def test_report_modules_live_in_the_compare_package() -> None:
    assert hasattr(compare, "__path__"), "experiments.compare is a package"
    for old in OLD:
        assert importlib.util.find_spec(old) is None, f"{old} still exists beside the training app"
    for mod in ("runs", "grouping", "stats", "significance", "comparison", "figures", "plots", "tables", "markdown",
                "html", "outdir", "report", "cli", "wandb_pull", "__main__"):
        assert importlib.util.find_spec(f"experiments.compare.{mod}") is not None, mod


def test_nothing_imports_the_old_modules() -> None:
    pattern = re.compile(r"^\s*(from|import)\s+(" + "|".join(re.escape(o) for o in OLD) + r")\b", re.M)
    hits = [f"{p.relative_to(REPO)}" for top in ("experiments", "tests", "bench") for p in (REPO / top).rglob("*.py")
            if pattern.search(p.read_text(errors="replace"))]
    assert hits == []


def test_build_report_keeps_its_signature() -> None:
    # the sweep callback and the demo call it; the literal list is the contract
    params = [(p.name, p.default) for p in inspect.signature(compare.build_report).parameters.values()]
    empty = inspect.Parameter.empty
    assert params == [("run_paths", empty), ("out_dir", None), ("by", None), ("metric", "val/loss"), ("x", "tokens"),
                      ("allow_mixed", False), ("runs", None), ("command", None), ("baseline", None), ("smooth", 0.0),
                      ("analysis", False)]


def test_python_m_runs_the_package_cli() -> None:
    p = subprocess.run([sys.executable, "-m", "experiments.compare", "--help"], capture_output=True, text=True,
                       cwd=REPO, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: python -m experiments.compare")


def test_importing_the_package_does_not_import_matplotlib() -> None:
    code = "import sys, experiments.compare; print('matplotlib' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert p.stdout.strip() == "False", p.stderr


def test_pyproject_packages_every_python_package() -> None:
    # a non-editable install only ships the packages listed; experiments.compare must be one of them
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for top in ("tokenizer", "arch", "experiments")
             for p in (REPO / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    assert found - listed == set()


# ---------------------------------------------------------------- item 2: run dirs are read through rundir.py


def test_run_dir_constants_come_from_rundir() -> None:
    assert compare_runs.RUN_MARKERS is rundir.RUN_MARKERS
    assert compare_runs.STATUSES is rundir.STATUSES
    assert set(compare.EXCLUDED_STATUSES) == set(rundir.STATUSES) - {"running", "completed"}


def test_load_run_reads_through_rundir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = write_run(tmp_path / "r", make_config(GROUPS[0], 0), [{"step": 0, "tokens": 0}], {"status": "completed"})
    calls: list[str] = []
    for name in ("read_summary", "read_metrics", "read_config"):
        real = getattr(rundir.RunDir, name)

        def spy(self, _real=real, _name=name):
            calls.append(_name)
            return _real(self)

        monkeypatch.setattr(rundir.RunDir, name, spy)
    r = compare.load_run(d)
    assert sorted(calls) == ["read_config", "read_metrics", "read_summary"]
    assert r.status == "completed" and r.flat["model.pos.kind"] == GROUPS[0]["pos"]


@pytest.mark.parametrize("garbage", ["[1, 2]", '"done"', "{not json", ""])
def test_a_garbage_summary_reads_as_no_summary(tmp_path: Path, garbage: str) -> None:
    d = write_run(tmp_path / "r", make_config(GROUPS[0], 0), [{"step": 0, "tokens": 0, "train/loss": 5.0}], None)
    (d / "summary.json").write_text(garbage)
    r = compare.load_run(d)
    assert r.summary == {} and r.status == "running" and len(r.metrics) == 1


def test_interrupted_is_a_status_of_its_own(tmp_path: Path) -> None:
    d = write_run(tmp_path / "r", make_config(GROUPS[0], 0), [], {"status": "interrupted", "steps": 40,
                                                                  "error": "KeyboardInterrupt: SIGINT"})
    r = compare.load_run(d)
    assert r.status == "interrupted" and r.reason == "KeyboardInterrupt: SIGINT"
    assert json.loads((d / "summary.json").read_text())["status"] in rundir.STATUSES
