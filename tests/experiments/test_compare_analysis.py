"""The report's Analysis section (experiments/compare/analysis.py) on a tiny run trained here: the logit lens reads
the run's validation stream (its last layer reproduces the logged val/loss of the best checkpoint), per-head
entropy averages to the logged attn_entropy/layer_{i}, the figures go through the manifest; synthetic runs
without checkpoints get notes instead."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from experiments.rundir.checkpoint import read_weights_meta
from experiments.compare import build_report, main
from experiments.compare.analysis import (
    ANALYSIS_FIGURES,
    _val_text,
    analysis_batch,
    inspect_model,
    uniform_entropy,
)
from experiments.use.load import load_run, weights_path
from experiments.run.train import train
from tests.experiments.synthetic_runs import GROUPS, write_sweep


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, cache_dir_module):
    """One tiny run, evaluated at steps 2 and 4 (8 windows of 32 tokens per eval, the first 4 for entropy)."""
    from experiments.config.compose import compose_config
    from tests.experiments.conftest import TINY

    run_dir = tmp_path_factory.mktemp("analysis") / "sweep" / "run0"
    cfg = compose_config([*TINY, f"data.cache_dir={cache_dir_module}", f"train.run_dir={run_dir}", "train.steps=4",
                          "train.eval_interval=2", "train.ckpt_interval=4"])
    train(cfg)
    return run_dir


@pytest.fixture(scope="module")
def cache_dir_module(tmp_path_factory):
    return tmp_path_factory.mktemp("archlab_cache_analysis")


def _evals(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if "val/loss" in json.loads(line)]


def test_lens_reads_the_validation_stream_of_the_run(tiny_run):
    model, tok, cfg = load_run(tiny_run)
    meta = read_weights_meta(weights_path(tiny_run, "best"))
    docs, source = _val_text(dict(cfg["data"]), {})
    assert source.startswith("the validation split of data=embedded")
    n_ctx = int(cfg["train"]["n_ctx"])
    batch = analysis_batch(docs, tok, n_ctx, windows=8)  # = the eval's 2 batches x 4 windows
    assert batch.shape == (8, n_ctx + 1)
    got = inspect_model(model, batch)
    L = model.cfg.n_layers
    assert len(got["logp"]) == len(got["top1"]) == L + 1
    # the last layer is the model's prediction: -mean log p == the val/loss logged for the best checkpoint
    assert -got["logp"][-1] == pytest.approx(float(meta["val_loss"]), rel=1e-5)
    with torch.no_grad():  # and == the plain forward's top-1 accuracy on the same windows
        ids = torch.from_numpy(batch)
        acc = (model(ids[:, :-1]).argmax(-1) == ids[:, 1:]).double().mean().item()
    assert got["top1"][-1] == pytest.approx(acc, abs=1e-12)
    # per-head entropy on the first eval batch averages to the logged per-layer value of that step
    first = inspect_model(model, batch[:4])
    row = next(r for r in _evals(tiny_run) if r["step"] == int(meta["step"]))
    for i in range(L):
        assert np.mean(first["head_entropy"][i]) == pytest.approx(row[f"attn_entropy/layer_{i}"], rel=1e-5)
        assert 0.0 <= min(first["head_entropy"][i]) and max(first["head_entropy"][i]) <= uniform_entropy(n_ctx)


def test_report_with_analysis_then_without(tiny_run, tmp_path):
    out = tmp_path / "report"
    assert main([str(tiny_run), "--analysis", "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    assert "## Analysis" in md and "### Logit lens per layer" in md
    assert "| group | n | emb | L0 | L1 |" in md
    html = (out / "report.html").read_text()
    assert 'href="#analysis"' in html and 'id="lens-table"' in html
    manifest = json.loads((out / "report_manifest.json").read_text())["files"]
    for name in ANALYSIS_FIGURES:
        assert (out / name).stat().st_size > 5_000 and name in manifest, name
        assert f"({name})" in md
    # a rebuild without --analysis removes its figures (they are the report's own files) and the section
    build_report([str(tiny_run)], out)
    assert not any((out / name).exists() for name in ANALYSIS_FIGURES)
    assert "## Analysis" not in (out / "report.md").read_text()


def test_synthetic_runs_get_the_entropy_curves_and_notes(tmp_path):
    sweep = tmp_path / "sweep"
    write_sweep(sweep, groups=GROUPS[:2], seeds=(0, 1), diverged=None, extrap=False)
    report = build_report([sweep], tmp_path / "out", analysis=True)
    md = report.with_name("report.md").read_text()
    assert "![Attention entropy per layer over training](analysis_attn_entropy.png)" in md
    assert "left out of the logit lens (cannot load its checkpoint" in md
    assert "logit lens and per-head entropy: skipped" in md
    assert not (report.parent / "analysis_logit_lens.png").exists()


def test_uniform_entropy_closed_form():
    assert uniform_entropy(2) == pytest.approx(np.log(2) / 2)
    assert uniform_entropy(4, window=2) == pytest.approx(3 * np.log(2) / 4)
