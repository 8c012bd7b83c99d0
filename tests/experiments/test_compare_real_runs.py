"""compare on run dirs written by the real runner (experiments.run.train.train), not the synthetic writer:
two position encodings × 2 seeds plus one diverging run, all tiny. Slow (5 trainings on CPU)."""

from __future__ import annotations

import pytest

from experiments.compare import build_report
from experiments.run.train import train

pytestmark = pytest.mark.slow


def test_report_from_real_runs(make_cfg, tmp_path):
    sweep = tmp_path / "multirun" / "pos" / "t0"
    extrap = ["train.extrap=end", "train.extrap_max_tokens=256", "train.steps=4", "train.eval_interval=2"]
    for i, (pos, seed) in enumerate([("learned", 0), ("learned", 1), ("rope", 0), ("rope", 1)]):
        train(make_cfg(f"model/pos={pos}", f"seed={seed}", *extrap, run_dir=sweep / f"{i}_{pos}_s{seed}"))
    train(make_cfg("model/pos=rope", "seed=2", "optim.lr=1e30", "schedule.warmup_steps=0", "train.grad_clip=null",
                   "train.steps=10", run_dir=sweep / "4_rope_s2_lr1e30"))

    report = build_report([sweep], None, by=["model.pos.kind"])
    assert report == sweep / "report" / "report.html"
    md = (report.parent / "report.md").read_text()
    assert "| pos=learned | 2 |" in md
    assert "| pos=rope | 2 (+1 diverged) |" in md
    assert sum("| diverged |" in line for line in md.splitlines()) == 1
    assert "pos=learned: nonoverlap loss N/A at 2×, 4×, 8×" in md  # learned positions past n_ctx
    for png in ("curve_train_loss.png", "curve_val_loss.png", "extrapolation.png", "grad_norm_per_layer.png"):
        assert (report.parent / png).stat().st_size > 10_000, png
    assert "depth vs width (aspect ratio): skipped" in md
    # the diverged run's learning rate differs inside the rope group: shown, not hidden
    assert "| pos=rope | rope | 0.001 \\| 1e+30 |" in md
