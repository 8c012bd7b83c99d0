"""The tuned sweeper (`hydra/sweeper=tuned`) as Hydra runs it, in-process with the basic launcher.

Fast tests replace the trainer by a stand-in (`fake_train`) that writes the run dir a real run would (through
experiments/rundir/layout.py) with a final val loss from a known basin per arm, so the phases, widening, tuning.json
and resume are checked against numbers worked out by hand. The slow tests train TINY models for real: a whole
sweep through the CLI (the plugin found by Hydra, its report built) and Ctrl-C in the tuning phase, then resume.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.run import train as train_mod
from experiments.run.interrupt import sweep_stopped
from experiments.sweep.job import hydra_runtime
from experiments.sweep.tuning_record import TuningRecord

from .conftest import PYTHON, REPO, TINY
from .test_faults import _run_main as run_main
from .test_tune_report import config, write_run

GRID = "[1e-3,3e-3,1e-2,3e-2]"
# the stand-in's basins: learned is best at 3e-3 (interior); rope keeps improving up to 0.2 and diverges above it
OPTIMUM = {"learned": 3e-3, "rope": 0.2, "alibi": 3e-3}
DIVERGE_ABOVE = 0.2


def basin(pos: str, lr: float, seed: int) -> float:
    return 3.0 + (math.log10(lr) - math.log10(OPTIMUM[pos])) ** 2 + 0.001 * (seed % 7)


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Replace the trainer: every call is recorded as (pos, lr, seed, steps) and leaves a finished run dir."""
    calls = []

    def fake_train(cfg):
        c = OmegaConf.to_container(cfg, resolve=True)
        run_dir = Path(hydra_runtime().runtime.output_dir)
        pos, lr, seed, steps = c["model"]["pos"]["kind"], c["optim"]["lr"], c["seed"], c["train"]["steps"]
        calls.append((pos, lr, seed, steps))
        conf = {**config(pos, lr, seed, steps), "experiment_name": c["experiment_name"]}
        if pos == "alibi":  # this arm's runs all fail
            return write_run(run_dir, conf, None, "failed")
        diverged = lr > DIVERGE_ABOVE
        return write_run(run_dir, conf, None if diverged else basin(pos, lr, seed), "diverged" if diverged else "completed")

    monkeypatch.setattr(train_mod, "train", fake_train)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return calls


def sweep_argv(sweep: Path, *extra: str, grid: str = GRID, widen: int = 2) -> list[str]:
    return ["train", "-m", "hydra/sweeper=tuned", f"hydra.sweeper.tune={{optim.lr:{grid}}}",
            "hydra.sweeper.tune_seeds=[1000]", "hydra.sweeper.seeds=[0,1]", "hydra.sweeper.tune_fraction=0.25",
            f"hydra.sweeper.widen={widen}", "model/pos=learned,rope", "logger=disabled", "train.steps=8",
            "experiment_name=tuned_test", f"hydra.sweep.dir={sweep}", "hydra/job_logging=disabled", *extra]


def job_dirs(sweep: Path) -> list[Path]:
    return sorted((p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit()), key=lambda p: int(p.name.split("_")[0]))


def test_tuning_widening_and_final_runs_at_each_arms_best_lr(fake, monkeypatch, tmp_path):
    sweep = tmp_path / "sweep"
    before = signal.getsignal(signal.SIGINT)
    assert run_main(monkeypatch, sweep_argv(sweep)) == 0
    assert signal.getsignal(signal.SIGINT) is before
    # phase 1: 2 arms x 4 lrs x 1 tune seed at a quarter of train.steps=8
    tuning = [(p, lr, s, steps) for p, lr, s, steps in fake if s == 1000]
    assert fake[:8] == [(p, lr, 1000, 2) for p in ("learned", "rope") for lr in (1e-3, 3e-3, 1e-2, 3e-2)]
    # phase 2: rope's best is at the high edge: widened to 3e-2 * (3e-2 / 1e-2) = 0.09, still the best, then 0.27
    # (diverges: +inf), which makes 0.09 interior; learned's 3e-3 is interior from the start
    assert fake[8:10] == [("rope", 0.09, 1000, 2), ("rope", 0.27, 1000, 2)] and len(tuning) == 10
    # phase 3: each arm at its own best lr on the fresh seeds, full budget, seed-major
    assert fake[10:] == [("learned", 3e-3, 0, 8), ("rope", 0.09, 0, 8), ("learned", 3e-3, 1, 8), ("rope", 0.09, 1, 8)]
    dirs = job_dirs(sweep)
    assert [int(d.name.split("_")[0]) for d in dirs] == list(range(14))
    rec = TuningRecord.read(sweep)
    assert rec.phase == "done" and rec.grid == [1e-3, 3e-3, 1e-2, 3e-2] and rec.tune_seeds == [1000]
    assert rec.seeds == [0, 1] and rec.fraction == 0.25 and rec.widen == 2
    assert rec.arms == [{"model/pos": "learned"}, {"model/pos": "rope"}]
    assert rec.horizon == [{"key": "train.steps", "full": 8, "tuning": 2}] * 2
    assert [(r.arm, r.lr, r.seed, r.status) for r in rec.runs] == \
        [(a, lr, 1000, "completed") for a in (0, 1) for lr in (1e-3, 3e-3, 1e-2, 3e-2)] + \
        [(1, 0.09, 1000, "completed"), (1, 0.27, 1000, "diverged")]
    assert [sweep / r.run_dir for r in rec.runs] == dirs[:10]
    assert rec.runs[1].final_val_loss == pytest.approx(basin("learned", 3e-3, 1000))
    learned, rope = rec.results
    assert (learned.best_lr, learned.edge, learned.widened) == (3e-3, None, [])
    assert (rope.best_lr, rope.edge, rope.widened) == (0.09, None, [0.09, 0.27])
    losses = [basin("learned", lr, 1000) for lr in (1e-3, 3e-3, 1e-2, 3e-2)]
    assert learned.loss_spread == pytest.approx(max(losses) - min(losses))
    assert [(r.arm, r.lr, r.seed) for r in rec.finals] == [(0, 3e-3, 0), (1, 0.09, 0), (0, 3e-3, 1), (1, 0.09, 1)]
    assert [sweep / r.run_dir for r in rec.finals] == dirs[10:]
    report = json.loads((sweep / "report" / "comparison.json").read_text())
    assert report["protocol"].startswith("tuned") and [g["n"] for g in report["metrics"][0]["groups"]] == [2, 2]
    assert (sweep / "report" / "basin.png").is_file()


@pytest.mark.slow  # (~9 s; test_tuning_widening_and_final_runs_at_each_arms_best_lr widens in the default suite)
def test_the_widen_cap_leaves_an_edge_optimum_flagged(fake, monkeypatch, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, widen=1)) == 0
    rope = TuningRecord.read(sweep).results[1]
    assert (rope.best_lr, rope.edge, rope.widened) == (0.09, "high", [0.09])  # one point more, still the best
    assert [c for c in fake if c[2] != 1000] == [("learned", 3e-3, 0, 8), ("rope", 0.09, 0, 8),
                                                 ("learned", 3e-3, 1, 8), ("rope", 0.09, 1, 8)]
    err = capsys.readouterr().err
    assert "model/pos=rope: best 0.09 (at the high edge, widened by 0.09" in err
    assert "model/pos=learned: best 0.003 (interior" in err


@pytest.mark.slow  # (~8 s; test_tuning_widening_and_final_runs_at_each_arms_best_lr widens in the default suite)
def test_widen_0_and_a_low_edge(fake, monkeypatch, tmp_path):
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, grid="[1e-2,3e-2,1e-1,3e-1]", widen=0)) == 0
    learned, rope = TuningRecord.read(sweep).results
    assert (learned.best_lr, learned.edge, learned.widened) == (1e-2, "low", [])
    assert (rope.best_lr, rope.edge) == (1e-1, None)  # 0.3 diverged
    assert len([c for c in fake if c[2] == 1000]) == 8


def test_an_arm_without_a_completed_tuning_run_is_reported_not_dropped(fake, monkeypatch, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, "model/pos=learned,alibi")) == 1  # failed jobs: exit 1
    rec = TuningRecord.read(sweep)
    assert rec.arms == [{"model/pos": "learned"}, {"model/pos": "alibi"}]
    alibi = rec.results[1]
    assert alibi.best_lr is None and alibi.note.startswith("no tuning run completed (failed)")
    assert {(c[0], c[2]) for c in fake if c[2] != 1000} == {("learned", 0), ("learned", 1)}  # no alibi final runs
    assert "model/pos=alibi: (no tuning run completed (failed): no final runs)" in capsys.readouterr().err
    md = (sweep / "report" / "report.md").read_text()
    assert "| model/pos=alibi | — | none |" in md and "no tuning run completed" in md


def test_a_proxy_is_tuned_alone_and_its_lr_transferred_to_every_arm(fake, monkeypatch, tmp_path, capsys):
    """μTransfer: hydra.sweeper.proxy names one arm (rope); only it is tuned (grid, then widened as in the test
    above: 0.09 then 0.27, which diverges), and every arm's final runs use its best lr, 0.09, though learned's own
    best would be 3e-3."""
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, "hydra.sweeper.proxy={model/pos:rope}")) == 0
    assert fake[:6] == [("rope", lr, 1000, 2) for lr in (1e-3, 3e-3, 1e-2, 3e-2, 0.09, 0.27)]
    assert fake[6:] == [("learned", 0.09, 0, 8), ("rope", 0.09, 0, 8), ("learned", 0.09, 1, 8), ("rope", 0.09, 1, 8)]
    rec = TuningRecord.read(sweep)
    assert (rec.proxy, rec.proxy_only, rec.phase) == (1, False, "done")
    assert rec.arms == [{"model/pos": "learned"}, {"model/pos": "rope"}]
    learned, rope = rec.results
    assert (rope.best_lr, rope.edge, rope.widened) == (0.09, None, [0.09, 0.27])
    assert (learned.best_lr, learned.edge, learned.widened, learned.loss_spread) == (0.09, None, [], None)
    assert learned.note == "transferred from the proxy (model/pos=rope)"
    err = capsys.readouterr().err
    assert "tuned optim.lr on the proxy model/pos=rope at 0.25 of train.steps" in err
    assert "model/pos=learned: 0.09, transferred from the proxy (model/pos=rope)" in err
    assert "model/pos=rope: best 0.09 (proxy; interior, widened by 0.09, 0.27" in err
    report = json.loads((sweep / "report" / "comparison.json").read_text())
    assert report["protocol"] == "tuned once on a proxy: every arm at the proxy's best lr, fresh seeds"
    md = (sweep / "report" / "report.md").read_text()
    assert "| model/pos=rope (proxy) | 0.09 | interior |" in md


@pytest.mark.slow  # (~8 s; test_a_proxy_is_tuned_alone_and_its_lr_transferred_to_every_arm keeps the proxy default)
def test_a_proxy_outside_the_arms_is_tuned_but_not_compared(fake, monkeypatch, tmp_path):
    """A proxy that sets a key the arms do not sweep (here a shorter train.steps: the proxy is a cheaper model) is
    a model of its own: tuned at a quarter of its own 4 steps, no final runs; both arms run at its best lr, 3e-3."""
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, "hydra.sweeper.proxy={model/pos:learned,train.steps:4}")) == 0
    assert fake == [*(("learned", lr, 1000, 1) for lr in (1e-3, 3e-3, 1e-2, 3e-2)),
                    ("learned", 3e-3, 0, 8), ("rope", 3e-3, 0, 8), ("learned", 3e-3, 1, 8), ("rope", 3e-3, 1, 8)]
    rec = TuningRecord.read(sweep)
    assert (rec.proxy, rec.proxy_only) == (2, True)
    assert rec.arms[2] == {"model/pos": "learned", "train.steps": "4"}
    assert rec.horizon[2] == {"key": "train.steps", "full": 4, "tuning": 1}
    assert [r.arm for r in rec.finals] == [0, 1, 0, 1] and [r.best_lr for r in rec.results] == [3e-3] * 3
    assert run_main(monkeypatch, [*sweep_argv(sweep, "hydra.sweeper.proxy={model/pos:rope}"),
                                  "train.resume=true"]) == 2  # a resume may not change the proxy


@pytest.mark.parametrize("extra, message", [
    (["hydra.sweeper.tune={optim.lr:[1e-3,3e-3,1e-2]}"], "hydra.sweeper.tune.optim.lr: a log grid needs at least 4"),
    (["hydra.sweeper.tune={optim.lr:[-1e-3,1e-3,3e-3,1e-2]}"], "every point must be a number > 0"),
    (["hydra.sweeper.seeds=[0,1000]"], "hydra.sweeper.seeds: the final runs need fresh seeds, but 1000"),
    (["seed=0,1"], "seed: set per run by the tuned sweeper"),
    (["+hydra.sweeper.params.seed='0,1'"], "seed: set per run by the tuned sweeper"),
    (["optim.lr=1e-3"], "optim.lr: set per run by the tuned sweeper"),
    (["+hydra.sweeper.tune_seed=[1]"], "hydra.sweeper.tune_seed: not a key of the tuned sweeper; did you mean tune_seeds?"),
    (["hydra.sweeper.proxy={train.steps:4}"], "hydra.sweeper.proxy: sets no value for the swept key model/pos"),
    (["hydra.sweeper.proxy={model/pos:[learned,rope]}"], "hydra.sweeper.proxy.model/pos: must be one value"),
    (["hydra.sweeper.proxy={model/pos:rope,seed:3}"], "hydra.sweeper.proxy.seed: set per run by the tuned sweeper"),
    (["hydra.sweeper.proxy=rope"], "hydra.sweeper.proxy: must map keys to values"),
])
def test_bad_declarations_are_refused_before_any_run_starts(fake, monkeypatch, tmp_path, capsys, extra, message):
    sweep = tmp_path / "sweep"
    before = signal.getsignal(signal.SIGINT)
    assert run_main(monkeypatch, [*sweep_argv(sweep), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("config error: ") and message in err[-1] and "Traceback" not in "\n".join(err)
    assert fake == [] and not sweep.exists()
    assert signal.getsignal(signal.SIGINT) is before and sweep_stopped(str(sweep)) is None


@pytest.mark.slow
def test_a_tuned_sweep_dir_is_resumed_not_restarted(fake, monkeypatch, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep)) == 0
    record = (sweep / "tuning.json").read_bytes()
    summaries = {p: (p / "summary.json").read_bytes() for p in job_dirs(sweep)}
    fake.clear()
    capsys.readouterr()
    assert run_main(monkeypatch, sweep_argv(sweep)) == 2  # without train.resume=true
    assert "config error: hydra.sweep.dir: " in capsys.readouterr().err and fake == []
    assert run_main(monkeypatch, sweep_argv(sweep, widen=1) + ["train.resume=true"]) == 2  # another declaration
    assert "declared widen = 2, this command 1" in capsys.readouterr().err and fake == []
    assert run_main(monkeypatch, [*sweep_argv(sweep), "train.resume=true"]) == 0
    assert fake == []  # every job already has its result: nothing is launched again
    assert {p: (p / "summary.json").read_bytes() for p in job_dirs(sweep)} == summaries
    assert json.loads((sweep / "tuning.json").read_bytes()) == json.loads(record)


def test_resume_launches_only_the_jobs_without_a_result(fake, monkeypatch, tmp_path):
    """A sweep whose tuning job 2 and final job 11 lost their results (as a stopped sweep leaves them): the resume
    runs exactly those two again, under their own job numbers and dirs."""
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep)) == 0
    dirs = job_dirs(sweep)
    for i in (2, 11):
        summary = json.loads((dirs[i] / "summary.json").read_text())
        (dirs[i] / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    fake.clear()
    assert run_main(monkeypatch, [*sweep_argv(sweep), "train.resume=true"]) == 0
    assert fake == [("learned", 1e-2, 1000, 2), ("rope", 0.09, 0, 8)]
    assert job_dirs(sweep) == dirs and TuningRecord.read(sweep).phase == "done"


def test_a_launcher_error_says_how_to_resume(fake, monkeypatch, tmp_path, capsys):
    """The final phase's launch fails (as when a job's config stopped composing under a running sweep): Hydra's
    error, one line with the resume command, and that command finishes the sweep without rerunning tuning."""
    from hydra.core.plugins import Plugins

    # the class Hydra instantiates (its first plugin scan may load the module anew: patch that one)
    BasicLauncher = Plugins.instance().class_name_to_class["hydra._internal.core_plugins.basic_launcher.BasicLauncher"]
    real, launches = BasicLauncher.launch, []

    def launch(self, job_overrides, initial_job_idx):
        launches.append(initial_job_idx)
        if len(launches) == 3:  # tuning (jobs 0-7), widening (8: rope at 0.09), then the final phase (9-12)
            raise RuntimeError("config no longer composes")
        return real(self, job_overrides, initial_job_idx)

    monkeypatch.setattr(BasicLauncher, "launch", launch)
    sweep = tmp_path / "sweep"
    assert run_main(monkeypatch, sweep_argv(sweep, widen=1)) == 1  # Hydra reports the error, exit 1
    lines = [line for line in capsys.readouterr().err.splitlines() if "resume with: " in line]
    assert len(lines) == 1 and lines[0].startswith("[archlab] the tuned sweep stopped at a launcher error")
    assert TuningRecord.read(sweep).phase == "final" and len(fake) == 9
    resume = shlex.split(lines[0].split("resume with: ", 1)[1])
    fake.clear()
    assert run_main(monkeypatch, ["train", *resume[3:]]) == 0
    assert [c[2] for c in fake] == [0, 0, 1, 1] and TuningRecord.read(sweep).phase == "done"


# ------------------------------------------------------------------------------------------ real training (slow)


def _tiny(*drop: str) -> list[str]:
    return [o for o in TINY if not o.startswith(drop)]


@pytest.mark.slow
def test_a_real_tuned_sweep_through_the_cli(cli_env, cache_dir, tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [PYTHON, "-m", "experiments.train", "-m", "hydra/sweeper=tuned", "hydra.sweeper.tune={optim.lr:[1e-5,2e-5,4e-5,8e-5]}",
           "hydra.sweeper.tune_seeds=[1000]", "hydra.sweeper.seeds=[0,1]", "hydra.sweeper.tune_fraction=0.5",
           "hydra.sweeper.widen=1", "model/pos=learned,rope", *_tiny("train.steps", "train.eval_interval"),
           "train.steps=4", "train.eval_interval=2", f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}",
           "experiment_name=tuned_cli"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=cli_env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = TuningRecord.read(sweep)
    assert rec.phase == "done"
    summaries = {d.name: json.loads((d / "summary.json").read_text()) for d in job_dirs(sweep)}
    tuning = [summaries[r.run_dir] for r in rec.runs]
    finals = [summaries[r.run_dir] for r in rec.finals]
    widened = [v for res in rec.results for v in res.widened]
    assert len(tuning) == 2 * 4 + len(widened) and len(finals) == 2 * 2 and len(summaries) == len(tuning) + len(finals)
    assert all(s["seed"] == 1000 and s["steps"] == 2 and s["status"] == "completed" for s in tuning)
    # at 2 steps the loss falls with the lr over this grid of tiny lrs: each arm's best is the high edge, widened
    # once to 8e-5 * (8e-5 / 4e-5) = 1.6e-4, still the best (widen=1: flagged edge)
    assert [(res.best_lr, res.edge, res.widened) for res in rec.results] == [(0.00016, "high", [0.00016])] * 2
    for arm, res in enumerate(rec.results):
        # the best lr, recomputed from the tuning runs' own summary.json files: the lowest final val loss
        mine = {r.lr: summaries[r.run_dir]["final_val_loss"] for r in rec.runs if r.arm == arm}
        assert res.best_lr == min(mine, key=mine.get)
        assert res.interior == (min(mine) < res.best_lr < max(mine))
        arm_finals = [(summaries[r.run_dir], r) for r in rec.finals if r.arm == arm]
        assert sorted(s["seed"] for s, _ in arm_finals) == [0, 1] and all(s["steps"] == 4 for s, _ in arm_finals)
        for s, r in arm_finals:
            run_cfg = OmegaConf.load(sweep / r.run_dir / "config.yaml")
            assert run_cfg.optim.lr == res.best_lr and run_cfg.seed == s["seed"]
    assert (sweep / "report" / "report.html").is_file() and (sweep / "report" / "basin.png").is_file()
    assert "tuned: each arm at its own best lr, fresh seeds" in (sweep / "report" / "report.md").read_text()


@pytest.mark.slow
def test_ctrl_c_in_the_tuning_phase_then_resume(make_cfg, cache_dir, tmp_path, monkeypatch, capsys):
    """SIGINT during tuning job 2: it checkpoints and says interrupted, the later tuning jobs record themselves
    not started, the final phase never starts, exit 130 with the resume command. The resume finishes job 2 from
    its checkpoint, starts the others, leaves jobs 0 and 1 untouched (not launched again) and runs the final phase."""
    import experiments.run.schedule

    monkeypatch.setenv("WANDB_MODE", "disabled")
    real, count = experiments.run.schedule.lr_at, []

    def lr_at(step, **kw):
        count.append(step)
        if len(count) == 2 * 6 + 3:  # tuning job 2 (6 steps each), its step 3
            os.kill(os.getpid(), signal.SIGINT)
        return real(step, **kw)

    monkeypatch.setattr(experiments.run.schedule, "lr_at", lr_at)
    sweep = tmp_path / "sweep"
    argv = ["train", "-m", "hydra/sweeper=tuned", "hydra.sweeper.tune={optim.lr:[1e-3,3e-3,1e-2,3e-2]}",
            "hydra.sweeper.tune_seeds=[1000]", "hydra.sweeper.seeds=[0]", "hydra.sweeper.tune_fraction=0.5",
            "hydra.sweeper.widen=0", *_tiny("train.steps", "train.eval_interval", "train.ckpt_interval"),
            "train.steps=12", "train.eval_interval=6", "train.ckpt_interval=100", f"data.cache_dir={cache_dir}",
            f"hydra.sweep.dir={sweep}", "hydra/job_logging=disabled", "experiment_name=tuned_stop"]
    assert run_main(monkeypatch, argv) == 130
    err = capsys.readouterr().err
    rec = TuningRecord.read(sweep)
    assert rec.phase == "tuning" and rec.finals == [] and rec.results == []
    assert [r.status for r in rec.runs] == ["completed", "completed", "interrupted", "interrupted"]
    assert len(job_dirs(sweep)) == 4  # no final run dir
    kept = {i: (job_dirs(sweep)[i] / "summary.json").read_bytes() for i in (0, 1)}
    lines = [line for line in err.splitlines() if "resume with: " in line]
    assert len(lines) == 1 and lines[0].startswith("[archlab] sweep stopped by Ctrl-C (SIGINT)")
    resume = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert resume[-1] == "train.resume=true" and f"hydra.sweep.dir={sweep}" in resume

    assert run_main(monkeypatch, ["train", *resume[3:]]) == 0
    rec = TuningRecord.read(sweep)
    assert rec.phase == "done" and [r.status for r in rec.runs] == ["completed"] * 4
    assert {i: (job_dirs(sweep)[i] / "summary.json").read_bytes() for i in (0, 1)} == kept  # not relaunched
    resumed = json.loads((job_dirs(sweep)[2] / "summary.json").read_text())
    assert resumed["steps"] == 6 and resumed["status"] == "completed"
    assert len(rec.finals) == 1 and len(job_dirs(sweep)) == 5
    final = json.loads((sweep / rec.finals[0].run_dir / "summary.json").read_text())
    assert final["status"] == "completed" and final["seed"] == 0 and final["steps"] == 12
