"""A sweep run again into a dir whose every job already holds a run says that nothing ran, with the command that
continues them, and exits 1 (experiments/sweep/callbacks.py). Before, every job was refused ("already holds a run")
and the sweep still ended "finished ... completed", exit 0, reading the old runs as its own.

The class: every job refused (nothing ran), some refused (the others ran), none refused (a resumed or a new sweep),
a refused job in a stopped sweep (SweepStop's exit 130 stands). The callback's start/end are called directly on fake
job dirs (fast); one test runs the real command twice.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.sweep.callbacks import SweepReport

from .conftest import TINY


def _job(sweep: Path, i: int, status: str = "completed") -> Path:
    d = sweep / f"{i}_seed={i}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "summary.json").write_text(json.dumps({"status": status, "final_val_loss": 5.0 + i}))
    (d / "metrics.jsonl").write_text('{"step": 1}\n')
    return d


def _config(sweep: Path, resume: bool = False):
    return OmegaConf.create({"experiment_name": "x", "hydra": {"sweep": {"dir": str(sweep)}},
                             "train": {"resume": resume}})


def _end(cb: SweepReport, sweep: Path, capsys, resume: bool = False) -> tuple[int, str]:
    try:
        cb.on_multirun_end(_config(sweep, resume))
        code = 0
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("n", [1, 3])
def test_every_job_refused_says_nothing_ran_and_exits_1(tmp_path, capsys, n):
    sweep = tmp_path / "sweep"
    jobs = [_job(sweep, i) for i in range(n)]
    cb = SweepReport()
    cb.on_multirun_start(_config(sweep))
    code, err = _end(cb, sweep, capsys)  # no job wrote anything in between
    assert code == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"[archlab] nothing ran: each of the {n} job dirs already held a run"), err
    assert f"hydra.sweep.dir={sweep} train.resume=true" in last and "train.overwrite=true" in last
    assert err.count("not run by this sweep") == n and "finished" in err
    assert not (sweep / "report").exists()  # no report rebuilt over old runs
    assert all((d / "summary.json").exists() for d in jobs)


def test_some_refused_the_others_ran_exits_1_naming_the_refused(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    _job(sweep, 0)
    cb = SweepReport()
    cb.on_multirun_start(_config(sweep))
    _job(sweep, 1)  # a new job ran
    code, err = _end(cb, sweep, capsys)
    assert code == 1
    assert "1 of 2 run(s) did not complete: 0_seed=0 (not run by this sweep" in err, err
    assert err.count("(not run by this sweep") == 2  # its status line and the summary line
    assert "resume them with:" in err and "nothing ran" not in err


@pytest.mark.parametrize("before", [0, 2])
def test_jobs_that_all_ran_are_not_flagged(tmp_path, capsys, before):
    sweep = tmp_path / "sweep"
    for i in range(before):
        _job(sweep, i, status="interrupted")  # a stopped sweep, then resumed: each summary is rewritten
    cb = SweepReport()
    cb.on_multirun_start(_config(sweep))
    for i in range(2):
        _job(sweep, i)
    code, err = _end(cb, sweep, capsys)
    assert code == 0 and "not run by this sweep" not in err and "nothing ran" not in err, err


@pytest.mark.slow  # three sweeps of two tiny runs: ~30 s on 2 cores
def test_a_resumed_sweep_that_skips_finished_jobs_is_not_flagged(tmp_path, capsys):
    """hydra/sweeper=tuned does not launch a job that holds a result on train.resume=true: untouched on purpose."""
    sweep = tmp_path / "sweep"
    _job(sweep, 0)
    _job(sweep, 1)
    cb = SweepReport()
    cb.on_multirun_start(_config(sweep, resume=True))
    code, err = _end(cb, sweep, capsys, resume=True)
    assert code == 0 and "not run by this sweep" not in err and "nothing ran" not in err, err


def test_the_command_run_twice_says_nothing_ran_the_second_time(train_cli, tmp_path):
    sweep = tmp_path / "sweep"
    argv = ["-m", *TINY, "seed=0,1", "train.eval_batches=1", f"hydra.sweep.dir={sweep}"]
    first = train_cli(*argv)
    assert first.returncode == 0, first.stderr
    before = {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file() and "report" not in p.parts}
    again = train_cli(*argv)
    assert again.returncode == 1, again.stderr
    assert again.stderr.count("already holds a run") == 2
    last = again.stderr.strip().splitlines()[-1]
    assert last.startswith("[archlab] nothing ran: each of the 2 job dirs already held a run"), again.stderr
    resume = shlex.split(last.split("continue them with: ", 1)[1].split(" (or ", 1)[0])
    assert resume[:4] == ["python", "-m", "experiments.train", "-m"] and resume[-1] == "train.resume=true"
    assert {p: p.read_bytes() for p in before} == before  # every file of the old runs kept its bytes
    resumed = train_cli(*resume[3:])  # the printed command continues them: nothing refused, exit 0
    assert resumed.returncode == 0 and "nothing ran" not in resumed.stderr, resumed.stderr
