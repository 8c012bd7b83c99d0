"""One name per meaning for reading runs: `load_run` is experiments/use/load.py's (model, tokenizer, cfg) alone; the
comparison report reads run dirs into `Run` records with `read_run` / `read_runs`; the run's tokenizer is
`load_run_tokenizer`. Each of these names is defined once in the product packages."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import experiments
from experiments import compare
from experiments.use import load

from .conftest import REPO

NAMES = ("load_run", "read_run", "read_runs", "load_run_tokenizer", "run_tokenizer_file")


def definitions() -> dict[str, list[str]]:
    """Top-level function definitions of NAMES in arch/, tokenizer/ and experiments/, by name -> files."""
    found: dict[str, list[str]] = defaultdict(list)
    for package in ("arch", "tokenizer", "experiments"):
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.FunctionDef) and node.name in NAMES:
                    found[node.name].append(str(path.relative_to(REPO)))
    return found


def test_each_run_reading_name_is_defined_once():
    found = definitions()
    assert {name: files for name, files in found.items() if len(files) != 1} == {}
    assert found["load_run"] == [str(Path("experiments/use/load.py"))]
    assert found["read_run"] == found["read_runs"] == [str(Path("experiments/compare/runs.py"))]


def test_the_packages_export_the_one_meaning():
    assert experiments.load_run is load.load_run
    assert not hasattr(compare, "load_run") and not hasattr(compare, "load_runs")
    assert compare.read_run.__module__ == "experiments.compare.runs"
