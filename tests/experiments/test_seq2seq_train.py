"""task=seq2seq end to end: the encoder-decoder trains on synthetic pairs, its logged exact match equals a plain
uncached greedy decode of the saved model, resume is exact, sample --src and evaluate work, and the report draws
exact match vs test length."""

from __future__ import annotations

import json

import pytest
import torch

from experiments import load_run
from experiments.run.train import train

S2S = ["task=seq2seq", "model.d_model=32", "model.n_heads=2", "model.n_layers=2", "train.batch_size=16",
       "data.n_train=400", "data.train_lengths=[1,4]", "data.test_lengths=[3,6]", "data.n_test_per_length=6",
       "train.eval_batch_size=8", "optim.lr=3e-3"]


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cache_dir):
    from experiments.config.compose import compose_config

    from .conftest import TINY

    run = tmp_path_factory.mktemp("s2s") / "run"
    base = [o for o in TINY if not o.startswith(("model.", "train.batch_size"))]
    summary = train(compose_config([*base, *S2S, "train.steps=40", "train.eval_interval=20",
                                    "train.ckpt_interval=20", f"data.cache_dir={cache_dir}", f"train.run_dir={run}"]))
    return run, summary


def test_logged_exact_match_equals_an_uncached_greedy_decode(trained):
    run, summary = trained
    assert summary["status"] == "completed"
    last = [r for r in _rows(run) if "val/exact_match" in r][-1]
    assert {f"val/exact_match@len{k}" for k in range(3, 7)} <= set(last) and "val/token_acc" in last
    model, tok, cfg = load_run(run, which="last")
    from experiments.data.pairs import prepare_pairs

    p = prepare_pairs(cfg["data"], cfg["tokenizer"], cfg["data"]["cache_dir"])
    hits = 0
    for src, target in zip(p.test.src, p.test.tgt_out):  # one pair at a time, no cache, no padding
        out = [p.bos_id]
        for _ in range(len(target) + 1):
            logits = model(torch.tensor([src]), torch.tensor([out]))
            out.append(int(logits[0, -1].argmax()))
            if out[-1] == p.eos_id:
                break
        gen = out[1:]
        gen = gen[: gen.index(p.eos_id)] if p.eos_id in gen else gen
        hits += gen == target[:-1]
    assert last["val/exact_match"] == pytest.approx(hits / len(p.test.src))


def test_resume_is_exact(make_cfg, tmp_path):
    full = train(make_cfg(*S2S, "train.steps=6", "train.eval_interval=3", "train.ckpt_interval=3",
                          run_dir=tmp_path / "full"))
    train(make_cfg(*S2S, "train.steps=6", "train.eval_interval=3", "train.ckpt_interval=3", run_dir=tmp_path / "cut"))
    # cut the second run back to its step-3 checkpoint and resume it
    import shutil

    shutil.rmtree(tmp_path / "cut" / "checkpoints" / "step_00000006", ignore_errors=True)
    resumed = train(make_cfg(*S2S, "train.steps=6", "train.eval_interval=3", "train.ckpt_interval=3",
                             "train.resume=true", run_dir=tmp_path / "cut"))
    assert resumed["final_val_loss"] == full["final_val_loss"]
    strip = lambda rows: [{k: v for k, v in r.items() if k not in ("time", "tokens_per_s", "mfu")} for r in rows]
    assert strip(_rows(tmp_path / "cut")) == strip(_rows(tmp_path / "full"))


def test_sample_src_and_evaluate(trained, capsys):
    from experiments.use.evaluate.cli import main as evaluate
    from experiments.use.sample import main as sample

    run, _ = trained
    assert sample([str(run), "--src", "1234", "--temperature", "0", "--max-new-tokens", "6"]) == 0
    assert sample([str(run), "--prompt", "x"]) == 2
    assert evaluate([str(run), "--json"]) == 0
    out = capsys.readouterr()
    assert "pass --src" in out.err
    result = json.loads(out.out[out.out.index("{"):])
    assert "test/exact_match@len6" in result


def test_report_draws_exact_match_vs_length(trained, tmp_path):
    from experiments.compare import build_report

    html = build_report([str(trained[0])], tmp_path / "report")
    assert (tmp_path / "report" / "exact_match_vs_length.png").stat().st_size > 0
    assert "Exact match vs test length" in html.read_text()
