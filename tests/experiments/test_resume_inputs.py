"""Resuming is refused, in one line and before anything is rewritten, when the tokenizer or the data differ from
those the run's checkpoint was trained on (fingerprints recorded in state.pt; for a checkpoint from before that
record, the run dir's tokenizer.json). Each case keeps the model config identical, so nothing else would notice."""

from __future__ import annotations

import shutil

import pytest
import torch

from experiments.config.errors import ConfigError
from experiments.run.train import train
from tokenizer.cli import main as bpe
from tokenizer.corpus import embedded_documents

from .conftest import file_bytes


def _refused(make_cfg, run, *overrides: str, what: str) -> None:
    before = file_bytes(run)
    with pytest.raises(ConfigError) as e:
        train(make_cfg(*overrides, "train.resume=true", run_dir=run))
    msg = str(e.value)
    assert "\n" not in msg and "train.resume=true but" in msg and str(run / "checkpoints") in msg, msg
    assert f"trained on {what}" in msg, msg
    assert file_bytes(run) == before  # a refused resume rewrites nothing


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "train.txt").write_text("".join(embedded_documents()[:20]), encoding="utf-8")
    assert bpe(["train", str(d / "train.txt"), "--vocab-size", "400", "--special-token", "<|endoftext|>",
                "--out", str(d / "tok"), "--workers", "1"]) == 0
    return d / "tok"


def test_another_tokenizer_of_the_same_size_is_refused(make_cfg, tmp_path):
    run = tmp_path / "run"
    train(make_cfg("tokenizer.vocab_size=300", run_dir=run))
    _refused(make_cfg, run, "tokenizer.vocab_size=300", "tokenizer.pattern=gpt4", what="another tokenizer")
    assert train(make_cfg("tokenizer.vocab_size=300", "train.resume=true", run_dir=run))["status"] == "completed"


def test_other_data_with_the_same_tokenizer_is_refused(make_cfg, tmp_path, tokenizer_dir):
    run = tmp_path / "run"
    load = ("tokenizer=load", f"tokenizer.path={tokenizer_dir}")
    train(make_cfg(*load, run_dir=run))
    _refused(make_cfg, run, *load, "data.val_fraction=0.2", what="other data")
    _refused(make_cfg, run, *load, "data.split_by=documents", what="other data")


def test_other_token_files_are_refused(make_cfg, tmp_path, tokenizer_dir):
    d = tmp_path / "tokens"
    d.mkdir()
    docs = embedded_documents()
    for name, part in (("a", docs[:10]), ("b", docs[10:20])):
        (d / f"{name}.txt").write_text("".join(part), encoding="utf-8")
        assert bpe(["encode", "--tokenizer", str(tokenizer_dir), str(d / f"{name}.txt"), "--out", str(d / f"{name}.bin")]) == 0
    run = tmp_path / "run"
    common = ("data=tokens", "tokenizer=load", f"tokenizer.path={tokenizer_dir}")
    train(make_cfg(*common, f"data.train_path={d / 'a.bin'}", run_dir=run))
    _refused(make_cfg, run, *common, f"data.train_path={d / 'b.bin'}", what="other data")


def test_a_checkpoint_without_a_record_is_compared_by_the_run_dirs_tokenizer(make_cfg, tmp_path):
    run = tmp_path / "run"
    train(make_cfg("tokenizer.vocab_size=300", run_dir=run))
    state_path = run / "checkpoints" / "step_00000003" / "state.pt"
    state = torch.load(state_path, weights_only=False)
    state.pop("inputs", None)  # as written before the record existed
    torch.save(state, state_path)
    _refused(make_cfg, run, "tokenizer.vocab_size=300", "tokenizer.pattern=gpt4", what="another tokenizer")
    shutil.rmtree(run / "checkpoints" / "step_00000003")  # no checkpoint: nothing to compare, starts from scratch
    assert train(make_cfg("tokenizer.vocab_size=300", "tokenizer.pattern=gpt4", "train.resume=true",
                          run_dir=run))["status"] == "completed"


def test_other_seq2seq_pairs_with_the_same_tokenizer_are_refused(make_cfg, tmp_path):
    # vocab 259: the 256 bytes and the 3 specials, no merges: every pair set gets the same tokenizer
    s2s = ("task=seq2seq", "model.d_model=32", "model.n_heads=2", "model.n_layers=2", "data.n_train=200",
           "data.n_test_per_length=2")
    run = tmp_path / "run"
    train(make_cfg(*s2s, run_dir=run))
    _refused(make_cfg, run, *s2s, "data.task=copy", what="other data")
    _refused(make_cfg, run, *s2s, "data.seed=1", what="other data")
