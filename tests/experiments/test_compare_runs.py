"""experiments.compare runs.py + grouping.py: discovering run dirs, loading them, and grouping by the config keys that differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.compare import (
    Group,
    RunsError,
    check_keys,
    default_group_keys,
    discover_runs,
    flatten,
    group_runs,
    is_noise_key,
    read_run,
    read_runs,
    stat_runs,
)
from tests.experiments.synthetic_runs import GROUPS, make_config, write_run, write_sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs") / "multirun" / "arch_sweep" / "2026-01-01_00-00-00"
    write_sweep(root)
    return root


def test_discover_finds_every_job_in_natural_order(sweep: Path) -> None:
    dirs = discover_runs([sweep])
    assert [d.name for d in dirs] == [str(i) for i in range(15)]  # 10 after 9, .hydra never a run


def test_discover_accepts_run_dirs_and_globs(sweep: Path) -> None:
    assert discover_runs([sweep / "3"]) == [(sweep / "3").resolve()]
    assert len(discover_runs([str(sweep / "1*")])) == 6  # 1, 10..14
    assert len(discover_runs([str(sweep / "*" / "summary.json")])) == 15


def test_discover_errors(tmp_path: Path) -> None:
    with pytest.raises(RunsError, match="path not found"):
        discover_runs([tmp_path / "nope"])
    with pytest.raises(RunsError, match="no path matches"):
        discover_runs([str(tmp_path / "x*")])
    with pytest.raises(RunsError, match="no runs found"):
        read_runs([tmp_path])


def test_read_run_reads_all_three_files(sweep: Path) -> None:
    r = read_run(sweep / "8")  # post-LN seed 2: the diverged one
    assert r.status == "diverged"
    assert r.seed == 2 and r.experiment == "arch_sweep"
    assert r.flat["model.pos.kind"] == "alibi" and r.flat["model.norm"] == "post"
    assert r.metrics[0]["step"] == 0 and "train/loss" in r.metrics[0]


def test_running_run_without_summary_and_torn_last_line(tmp_path: Path) -> None:
    d = write_run(tmp_path / "live", make_config(GROUPS[0], 0), [{"step": 0, "tokens": 0, "train/loss": 6.0}], None)
    with open(d / "metrics.jsonl", "a") as f:
        f.write('{"step": 10, "tok')  # killed mid-write
    r = read_run(d)
    assert r.status == "running" and len(r.metrics) == 1


@pytest.mark.parametrize("garbage", ["[1, 2]", '"done"', "{not json", ""])
def test_a_garbage_summary_reads_as_no_summary(tmp_path: Path, garbage: str) -> None:
    d = write_run(tmp_path / "r", make_config(GROUPS[0], 0), [{"step": 0, "tokens": 0, "train/loss": 5.0}], None)
    (d / "summary.json").write_text(garbage)
    r = read_run(d)
    assert r.summary == {} and r.status == "running" and len(r.metrics) == 1


@pytest.mark.parametrize("status, averaged", [("completed", True), ("diverged", False), ("interrupted", False),
                                              ("failed", False), ("exploded", False)])
def test_a_status_reads_as_itself_and_only_completed_runs_are_averaged(tmp_path: Path, status: str,
                                                                       averaged: bool) -> None:
    line = [{"step": 0, "tokens": 0, "train/loss": 5.0}]
    done = read_run(write_run(tmp_path / "a", make_config(GROUPS[0], 0), line, {"status": "completed"}))
    other = read_run(write_run(tmp_path / "b", make_config(GROUPS[0], 1), line, {"status": status}))
    assert other.status == status  # an unknown one too, kept as is
    assert [r.path for r in stat_runs(Group((), [done, other]))] == [done.path, other.path][:1 + averaged]


def test_interrupted_run_gives_its_signal_as_reason(tmp_path: Path) -> None:
    d = write_run(tmp_path / "r", make_config(GROUPS[0], 0), [], {"status": "interrupted", "steps": 40,
                                                                  "error": "KeyboardInterrupt: SIGINT"})
    assert read_run(d).reason == "KeyboardInterrupt: SIGINT"
    (d / "summary.json").write_text(json.dumps({"status": "interrupted", "steps": 40}))
    assert read_run(d).reason == "stopped at step 40"


def test_a_dir_with_metrics_or_a_summary_is_a_run_a_config_alone_is_not(tmp_path: Path) -> None:
    write_run(tmp_path / "metrics_only", make_config(GROUPS[0], 0), [{"step": 0, "tokens": 0}], None)
    (tmp_path / "summary_only").mkdir()
    (tmp_path / "summary_only" / "summary.json").write_text('{"status": "failed"}')
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.yaml").write_text("seed: 0\n")
    assert [d.name for d in discover_runs([tmp_path])] == ["metrics_only", "summary_only"]


def test_config_falls_back_to_hydra_dir(tmp_path: Path) -> None:
    d = write_run(tmp_path / "r", make_config(GROUPS[1], 0), [], {"status": "completed"})
    (d / "config.yaml").unlink()
    assert read_run(d).flat["model.pos.kind"] == "rope"


def test_flatten_and_noise() -> None:
    assert flatten({"model": {"pos": {"kind": "rope"}, "n": 2}, "l": [1, 2]}) == {"model.pos.kind": "rope", "model.n": 2, "l": (1, 2)}
    for k in ("seed", "data.seed", "hydra.job.name", "logger.name", "train.out_dir", "train.resume", "run_dir"):
        assert is_noise_key(k), k
    for k in ("model.pos.kind", "model.norm", "optim.lr", "experiment_name"):
        assert not is_noise_key(k), k


def test_default_by_is_the_differing_keys_without_seed_or_noise(sweep: Path) -> None:
    runs = read_runs([sweep])
    by = default_group_keys(runs)
    assert sorted(by) == ["model.d_model", "model.n_layers", "model.norm", "model.pos.kind"]
    groups = group_runs(runs, by)
    assert len(groups) == 5 and all(len(g.runs) == 3 for g in groups)
    assert [r.seed for r in groups[0].runs] == [0, 1, 2]
    assert groups[0].label == "pos=learned norm=pre d_model=128 n_layers=4"


def test_explicit_by_merges_groups(sweep: Path) -> None:
    runs = read_runs([sweep])
    groups = group_runs(runs, ["model.pos.kind"])
    assert [g.label for g in groups] == ["pos=learned", "pos=rope", "pos=alibi"]
    assert [len(g.runs) for g in groups] == [3, 9, 3]
    assert len({g.color for g in groups}) == 3


def test_by_seed_gives_one_group_per_seed(sweep: Path) -> None:
    groups = group_runs(read_runs([sweep]), ["seed"])
    assert [g.label for g in groups] == ["seed=0", "seed=1", "seed=2"]


def test_label_drops_keys_only_some_runs_have(tmp_path: Path) -> None:
    a = make_config(GROUPS[1], 0)
    b = make_config(GROUPS[1], 0)
    b["model"]["pos"] = {"kind": "relative", "num_buckets": 32}
    a["model"]["pos"] = {"kind": "rope"}
    for i, c in enumerate((a, b)):
        write_run(tmp_path / str(i), c, [], {"status": "completed"})
    runs = read_runs([tmp_path])
    by = default_group_keys(runs)
    assert by == ["model.pos.kind", "model.pos.num_buckets"]
    assert [g.label for g in group_runs(runs, by)] == ["pos=rope", "pos=relative"]


def test_check_keys_lists_close_matches(sweep: Path) -> None:
    runs = read_runs([sweep])
    check_keys(runs, ["model.norm"])
    with pytest.raises(RunsError, match=r"'pos.kind'.*model\.pos\.kind"):
        check_keys(runs, ["pos.kind"])
    with pytest.raises(RunsError, match=r"model\.n_layers"):
        check_keys(runs, ["model.n_layer"])


def test_summary_file_is_what_it_says(sweep: Path) -> None:
    s = json.loads((sweep / "0" / "summary.json").read_text())
    for key in ("status", "experiment", "run_name", "overrides", "seed", "final_val_loss", "best_val_loss",
                "final_val_bpb", "best_val_bpb", "final_train_loss", "params", "non_embedding_params", "tokens",
                "steps", "wall_time_s", "tokens_per_s", "mfu", "extrap"):
        assert key in s, key
