"""Run-lifecycle faults: a dir that already holds a run, Ctrl-C / SIGTERM, a crash during setup, a broken
checkpoint. Each leaves a summary.json that says what happened (never `running`), one line on stderr for the
CLI, and never touches files it does not own."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.config.errors import ConfigError
from experiments.run import train as train_mod
from experiments.run.train import train

from .conftest import PYTHON, REPO, TINY, exit_status, file_bytes

# What a TINY run writes, spelled out here independently of experiments/rundir/layout.py.
RUN_WRITES = {"config.yaml", "metrics.jsonl", "summary.json", "tokenizer.json", "checkpoints/step_00000003/model.safetensors",
              "checkpoints/step_00000003/state.pt", "checkpoints/best.safetensors"}
RUN_FILES = ["config.yaml", "metrics.jsonl", "summary.json", "checkpoints/last.pt", "checkpoints/old.pt", "tokenizer.json",
             "wandb/offline-run-1/run.wandb"]
OTHER_FILES = ["notes.txt", "data/corpus.txt", ".hydra/config.yaml", "checkpoints.txt", "summary.json.bak"]


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# ------------------------------------------------------------------------------------------ an existing run


def test_train_refuses_a_dir_that_holds_a_run_before_reading_data(make_cfg, tmp_path, monkeypatch):
    run = tmp_path / "run"
    train(make_cfg())
    before = file_bytes(run)
    import experiments.data.cache

    def no_data(*a, **k):
        raise AssertionError("data read before the run dir was checked")

    monkeypatch.setattr(experiments.data.cache, "prepare_data", no_data)
    with pytest.raises(ConfigError, match=r"train\.resume=true.*train\.overwrite=true") as e:
        train(make_cfg())
    assert "\n" not in str(e.value) and str(run) in str(e.value)
    assert file_bytes(run) == before


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(run_files=st.sets(st.sampled_from(RUN_FILES)), others=st.sets(st.sampled_from(OTHER_FILES), min_size=1),
       overwrite=st.booleans(), content=st.binary(min_size=1, max_size=64))
def test_files_that_existed_keep_their_bytes(make_cfg, tmp_path, run_files, others, overwrite, content):
    # invariant: other files always keep their bytes; run files too, unless train.overwrite=true replaces the run
    run = tmp_path / f"run_{os.urandom(4).hex()}"
    for name in sorted(run_files | others):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(content + name.encode())
    before = file_bytes(run)
    cfg = make_cfg(f"train.overwrite={str(overwrite).lower()}", run_dir=run)
    if run_files and not overwrite:
        with pytest.raises(ConfigError, match="already holds a run"):
            train(cfg)
        assert file_bytes(run) == before
        return
    assert train(cfg)["status"] == "completed"
    after = file_bytes(run)
    assert {k: after[k] for k in others} == {k: before[k] for k in others}
    assert set(after) == set(others) | RUN_WRITES  # exactly the old run's files went, nothing of the user's


@pytest.mark.parametrize("how", ["hydra.run.dir", "train.run_dir", "main_without_precheck"])
def test_cli_refuses_an_existing_run_with_one_line(make_cfg, train_cli, cache_dir, tmp_path, how):
    # main_without_precheck: Hydra's main() without the precheck of `python -m experiments.train` (train()'s own check)
    run = tmp_path / "run"
    train(make_cfg(run_dir=run))
    (run / "notes.txt").write_text("mine")
    before = file_bytes(run)
    key = "train.run_dir" if how == "train.run_dir" else "hydra.run.dir"
    proc = train_cli(*TINY, f"data.cache_dir={cache_dir}", f"{key}={run}", via_main=how == "main_without_precheck")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error:"), proc.stderr[-2000:]
    assert "train.resume=true" in lines[0] and "train.overwrite=true" in lines[0]
    after = file_bytes(run)
    assert {k: after[k] for k in before} == before  # Hydra may add .hydra/ files, nothing old changes


# ------------------------------------------------------------------------------------------ Ctrl-C / SIGTERM


def _interrupt_at(monkeypatch, at_step: int, sig=signal.SIGINT):
    """Send `sig` to this process while step `at_step` (0-based) is being computed (from inside lr_at)."""
    import experiments.run.schedule

    real = experiments.run.schedule.lr_at

    def lr_at(step, **kw):
        if step == at_step:
            os.kill(os.getpid(), sig)
        return real(step, **kw)

    monkeypatch.setattr(experiments.run.schedule, "lr_at", lr_at)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_in_process_finishes_the_step_saves_and_restores_handlers(make_cfg, tmp_path, monkeypatch, sig):
    marker = []
    previous = signal.signal(sig, lambda *a: marker.append(1))
    try:
        _interrupt_at(monkeypatch, 1, sig)
        with pytest.raises(getattr(train_mod, "RunInterrupted", KeyboardInterrupt), match="interrupted at step 2") as e:
            train(make_cfg("train.steps=10", "train.ckpt_interval=100", "train.eval_interval=100"))
        assert signal.getsignal(sig) is not previous and marker == []  # ours was replaced during the run ...
        handler = signal.getsignal(sig)
    finally:
        restored = signal.signal(sig, previous)
    assert restored is handler and callable(handler) and handler.__name__ == "<lambda>"  # ... and put back
    run = tmp_path / "run"
    summary = summary_of(run)
    assert summary["status"] == "interrupted" and summary["steps"] == 2 == e.value.summary["steps"]
    import torch

    assert torch.load(run / "checkpoints" / "step_00000002" / "state.pt", weights_only=False)["step"] == 2
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]


STEPS = 200
RUN = [*TINY, f"train.steps={STEPS}", "train.ckpt_interval=1000", "train.eval_interval=50", "optim.lr=3e-3"]


def comparable(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        keys = ("train/loss", "lr", "grad_norm", "grad_norm/layer_1") if "train/loss" in r else ("val/loss", "val/bpb")
        out.append((r["step"], r["tokens"], *(r[k] for k in keys)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_then_resume_matches_uninterrupted_run(make_cfg, cli_env, cache_dir, tmp_path, sig):
    reference = tmp_path / "reference"
    assert train(make_cfg(*RUN[len(TINY):], run_dir=reference))["status"] == "completed"

    run_dir = tmp_path / "stopped"
    cmd = [PYTHON, "-m", "experiments.train", *RUN, f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and \
            (not metrics.exists() or len(metrics.read_text().splitlines()) < 5):
        time.sleep(0.01)
    os.kill(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "interrupted at step" in line]
    assert len(lines) == 1, err[-2000:]
    summary = summary_of(run_dir)
    assert summary["status"] == "interrupted" and 5 <= summary["steps"] < STEPS
    assert f"interrupted at step {summary['steps']};" in lines[0]
    assert (run_dir / "checkpoints" / f"step_{summary['steps']:08d}" / "model.safetensors").exists()

    resume = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert resume[:3] == ["python", "-m", "experiments.train"] and "train.resume=true" in resume
    resumed = subprocess.run([PYTHON, *resume[1:]], cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert comparable(run_dir) == comparable(reference)
    final = summary_of(run_dir)
    assert final["status"] == "completed" and final["steps"] == STEPS
    assert final["final_val_loss"] == summary_of(reference)["final_val_loss"]


# ------------------------------------------------------------------------------------------ crash during setup


def _boom(*a, **k):
    raise RuntimeError("disk on fire")


@pytest.mark.parametrize("where", ["data", "model"])
def test_a_crash_during_setup_leaves_a_failed_summary(make_cfg, tmp_path, monkeypatch, where):
    import arch
    import experiments.data.cache

    monkeypatch.setattr(*((experiments.data.cache, "prepare_data") if where == "data" else (arch, "build_model")), _boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        train(make_cfg())
    summary = summary_of(tmp_path / "run")
    assert summary["status"] == "failed" and summary["error"] == "RuntimeError: disk on fire"


def test_a_short_val_split_leaves_a_failed_summary(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="validation split") as e:
        train(make_cfg("data.val_fraction=0.0001"))
    summary = summary_of(tmp_path / "run")
    assert summary["status"] == "failed" and str(e.value) in summary["error"] and "\n" not in summary["error"]


def test_a_config_error_leaves_a_failed_summary_in_a_fresh_dir(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match="n_heads"):
        train(make_cfg("model.n_heads=3"))
    summary = summary_of(tmp_path / "run")
    assert summary["status"] == "failed" and "n_heads" in summary["error"]


# ------------------------------------------------------------------------------------------ broken checkpoint


def _truncate(p: Path) -> None:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])


def _garbage(p: Path) -> None:
    p.write_bytes(os.urandom(4096))


@pytest.mark.parametrize("file", ["state.pt", "model.safetensors"])
@pytest.mark.parametrize("damage", [_truncate, _garbage])
def test_resume_from_a_broken_checkpoint_is_one_line_and_deletes_nothing(make_cfg, tmp_path, damage, file):
    run = tmp_path / "run"
    train(make_cfg())
    broken = run / "checkpoints" / "step_00000003" / file
    damage(broken)
    before = file_bytes(run)
    with pytest.raises(ConfigError) as e:
        train(make_cfg("train.resume=true"))
    msg = str(e.value)
    assert "\n" not in msg and str(broken) in msg
    assert "delete it" in msg and "train.overwrite=true" in msg
    assert file_bytes(run) == before


def test_cli_resume_from_a_broken_checkpoint_exits_2(make_cfg, train_cli, cache_dir, tmp_path):
    run = tmp_path / "run"
    train(make_cfg(run_dir=run))
    _truncate(run / "checkpoints" / "step_00000003" / "state.pt")
    before = file_bytes(run)
    proc = train_cli(*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run}", "train.resume=true")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error:") and "state.pt" in lines[0], proc.stderr[-2000:]
    assert file_bytes(run) == before


# ------------------------------------------------------------------------------------------ a sweep with failing jobs


def test_a_sweep_with_failing_jobs_runs_the_rest_reports_them_and_exits_1(cache_dir, tmp_path, monkeypatch, capsys):
    """Job 0 completes, job 1 is a config error (3 heads do not divide d_model 32), job 2 raises in the model
    build. In-process Hydra multirun (basic launcher), so the exception can be injected."""
    import arch

    real_build = arch.build_model

    def build(cfg):
        if cfg.n_layers == 3:
            raise RuntimeError("disk on fire")
        return real_build(cfg)

    monkeypatch.setattr(arch, "build_model", build)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sweep = tmp_path / "sweep"
    argv = ["train", "-m", *[o for o in TINY if not o.startswith(("model.n_heads", "model.n_layers"))],
            f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}", "hydra/job_logging=disabled",
            "model.n_heads=2,3,2", "model.n_layers=2,2,3"]
    monkeypatch.setattr("sys.argv", argv)
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(SystemExit) as e:
        train_mod.main()
    assert e.value.code == 1
    # the sweep's stop handlers are put back even though the report's exit 1 ends the callbacks early (left
    # installed, they made later forked tokenizer workers immune to Pool.terminate's SIGTERM: a hung suite)
    assert {sig: signal.getsignal(sig) for sig in before} == before
    err = capsys.readouterr().err
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit()), key=lambda p: int(p.name.split("_")[0]))
    statuses = [summary_of(p) for p in jobs]
    # basic launcher: the cross product of the two lists, 3 x 3 = 9 jobs; n_heads=3 ones are config errors
    assert len(statuses) == 9
    for s in statuses:
        cfg = dict(o.split("=", 1) for o in s["overrides"])
        if cfg["model.n_heads"] == "3":
            assert s["status"] == "failed" and s["error"].startswith("config error: ") and "n_heads" in s["error"]
        elif cfg["model.n_layers"] == "3":
            assert s["status"] == "failed" and s["error"] == "RuntimeError: disk on fire"
        else:
            assert s["status"] == "completed" and s["steps"] == 3
    report_md = (sweep / "report" / "report.md").read_text()
    assert "RuntimeError: disk on fire" in report_md and "config error: " in report_md
    assert f"report: {sweep / 'report' / 'report.html'}" in err
    assert "did not complete" in err


# ------------------------------------------------------------------------------------------ a stopped sweep


def _sweep_argv(cache_dir, sweep, *extra):
    return ["train", "-m", *[o for o in TINY if not o.startswith(("train.steps", "train.eval_interval", "train.ckpt_interval"))],
            "train.steps=12", "train.eval_interval=4", "train.ckpt_interval=100", f"data.cache_dir={cache_dir}",
            f"hydra.sweep.dir={sweep}", "hydra/job_logging=disabled", "seed=0,1,2", *extra]


def _run_main(monkeypatch, argv) -> int:
    return exit_status(train_mod.main, monkeypatch, argv)


def test_a_stopped_sweep_records_every_job_and_resumes_to_the_uninterrupted_result(make_cfg, cache_dir, tmp_path,
                                                                                   monkeypatch, capsys):
    """Ctrl-C during job 0 of an in-process sweep (basic launcher): job 0 finishes its step, checkpoints and says
    `interrupted`; jobs 1 and 2 say `interrupted` without having started; the report is built; exit 130 with one
    resume command. That command finishes every job, and job 0's metrics equal an uninterrupted run's."""
    import experiments.run.schedule

    monkeypatch.setenv("WANDB_MODE", "disabled")
    reference = tmp_path / "reference"
    train(make_cfg("train.steps=12", "train.eval_interval=4", "train.ckpt_interval=100", "seed=0", run_dir=reference))

    real, fired = experiments.run.schedule.lr_at, []

    def lr_at(step, **kw):
        if step == 5 and not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return real(step, **kw)

    monkeypatch.setattr(experiments.run.schedule, "lr_at", lr_at)
    sweep = tmp_path / "sweep"
    before = signal.getsignal(signal.SIGINT)
    assert _run_main(monkeypatch, _sweep_argv(cache_dir, sweep)) == 130
    assert signal.getsignal(signal.SIGINT) is before  # the sweep's handlers are put back
    err = capsys.readouterr().err
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit()), key=lambda p: int(p.name.split("_")[0]))
    statuses = [summary_of(p) for p in jobs]
    assert [s["status"] for s in statuses] == ["interrupted"] * 3
    assert statuses[0]["steps"] == 6 and "Ctrl-C (SIGINT) at step 6" in statuses[0]["error"]
    assert [s["steps"] for s in statuses[1:]] == [0, 0]
    assert all(s["error"].startswith("not started: the sweep was stopped by Ctrl-C (SIGINT)") for s in statuses[1:])
    # each job says what happened to it: job 0 was interrupted, the others never started (no "interrupted" for them)
    job_lines = [line for line in err.splitlines() if line.endswith(("summary.json says interrupted", "(SIGINT)"))]
    assert job_lines[0] == f"interrupted at step 6; {jobs[0]}: summary.json says interrupted"
    assert job_lines[1:] == [f"{p}: not started: the sweep was stopped by Ctrl-C (SIGINT)" for p in jobs[1:]]
    assert (sweep / "report" / "report.md").exists()
    lines = [line for line in err.splitlines() if "resume with: " in line]
    assert len(lines) == 1 and lines[0].startswith("[archlab] sweep stopped by Ctrl-C (SIGINT): 3 of 3 run(s) not "
                                                   "completed")
    resume = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert resume[:4] == ["python", "-m", "experiments.train", "-m"] and resume[-1] == "train.resume=true"
    assert f"hydra.sweep.dir={sweep}" in resume

    assert _run_main(monkeypatch, ["train", *resume[3:]]) == 0
    finals = [summary_of(p) for p in jobs]
    assert [s["status"] for s in finals] == ["completed"] * 3 and [s["steps"] for s in finals] == [12] * 3
    assert comparable(jobs[0]) == comparable(reference)
    assert finals[0]["final_val_loss"] == summary_of(reference)["final_val_loss"]

    again = {p.name: file_bytes(p) for p in jobs}  # resuming a finished sweep changes no run's metrics
    assert _run_main(monkeypatch, ["train", *resume[3:]]) == 0
    for p in jobs:
        assert file_bytes(p)["metrics.jsonl"] == again[p.name]["metrics.jsonl"]
        assert summary_of(p)["status"] == "completed"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c to the group", "SIGTERM to the launcher"])
def test_a_joblib_sweep_stops_cleanly_and_resumes(make_cfg, cli_env, cache_dir, tmp_path, how):
    """Two loky workers. A terminal's Ctrl-C reaches every process of the group; `kill <launcher>` reaches only the
    launcher, which passes it on. Either way: no traceback, exit 130, every job recorded, and the printed command
    finishes the sweep with job 0 equal to an uninterrupted run."""
    reference = tmp_path / "reference"
    train(make_cfg("train.steps=300", "train.eval_interval=100", "train.ckpt_interval=1000", "seed=0", run_dir=reference))
    sweep = tmp_path / "sweep"
    cmd = [PYTHON, "-m", "experiments.train", "-m", *[o for o in TINY if not o.startswith(("train.steps", "train.eval_interval",
           "train.ckpt_interval"))], "train.steps=300", "train.eval_interval=100", "train.ckpt_interval=1000",
           f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}", "hydra/launcher=joblib_2", "train.num_threads=1",
           "seed=0,1,2"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and \
            sum(1 for m in sweep.glob("*/metrics.jsonl") if len(m.read_text().splitlines()) >= 3) < 2:
        time.sleep(0.05)
    if how == "ctrl-c to the group":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    jobs = sorted((p for p in sweep.iterdir() if p.is_dir() and p.name[0].isdigit()), key=lambda p: int(p.name.split("_")[0]))
    statuses = [summary_of(p) for p in jobs]
    assert len(statuses) == 3 and {s["status"] for s in statuses} == {"interrupted"}, statuses
    assert statuses[0]["steps"] >= 3 and statuses[1]["steps"] >= 3 and statuses[2]["steps"] == 0
    resume_lines = [line for line in err.splitlines() if "resume with: " in line]
    assert len(resume_lines) == 1, err[-3000:]
    resume = shlex.split(resume_lines[0].split("resume with: ", 1)[1])
    resumed = subprocess.run([PYTHON, *resume[1:]], cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [summary_of(p)["status"] for p in jobs] == ["completed"] * 3
    assert comparable(jobs[0]) == comparable(reference)
