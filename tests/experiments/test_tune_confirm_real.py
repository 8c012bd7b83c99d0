"""The confirm phase of the tuned sweeper with TINY models trained for real: through hydra/launcher=packed (each
arm's confirm runs one pack, as its tuning grid and its final seeds are), through SLURM with pack=true (slurm,
slow), and Ctrl-C in the confirm phase then resume, against the same sweep never stopped (slow).

The reference for the chosen lr is always the confirm runs' own summary.json files (the lowest final val loss at
the full budget), never tuning.json alone.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest

from experiments.sweep.tuning_record import TuningRecord

from .conftest import PYTHON, REPO, TINY, train_losses
from .test_faults import _run_main as run_main
from .test_faults import comparable
from .test_pack import _tuned
from .test_slurm import JOB, slurm_conf, slurm_env  # noqa: F401 (fixtures: the local SLURM cluster)

CONFIRM = ("hydra.sweeper.confirm=true", "hydra.sweeper.confirm_widen=0")


def _summary(sweep: Path, run) -> dict:
    return json.loads((sweep / run.run_dir / "summary.json").read_text())


def check_confirmed(sweep: Path, full_steps: int) -> TuningRecord:
    """Every confirm run trained the full budget on the tune seed at the best lr, x2 and /2 of it; each arm's final
    lr is the argmin of its confirm runs' losses read from their summary.json files, and its final runs used it."""
    rec = TuningRecord.read(sweep)
    assert rec.phase == "done" and rec.confirm
    for arm, res in enumerate(rec.results):
        mine = [r for r in rec.confirm_runs if r.arm == arm]
        assert sorted(r.lr for r in mine) == [res.best_lr / 2, res.best_lr, res.best_lr * 2]
        got = {r.lr: _summary(sweep, r) for r in mine}
        assert all(s["steps"] == full_steps and s["seed"] == 1000 and s["status"] == "completed" for s in got.values())
        losses = {lr: s["final_val_loss"] for lr, s in got.items()}
        assert res.confirmed_lr == min(losses, key=losses.get)
        ends = {min(losses): "low", max(losses): "high"}
        assert res.confirm_edge == ends.get(res.confirmed_lr)
        finals = [r for r in rec.finals if r.arm == arm]
        assert finals and all(_summary(sweep, r)["steps"] == full_steps and r.lr == res.confirmed_lr for r in finals)
    return rec


def test_a_confirmed_sweep_runs_every_phase_through_the_packed_launcher(train_cli, tmp_path):
    """hydra/launcher=packed: tuning one pack per arm (4 lrs), confirm one pack per arm (3 lrs at the full budget),
    final one pack per arm (2 fresh seeds)."""
    ran = _tuned(train_cli, tmp_path / "packed", "hydra/launcher=packed", *CONFIRM)
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = ran.stderr + ran.stdout
    assert "Launching 8 jobs as 2 pack(s) of sizes [4, 4]" in said
    assert "Launching 6 jobs as 2 pack(s) of sizes [3, 3]" in said
    assert "Launching 4 jobs as 2 pack(s) of sizes [2, 2]" in said
    rec = check_confirmed(tmp_path / "packed", full_steps=6)
    assert len(rec.runs) == 8 and len(rec.confirm_runs) == 6 and len(rec.finals) == 4


def _tiny(*drop: str) -> list[str]:
    return [o for o in TINY if not o.startswith(drop)]


@pytest.mark.slow
def test_ctrl_c_in_the_confirm_phase_then_resume_equals_the_sweep_never_stopped(cache_dir, tmp_path, monkeypatch,
                                                                                capsys):
    """SIGINT at step 5 of the second confirm run (12 steps; the 4 tuning runs train 6): it checkpoints and says
    interrupted, the third never starts, no final run starts, exit 130. The resume command finishes both and runs
    the final phase; tuning.json and every run's curve then equal those of the same sweep never stopped."""
    import experiments.run.schedule

    monkeypatch.setenv("WANDB_MODE", "disabled")

    def argv(sweep: Path) -> list[str]:
        return ["train", "-m", "hydra/sweeper=tuned", "hydra.sweeper.tune={optim.lr:[1e-3,3e-3,1e-2,3e-2]}",
                "hydra.sweeper.tune_seeds=[1000]", "hydra.sweeper.seeds=[0]", "hydra.sweeper.tune_fraction=0.5",
                "hydra.sweeper.widen=0", *CONFIRM, *_tiny("train.steps", "train.eval_interval", "train.ckpt_interval"),
                "train.steps=12", "train.eval_interval=6", "train.ckpt_interval=100", f"data.cache_dir={cache_dir}",
                f"hydra.sweep.dir={sweep}", "hydra/job_logging=disabled", "experiment_name=tuned_confirm_stop"]

    whole = tmp_path / "whole"
    assert run_main(monkeypatch, argv(whole)) == 0
    check_confirmed(whole, full_steps=12)

    real, count = experiments.run.schedule.lr_at, []

    def lr_at(step, **kw):
        count.append(step)
        if len(count) == 4 * 6 + 12 + 5:  # confirm job 2 (after 4 tuning runs of 6 steps, one confirm run of 12)
            os.kill(os.getpid(), signal.SIGINT)
        return real(step, **kw)

    monkeypatch.setattr(experiments.run.schedule, "lr_at", lr_at)
    sweep = tmp_path / "sweep"
    capsys.readouterr()
    assert run_main(monkeypatch, argv(sweep)) == 130
    rec = TuningRecord.read(sweep)
    assert rec.phase == "confirm" and rec.finals == []
    assert [r.status for r in rec.confirm_runs] == ["completed", "interrupted", "interrupted"]
    assert _summary(sweep, rec.confirm_runs[1])["steps"] == 5
    lines = [line for line in capsys.readouterr().err.splitlines() if "resume with: " in line]
    assert len(lines) == 1
    monkeypatch.setattr(experiments.run.schedule, "lr_at", real)
    assert run_main(monkeypatch, ["train", *shlex.split(lines[0].split("resume with: ", 1)[1])[3:]]) == 0
    check_confirmed(sweep, full_steps=12)
    assert json.loads((sweep / "tuning.json").read_text()) == json.loads((whole / "tuning.json").read_text())
    jobs = sorted(p.name for p in whole.iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 4 + 3 + 1 and jobs == sorted(p.name for p in sweep.iterdir() if (p / "summary.json").exists())
    for job in jobs:
        assert comparable(sweep / job) == comparable(whole / job), job


@pytest.mark.slurm
@pytest.mark.slow
def test_a_confirmed_sweep_packed_on_slurm_equals_the_packed_launcher(slurm_env, cache_dir, tmp_path):
    """hydra/launcher=slurm with pack=true: the confirm phase is an array task per arm, like the other phases; its
    record and every curve equal the same sweep through hydra/launcher=packed on this machine."""
    env = slurm_env
    tuned = [*TINY, "train.eval_interval=3", "train.ckpt_interval=6", "train.steps=6", "hydra/sweeper=tuned",
             "hydra.sweeper.tune={optim.lr:[1e-3,3e-3,1e-2,3e-2]}", "hydra.sweeper.tune_seeds=[1000]",
             "hydra.sweeper.seeds=[0,1]", "hydra.sweeper.tune_fraction=0.5", "hydra.sweeper.widen=0",
             "model/pos=learned,rope", *CONFIRM, f"data.cache_dir={cache_dir}"]
    proc = subprocess.run([PYTHON, "-m", "experiments.train", "-m", *JOB, *tuned, "hydra.launcher.pack=true",
                           f"hydra.sweep.dir={tmp_path / 'slurm'}"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6 job(s) packed into 2 SLURM array task(s) of sizes [3, 3]" in proc.stdout
    local = subprocess.run([PYTHON, "-m", "experiments.train", "-m", *tuned, "hydra/launcher=packed",
                            f"hydra.sweep.dir={tmp_path / 'local'}"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]
    records = [json.loads((tmp_path / s / "tuning.json").read_text()) for s in ("slurm", "local")]
    for key in ("results", "confirm_runs", "finals"):
        assert records[0][key] == records[1][key], key
    check_confirmed(tmp_path / "slurm", full_steps=6)
    jobs = sorted(p.name for p in (tmp_path / "local").iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 8 + 6 + 4
    for job in jobs:
        assert train_losses(tmp_path / "slurm" / job) == train_losses(tmp_path / "local" / job)
