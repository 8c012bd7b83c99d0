"""train.sampler=epoch / train.max_epochs: a run that sees each window of its train split at most once, says how many
passes over the split it made (summary.json `epochs`), resumes onto the same windows, and is refused in one line
when its budget would need more passes than allowed."""

from __future__ import annotations

import json

import pytest

from experiments.config.check import validate
from experiments.config.errors import ConfigError
from experiments.data import cache
from experiments.data import epochs as epochs_module
from experiments.run.tasks import tokenizer_dict
from experiments.run.train import train

from .conftest import TINY


def _record_starts(monkeypatch) -> list[list[int]]:
    seen: list[list[int]] = []
    real = epochs_module.EpochSampler.starts

    def starts(self, batch):
        out = real(self, batch)
        seen.append(out)
        return out

    monkeypatch.setattr(epochs_module.EpochSampler, "starts", starts)
    return seen


def _split_tokens(cfg) -> int:
    """The train split's length, read through the data side alone (not the loop that counts epochs)."""
    rc = validate(cfg)
    return len(cache.prepare_data(rc.data, tokenizer_dict(rc), rc.data.cache_dir, progress=False).data.train)


def test_one_pass_sees_every_window_once_and_counts_its_epochs(make_cfg, monkeypatch):
    seen = _record_starts(monkeypatch)
    cfg = make_cfg("train.sampler=epoch", "train.max_epochs=1", "train.steps=20", "train.ckpt_interval=20",
                   "train.eval_interval=20")
    summary = train(cfg)
    flat = [s for batch in seen for s in batch]
    assert len(flat) == 20 * 4 and len(set(flat)) == len(flat)  # 80 windows of 32 tokens, none twice
    assert all(s % 32 == 0 for s in flat)
    n = _split_tokens(cfg)
    one_pass = ((n - 1) // 32 // 4) * 4 * 32  # whole batches of 4 windows of the split's (N-1)//T
    assert summary["tokens"] == 20 * 4 * 32 and summary["epochs"] == pytest.approx(summary["tokens"] / one_pass)


def test_random_windows_count_epochs_against_the_split(make_cfg):
    cfg = make_cfg("train.steps=6")
    summary = train(cfg)
    assert summary["epochs"] == pytest.approx(6 * 4 * 32 / _split_tokens(cfg))


def test_an_interrupted_epoch_run_resumes_onto_the_same_windows(make_cfg, monkeypatch, tmp_path):
    seen = _record_starts(monkeypatch)
    common = ["train.sampler=epoch", "schedule=constant", "train.ckpt_interval=4", "train.eval_interval=100",
              "train.grad_accum=2"]
    train(make_cfg(*common, "train.steps=8", run_dir=tmp_path / "straight"))
    straight, seen[:] = list(seen), []
    train(make_cfg(*common, "train.steps=4", run_dir=tmp_path / "split"))
    train(make_cfg(*common, "train.steps=8", "train.resume=true", run_dir=tmp_path / "split"))
    assert seen == straight  # the resumed half deals micro-batches 8..15, as the uninterrupted run did
    rows = lambda d: [(r["step"], r["train/loss"]) for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "train/loss" in r]  # noqa: E731
    assert rows(tmp_path / "split") == rows(tmp_path / "straight")


def test_a_budget_past_max_epochs_is_refused(make_cfg, tmp_path):
    with pytest.raises(ConfigError, match=r"^train.max_epochs: the budget of \d+ tokens covers the train split"):
        train(make_cfg("train.max_epochs=0.001", "train.steps=50"))


def test_seq2seq_refuses_the_epoch_sampler_before_reading_data(make_cfg):
    with pytest.raises(ConfigError, match="^train.sampler / train.max_epochs: task=seq2seq"):
        train(make_cfg("task=seq2seq", "data=seq2seq_synthetic", "tokenizer=seq2seq", "train.sampler=epoch"))


@pytest.mark.parametrize("bad, key", [("train.sampler=shuffle", "train.sampler"), ("train.max_epochs=0", "train.max_epochs")])
def test_cli_bad_values_are_one_line(bad, key, train_cli, tmp_path):
    r = train_cli(*TINY, bad, f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and key in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()
