"""The own JSON format: save -> load keeps ids and fingerprint; bad files give a clear ValueError naming the file."""

from __future__ import annotations

import json

import pytest

from tests.tokenizer.tokenizers_for_tests import EOT, gpt2_tokenizer, hand_tokenizer, trained_tokenizer
from tokenizer.corpus import embedded_text
from tokenizer.serialize import FORMAT_VERSION
from tokenizer.tokenizer import Tokenizer


@pytest.mark.parametrize("make", [hand_tokenizer, lambda: trained_tokenizer("gpt4")])
def test_save_load_keeps_ids_and_fingerprint(tmp_path, make):
    tok = make()
    path = tmp_path / "tok.json"
    tok.save(path)
    back = Tokenizer.load(path)
    text = embedded_text()[:20000] + f"{EOT} tail<|pad|>"
    assert back.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    assert back.fingerprint() == tok.fingerprint()
    assert back == tok
    assert (back.merges, back.vocab, back.special_tokens, back.pattern) == (tok.merges, tok.vocab, tok.special_tokens, tok.pattern)
    d = json.loads(path.read_text(encoding="utf-8"))
    assert d["format"] == "archlab-bpe" and d["version"] == FORMAT_VERSION and d["vocab"] is None


def test_save_load_gpt2_keeps_its_vocab(tmp_path, shared_data):
    tok = gpt2_tokenizer(shared_data)
    tok.save(tmp_path)  # a directory -> tokenizer.json inside
    back = Tokenizer.load(tmp_path)
    assert back.vocab == tok.vocab and back.fingerprint() == tok.fingerprint()
    assert back.encode("Hello world<|endoftext|>", allowed_special="all") == [15496, 995, 50256]


def test_fingerprint_tracks_content():
    a = Tokenizer([(b"a", b"b")], special_tokens=[EOT])
    assert a.fingerprint() == Tokenizer([(b"a", b"b")], special_tokens=[EOT], pattern=a.pattern).fingerprint()
    others = [Tokenizer([(b"a", b"b")]), Tokenizer([(b"b", b"a")], special_tokens=[EOT]),
              Tokenizer([(b"a", b"b")], special_tokens=[EOT], pattern="gpt4")]
    assert len({a.fingerprint()} | {o.fingerprint() for o in others}) == 4
    assert len(a.fingerprint()) == 64


def _bad_files(good: str) -> dict[str, str]:
    d = json.loads(good)
    return {
        "truncated": good[: len(good) // 2],
        "empty": "",
        "not json": "merges: a b\n",
        "wrong version": json.dumps({**d, "version": 99}),
        "no version": json.dumps({k: v for k, v in d.items() if k != "version"}),
        "other format": json.dumps({**d, "format": "something"}),
        "hf file": json.dumps({"model": {}, "added_tokens": []}),
        "list": "[1, 2]",
        "bad merge": json.dumps({**d, "merges": ["a b c"]}),
        "merge not in table": json.dumps({**d, "merges": ["a  b"]}),
        "merges missing": json.dumps({k: v for k, v in d.items() if k != "merges"}),
        "bad special id": json.dumps({**d, "special_tokens": {EOT: -1}}),
        "bad pattern": json.dumps({**d, "pattern": "gpt9"}),
        "bad vocab id": json.dumps({**d, "vocab": {"x": "a"}}),
        "non-ascii digit vocab id": json.dumps({**d, "vocab": {"\u00b2": "a"}}),  # "²".isdigit() is True
    }


def test_corrupt_files_raise_clear_value_errors(tmp_path):
    good = tmp_path / "good.json"
    hand_tokenizer().save(good)
    expected = {
        "truncated": "corrupt or truncated", "empty": "corrupt or truncated", "not json": "corrupt or truncated",
        "wrong version": "unsupported tokenizer file version 99", "no version": "unsupported tokenizer file version None",
        "other format": "not an archlab tokenizer file", "hf file": "Hugging Face", "list": "expected a JSON object",
        "bad merge": "not two tokens", "merge not in table": "not two tokens", "merges missing": "'merges'",
        "bad special id": "invalid id", "bad pattern": "unknown pattern", "bad vocab id": "not a non-negative integer",
        "non-ascii digit vocab id": "not a non-negative integer",
    }
    for name, content in _bad_files(good.read_text(encoding="utf-8")).items():
        path = tmp_path / f"{name}.json"
        path.write_text(content, encoding="utf-8")
        with pytest.raises(ValueError) as info:
            Tokenizer.load(path)
        assert str(path) in str(info.value), name
        assert expected[name] in str(info.value), (name, str(info.value))
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x80\x81 not utf-8")
    with pytest.raises(ValueError, match="not UTF-8"):
        Tokenizer.load(binary)
    with pytest.raises(ValueError, match="no such tokenizer file"):
        Tokenizer.load(tmp_path / "missing.json")


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    tok = hand_tokenizer()
    tok.save(tmp_path / "t.json")
    tok.save(tmp_path / "t.json")  # overwrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]
