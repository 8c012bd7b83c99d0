"""summary.json has one writer (rundir.layout.RunSummary) and one status vocabulary (RunStatus): the keys and
their order stay what compare, findings and earlier runs know (spelled out here, independently of the writer);
the sweep modules do not import the trainer (the import circle run/train <-> sweep/callbacks is gone)."""

from __future__ import annotations

import json
import subprocess

from omegaconf import OmegaConf

from experiments.rundir.layout import RunStatus
from experiments.run.train import train
from experiments.sweep import job
from experiments.sweep.records import record_config_error, record_not_started

from .conftest import PYTHON, REPO

# summary.json of a run that reached its loop, keys in the order every earlier version wrote them
RUN_KEYS = ["status", "experiment", "run_name", "overrides", "seed", "final_val_loss", "best_val_loss", "final_val_bpb",
            "best_val_bpb", "final_train_loss", "params", "non_embedding_params", "tokens", "steps", "flops", "budget",
            "wall_time_s", "tokens_per_s", "mfu", "extrap", "run_dir", "device", "world_size", "num_threads",
            "epochs"]  # epochs (LM runs) came last, after every key an earlier version wrote
# ... and of a job that never reached it (a refused config, a setup crash, a sweep stopped before it began)
NOT_RUN_KEYS = ["status", "error", "experiment", "run_name", "overrides", "seed", "steps", "tokens", "run_dir"]


def test_a_runs_summary_keeps_its_keys_in_order(make_cfg, tmp_path):
    train(make_cfg())
    assert list(json.loads((tmp_path / "run" / "summary.json").read_text())) == RUN_KEYS


def test_a_diverged_runs_summary_ends_with_the_step(make_cfg, tmp_path):
    train(make_cfg("optim.lr=1e30", "schedule.warmup_steps=0", "train.grad_clip=null", "train.steps=20"))
    assert list(json.loads((tmp_path / "run" / "summary.json").read_text())) == [*RUN_KEYS, "diverged_at_step"]


def test_a_config_error_and_a_stopped_sweep_record_the_job(make_cfg, tmp_path):
    cfg = make_cfg("seed=3", run_dir=tmp_path / "a")
    summary = record_config_error(cfg, ValueError("model.n_heads: 3 does not divide 32"))
    on_disk = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert list(on_disk) == NOT_RUN_KEYS and on_disk == summary
    assert (on_disk["status"], on_disk["seed"], on_disk["steps"]) == ("failed", 3, 0)
    assert on_disk["error"] == "config error: model.n_heads: 3 does not divide 32"

    on_disk = record_not_started(make_cfg(run_dir=tmp_path / "b"), "Ctrl-C (SIGINT)")
    assert on_disk["status"] == "interrupted" and on_disk["error"].startswith("not started: the sweep was stopped by Ctrl-C")
    assert record_not_started(make_cfg(run_dir=tmp_path / "b"), "SIGTERM") == on_disk  # never over a dir's run


def test_the_status_vocabulary():
    assert [str(s) for s in RunStatus] == ["running", "completed", "diverged", "interrupted", "failed", "requeued"]
    assert [s for s in RunStatus if s.has_result] == ["completed", "diverged"]       # a verdict is judged on these
    assert [s for s in RunStatus if s.ended_early] == ["diverged", "interrupted", "failed"]  # compare leaves them out
    assert RunStatus.of("completed") is RunStatus.COMPLETED and RunStatus.of("finished") is None
    assert f"{RunStatus.FAILED:<8}|" == "failed  |" and json.dumps(RunStatus.FAILED) == '"failed"'


def test_sweep_modules_do_not_import_the_trainer():
    code = ("import sys, experiments.sweep.callbacks, experiments.sweep.records, experiments.sweep.resume; "
            "print(sorted(m for m in sys.modules if m in ('experiments.run.train', 'experiments.run.loop')))")
    out = subprocess.run([PYTHON, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_progress_label_shows_the_swept_values(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    OmegaConf.save(OmegaConf.create({"hydra": {"sweeper": {"params": {"model/pos": "learned,alibi"}},
                                               "overrides": {"task": ["seed=0,1", "model.d_model=32"]}}}),
                   sweep / "multirun.yaml")
    hc = OmegaConf.create({"mode": "MULTIRUN", "sweep": {"dir": str(sweep)},
                           "overrides": {"task": ["model/pos=alibi", "seed=0", "model.d_model=32", "logger=disabled"]},
                           "job": {"config": {"override_dirname": {"exclude_keys": ["logger"]}}}})
    monkeypatch.setattr(job, "hydra_runtime", lambda: hc)
    monkeypatch.setattr(job, "is_multirun", lambda: True)
    assert job.progress_label(tmp_path / "0_x") == "pos=alibi seed=0"
    monkeypatch.setattr(job, "is_multirun", lambda: False)  # a single run: its named overrides
    assert job.progress_label(tmp_path / "0_x") == "pos=alibi seed=0 d_model=32"
    OmegaConf.save(OmegaConf.create({"hydra": {"sweeper": {"params": {}}, "overrides": {"task": ["seed=0,1"]}}}),
                   sweep / "multirun.yaml")  # sweeping on the command line only
    monkeypatch.setattr(job, "is_multirun", lambda: True)
    assert job.progress_label(tmp_path / "0_x") == "seed=0"


def test_the_progress_bar_is_labelled_in_full(make_cfg, tmp_path, monkeypatch):
    from experiments.run import loop

    seen = []
    real = loop.progress_bar
    monkeypatch.setattr(loop, "progress_bar", lambda *a, **k: seen.append(k["desc"]) or real(*a, **k))
    run_dir = tmp_path / "a_run_dir_whose_name_is_longer_than_forty_characters"
    train(make_cfg(run_dir=run_dir))
    assert seen == [run_dir.name]  # outside Hydra the label is the run dir's name (it was cut at 40 characters)


def test_a_tuned_sweeps_progress_label_shows_the_lr_and_seed(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    OmegaConf.save(OmegaConf.create({"hydra": {"sweeper": {"params": {"model/pos": "learned,alibi"},
                                                           "tune": {"optim.lr": [1e-3, 2e-3, 4e-3, 8e-3]}},
                                               "overrides": {"task": []}}}), sweep / "multirun.yaml")
    hc = OmegaConf.create({"mode": "MULTIRUN", "sweep": {"dir": str(sweep)},
                           "overrides": {"task": ["model/pos=alibi", "optim.lr=0.002", "seed=1000", "train.tokens=500"]},
                           "job": {"config": {"override_dirname": {"exclude_keys": []}}}})
    monkeypatch.setattr(job, "hydra_runtime", lambda: hc)
    monkeypatch.setattr(job, "is_multirun", lambda: True)
    assert job.progress_label(tmp_path / "0_x") == "pos=alibi lr=0.002 seed=1000"
