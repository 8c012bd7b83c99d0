"""act_rms/layer_{i} and act_rms/logits (the coordinate check's statistic, experiments/run/eval_lm.py): the RMS of
each block's output and of the logits on the first eval batch, checked against plain torch forward hooks on
`model.blocks[i]` and `model.lm_head` (not arch's hook points) summed by hand in float64, for SP, μP (whose readout
multiplies its input: the logits are the model's, multiplier included) and post-LN; and that a training run logs
them in every eval row, which compare's coord.png reads."""

from __future__ import annotations

import json
import math

import pytest
import torch

from arch import ModelConfig, build_model
from experiments.run.eval_lm import evaluate_model
from experiments.run.train import train

V, T = 37, 8


def hand_rms(model, inputs) -> dict[str, float]:
    """{key: sqrt(sum x² / numel)} of each block's output and of lm_head's, read with nn.Module forward hooks."""
    seen = {}

    def keep(key):
        def hook(module, args, output):
            x = output.double()
            seen[key] = math.sqrt((x * x).sum().item() / x.numel())
        return hook

    handles = [b.register_forward_hook(keep(f"act_rms/layer_{i}")) for i, b in enumerate(model.blocks)]
    handles.append(model.lm_head.register_forward_hook(keep("act_rms/logits")))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("kw", [{}, {"param": "mup", "base_width": 16}, {"norm": "post"}])
def test_act_rms_is_the_hand_computed_one(kw):
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=V, n_ctx=T, d_model=32, n_layers=3, n_heads=4, **kw))
    with torch.no_grad():
        for p in model.parameters():  # away from init, so every block's output has its own size
            p.add_(torch.randn_like(p) * 0.3)
    toks = torch.randint(0, V, (6 * T + 1,), generator=torch.Generator().manual_seed(3)).numpy()
    out = evaluate_model(model, toks, n_ctx=T, batch_size=3, max_batches=None, bytes_per_token=1.0, device="cpu")
    first = torch.stack([torch.from_numpy(toks[s: s + T]).long() for s in range(0, 3 * T, T)])  # the first batch
    want = hand_rms(model, first)
    got = {k: v for k, v in out.items() if k.startswith("act_rms/")}
    assert sorted(got) == sorted(want) == ["act_rms/layer_0", "act_rms/layer_1", "act_rms/layer_2", "act_rms/logits"]
    assert got == pytest.approx(want, rel=1e-5)
    assert len(set(got.values())) == 4  # four different numbers: no key read another's tensor


def test_a_run_logs_act_rms_at_every_eval(make_cfg, tmp_path):
    train(make_cfg("train.steps=4", "train.eval_interval=2", "train.ckpt_interval=4"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val/loss" in r]
    assert len(evals) == 2
    for r in evals:
        values = [r["act_rms/layer_0"], r["act_rms/layer_1"], r["act_rms/logits"]]
        assert all(math.isfinite(v) and v > 0 for v in values)
        assert "act_rms/layer_2" not in r
    assert not any(k.startswith("act_rms/") for r in rows if "val/loss" not in r for k in r)  # eval rows only
