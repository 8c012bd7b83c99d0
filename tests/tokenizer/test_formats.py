"""Other tools' formats: HF tokenizer.json export and tiktoken ranks export give identical ids in those libraries;
GPT-2 import; the byte-to-unicode table; and the incompatibility checks that make exports refuse."""

from __future__ import annotations

import base64
import json

import pytest
import tiktoken
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.tokenizers_for_tests import (
    EOT, MAX_EXAMPLES, TIKTOKEN_PATTERNS, assigned, gpt2_tokenizer, text_strategy, trained_tokenizer,
)
from tokenizer.formats import bytes_to_unicode, rank_bpe, tiktoken_incompatibility, token_to_unicode, unicode_to_token
from tokenizer.tokenizer import Tokenizer


def test_bytes_to_unicode_matches_transformers():
    from transformers.convert_slow_tokenizer import bytes_to_unicode as hf_table

    assert bytes_to_unicode() == hf_table()
    assert token_to_unicode(b" the\n") == "ĠtheĊ"
    assert unicode_to_token("Ġthe") == b" the"
    with pytest.raises(ValueError, match="byte-to-unicode"):
        unicode_to_token(" the")


# ---------------------------------------------------------------- HF export
def _hf(tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    tok.export_hf(path)
    return tokenizers.Tokenizer.from_file(str(path))


def _hf_corpus(shared_data_or_none):
    from tokenizer.corpus import embedded_text

    texts = [embedded_text()[:100_000]]
    if shared_data_or_none is not None:
        texts.append((shared_data_or_none / "tinyshakespeare.txt").read_text(encoding="utf-8"))
    return texts


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_hf_export_trained_gives_identical_ids(tmp_path, pattern):
    tok = trained_tokenizer(pattern)
    hf = _hf(tok, tmp_path)
    assert hf.get_vocab_size() == tok.vocab_size
    for text in _hf_corpus(None) + [f"a{EOT}b<|pad|>", "  \n\n x 12345 don't"]:
        ids = tok.encode(text, allowed_special="all")
        assert hf.encode(text).ids == ids
        assert hf.decode(ids, skip_special_tokens=False) == text


def test_hf_export_gpt2_gives_identical_ids(tmp_path, shared_data):
    tok = gpt2_tokenizer(shared_data)
    hf = _hf(tok, tmp_path)
    for text in _hf_corpus(shared_data):
        assert hf.encode(text).ids == tok.encode(text, allowed_special="all")


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy().map(assigned), pattern=st.sampled_from(["gpt2", "gpt4"]))
def test_hf_export_hypothesis(tmp_path_factory, text, pattern):
    tok = trained_tokenizer(pattern)
    hf = _hf_cached(tok, tmp_path_factory)
    assert hf.encode(text).ids == tok.encode(text, allowed_special="all")


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy().map(assigned))
def test_hf_and_tiktoken_export_gpt2_hypothesis(tmp_path_factory, shared_data, text):
    tok = gpt2_tokenizer(shared_data)
    hf = _hf_cached(tok, tmp_path_factory)
    key = "tt" + tok.fingerprint()
    if key not in _HF_CACHE:
        _HF_CACHE[key] = _tiktoken(tok, tmp_path_factory.mktemp("tt"))
    ids = tok.encode(text, allowed_special="all")
    assert hf.encode(text).ids == ids
    assert _HF_CACHE[key].encode(text, allowed_special="all") == ids


_HF_CACHE: dict = {}  # fingerprint -> loaded HF / tiktoken object, so hypothesis examples reuse one export


def _hf_cached(tok, tmp_path_factory):
    key = tok.fingerprint()
    if key not in _HF_CACHE:
        _HF_CACHE[key] = _hf(tok, tmp_path_factory.mktemp("hf"))
    return _HF_CACHE[key]


def test_hf_export_refuses_duplicate_byte_strings(tmp_path):
    # (a, bc) and (ab, c) both make b"abc": HF's vocab is string -> id, so this cannot be exported
    tok = Tokenizer([(b"b", b"c"), (b"a", b"bc"), (b"a", b"b"), (b"ab", b"c")])
    with pytest.raises(ValueError, match="same byte string"):
        tok.export_hf(tmp_path / "t.json")


# ---------------------------------------------------------------- tiktoken export
def _tiktoken(tok, tmp_path):
    from tiktoken.load import load_tiktoken_bpe

    path = tmp_path / "tok.tiktoken"
    tok.export_tiktoken(path)
    ranks = load_tiktoken_bpe(str(path))
    pat_str = TIKTOKEN_PATTERNS.get(tok.pattern_name, tok.pattern)  # tiktoken's own gpt2/cl100k pattern, not ours
    return tiktoken.Encoding(name="exported", pat_str=pat_str, mergeable_ranks=ranks, special_tokens=tok.special_tokens)


def test_a_tiktoken_file_rewritten_at_the_same_path_is_read_again(tmp_path):
    """tests/conftest.py turns off tiktoken's cache, which is keyed by the path: exports land at paths that repeat
    across pytest sessions, and a cached read gave another session's tokenizer."""
    from tiktoken.load import load_tiktoken_bpe

    path = tmp_path / "tok.tiktoken"
    path.write_text("YQ== 0\n")  # b"a" -> 0
    assert load_tiktoken_bpe(str(path)) == {b"a": 0}
    path.write_text("Yg== 0\n")  # b"b" -> 0, same path
    assert load_tiktoken_bpe(str(path)) == {b"b": 0}


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_tiktoken_export_trained_gives_identical_ids(tmp_path, pattern):
    tok = trained_tokenizer(pattern)
    enc = _tiktoken(tok, tmp_path)
    assert enc.n_vocab == tok.vocab_size
    for text in _hf_corpus(None) + [f"a{EOT}b<|pad|>"]:
        assert enc.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


def test_tiktoken_export_gpt2(tmp_path, shared_data):
    tok = gpt2_tokenizer(shared_data)
    enc = _tiktoken(tok, tmp_path)
    for text in _hf_corpus(shared_data):
        assert enc.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")
    line = (tmp_path / "tok.tiktoken").read_text().splitlines()[262]
    assert line.split(" ") == [base64.b64encode(tok.id_to_token(262)).decode(), "262"]


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy().map(assigned))
def test_tiktoken_export_hypothesis(tmp_path_factory, text):
    tok = trained_tokenizer("gpt2")
    key = "tt" + tok.fingerprint()
    if key not in _HF_CACHE:
        _HF_CACHE[key] = _tiktoken(tok, tmp_path_factory.mktemp("tt"))
    assert _HF_CACHE[key].encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


def test_tiktoken_export_refuses_incompatible_tokenizers(tmp_path):
    dup = Tokenizer([(b"b", b"c"), (b"a", b"bc"), (b"a", b"b"), (b"ab", b"c")])
    assert "same byte string" in tiktoken_incompatibility(dup)
    # ids not increasing in merge order: an explicit vocab that puts merge 1 before merge 0
    vocab = {i: bytes([i]) for i in range(256)} | {257: b"ab", 256: b"abc"}
    swapped = Tokenizer([(b"a", b"b"), (b"ab", b"c")], vocab=vocab)
    assert "not ordered like merges" in tiktoken_incompatibility(swapped)
    # our merges turn "abc" into [a, bc] (no (a, bc) merge), but the rank rule joins a + bc into "abc"
    diverging = Tokenizer([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")])
    assert "under tiktoken's rank rule" in tiktoken_incompatibility(diverging)
    assert tiktoken_incompatibility(Tokenizer([(b"b", b"c"), (b"a", b"bc")])) is None
    with pytest.raises(ValueError, match="cannot export to tiktoken"):
        dup.export_tiktoken(tmp_path / "x.tiktoken")
    assert not (tmp_path / "x.tiktoken").exists()


def test_rank_bpe_is_tiktokens_rule():
    ranks = {bytes([i]): i for i in range(256)} | {b"ab": 256, b"bc": 257, b"abc": 258}
    assert rank_bpe(b"abc", ranks) == [258]
    assert rank_bpe(b"abcd", ranks) == [258, 100]


def test_gpt2_files_refuse_special_tokens_given_as_one_string(tmp_path):
    vocab = {c: b for b, c in bytes_to_unicode().items()} | {"<|endoftext|>": 256}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tok = Tokenizer.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt", special_tokens=["<|endoftext|>"])
    assert tok.special_tokens == {"<|endoftext|>": 256} and tok.vocab_size == 257
    # a bare string used to be searched for substrings ("<", "e", ...), so byte tokens turned into specials
    with pytest.raises(ValueError, match="list of strings"):
        Tokenizer.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt", special_tokens="<|endoftext|>")
