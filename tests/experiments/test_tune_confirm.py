"""The confirm phase of the tuned sweeper (`hydra.sweeper.confirm: true`, experiments/sweep/tune_confirm.py): each
arm's short-horizon best lr and exactly x2 and /2 of it train the full budget on the tune seeds, and the final runs
use the best of those.

In-process through Hydra with a stand-in trainer whose basin depends on the horizon: its optimum at the tuning
horizon (2 steps) differs from the one at the full budget (8 steps), so the short- and full-horizon bests differ.
Every expected lr and edge below is worked out by hand from the stand-in's closed form (a parabola in log10(lr));
the chosen lr is also checked against the losses read back from the confirm runs' own summary.json files.
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.compare import build_report
from experiments.compare.cli import main as compare_main
from experiments.run import train as train_mod
from experiments.run.interrupt import sweep_stopped
from experiments.sweep.job import hydra_runtime
from experiments.sweep.tune_confirm import confirm_points
from experiments.sweep.tuning_record import ArmResult, TuningRecord

from .conftest import exit_status
from .test_faults import _run_main as run_main
from .test_tune_report import config, metric_doc, write_run
from .test_tune_sweep import job_dirs, sweep_argv

# optimum of the stand-in per arm: at the tuning horizon (train.steps 2) and at the full budget (8)
SHORT = {"learned": 3e-3, "rope": 1e-2}
FULL = {"learned": 2.5e-3, "rope": 4e-3}
DIVERGE_ABOVE = 0.2
CONFIRM = ("hydra.sweeper.confirm=true",)


def loss(opt: float, lr: float, seed: int) -> float:
    return 3.0 + (math.log10(lr) - math.log10(opt)) ** 2 + 0.001 * (seed % 7)


@pytest.fixture
def fake(monkeypatch):
    """The stand-in trainer; `fake.calls`: (pos, lr, seed, steps) per call; `fake.full` / `fake.diverge_full` set
    the full-budget basin; `fake.stop_at`: the call that sends this process SIGINT (the run says interrupted)."""
    class Fake:
        calls: list = []
        full = dict(FULL)
        diverge_full = DIVERGE_ABOVE
        stop_at: int | None = None

    f = Fake()
    f.calls = []

    def fake_train(cfg):
        c = OmegaConf.to_container(cfg, resolve=True)
        run_dir = Path(hydra_runtime().runtime.output_dir)
        pos, lr, seed, steps = c["model"]["pos"]["kind"], c["optim"]["lr"], c["seed"], c["train"]["steps"]
        conf = {**config(pos, lr, seed, steps), "experiment_name": c["experiment_name"]}
        if sweep_stopped(str(hydra_runtime().sweep.dir)):  # as train() records a job that never started
            return write_run(run_dir, conf, None, "interrupted")
        f.calls.append((pos, lr, seed, steps))
        if len(f.calls) == f.stop_at:
            os.kill(os.getpid(), signal.SIGINT)
            return write_run(run_dir, conf, None, "interrupted")
        opt, limit = (SHORT[pos], DIVERGE_ABOVE) if steps == 2 else (f.full[pos], f.diverge_full)
        if lr > limit:
            return write_run(run_dir, conf, None, "diverged")
        return write_run(run_dir, conf, loss(opt, lr, seed), "completed")

    monkeypatch.setattr(train_mod, "train", fake_train)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return f


def summaries(sweep: Path, runs) -> dict[float, float]:
    """lr -> mean final val loss (inf: diverged) of `runs`, read from their own summary.json files."""
    by: dict[float, list[float]] = {}
    for r in runs:
        s = json.loads((sweep / r.run_dir / "summary.json").read_text())
        value = s["final_val_loss"] if s["status"] == "completed" else math.inf
        by.setdefault(r.lr, []).append(value)
    return {lr: sum(v) / len(v) for lr, v in by.items()}


def rope_argv(sweep: Path, *extra: str) -> list[str]:
    """sweep_argv with one arm, rope (cheaper where the other arm adds nothing)."""
    return [*(a for a in sweep_argv(sweep) if not a.startswith("model/pos=")), "model/pos=rope", *extra]


def test_confirm_points_are_exactly_half_and_twice():
    assert confirm_points(3e-3) == [0.0015, 0.003, 0.006]
    assert confirm_points(1e-2) == [0.005, 0.01, 0.02]  # not the grid's 3e-3 / 3e-2


def test_tuning_then_confirm_then_final_at_the_full_horizon_best(fake, monkeypatch, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, *CONFIRM)) == 0
    # tuning: 2 arms x 4 lrs at 2 steps; learned's best 3e-3 and rope's 1e-2 are interior (no widening)
    assert fake.calls[:8] == [(p, lr, 1000, 2) for p in ("learned", "rope") for lr in (1e-3, 3e-3, 1e-2, 3e-2)]
    # confirm: each best, /2 and x2, at the full 8 steps on the tune seed. At 8 steps learned's optimum is 2.5e-3:
    # |log10(lr/2.5e-3)| = 0.222, 0.079, 0.380 -> 3e-3 interior. rope's is 4e-3: 0.097, 0.398, 0.699 -> 5e-3 at
    # the low end; confirm_widen 1 adds 2.5e-3 (0.204): 5e-3 is then interior
    assert fake.calls[8:14] == [("learned", lr, 1000, 8) for lr in (1.5e-3, 3e-3, 6e-3)] + \
        [("rope", lr, 1000, 8) for lr in (5e-3, 1e-2, 2e-2)]
    assert fake.calls[14:15] == [("rope", 2.5e-3, 1000, 8)]
    # final: the full-horizon bests on the fresh seeds
    assert fake.calls[15:] == [("learned", 3e-3, 0, 8), ("rope", 5e-3, 0, 8), ("learned", 3e-3, 1, 8),
                               ("rope", 5e-3, 1, 8)]
    dirs = job_dirs(sweep)
    assert [int(d.name.split("_")[0]) for d in dirs] == list(range(19))
    rec = TuningRecord.read(sweep)
    assert rec.phase == "done" and rec.confirm and rec.confirm_widen == 1
    assert [sweep / r.run_dir for r in rec.runs] == dirs[:8]
    assert [sweep / r.run_dir for r in rec.confirm_runs] == dirs[8:15]
    assert [sweep / r.run_dir for r in rec.finals] == dirs[15:]
    assert all(r.status == "completed" and r.seed == 1000 for r in rec.confirm_runs)
    learned, rope = rec.results
    assert (learned.best_lr, learned.confirmed_lr, learned.confirm_edge, learned.confirm_widened) == \
        (3e-3, 3e-3, None, [])
    assert (rope.best_lr, rope.confirmed_lr, rope.confirm_edge, rope.confirm_widened) == (1e-2, 5e-3, None, [2.5e-3])
    for arm, res in enumerate(rec.results):  # the chosen lr: the argmin of the confirm runs' own losses
        mine = summaries(sweep, [r for r in rec.confirm_runs if r.arm == arm])
        assert res.confirmed_lr == min(mine, key=mine.get)
        for r in rec.finals:
            if r.arm == arm:
                assert OmegaConf.load(sweep / r.run_dir / "config.yaml").optim.lr == res.confirmed_lr
    err = capsys.readouterr().err
    assert "[archlab] confirmed optim.lr at the full budget (train.steps 8) on seeds 1000: each best, x2 and /2 " \
        "of it; the final runs use the full-horizon best:" in err.splitlines()  # as docs/tuning.md shows it
    losses = ", ".join(f"{lr:g}: {loss(4e-3, lr, 1000):.4f}" for lr in (2.5e-3, 5e-3, 1e-2, 2e-2))
    assert f"  model/pos=rope: full-horizon best 0.005 (short-horizon best 0.01; interior, widened by 0.0025; " \
        f"{losses})" in err.splitlines()
    # the report: the final runs alone are compared; its table shows both lrs
    doc, m = metric_doc(sweep / "report")
    assert doc["protocol"].startswith("tuned") and [g["n"] for g in m["groups"]] == [2, 2]
    assert all(g["seeds"] == [0, 1] for g in m["groups"])
    rows = _table(sweep / "report" / "report.md")
    assert rows["model/pos=rope"][:2] == ["0.01", "interior"] and rows["model/pos=rope"][5:7] == ["0.005", "interior"]
    assert rows["model/pos=learned"][5] == "0.003"
    assert f"0.006 ({loss(2.5e-3, 6e-3, 1000):.4f})" in rows["model/pos=learned"][7]
    assert (sweep / "report" / "basin.png").is_file()


def _table(md: Path) -> dict[str, list[str]]:
    """The tuning table's rows of report.md: arm -> its cells."""
    return {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in md.read_text().splitlines() if line.startswith("| model/pos=")}


# (rope's full-budget optimum, confirm_widen) -> rope's (full-horizon best, confirm edge, points added), by hand:
# from confirm points 5e-3, 1e-2, 2e-2 with log10 distances to the optimum
EDGES = [
    (4e-3, 0, (5e-3, "low", [])),                    # 5e-3 at the low end, no widening allowed: flagged
    (1e-3, 1, (2.5e-3, "low", [2.5e-3])),            # 2.5e-3 (0.398) beats 5e-3 (0.699): still the low end
    (1e-3, 2, (1.25e-3, "low", [2.5e-3, 1.25e-3])),  # 1.25e-3 (0.097): still the end, cap reached
    (1e-3, 3, (1.25e-3, None, [2.5e-3, 1.25e-3, 6.25e-4])),  # 6.25e-4 (0.204) is worse: interior
    (1e-2, 1, (1e-2, None, [])),                     # the short-horizon best holds at the full budget
    (5e-2, 1, (4e-2, "high", [4e-2])),               # 2e-2 at the high end; 4e-2 (0.097) better, cap reached
]


@pytest.mark.parametrize("full, widen, expected", [
    pytest.param(*case, marks=() if i == 5 else pytest.mark.slow) for i, case in enumerate(EDGES)])
def test_the_full_horizon_best_at_an_end_is_widened_then_flagged(fake, monkeypatch, tmp_path, full, widen, expected):
    fake.full["rope"] = full
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, rope_argv(sweep, *CONFIRM, f"hydra.sweeper.confirm_widen={widen}")) == 0
    rope, = TuningRecord.read(sweep).results
    assert (rope.confirmed_lr, rope.confirm_edge, rope.confirm_widened) == expected
    assert {c[1] for c in fake.calls if c[0] == "rope" and c[2] == 0} == {expected[0]}  # the final runs' lr


@pytest.mark.slow
def test_a_diverged_confirm_run_counts_as_inf_and_every_one_diverged_means_no_final_runs(fake, monkeypatch, tmp_path,
                                                                                        capsys):
    """At 8 steps learned diverges above 5e-3: 6e-3 is +inf, 3e-3 stays the best (interior). rope's confirm points
    (5e-3 .. 2e-2) and 2.5e-3 widened below them all diverge at 2e-3: rope has no full-horizon best and no final
    runs; the sweep says why."""
    fake.diverge_full = 2e-3
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, *CONFIRM)) == 0
    rec = TuningRecord.read(sweep)
    statuses = {(r.arm, r.lr): r.status for r in rec.confirm_runs}
    assert statuses == {(0, 1.5e-3): "completed", (0, 3e-3): "diverged", (0, 6e-3): "diverged",
                        (1, 5e-3): "diverged", (1, 1e-2): "diverged", (1, 2e-2): "diverged",
                        (1, 2.5e-3): "diverged", (0, 7.5e-4): "completed"}
    learned, rope = rec.results
    # learned: only 1.5e-3 is finite, at the low end -> 7.5e-4 widened (|log10(7.5e-4/2.5e-3)| = 0.523 > 0.222)
    assert (learned.confirmed_lr, learned.confirm_edge, learned.confirm_widened) == (1.5e-3, None, [7.5e-4])
    assert rope.confirmed_lr is None and rope.note == "every confirm run diverged at the full budget: no final runs"
    assert [(r.arm, r.lr) for r in rec.finals] == [(0, 1.5e-3), (0, 1.5e-3)]
    assert "model/pos=rope: full-horizon best (short-horizon best 0.01; every confirm run diverged" in \
        capsys.readouterr().err


def test_without_confirm_tuning_json_has_no_confirm_keys():
    """confirm: false (the default): the record's keys are those of a record from before confirm existed (the sweep
    itself runs no confirm run: test_tune_sweep.py's call lists), and it reads back as one without confirm."""
    rec = TuningRecord(key="optim.lr", grid=[1e-3, 3e-3, 1e-2, 3e-2], tune_seeds=[1000], seeds=[0], fraction=0.25,
                       widen=2, arms=[{"model/pos": "rope"}], results=[ArmResult(3e-3, None)], confirm_widen=1)
    data = rec.to_json()
    assert list(data) == ["version", "key", "grid", "tune_seeds", "seeds", "fraction", "widen", "arms", "horizon",
                          "phase", "runs", "results", "finals", "proxy", "proxy_only", "config"]
    assert list(data["results"][0]) == ["best_lr", "edge", "widened", "loss_spread", "note"]
    back = TuningRecord.from_json(data)
    assert not back.confirm and back.confirm_runs == [] and back.final_lr(0) == 3e-3
    assert back.declaration() == rec.declaration() and "confirm_widen" not in data
    on = TuningRecord.from_json({**data, "confirm": True, "confirm_widen": 1, "confirm_runs": [],
                                 "results": [{**data["results"][0], "confirmed_lr": 1.5e-3, "confirm_edge": "low"}]})
    assert on.final_lr(0) == 1.5e-3 and on.results[0].confirm_edge == "low"
    assert on.difference(back) == ("confirm", False, True)
    assert TuningRecord.from_json(on.to_json()) == on


@pytest.mark.slow
def test_a_proxy_is_confirmed_alone_and_its_full_horizon_best_transferred(fake, monkeypatch, tmp_path):
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, *CONFIRM, "hydra.sweeper.proxy={model/pos:rope}")) == 0
    assert [c for c in fake.calls if c[3] == 8 and c[2] == 1000] == \
        [("rope", lr, 1000, 8) for lr in (5e-3, 1e-2, 2e-2, 2.5e-3)]
    rec = TuningRecord.read(sweep)
    assert [(r.confirmed_lr, r.confirm_edge) for r in rec.results] == [(5e-3, None), (5e-3, None)]
    assert {(r.arm, r.lr) for r in rec.finals} == {(0, 5e-3), (1, 5e-3)}


@pytest.mark.slow
def test_confirm_runs_are_never_compared(fake, monkeypatch, tmp_path, capsys):
    """A confirm run at the final lr has the final runs' config but for the seed: compare leaves it out however it
    is named, and compare on it alone says what it is."""
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, *CONFIRM)) == 0
    rec = TuningRecord.read(sweep)
    build_report([f"{sweep}/*"], tmp_path / "r", by=["model.pos.kind"])
    _, m = metric_doc(tmp_path / "r")
    assert [g["n"] for g in m["groups"]] == [2, 2] and all(g["seeds"] == [0, 1] for g in m["groups"])
    confirm = next(r for r in rec.confirm_runs if r.lr == rec.results[0].confirmed_lr)
    capsys.readouterr()
    assert compare_main([str(sweep / confirm.run_dir)]) == 2
    line = capsys.readouterr().err.strip().splitlines()
    assert len(line) == 1 and f"{sweep / confirm.run_dir} is a confirm run (optim.lr=0.003, seed 1000" in line[0]


def test_a_stopped_confirm_phase_resumes_to_the_unstopped_sweep(fake, monkeypatch, tmp_path, capsys):
    """SIGINT during the second confirm run (rope alone: 4 tuning runs, confirm at 5e-3, 1e-2, 2e-2, then 2.5e-3
    widened below, 2 final runs): it and the third say interrupted, no widening or final run starts, tuning.json
    stays in phase confirm, exit 130. The resume runs exactly the runs without a result and ends with the same
    tuning.json and run dirs as the sweep never stopped."""
    whole = tmp_path / "whole"
    assert run_main(monkeypatch, rope_argv(whole, *CONFIRM)) == 0
    ran = list(fake.calls)
    assert [c[1:] for c in ran[4:8]] == [(5e-3, 1000, 8), (1e-2, 1000, 8), (2e-2, 1000, 8), (2.5e-3, 1000, 8)]
    fake.calls.clear()
    fake.stop_at = 6
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, rope_argv(sweep, *CONFIRM)) == 130
    rec = TuningRecord.read(sweep)
    assert rec.phase == "confirm" and rec.finals == [] and len(job_dirs(sweep)) == 7
    assert [r.status for r in rec.confirm_runs] == ["completed", "interrupted", "interrupted"]
    assert "train.resume=true" in capsys.readouterr().err
    fake.calls.clear()
    fake.stop_at = None
    assert run_main(monkeypatch, [*rope_argv(sweep, *CONFIRM), "train.resume=true"]) == 0
    assert fake.calls == ran[5:]  # confirm runs 2 and 3, the widened one, the finals
    assert json.loads((sweep / "tuning.json").read_text()) == json.loads((whole / "tuning.json").read_text())
    assert [d.name for d in job_dirs(sweep)] == [d.name for d in job_dirs(whole)]


def _cli(monkeypatch, argv: list[str]) -> int:
    return exit_status(train_mod.cli, monkeypatch, argv)


BAD = [
    ("hydra.sweeper.confirm=maybe", "hydra.sweeper.confirm: must be true or false (confirm each arm's best lr at "
                                    "the full budget), got 'maybe'"),
    ("hydra.sweeper.confirm=1", "hydra.sweeper.confirm: must be true or false"),
    ("hydra.sweeper.confirm_widen=-1", "hydra.sweeper.confirm_widen: must be an integer >= 0"),
    ("hydra.sweeper.confirm_widen=1.5", "hydra.sweeper.confirm_widen: must be an integer >= 0"),
    ("hydra.sweeper.confirm_widen=true", "hydra.sweeper.confirm_widen: must be an integer >= 0"),
    ("+hydra.sweeper.confirmm=true", "hydra.sweeper.confirmm: not a key of the tuned sweeper; did you mean confirm?"),
]


@pytest.mark.parametrize("arg, message", [
    pytest.param(*case, marks=() if i in (0, 2, 5) else pytest.mark.slow) for i, case in enumerate(BAD)])
def test_a_bad_confirm_value_is_one_line_before_anything_is_written(fake, monkeypatch, tmp_path, capfd, arg,
                                                                    message):
    """Through the command's precheck (one line, nothing printed before it) and through the sweeper itself (its
    last line): exit 2, no run, no sweep dir."""
    sweep = tmp_path / "sweep"
    for entry, one in ((_cli, True), (run_main, False)):
        capfd.readouterr()
        assert entry(monkeypatch, sweep_argv(sweep, arg)) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert err[-1].startswith("config error: ") and message in err[-1], err
        assert "Traceback" not in "\n".join(err) and (len(err) == 1 or not one)
        assert fake.calls == [] and not sweep.exists()


@pytest.mark.parametrize("first, then, said", [
    ((), CONFIRM, "declared confirm = False, this command True"),
    pytest.param(CONFIRM, ("hydra.sweeper.confirm=false",), "declared confirm = True, this command False",
                 marks=pytest.mark.slow),
    pytest.param(CONFIRM, (*CONFIRM, "hydra.sweeper.confirm_widen=2"), "declared confirm_widen = 1, this command 2",
                 marks=pytest.mark.slow),
])
def test_a_resume_with_another_confirm_is_refused_in_one_line(fake, monkeypatch, tmp_path, capfd, first, then, said):
    sweep = tmp_path / "sweep"
    assert _cli(monkeypatch, rope_argv(sweep, *first)) == 0
    before = {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()}
    fake.calls.clear()
    capfd.readouterr()
    assert _cli(monkeypatch, [*rope_argv(sweep, *then), "train.resume=true"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: train.resume=true: ") and said in err[0], err
    assert fake.calls == [] and {p: p.read_bytes() for p in sorted(sweep.rglob("*")) if p.is_file()} == before
