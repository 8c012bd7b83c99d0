"""`bpe` output safety: encode/convert never overwrite an input (any spelling, symlinks, the sidecar), refuse an
existing output without --force, decode refuses another tokenizer's token file, a failed write names the user's
path (never a temp file), and the property: a writing command changes no file but the outputs it was forced to
replace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tokenizer.tokenizers_for_tests import EOT
from tokenizer.cli import main
from tokenizer.tokenfile import read_tokens
from tokenizer.train import train_bpe_from_iterator

TEXT = "Hello world, hello tokens. " * 20 + EOT + " the end\n"


@pytest.fixture(scope="module")
def toks(tmp_path_factory) -> tuple[Path, Path]:
    """Two different tokenizer dirs."""
    base = tmp_path_factory.mktemp("toks")
    dirs = []
    for name, vocab in (("a", 265), ("b", 270)):
        d = base / name
        d.mkdir()
        train_bpe_from_iterator([TEXT], vocab, special_tokens=[EOT], workers=1).save(d / "tokenizer.json")
        dirs.append(d)
    return dirs[0], dirs[1]


def run_err(capsys, argv) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("bpe: error: "), err
    return lines[0]


def snapshot(*dirs: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for d in dirs for p in sorted(d.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------- encode: output == input, existing output
def test_encode_refuses_its_own_input_in_every_spelling(toks, tmp_path, capsys):
    tok, _ = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias.txt").symlink_to(src)
    os.link(src, tmp_path / "hard.txt")
    before = snapshot(tmp_path, tok)
    spellings = [str(src), str(tmp_path / "sub" / ".." / "in.txt"), str(tmp_path / "alias.txt"), str(tmp_path / "hard.txt")]
    for out in spellings:
        for force in ([], ["--force"]):
            line = run_err(capsys, ["encode", "--tokenizer", str(tok), str(src), "--out", out, *force])
            assert "is the input" in line and out in line
    # the sidecar of --out would be the input: in.txt -> --out in -> sidecar in.json
    side_src = tmp_path / "x.bin.json"
    side_src.write_text("not a sidecar, a text input")
    before = snapshot(tmp_path, tok)
    line = run_err(capsys, ["encode", "--tokenizer", str(tok), str(side_src), "--out", str(tmp_path / "x.bin"), "--force"])
    assert "its sidecar" in line
    # the tokenizer file itself is an input too
    line = run_err(capsys, ["encode", "--tokenizer", str(tok), str(src), "--out", str(tok / "tokenizer.json"), "--force"])
    assert "is the input" in line
    assert snapshot(tmp_path, tok) == before


def test_encode_refuses_existing_output_or_sidecar_without_force(toks, tmp_path, capsys):
    tok, _ = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    out = tmp_path / "o.bin"
    out.write_bytes(b"old ids")
    assert "o.bin already exists; pass --force" in run_err(capsys, ["encode", "--tokenizer", str(tok), str(src), "--out", str(out)])
    assert out.read_bytes() == b"old ids"
    out.unlink()
    (tmp_path / "o.bin.json").write_text("{}")
    assert "o.bin.json already exists; pass --force" in run_err(capsys, ["encode", "--tokenizer", str(tok), str(src), "--out", str(out)])
    assert not out.exists()
    assert main(["encode", "--tokenizer", str(tok), str(src), "--out", str(out), "--force"]) == 0
    ids, meta = read_tokens(out)
    assert meta["n_bytes"] == len(TEXT.encode("utf-8")) and meta["count"] == len(ids) > 0


# ---------------------------------------------------------------- decode: another tokenizer's file, corrupt sidecar
def test_decode_refuses_another_tokenizers_token_file(toks, tmp_path, capsys):
    a, b = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    out = tmp_path / "a.bin"
    assert main(["encode", "--tokenizer", str(a), str(src), "--out", str(out)]) == 0
    capsys.readouterr()
    line = run_err(capsys, ["decode", "--tokenizer", str(b), str(out)])
    assert "encoded with another tokenizer" in line and str(out) in line
    assert main(["decode", "--tokenizer", str(a), str(out)]) == 0
    assert capsys.readouterr().out == TEXT


@pytest.mark.parametrize("sidecar", ["{not json", '{"dtype": "uint16", "count": 999}', "[]", ""])
def test_decode_corrupt_or_truncated_sidecar_one_line(toks, tmp_path, capsys, sidecar):
    a, _ = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    out = tmp_path / "a.bin"
    assert main(["encode", "--tokenizer", str(a), str(src), "--out", str(out)]) == 0
    capsys.readouterr()
    (tmp_path / "a.bin.json").write_text(sidecar)
    assert str(out) in run_err(capsys, ["decode", "--tokenizer", str(a), str(out)])


def test_decode_truncated_bin_one_line(toks, tmp_path, capsys):
    a, _ = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    out = tmp_path / "a.bin"
    assert main(["encode", "--tokenizer", str(a), str(src), "--out", str(out)]) == 0
    capsys.readouterr()
    out.write_bytes(out.read_bytes()[:-3])
    assert "truncated" in run_err(capsys, ["decode", "--tokenizer", str(a), str(out)])


# ---------------------------------------------------------------- convert
def test_convert_refuses_its_tokenizer_file_in_any_spelling(toks, tmp_path, capsys):
    a, _ = toks
    named = tmp_path / "my_tok.json"  # a tokenizer file not called tokenizer.json
    named.write_bytes((a / "tokenizer.json").read_bytes())
    (tmp_path / "alias.json").symlink_to(named)
    before = snapshot(tmp_path, a)
    for out in (named, tmp_path / "alias.json"):
        assert "is the input" in run_err(capsys, ["convert", str(named), "--to", "hf", "--out", str(out), "--force"])
    assert snapshot(tmp_path, a) == before


# ---------------------------------------------------------------- write errors name the user's path
def _unwritable_targets(tmp_path: Path) -> list[Path]:
    blocker = tmp_path / "plain_file"
    blocker.write_text("I am a file, not a directory")
    targets = [blocker / "sub" / "out"]  # parent is a regular file: fails even as root
    if os.geteuid() != 0:
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        targets.append(ro / "out")
    return targets


@pytest.mark.parametrize("command", ["train", "encode", "convert-hf", "convert-tiktoken"])
def test_write_errors_name_the_users_path_not_a_temp_file(toks, tmp_path, capsys, command):
    a, _ = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    for target in _unwritable_targets(tmp_path):
        argv = {
            "train": ["train", str(src), "--vocab-size", "260", "--out", str(target), "--workers", "1"],
            "encode": ["encode", "--tokenizer", str(a), str(src), "--out", str(target)],
            "convert-hf": ["convert", str(a), "--to", "hf", "--out", str(target)],
            "convert-tiktoken": ["convert", str(a), "--to", "tiktoken", "--out", str(target)],
        }[command]
        line = run_err(capsys, argv)
        expected = target / "tokenizer.json" if command == "train" else target
        assert f"cannot write {expected}:" in line, line
        assert ".tmp" not in line
    if (tmp_path / "ro").exists():
        (tmp_path / "ro").chmod(0o700)  # let tmp_path be cleaned up


def test_disk_error_while_writing_temp_file_names_the_output(toks, tmp_path, capsys, monkeypatch):
    """An OSError raised while the temp file is being written (disk full) names --out, not `.o.bin.XXXX.tmp`."""
    import tokenizer.tokenfile as tokenfile

    a, _ = toks
    src = tmp_path / "in.txt"
    src.write_text(TEXT)
    real_open = open

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, b):
            raise OSError(28, "No space left on device", os.readlink(f"/proc/self/fd/{self.f.fileno()}"))  # the temp name

    # the ids go to the temp file through tokenfile's own open(..., "wb")
    monkeypatch.setattr(tokenfile, "open", lambda path, mode="r", *a, **k: Full(real_open(path, mode, *a, **k))
                        if "w" in mode else real_open(path, mode, *a, **k), raising=False)
    # array.tofile writes through .write
    line = run_err(capsys, ["encode", "--tokenizer", str(a), str(src), "--out", str(tmp_path / "o.bin")])
    assert f"cannot write {tmp_path / 'o.bin'}: No space left on device" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # no temp file left behind


# ---------------------------------------------------------------- the invariant, as a property
_NAMES = st.sampled_from(["out", "o.bin", "o.bin.json", "tokenizer.json", "x.txt", "hf.json", "t.tiktoken", "in.txt"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    existing=st.lists(_NAMES, unique=True, max_size=4),
    command=st.sampled_from(["train", "encode", "convert-hf", "convert-tiktoken"]),
    out_name=_NAMES,
    force=st.booleans(),
)
def test_property_writing_commands_change_only_forced_outputs(toks, tmp_path_factory, capsys, existing, command, out_name, force):
    a, _ = toks
    d = tmp_path_factory.mktemp("inv")
    src = d / "in.txt"
    src.write_text(TEXT)
    for name in existing:
        if name != "in.txt":
            (d / name).write_bytes(f"precious {name}".encode())
    tok_dir = d / "tok"
    tok_dir.mkdir()
    (tok_dir / "tokenizer.json").write_bytes((a / "tokenizer.json").read_bytes())
    out = d / out_name
    argv = {
        "train": ["train", str(src), "--vocab-size", "260", "--out", str(out), "--workers", "1"],
        "encode": ["encode", "--tokenizer", str(tok_dir), str(src), "--out", str(out)],
        "convert-hf": ["convert", str(tok_dir), "--to", "hf", "--out", str(out)],
        "convert-tiktoken": ["convert", str(tok_dir), "--to", "tiktoken", "--out", str(out)],
    }[command] + (["--force"] if force else [])
    before = snapshot(d)
    code = main(argv)
    capsys.readouterr()
    assert code in (0, 2)
    may_change = set()
    if code == 0:
        outputs = {"train": [out / "tokenizer.json"], "encode": [out, Path(f"{out}.json")]}.get(command, [out])
        may_change = {p for p in outputs if force or p not in before}
    for path, content in before.items():
        if path not in may_change:
            assert path.read_bytes() == content, (argv, path)
    leftovers = [p.name for p in d.rglob(".*")]
    assert not leftovers, leftovers
    assert all(p in before or p in may_change for p in snapshot(d)), (argv, sorted(snapshot(d)))
