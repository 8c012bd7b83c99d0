"""Every corrupt tokenizer file (tests/tokenizer/corrupt_tokenizers.py: ids out of range or not integers, clashing
ids, bad merges, bad patterns, wrong fields, format or encoding, truncated, nested too deep) is refused by the loader
with a TokenizerFileError whose one line names the file and says what is wrong, and `bpe encode` (to a file or stdout),
`decode` and `info` turn it into one `bpe: error:` line, exit 2, nothing written and nothing on stdout."""

from __future__ import annotations

import pytest

from tests.tokenizer.corrupt_tokenizers import CASES, write_corrupt
from tokenizer.cli import main as bpe
from tokenizer.serialize import TokenizerFileError
from tokenizer.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory):
    return write_corrupt(tmp_path_factory.mktemp("corrupt"))


@pytest.mark.parametrize("name", CASES)
def test_the_loader_refuses_it_in_one_line_naming_the_file(corrupt, name):
    path, words = corrupt[name]
    with pytest.raises(TokenizerFileError) as e:
        Tokenizer.load(path)
    msg = str(e.value)
    assert isinstance(e.value, ValueError)  # callers that catch ValueError keep working
    assert msg.startswith(f"{path}: ") and "\n" not in msg and words in msg, msg
    assert len(msg) < 400, msg  # one readable line, even for a 5000-digit id


@pytest.mark.parametrize("command", ["encode --out", "encode", "decode", "info"])
@pytest.mark.parametrize("name", CASES)
def test_bpe_refuses_it_in_one_line_and_writes_nothing(corrupt, name, command, tmp_path, capsys):
    path, words = corrupt[name]
    text = tmp_path / "in.txt"
    text.write_text("hello there<|endoftext|>", encoding="utf-8")
    ids = tmp_path / "ids.txt"
    ids.write_text("104 101 263\n", encoding="utf-8")
    out = tmp_path / "ids.bin"
    argv = {"encode --out": ["encode", "--tokenizer", str(path), str(text), "--out", str(out)],
            "encode": ["encode", "--tokenizer", str(path), str(text)],
            "decode": ["decode", "--tokenizer", str(path), str(ids)],
            "info": ["info", str(path)]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert bpe(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bpe: error: {path}: ") and words in lines[0], captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no ids, no sidecar, no temp file
