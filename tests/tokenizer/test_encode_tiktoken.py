"""GPT-2 loaded from vocab.json + merges.txt gives exactly tiktoken's ids (tiktoken built offline from the same
files), on real text files and hypothesis text, special-token cases included. Needs ../shared/data."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.tokenizer.tokenizers_for_tests import EOT, MAX_EXAMPLES, gpt2_tokenizer, text_strategy, tiktoken_gpt2


@pytest.fixture(scope="module")
def pair(shared_data):
    return gpt2_tokenizer(shared_data), tiktoken_gpt2(shared_data)


def test_gpt2_layout(pair):
    ours, theirs = pair
    assert ours.vocab_size == theirs.n_vocab == 50257
    assert ours.special_tokens == {EOT: 50256}
    assert ours.pattern_name == "gpt2"
    for i in (0, 1, 255, 256, 1000, 50255):
        assert ours.id_to_token(i) == theirs.decode_single_token_bytes(i)


@pytest.mark.parametrize("name", ["tinyshakespeare.txt", "cs336/address.txt", "cs336/german.txt", "cs336/tinystories_sample.txt",
                                  "cs336/special_token_double_newlines_non_whitespace.txt", "cs336/special_token_trailing_newlines.txt",
                                  "cs336/corpus.en"])
def test_files_match_tiktoken(pair, shared_data, name):
    ours, theirs = pair
    path = shared_data / name
    if not path.exists():
        pytest.skip(f"{path} not present")
    text = path.read_text(encoding="utf-8")
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert ours.decode(ours.encode_ordinary(text)) == text


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy())
def test_hypothesis_text_matches_tiktoken(pair, text):
    ours, theirs = pair
    assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
    assert ours.encode(text, disallowed_special=()) == theirs.encode(text, disallowed_special=())
    if EOT in text:
        with pytest.raises(ValueError, match="special token"):
            ours.encode(text)
        with pytest.raises(ValueError):
            theirs.encode(text)
    else:
        assert ours.encode(text) == theirs.encode(text)


def test_lone_surrogates_like_tiktoken(pair):
    ours, theirs = pair
    for text in ["a\ud800b", "\udfff", "x \ud83d\ude42 \ud83d end"]:
        assert ours.encode(text) == theirs.encode(text)
    assert ours.decode(ours.encode("a\ud800b")) == "a\ufffdb"


def test_special_token_cases(pair):
    ours, theirs = pair
    for text in [EOT, EOT + EOT, "a" + EOT + "b", "<|endoftext|", "<|endoftext", f" {EOT}\n\n{EOT} hi"]:
        assert ours.encode(text, allowed_special="all") == theirs.encode(text, allowed_special="all")
        assert ours.encode(text, allowed_special={EOT}) == theirs.encode(text, allowed_special={EOT})
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert ours.encode(EOT, allowed_special="all") == [50256]
    with pytest.raises(ValueError, match=r"text contains special token '<\|endoftext\|>'"):
        ours.encode(f"x{EOT}")
