"""`python -m experiments.train tokenizer=load tokenizer.path=FILE` with a corrupt tokenizer file (the table of
tests/tokenizer/corrupt_tokenizers.py: a special token id of 2**40, bad merges, ...) is one `config error:` line
naming tokenizer.path and the file, exit 2, before any data is read and before any dir is made. The whole table runs
in the slow tier; the default tier runs a few rows of it (the check is the loader's, whose own test covers the table)."""

from __future__ import annotations

import pytest

from experiments.data import corpus as corpus_mod
from tests.tokenizer.corrupt_tokenizers import CASES, write_corrupt

from .conftest import TINY

DEFAULT_ROWS = {"special id 2**40", "merge of an unknown token", "truncated"}


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    return write_corrupt(tmp_path_factory.mktemp("corrupt"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT_ROWS else pytest.mark.slow)
                                  for n in CASES])
def test_train_refuses_a_corrupt_tokenizer_file_in_one_line_before_reading_data(corrupt, name, train_cli, tmp_path,
                                                                                monkeypatch):
    path, words = corrupt[name]

    def no_data(*args, **kwargs):
        raise AssertionError("data was read")

    monkeypatch.setattr(corpus_mod, "load_corpus", no_data)
    run = tmp_path / "outputs" / "run"
    ran = train_cli(*TINY, "tokenizer=load", f"tokenizer.path={path}", f"hydra.run.dir={run}", cwd=tmp_path)
    lines = ran.stderr.splitlines()
    assert ran.returncode == 2, ran.stderr
    assert len(lines) == 1 and lines[0].startswith(f"config error: tokenizer.path='{path}' could not be loaded: "
                                                   f"{path}: "), ran.stderr
    assert words in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run dir, no outputs/, nothing
