"""model/param=mup through the runner: the optimizer's μP groups survive a checkpoint (a resumed run trains the
uninterrupted run's loss curve), μP changes the training (not SP under another name), and a μP config without
its proxy width is one line."""

from __future__ import annotations

from experiments.run.train import train

from .conftest import TINY, train_losses

MUP = ["model/param=mup", "model.base_width=32", "model.d_model=64", "schedule=constant", "optim.lr=3e-3",
       "train.ckpt_interval=4", "train.eval_interval=100"]


def test_a_mup_run_resumes_onto_the_same_curve_and_differs_from_sp(make_cfg, tmp_path):
    train(make_cfg(*MUP, "train.steps=8", run_dir=tmp_path / "straight"))
    train(make_cfg(*MUP, "train.steps=4", run_dir=tmp_path / "split"))
    train(make_cfg(*MUP, "train.steps=8", "train.resume=true", run_dir=tmp_path / "split"))
    assert train_losses(tmp_path / "split") == train_losses(tmp_path / "straight")
    sp = [o for o in MUP if not o.startswith(("model/param", "model.base_width"))]
    train(make_cfg(*sp, "train.steps=8", run_dir=tmp_path / "sp"))
    assert train_losses(tmp_path / "sp")[0] != train_losses(tmp_path / "straight")[0]  # d_model 64 = 2 x base: μP is not SP here
    config = (tmp_path / "straight" / "config.yaml").read_text()
    assert "param: mup" in config and "base_width: 32" in config


def test_mup_without_base_width_is_one_line(train_cli, tmp_path):
    r = train_cli(*TINY, "model/param=mup", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "config error: model: param='mup' needs base_width, the d_model the learning rate was tuned at (e.g. "
        "model.base_width=64), got None"]
    assert not (tmp_path / "r").exists()
