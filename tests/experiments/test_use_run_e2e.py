"""A finished run, used the way the README shows, in one test: train a tiny run, sample from it, evaluate it,
export it to HF, and load the export with transformers offline: same ids, same logits as load_run."""

from __future__ import annotations

import json

import pytest
import torch

from experiments import load_run
from experiments.use.evaluate.cli import main as evaluate
from experiments.use.export import main as export
from experiments.use.sample import main as sample
from experiments.run.train import train

transformers = pytest.importorskip("transformers")


def test_train_sample_evaluate_export_load(make_cfg, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    run = tmp_path / "run"
    summary = train(make_cfg("model/pos=rope", "model/norm_type=rmsnorm", "model/activation=swiglu",
                             "model.bias=false", "model.n_kv_heads=1", "train.steps=6", "train.eval_interval=6"))
    assert summary["status"] == "completed"

    assert sample([str(run), "--prompt", "The list", "--max-new-tokens", "8", "--seed", "1"]) == 0
    assert capsys.readouterr().out.startswith("The list")

    assert evaluate([str(run), "--json", "--factors", "1", "2"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["val/loss"] > 0 and scored["extrap/nonoverlap/loss@2x"] is not None  # rope runs past n_ctx

    out = tmp_path / "hf"
    assert export([str(run), "--to", "hf", "--out", str(out)]) == 0
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    model, tok, _ = load_run(run)
    text = "Ünïcödé  and  spaces\n\tand the list of things"
    ids = tok.encode(text)
    assert hf_tok(text, add_special_tokens=False)["input_ids"] == ids
    with torch.no_grad():
        ours, theirs = model(torch.tensor([ids])), hf_model(torch.tensor([ids])).logits
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0), (ours - theirs).abs().max()
