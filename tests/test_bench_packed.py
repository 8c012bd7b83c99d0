"""bench/bench_packed.py: its arguments, its table, and a smoke run that writes the JSON gpu_check reads. No timing
is asserted (benchmarks print ratios; docs/benchmarks.md records them)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_packed  # noqa: E402


@pytest.mark.parametrize("argv, message", [(["--members", "0"], "every count must be >= 1"),
                                           (["--members", "a,b"], "a comma list of ints"),
                                           (["--steps", "-1"], "--steps: must be >= 1")])
def test_bad_arguments_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        bench_packed.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_table_shows_the_ratios_of_each_row():
    rows = [{"members": 4, "packed_tok_s": 8000.0, "one_by_one_tok_s": 2000.0, "processes_tok_s": None,
             "packed_vs_one_by_one": 4.0, "packed_vs_processes": None}]
    lines = bench_packed.table(rows).splitlines()
    assert lines[-1] == "| 4 | 8,000 | 2,000 | n/a | 4.00x | n/a |"


def test_smoke_run_writes_the_figures_gpu_check_reads(tmp_path):
    out = tmp_path / "b.json"
    assert bench_packed.main(["--smoke", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["members"] == 2 and [r["members"] for r in result["rows"]] == [1, 2]
    row = result["rows"][1]
    assert result["speedup"] == pytest.approx(row["packed_tok_s"] / row["one_by_one_tok_s"])
