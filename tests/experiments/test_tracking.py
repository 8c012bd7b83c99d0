"""experiments.rundir.tracking: metrics.jsonl / summary.json contents, resume truncation, wandb failure isolation,
and one real offline wandb run (no network) whose files must land under run_dir/wandb/."""

from __future__ import annotations

import json
import math
import os
import sys
import types
from dataclasses import fields

import numpy as np
import pytest
import torch

from experiments.rundir import tracking
from experiments.rundir.layout import RunResults, RunStatus, RunSummary
from experiments.rundir.tracking import Tracker, flatten_config, read_metrics, resume_metrics, variant_tags

CONFIG = {"experiment_name": "t", "seed": 0, "model": {"n_layers": 2, "pos": {"kind": "rope"}}}


def _lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_metrics_jsonl_matches_logged_dicts(tmp_path):
    logged = [
        (0, {"tokens": 0, "flops": 0.0, "time": 0.01, "train/loss": 5.5, "lr": 1e-3}),
        (1, {"tokens": 64, "flops": 1.5e6, "time": 0.02, "train/loss": 5.25, "grad_norm/layer_0": 0.5}),
        (1, {"tokens": 64, "val/loss": 5.0, "extrap/nonoverlap/loss@2x": None, "attn_entropy/layer_0": 1.25}),
    ]
    with Tracker(tmp_path, CONFIG) as tr:
        for step, metrics in logged:
            tr.log(metrics, step=step)
            # flushed each time: readable before close
            assert _lines(tmp_path)[-1] == {"step": step, **metrics}
    rows = _lines(tmp_path)
    assert rows == [{"step": s, **m} for s, m in logged]
    assert list(rows[0]) == ["step", "tokens", "flops", "time", "train/loss", "lr"]  # order kept
    assert read_metrics(tmp_path) == rows


def test_scalars_from_numpy_and_torch_and_nan(tmp_path):
    with Tracker(tmp_path, CONFIG) as tr:
        tr.log({"a": np.float32(0.5), "b": torch.tensor(2.0), "c": np.int64(3), "d": float("nan")}, step=7)
    (row,) = _lines(tmp_path)
    assert row["a"] == 0.5 and row["b"] == 2.0 and row["c"] == 3 and math.isnan(row["d"])


def test_step_key_must_agree(tmp_path):
    with Tracker(tmp_path, CONFIG) as tr:
        tr.log({"step": 3, "x": 1}, step=3)
        with pytest.raises(ValueError, match="disagrees"):
            tr.log({"step": 4, "x": 1}, step=3)
    assert _lines(tmp_path) == [{"step": 3, "x": 1}]


def test_fresh_start_replaces_old_metrics(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 99}\n')
    with Tracker(tmp_path, CONFIG) as tr:
        tr.log({"x": 1}, step=0)
    assert _lines(tmp_path) == [{"step": 0, "x": 1}]


def test_summary_written_atomically_and_status_on_finish(tmp_path, monkeypatch):
    tr = Tracker(tmp_path, CONFIG)
    summary = RunSummary(RunStatus.RUNNING, run_name="r", overrides=["seed=1"], steps=3)
    tr.write_summary(summary)
    assert json.loads((tmp_path / "summary.json").read_text()) == {
        "status": "running", "error": None, "experiment": None, "run_name": "r", "overrides": ["seed=1"], "seed": None,
        "steps": 3, "tokens": 0, "run_dir": None}

    # a crash between writing the temp file and the rename leaves the previous summary intact, no temp files
    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(tracking.os, "replace", boom)
    with pytest.raises(OSError):
        tr.write_summary(RunSummary(RunStatus.RUNNING, steps=4))
    monkeypatch.undo()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary.to_dict()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "summary.json"]

    tr.write_summary(RunSummary(RunStatus.COMPLETED, steps=5))
    tr.finish(RunStatus.DIVERGED)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "diverged"
    tr.finish(RunStatus.COMPLETED)  # idempotent: the first finish wins
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "diverged"


def test_clean_exit_keeps_written_status_and_exception_marks_failed(tmp_path):
    with Tracker(tmp_path / "a", CONFIG) as tr:
        tr.write_summary(RunSummary(RunStatus.DIVERGED))
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["status"] == "diverged"

    with Tracker(tmp_path / "b", CONFIG):
        pass
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["status"] == "completed"

    with pytest.raises(RuntimeError, match="oops"):
        with Tracker(tmp_path / "c", CONFIG) as tr:
            tr.write_summary(RunSummary(RunStatus.RUNNING, steps=1))
            raise RuntimeError("oops")
    on_disk = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert (on_disk["status"], on_disk["steps"]) == ("failed", 1)


def test_finish_sets_the_status_of_a_summary_already_in_the_dir(tmp_path):
    # a resume that fails after its tracker started: the earlier run's summary keeps its numbers, status failed
    full = {"status": "interrupted", "experiment": "e", "run_name": "r", "overrides": [], "seed": 0,
            "final_val_loss": 2.5, "best_val_loss": 2.5, "final_val_bpb": 1.0, "best_val_bpb": 1.0,
            "final_train_loss": 2.4, "params": 10, "non_embedding_params": 8, "tokens": 64, "steps": 2, "flops": 1.0,
            "budget": "steps", "wall_time_s": 1.0, "tokens_per_s": 64.0, "mfu": 0.1, "extrap": {}, "run_dir": "d",
            "device": "cpu", "world_size": 1, "num_threads": 1, "error": "SIGINT at step 2"}
    (tmp_path / "summary.json").write_text(json.dumps(full))
    Tracker(tmp_path, CONFIG, resume_from_step=2).finish(RunStatus.FAILED)
    assert json.loads((tmp_path / "summary.json").read_text()) == {**full, "status": "failed"}


def test_resume_truncates_steps_after_checkpoint(tmp_path):
    with Tracker(tmp_path, CONFIG) as tr:
        for step in range(6):
            tr.log({"train/loss": 10.0 - step}, step=step)
        tr.log({"val/loss": 4.0}, step=5)
    # a kill mid-write leaves a partial last line
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "train/lo')
    with Tracker(tmp_path, CONFIG, resume_from_step=3) as tr:
        for step in range(4, 6):
            tr.log({"train/loss": 10.0 - step}, step=step)
    rows = _lines(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]
    assert rows == [{"step": s, "train/loss": 10.0 - s} for s in range(6)]


def test_resume_metrics_function(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in [0, 2, 2, 4, 6]))
    assert resume_metrics(tmp_path, 2) == 3
    assert _lines(tmp_path) == [{"step": 0}, {"step": 2}, {"step": 2}]
    assert resume_metrics(tmp_path / "missing", 2) == 0


def test_flatten_config():
    nested = {"model": {"n_layers": 2, "pos": {"kind": "rope", "rope_base": 1e4}}, "tags": ["a"], "empty": {}, "seed": 0}
    assert flatten_config(nested) == {
        "model.n_layers": 2,
        "model.pos.kind": "rope",
        "model.pos.rope_base": 1e4,
        "tags": ["a"],
        "empty": {},
        "seed": 0,
    }


def test_variant_tags():
    cfg = {"model": {"pos": {"kind": "alibi"}, "norm": "post", "norm_type": "rmsnorm", "activation": "swiglu"}}
    assert variant_tags(cfg) == ["alibi", "post", "rmsnorm", "swiglu"]
    assert variant_tags({"model": {"norm": "pre"}}) == ["pre"]


def test_unknown_logger_raises(tmp_path):
    with pytest.raises(ValueError, match="wandb_offline"):
        Tracker(tmp_path, CONFIG, logger="tensorboard")


def test_env_wandb_mode_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    with Tracker(tmp_path, CONFIG, logger="wandb_online") as tr:
        assert tr.wandb_mode == "disabled" and tr.wandb_run is None


class _FakeRun:
    """Records calls; raises from the methods named in `fail`."""

    def __init__(self, fail=()):
        self.fail, self.logged, self.finished, self.summary = set(fail), [], [], {}

    def define_metric(self, *a, **k):
        pass

    def log(self, metrics, step):
        if "log" in self.fail:
            raise RuntimeError("wandb log broke")
        self.logged.append((step, metrics))

    def finish(self, exit_code=None):
        self.finished.append(exit_code)


def _fake_wandb(monkeypatch, *, init=None):
    real = pytest.importorskip("wandb")
    fake = types.SimpleNamespace(Settings=real.Settings, init=init)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DISABLED", raising=False)


def test_wandb_init_failure_does_not_stop_run(tmp_path, monkeypatch, caplog):
    def broken_init(**kwargs):
        raise RuntimeError("no network")

    _fake_wandb(monkeypatch, init=broken_init)
    with caplog.at_level("WARNING", logger="experiments.rundir.tracking"):
        with Tracker(tmp_path, CONFIG, logger="wandb_online") as tr:
            tr.log({"x": 1.0}, step=0)
            tr.write_summary(RunSummary(RunStatus.COMPLETED))
    assert tr.wandb_run is None
    assert _lines(tmp_path) == [{"step": 0, "x": 1.0}]
    assert sum("wandb init failed" in r.message for r in caplog.records) == 1


def test_wandb_log_failure_warns_once_and_continues(tmp_path, monkeypatch, caplog):
    run = _FakeRun(fail={"log"})
    _fake_wandb(monkeypatch, init=lambda **kwargs: run)
    with caplog.at_level("WARNING", logger="experiments.rundir.tracking"):
        with Tracker(tmp_path, CONFIG, logger="wandb_offline") as tr:
            for step in range(3):
                tr.log({"x": float(step)}, step=step)
    assert [r["x"] for r in _lines(tmp_path)] == [0.0, 1.0, 2.0]
    assert sum("wandb log failed" in r.message for r in caplog.records) == 1
    assert run.finished == [1]  # switched off after the error, finished once


def test_wandb_receives_metrics_without_none_and_exit_codes(tmp_path, monkeypatch):
    runs, calls = [], []

    def init(**kwargs):
        calls.append(kwargs)
        runs.append(_FakeRun())
        return runs[-1]

    _fake_wandb(monkeypatch, init=init)
    with Tracker(tmp_path / "a", CONFIG, logger="wandb_offline", group="g", name="n", tags=["rope"], job_type="train") as tr:
        tr.log({"tokens": 8, "extrap/sliding/loss@8x": None, "val/loss": 2.0}, step=4)
        results = RunResults(**{f.name: None for f in fields(RunResults)})
        results.extrap = {"extrap/sliding/loss@8x": None}
        tr.write_summary(RunSummary(RunStatus.DIVERGED, steps=4, results=results))
    assert runs[0].logged == [(4, {"tokens": 8, "val/loss": 2.0})]
    assert runs[0].summary["extrap/sliding/loss@8x"] is None and runs[0].summary["steps"] == 4
    assert runs[0].summary["status"] == "diverged" and runs[0].finished == [1]
    kw = calls[0]
    assert (kw["mode"], kw["group"], kw["name"], kw["job_type"]) == ("offline", "g", "n", "train")
    assert kw["tags"] == ["rope"]  # the given tag, and CONFIG's model.pos.kind ("rope") only once
    assert kw["config"] == CONFIG and kw["dir"] == tmp_path / "a" and kw["resume"] is None

    with Tracker(tmp_path / "b", CONFIG, logger="wandb_offline"):
        pass
    assert runs[1].finished == [0]

    # resume reuses the stored run id
    first_id = calls[0]["id"]
    with Tracker(tmp_path / "a", CONFIG, logger="wandb_offline", resume_from_step=4):
        pass
    assert calls[2]["id"] == first_id and calls[2]["resume"] == "allow"


def test_real_offline_wandb_writes_under_run_dir(tmp_path, monkeypatch):
    """A real wandb offline run, no network: files appear under run_dir/wandb/offline-run-*/run-<id>.wandb."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    with Tracker(tmp_path, CONFIG, logger="wandb_offline", group="g", name="n", tags=["rope"], init_timeout=20) as tr:
        assert tr.wandb_run is not None, "wandb offline init failed (see the warning)"
        tr.log({"tokens": 8, "train/loss": 3.0}, step=1)
        tr.write_summary(RunSummary(RunStatus.COMPLETED, steps=1))
    run_id = (tmp_path / "wandb_run_id.txt").read_text().strip()
    offline_dirs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(offline_dirs) == 1
    wandb_file = offline_dirs[0] / f"run-{run_id}.wandb"
    assert wandb_file.is_file() and os.path.getsize(wandb_file) > 0
    assert _lines(tmp_path) == [{"step": 1, "tokens": 8, "train/loss": 3.0}]


def test_wandb_tags_add_variant_names(tmp_path, monkeypatch):
    calls = []
    _fake_wandb(monkeypatch, init=lambda **kwargs: calls.append(kwargs) or _FakeRun())
    cfg = {"model": {"pos": {"kind": "alibi"}, "norm": "post", "norm_type": "layernorm"}}
    with Tracker(tmp_path / "a", cfg, logger="wandb_offline", tags=["demo"]):
        pass
    with Tracker(tmp_path / "b", cfg, logger="wandb_offline", tags=["demo"], auto_tags=False):
        pass
    assert calls[0]["tags"] == ["demo", "alibi", "post", "layernorm"]
    assert calls[1]["tags"] == ["demo"]


def test_every_metric_a_run_logs_is_charted_against_tokens(make_cfg, tmp_path, monkeypatch):
    """wandb charts default to the step axis; every key a run writes to metrics.jsonl (eval rows included) must match
    a pattern the tracker gives `tokens` as its x axis (the counters step, tokens, flops and time are axes)."""
    import fnmatch

    patterns = []

    class Run(_FakeRun):
        def define_metric(self, name, step_metric=None, **k):
            if step_metric == "tokens":
                patterns.append(name)

    _fake_wandb(monkeypatch, init=lambda **kw: Run())
    from experiments.run.train import train

    train(make_cfg("logger=wandb", "train.eval_interval=1"))
    keys = {k for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() for k in json.loads(line)}
    uncharted = sorted(k for k in keys - {"step", "tokens", "time", "flops"} if not any(fnmatch.fnmatch(k, p) for p in patterns))
    assert patterns and uncharted == []


def test_concurrent_offline_wandb_runs_stay_live_side_by_side(tmp_path, monkeypatch):
    """The members of a pack each hold a live wandb run at once (concurrent=True): the second init does not finish the
    first (a plain Tracker's reinit would), both take metrics afterwards and each writes its own offline run."""
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_DISABLED", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    a = Tracker(tmp_path / "a", CONFIG, logger="wandb_offline", name="a", init_timeout=20, concurrent=True)
    b = Tracker(tmp_path / "b", CONFIG, logger="wandb_offline", name="b", init_timeout=20, concurrent=True)
    for tr in (a, b):
        tr.log({"tokens": 8, "train/loss": 3.0}, step=1)
        assert tr.wandb_run is not None, "a live wandb run was finished by another member's init"
    for tr in (a, b):
        tr.write_summary(RunSummary(RunStatus.COMPLETED, steps=1))
        tr.finish()
    ids = [(tmp_path / d / "wandb_run_id.txt").read_text().strip() for d in ("a", "b")]
    assert ids[0] != ids[1]
    for d, run_id in zip(("a", "b"), ids):
        files = list((tmp_path / d / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
        assert len(files) == 1 and files[0].stat().st_size > 0
