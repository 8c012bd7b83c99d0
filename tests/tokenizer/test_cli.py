"""The `bpe` CLI: each subcommand end to end in-process (`main([...])` + capsys), every bad-input case gives exactly
one `bpe: error:` line on stderr and exit 2, and `python -m tokenizer` in a subprocess never shows a traceback."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.tokenizer.tokenizers_for_tests import EOT
from tokenizer import cli
from tokenizer.cli import main
from tokenizer.corpus import embedded_documents
from tokenizer.tokenizer import Tokenizer
from tokenizer.train import train_bpe

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    docs = embedded_documents()
    (d / "a.txt").write_text(EOT.join(docs[:30]), encoding="utf-8")
    (d / "b.txt").write_text(EOT.join(docs[30:45]), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def trained_dir(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tok") / "tok"
    assert main(["train", str(corpus / "a.txt"), "--vocab-size", "400", "--out", str(out), "--special-token", EOT, "--workers", "1"]) == 0
    return out


def run_err(capsys, argv) -> str:
    """Run main(argv); assert exit 2 and exactly one `bpe: error:` line on stderr; return that line."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("bpe: error: "), err
    return lines[0]


# ---------------------------------------------------------------- train
def test_train_writes_tokenizer_and_stats(trained_dir, corpus, capsys):
    tok = Tokenizer.load(trained_dir / "tokenizer.json")
    assert tok.vocab_size == 400 and tok.special_tokens == {EOT: 399}
    direct = train_bpe([corpus / "a.txt"], 400, special_tokens=[EOT], workers=1)
    assert tok.merges == direct.merges and tok.fingerprint() == direct.fingerprint()


def test_train_stats_and_globs(corpus, tmp_path, capsys):
    out = tmp_path / "g"
    assert main(["train", str(corpus / "*.txt"), "--vocab-size", "300", "--out", str(out), "--pattern", "gpt4", "--workers", "1"]) == 0
    stdout = capsys.readouterr().out
    assert "2 files" in stdout and "vocab_size 300" in stdout and "bytes/token" in stdout and "pattern gpt4" in stdout
    tok = Tokenizer.load(out)
    assert tok.pattern_name == "gpt4"
    assert tok.merges == train_bpe(sorted(corpus.glob("*.txt")), 300, pattern="gpt4", workers=1).merges
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"]  # no temp dirs left behind


def test_train_error_cases(corpus, tmp_path, capsys, monkeypatch):
    a = str(corpus / "a.txt")
    (tmp_path / "empty.txt").write_text("")
    out = str(tmp_path / "out")
    cases = {
        "no such file": ["train", str(tmp_path / "missing.txt"), "--vocab-size", "300", "--out", out],
        "is a directory": ["train", str(corpus), "--vocab-size", "300", "--out", out],
        "no files match": ["train", str(tmp_path / "*.nothing"), "--vocab-size", "300", "--out", out],
        "empty corpus": ["train", str(tmp_path / "empty.txt"), "--vocab-size", "300", "--out", out],
        "too small": ["train", a, "--vocab-size", "256", "--special-token", EOT, "--out", out],
        "unknown pattern": ["train", a, "--vocab-size", "300", "--pattern", "gpt3", "--out", out],
        "invalid split pattern": ["train", a, "--vocab-size", "300", "--pattern", "(unclosed", "--out", out],
        "nothing to train on": ["train", "--vocab-size", "300", "--out", out],
        "expected an integer, got 'many'": ["train", a, "--vocab-size", "many", "--out", out],
        "required: --out": ["train", a, "--vocab-size", "300"],
        "--min-frequency: must be >= 0": ["train", a, "--vocab-size", "300", "--out", out, "--min-frequency", "-1"],
    }
    for expected, argv in cases.items():
        assert expected in run_err(capsys, argv), expected
    assert not Path(out).exists()
    monkeypatch.setattr(cli.os, "access", lambda *a, **k: False)
    assert "permission denied" in run_err(capsys, ["train", a, "--vocab-size", "300", "--out", out])


def test_train_refuses_existing_output_unless_forced(corpus, tmp_path, capsys):
    out = tmp_path / "existing"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    argv = ["train", str(corpus / "b.txt"), "--vocab-size", "280", "--out", str(out), "--workers", "1"]
    # an existing dir without tokenizer.json: tokenizer.json is added beside the other files
    assert main(argv) == 0
    first = (out / "tokenizer.json").read_bytes()
    assert "tokenizer.json already exists; pass --force" in run_err(capsys, argv)
    # a forced run that fails (bad pattern) leaves everything alone
    run_err(capsys, argv + ["--force", "--pattern", "nope"])
    assert (out / "precious.txt").read_text() == "keep me" and (out / "tokenizer.json").read_bytes() == first
    assert main(argv + ["--force", "--vocab-size", "290"]) == 0  # replaces tokenizer.json only, never the rest
    assert sorted(p.name for p in out.iterdir()) == ["precious.txt", "tokenizer.json"]
    assert (out / "precious.txt").read_text() == "keep me" and (out / "tokenizer.json").read_bytes() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]


def test_train_force_never_deletes_inputs(tmp_path, capsys):
    """`bpe train 'prec/*.txt' --out prec --force` used to replace the whole dir, inputs included."""
    prec = tmp_path / "prec"
    prec.mkdir()
    (prec / "a.txt").write_text("some precious text " * 50)
    (prec / "sub").mkdir()
    (prec / "sub" / "b.txt").write_text("more text " * 50)
    for inputs, out in [([f"{prec}/*.txt"], prec), ([str(prec / "sub" / "b.txt")], prec), ([str(prec / "a.txt")], prec / "a.txt")]:
        line = run_err(capsys, ["train", *inputs, "--vocab-size", "260", "--out", str(out), "--force", "--workers", "1"])
        assert str(out) in line
    link = tmp_path / "link"
    link.symlink_to(prec, target_is_directory=True)  # the same dir under another name
    assert "holds the input" in run_err(capsys, ["train", str(link / "a.txt"), "--vocab-size", "260", "--out", str(prec), "--force"])
    assert sorted(p.name for p in prec.iterdir()) == ["a.txt", "sub"]
    assert (prec / "a.txt").read_text() == "some precious text " * 50


def test_train_out_holding_the_dataset_refused(tmp_path, capsys):
    data = tmp_path / "d" / "d.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps({"text": "hello world"}) + "\n")
    line = run_err(capsys, ["train", "--dataset", str(data), "--vocab-size", "260", "--out", str(data.parent), "--force"])
    assert "holds the input" in line and data.read_text() == json.dumps({"text": "hello world"}) + "\n"


def test_train_from_local_dataset(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    docs = embedded_documents()[:10]
    data.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)), encoding="utf-8")
    out = tmp_path / "dtok"
    assert main(["train", "--dataset", str(data), "--text-column", "text", "--vocab-size", "300", "--out", str(out), "--workers", "1"]) == 0
    assert "dataset" in capsys.readouterr().out
    from tokenizer.train import train_bpe_from_iterator

    assert Tokenizer.load(out).merges == train_bpe_from_iterator(docs, 300, workers=1).merges
    assert "no column 'body'" in run_err(capsys, ["train", "--dataset", str(data), "--text-column", "body", "--vocab-size", "300",
                                                  "--out", str(tmp_path / "x")])


def test_train_hub_dataset_offline_fails_fast(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    line = run_err(capsys, ["train", "--dataset", "someone/some-corpus", "--vocab-size", "300", "--out", str(tmp_path / "x")])
    assert "dataset 'someone/some-corpus' is not a local path and the Hugging Face hub is off" in line


# ---------------------------------------------------------------- encode / decode
def test_encode_decode_roundtrip(trained_dir, corpus, tmp_path, capsys):
    tok = Tokenizer.load(trained_dir)
    src = corpus / "b.txt"
    text = src.read_text(encoding="utf-8")
    assert main(["encode", "--tokenizer", str(trained_dir), str(src)]) == 0
    printed = capsys.readouterr().out
    assert [int(x) for x in printed.split()] == tok.encode(text, allowed_special="all")
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text(printed)
    assert main(["decode", "--tokenizer", str(trained_dir / "tokenizer.json"), str(ids_file)]) == 0
    assert capsys.readouterr().out == text
    # --ordinary: the separators are plain text
    assert main(["encode", "--tokenizer", str(trained_dir), str(src), "--ordinary"]) == 0
    assert [int(x) for x in capsys.readouterr().out.split()] == tok.encode_ordinary(text)


def test_encode_to_bin_and_decode_bin(trained_dir, corpus, tmp_path, capsys):
    tok = Tokenizer.load(trained_dir)
    src = corpus / "a.txt"
    out = tmp_path / "a.bin"
    assert main(["encode", "--tokenizer", str(trained_dir), str(src), "--out", str(out)]) == 0
    expected = tok.encode(src.read_text(encoding="utf-8"), allowed_special="all")
    assert np.memmap(out, dtype=np.uint16, mode="r").tolist() == expected
    meta = json.loads((tmp_path / "a.bin.json").read_text())
    assert meta["count"] == len(expected) and meta["tokenizer_fingerprint"] == tok.fingerprint()
    capsys.readouterr()
    assert main(["decode", "--tokenizer", str(trained_dir), str(out)]) == 0
    assert capsys.readouterr().out == src.read_text(encoding="utf-8")


def test_encode_stdin(trained_dir, capsys, monkeypatch):
    tok = Tokenizer.load(trained_dir)
    text = "héllo\r\nworld 🙂 " + EOT
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    assert main(["encode", "--tokenizer", str(trained_dir), "-"]) == 0
    assert [int(x) for x in capsys.readouterr().out.split()] == tok.encode(text, allowed_special="all")


def test_encode_decode_errors(trained_dir, corpus, tmp_path, capsys):
    good = trained_dir / "tokenizer.json"
    truncated = tmp_path / "trunc" / "tokenizer.json"
    truncated.parent.mkdir()
    truncated.write_text(good.read_text()[:100])
    wrong_version = tmp_path / "v.json"
    wrong_version.write_text(json.dumps({**json.loads(good.read_text()), "version": 7}))
    src = str(corpus / "b.txt")
    bad_ids = tmp_path / "bad_ids.txt"
    bad_ids.write_text("1 2 x3")
    big_id = tmp_path / "big.txt"
    big_id.write_text("1 99999")
    bad_sidecar_bin = tmp_path / "ids.bin"
    bad_sidecar_bin.write_bytes(b"\x01\x00\x02\x00")
    (tmp_path / "ids.bin.json").write_text(json.dumps({"count": 2}))  # no dtype
    cases = {
        "corrupt or truncated": ["encode", "--tokenizer", str(truncated.parent), src],
        "unsupported tokenizer file version 7": ["encode", "--tokenizer", str(wrong_version), src],
        "no such tokenizer": ["encode", "--tokenizer", str(tmp_path / "nope"), src],
        "holds no tokenizer.json": ["encode", "--tokenizer", str(tmp_path), src],
        "no such file": ["encode", "--tokenizer", str(trained_dir), str(tmp_path / "missing.txt")],
        "is a directory": ["encode", "--tokenizer", str(trained_dir), str(corpus)],
        "not a token id: 'x3'": ["decode", "--tokenizer", str(trained_dir), str(bad_ids)],
        "unknown token id 99999": ["decode", "--tokenizer", str(trained_dir), str(big_id)],
        "not a token-file sidecar": ["decode", "--tokenizer", str(trained_dir), str(bad_sidecar_bin)],
        "invalid choice": ["convert", str(trained_dir), "--to", "sentencepiece"],
    }
    for expected, argv in cases.items():
        assert expected in run_err(capsys, argv), expected


# ---------------------------------------------------------------- info / convert
def test_info(trained_dir, corpus, capsys):
    assert main(["info", str(trained_dir), "--sample", str(corpus / "b.txt"), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "vocab_size  400 (256 bytes + 143 merges + 1 special)" in out
    assert "'<|endoftext|>'=399" in out and "pattern     gpt2" in out
    tok = Tokenizer.load(trained_dir)
    text = (corpus / "b.txt").read_text(encoding="utf-8")
    bpt = len(text.encode()) / len(tok.encode_ordinary(text))
    assert f"bytes/token {bpt:.3f}" in out
    longest = max(len(b) for i, b in tok.vocab.items() if i != 399)
    assert f"{longest:>3} bytes" in out
    assert main(["info", str(trained_dir)]) == 0  # default sample: the embedded corpus
    assert "embedded corpus" in capsys.readouterr().out


def test_convert_hf_and_tiktoken(trained_dir, tmp_path, capsys):
    import tiktoken
    import tokenizers
    from tiktoken.load import load_tiktoken_bpe

    tok = Tokenizer.load(trained_dir)
    text = "Convert me, please: 12345 <|endoftext|> done"
    hf_path = tmp_path / "hf.json"
    assert main(["convert", str(trained_dir), "--to", "hf", "--out", str(hf_path)]) == 0
    assert tokenizers.Tokenizer.from_file(str(hf_path)).encode(text).ids == tok.encode(text, allowed_special="all")
    tt_path = tmp_path / "t.tiktoken"
    assert main(["convert", str(trained_dir), "--to", "tiktoken", "--out", str(tt_path)]) == 0
    enc = tiktoken.Encoding(name="t", pat_str=tok.pattern, mergeable_ranks=load_tiktoken_bpe(str(tt_path)), special_tokens=tok.special_tokens)
    assert enc.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    capsys.readouterr()
    assert "already exists; pass --force" in run_err(capsys, ["convert", str(trained_dir), "--to", "hf", "--out", str(hf_path)])
    assert "is the input" in run_err(capsys, ["convert", str(trained_dir), "--to", "hf", "--out", str(trained_dir / "tokenizer.json"), "--force"])
    assert main(["convert", str(trained_dir), "--to", "hf", "--out", str(hf_path), "--force"]) == 0


# ---------------------------------------------------------------- process-level behaviour
def test_help_and_interrupt(capsys, monkeypatch):
    assert main(["--help"]) == 0
    assert "train" in capsys.readouterr().out

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_info", interrupted)
    assert main(["info", "x"]) == 130
    assert capsys.readouterr().err.strip() == "bpe: interrupted"


def test_python_dash_m_subprocess_has_no_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for argv in (["train", str(tmp_path / "missing.txt"), "--vocab-size", "300", "--out", str(tmp_path / "o")],
                 ["encode", "--tokenizer", str(tmp_path), "x.txt"]):
        proc = subprocess.run([sys.executable, "-m", "tokenizer", *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("bpe: error: "), proc.stderr


STDOUT_COMMANDS = {  # every subcommand that writes to stdout -> its argv (the tokenizer dir is {tok}, scratch {tmp})
    "encode": ["encode", "--tokenizer", "{tok}", "{tmp}/text.txt"],
    "decode": ["decode", "--tokenizer", "{tok}", "{tmp}/ids.txt"],
    "info": ["info", "{tok}", "--sample", "{tmp}/text.txt"],
    "convert": ["convert", "{tok}", "--to", "tiktoken", "--out", "{tmp}/tok.tiktoken"],
    "train": ["train", "{tmp}/text.txt", "--vocab-size", "260", "--out", "{tmp}/trained", "--workers", "1"],
}


def _bpe_to(stdout, command: str, trained_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    (tmp_path / "text.txt").write_text("hello world, hello there\n" * 20, encoding="utf-8")
    (tmp_path / "ids.txt").write_text("104 101 108 108 111\n")
    argv = [a.format(tok=trained_dir, tmp=tmp_path) for a in STDOUT_COMMANDS[command]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tokenizer", *argv], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          env=env, cwd=tmp_path, timeout=120)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("command", sorted(STDOUT_COMMANDS))
def test_stdout_that_cannot_be_written_is_one_line_naming_stdout(trained_dir, tmp_path, command):
    """`bpe ... > /dev/full`: one line saying stdout could not be written and why, exit 2, no traceback."""
    with open("/dev/full", "w") as full:
        proc = _bpe_to(full, command, trained_dir, tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["bpe: error: cannot write stdout (/dev/full): No space left on device"], proc.stderr


@pytest.mark.parametrize("command", sorted(STDOUT_COMMANDS))
def test_stdout_into_a_closed_pipe_ends_quietly(trained_dir, tmp_path, command):
    """`bpe ... | head -c 0`: the reader went away; nothing on stderr, exit 0."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as pipe:
        proc = _bpe_to(pipe, command, trained_dir, tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
