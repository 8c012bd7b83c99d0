"""A run's held-out evaluation (issue 32 §2): test/* are scored once, by the final eval, with the saved model, on the
test split's whole documents and on each extra corpus; a resume does not score them differently; packed members get
the same numbers as alone; experiments.compare gives each a "final test/..." block.

The reference for test/loss is computed here without the trainer's data or eval code: the test documents chosen by
the documented rule, encoded with the run's saved tokenizer (one <|endoftext|> after each), the windows tiled by
hand (0, n_ctx, 2·n_ctx, ... full windows only; or, with data.test_max_tokens, the first and the last), the model
loaded from the run's last checkpoint, the mean of torch's cross-entropy over every target.
"""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch
import torch.nn.functional as F

from experiments.compare import build_report
from experiments.config.check import validate
from experiments.config.compose import compose_config
from experiments.run import loop as loop_mod
from experiments.run.interrupt import RunInterrupted
from experiments.run.pack import train_packed
from experiments.run.train import train
from experiments.use.load import load_run
from tests.experiments.synthetic_runs import GROUPS, write_sweep
from tokenizer.corpus import embedded_documents

from .conftest import TINY

SEP = "<|endoftext|>"
N_DOCS, VAL, TEST = 20, 0.15, 0.15


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A file of N_DOCS documents joined by separator lines, and an extra corpus (not in it)."""
    root = tmp_path_factory.mktemp("held_out_corpus")
    docs = [d[:1200] for d in embedded_documents()[:N_DOCS]]
    novels = root / "novels.txt"
    novels.write_text(f"\n{SEP}\n".join(docs), encoding="utf-8")
    extra = root / "extra.txt"
    extra.write_text("\n".join(embedded_documents()[-1][:3000].splitlines()), encoding="utf-8")
    return novels, docs, extra


def held_out_args(corpus, *extra):
    novels, _, other = corpus
    return ["data=text", f"data.paths=[{novels}]", f"data.doc_separator='{SEP}'", "data.split_by=documents",
            f"data.val_fraction={VAL}", f"data.test_fraction={TEST}", f"+data.extra_eval.other={other}",
            "tokenizer.vocab_size=300", "train.steps=4", "train.eval_interval=2", "train.ckpt_interval=2",
            "train.keep_last_k=3", *extra]


def reference_test_docs(docs):
    """The documented rule, written out: held out when floor((i+1)h) > floor(ih); the j-th held-out one is test when
    floor((j+1)t) > floor(jt), t = TEST / h."""
    h = VAL + TEST
    held = [i for i in range(len(docs)) if int((i + 1) * h) > int(i * h)]
    t = TEST / h
    return [docs[held[j]] for j in range(len(held)) if int((j + 1) * t) > int(j * t)]


def reference_loss(model, ids: list[int], n_ctx: int, first_and_last: bool = False) -> float:
    starts = list(range(0, len(ids) - n_ctx, n_ctx))  # s + n_ctx + 1 <= len(ids)
    if first_and_last:
        starts = [starts[0], starts[-1]]
    nats, count = 0.0, 0
    with torch.no_grad():
        for s in starts:
            window = torch.tensor(ids[s : s + n_ctx + 1])
            logits = model(window[None, :-1])[0]
            nats += F.cross_entropy(logits.double(), window[1:], reduction="sum").item()
            count += n_ctx
    return nats / count


@pytest.fixture(scope="module")
def finished(corpus, cache_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("held_out_run") / "run"
    summary = train(compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run_dir}",
                                    *held_out_args(corpus)]))
    return run_dir, summary


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_test_loss_is_the_mean_cross_entropy_of_the_saved_model_on_the_test_documents(finished, corpus):
    run_dir, summary = finished
    _, docs, extra = corpus
    model, tok, cfg = load_run(run_dir, which="last")
    n_ctx, eot = cfg["train"]["n_ctx"], tok.special_tokens[SEP]
    test = reference_test_docs(docs)
    ids = [i for d in test for i in [*tok.encode(d), eot]]
    want = reference_loss(model, ids, n_ctx)
    assert summary["test"]["test/loss"] == pytest.approx(want, rel=1e-5)
    n_bytes = sum(len(d.encode()) for d in test)
    assert summary["test"]["test/bpb"] == pytest.approx(want / math.log(2) / (n_bytes / len(ids)), rel=1e-5)
    other = [*tok.encode(extra.read_text()), eot]
    assert summary["test"]["test/other/loss"] == pytest.approx(reference_loss(model, other, n_ctx), rel=1e-5)
    ev = summary["evaluation"]
    assert ev["split"]["test"]["documents"] == len(test) and ev["sets"]["test"]["tokens"] == len(ids)
    assert ev["sets"]["test"]["windows"] == len(range(0, len(ids) - n_ctx, n_ctx))
    assert ev["sets"]["test/other"]["path"] == str(extra)


def test_test_metrics_come_once_from_the_final_eval_and_nothing_that_selects_reads_them(finished):
    run_dir, summary = finished
    evals = [r for r in rows(run_dir) if "val/loss" in r]
    assert [r["step"] for r in evals] == [2, 4]
    assert [r["step"] for r in rows(run_dir) if any(k.startswith("test/") for k in r)] == [4]
    final = evals[-1]
    assert summary["test"] == {k: v for k, v in final.items() if k.startswith("test/")}
    assert summary["final_val_loss"] == final["val/loss"]  # what the tuned sweeper selects on: val, as before
    assert summary["best_val_loss"] == min(r["val/loss"] for r in evals)


def test_test_max_tokens_scores_windows_spread_over_the_set(corpus, make_cfg, tmp_path):
    _, docs, _ = corpus
    summary = train(make_cfg(*held_out_args(corpus, "data.test_max_tokens=64"), run_dir=tmp_path / "r"))
    model, tok, cfg = load_run(tmp_path / "r", which="last")
    n_ctx, eot = cfg["train"]["n_ctx"], tok.special_tokens[SEP]
    ids = [i for d in reference_test_docs(docs) for i in [*tok.encode(d), eot]]
    assert n_ctx == 32 and summary["evaluation"]["sets"]["test"]["windows"] == 2  # 64 // 32: the first and the last
    assert summary["test"]["test/loss"] == pytest.approx(reference_loss(model, ids, n_ctx, first_and_last=True),
                                                         rel=1e-5)


def test_resuming_a_finished_run_keeps_its_test_metrics(finished, corpus, make_cfg, tmp_path):
    import shutil

    run_dir, summary = finished
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    again = train(make_cfg(*held_out_args(corpus), "train.resume=true", run_dir=copy))
    assert again["test"] == summary["test"] and again["evaluation"] == summary["evaluation"]
    assert [r["step"] for r in rows(copy) if "test/loss" in r] == [4]


def test_an_interrupted_run_gets_its_test_metrics_when_it_finishes(finished, corpus, make_cfg, tmp_path, monkeypatch):
    after_step = loop_mod.TrainingRun.after_step

    def signal_at_2(self):
        after_step(self)
        if self.step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop_mod.TrainingRun, "after_step", signal_at_2)
    with pytest.raises(RunInterrupted):
        train(make_cfg(*held_out_args(corpus), run_dir=tmp_path / "r"))
    stopped = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert stopped["status"] == "interrupted" and "test" not in stopped
    monkeypatch.setattr(loop_mod.TrainingRun, "after_step", after_step)
    resumed = train(make_cfg(*held_out_args(corpus), "train.resume=true", run_dir=tmp_path / "r"))
    assert resumed["status"] == "completed"
    assert resumed["test"] == finished[1]["test"]  # bit for bit: the CPU resume is exact


def test_packed_members_get_the_test_metrics_of_their_solo_runs(corpus, make_cfg, tmp_path, finished):
    rcs = [validate(make_cfg(*held_out_args(corpus), f"seed={s}", run_dir=tmp_path / f"p{s}")) for s in (0, 1)]
    outcomes = train_packed(rcs)
    assert [o["status"] for o in outcomes] == ["completed", "completed"]
    solo = finished[1]["test"]  # seed 0 alone (TINY's seed)
    packed = json.loads((tmp_path / "p0" / "summary.json").read_text())["test"]
    assert packed.keys() == solo.keys()
    assert all(packed[k] == pytest.approx(solo[k], rel=1e-5) for k in solo)
    assert json.loads((tmp_path / "p1" / "summary.json").read_text())["test"].keys() == solo.keys()


# -- experiments.compare: a "final test/..." block per held-out metric -----------------------------------------------

def _with_test_metrics(run_dir, value: float) -> dict[str, float]:
    """Give a synthetic run the test/* keys a held-out run's final eval logs (in its last eval row and summary)."""
    test = {"test/loss": value, "test/bpb": value / 2, "test/wiki/loss": value + 1, "test/wiki/bpb": value / 2 + 1}
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = max(i for i, r in enumerate(lines) if "val/loss" in r)
    lines[last].update(test)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "test": test}))
    return test


def test_compare_gives_a_final_block_per_held_out_metric(tmp_path):
    dirs = write_sweep(tmp_path / "sweep", groups=GROUPS[:2], seeds=(0, 1, 2), diverged=None)
    values = {d: 3.0 + 0.1 * i + 0.01 * (i % 3) ** 2 for i, d in enumerate(dirs)}  # group 0: runs 0-2, group 1: 3-5
    for d, v in values.items():
        _with_test_metrics(d, v)
    out = build_report([tmp_path / "sweep"], tmp_path / "out", by=["model.pos.kind"])
    doc = json.loads((out.parent / "comparison.json").read_text())
    blocks = {m["name"]: m for m in doc["metrics"]}
    assert list(blocks)[-4:] == ["final test/loss", "final test/bpb", "final test/wiki/loss", "final test/wiki/bpb"]
    assert doc["metric"] == "val/loss" and doc["headline"]["metric"] == "final val/loss"  # the selection is val's
    group_values = [[values[d] for d in dirs[:3]], [values[d] for d in dirs[3:]]]
    means = {g["label"]: g["mean"] for g in blocks["final test/loss"]["groups"]}
    assert sorted(means.values()) == pytest.approx(sorted(sum(v) / 3 for v in group_values))
    diff = [g["vs_baseline"]["diff"] for g in blocks["final test/wiki/loss"]["groups"] if g["vs_baseline"]]
    assert abs(diff[0]) == pytest.approx(abs(sum(group_values[1]) - sum(group_values[0])) / 3)

    out = build_report([tmp_path / "sweep"], tmp_path / "out_test", by=["model.pos.kind"], metric="test/loss")
    doc = json.loads((out.parent / "comparison.json").read_text())
    assert doc["headline"]["metric"] == "final test/loss" and doc["omitted"] == ["best test/loss"]
    assert [m["name"] for m in doc["metrics"]].count("final test/loss") == 1
