"""`python -m experiments.evaluate RUN_DIR`: a finished run scored on its own val split (equal to what the trainer
logged on the same windows), on any text, and one-line errors."""

from __future__ import annotations

import json

import pytest

from experiments.config.compose import compose_config
from experiments.use.evaluate.cli import main
from experiments.run.train import train

from .conftest import TINY


@pytest.fixture(scope="module")
def run(tmp_path_factory, cache_dir):
    """One finished run for the module's tests (evaluate only reads a run dir; it writes nothing there)."""
    # eval_batches far above the val split's windows: the trainer scores every window (eval_lm.spread), as evaluate does
    run_dir = tmp_path_factory.mktemp("evaluate_run") / "run"
    summary = train(compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run_dir}", "train.steps=4",
                                    "train.eval_interval=2", "train.eval_batches=100000"]))
    return run_dir, summary


def test_own_val_split_matches_the_trainers_last_eval(run, capsys):
    run_dir, summary = run
    assert main([str(run_dir), "--which", "last", "--factors", "1", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["val/loss"] == pytest.approx(summary["final_val_loss"], abs=1e-6)
    assert r["val/bpb"] == pytest.approx(summary["final_val_bpb"], rel=1e-6)
    assert r["extrap/nonoverlap/loss@1x"] == pytest.approx(r["val/loss"], abs=1e-9)


def test_any_text_table_and_learned_positions_na_past_n_ctx(run, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("Ünïcödé and emoji 🙂 survive the byte-level round trip.\n" * 40)
    assert main([str(run[0]), "--text", str(text)]) == 0
    out = capsys.readouterr().out
    assert "val/bpb" in out and "bytes/token" in out
    assert [line.split()[2] for line in out.splitlines() if line.strip().startswith("2x")] == ["N/A"]  # learned: 64 > 32


@pytest.mark.parametrize("args,msg", [(["--text", "/nonexistent/x.txt"], "no file matches"),
                                      (["seed=1"], "only data overrides"),
                                      (["--which", "7"], "no checkpoint at step 7")])
def test_errors_are_one_line(run, capsys, args, msg):
    assert main([str(run[0]), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evaluate: error:") and msg in err[0]
