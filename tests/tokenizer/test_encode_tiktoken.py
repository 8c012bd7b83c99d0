"""GPT-2 loaded from vocab.json + merges.txt gives exactly tiktoken's ids (tiktoken built offline from the same
files and tiktoken's own published pattern), on real text files and hypothesis text, special-token cases included
(needs ../shared/data); and our gpt2/gpt4 patterns split like tiktoken's published r50k/cl100k patterns."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import regex
from hypothesis import example, given, settings

from tests.tokenizer.tokenizers_for_tests import (
    EOT, MAX_EXAMPLES, TIKTOKEN_PATTERNS, assigned, gpt2_tokenizer, text_strategy, tiktoken_gpt2, trained_tokenizer,
)
from tokenizer.pretokenize import splitter


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


def test_assigned_keeps_known_characters_and_replaces_new_ones():
    assert assigned("ab\u00e9\U000323b0") == "ab\u00e9\ufffd"


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy().map(assigned))
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


# ---------------------------------------------------------------- our split patterns vs tiktoken's published ones
def test_published_patterns_are_tiktokens():
    """The cl100k literal copied into tokenizers_for_tests is still the one in the installed tiktoken."""
    import tiktoken_ext.openai_public as public

    from tests.tokenizer.tokenizers_for_tests import TIKTOKEN_CL100K_PATTERN

    source = Path(public.__file__).read_text(encoding="utf-8")
    assert f'r"""{TIKTOKEN_CL100K_PATTERN}"""' in source


TRAILING = ["x  \n  ", "a\n \n", "end \n\n  ", " \r\n\t ", "hi  \n\n there  ", "12345 \n", "it's  \n "]


@pytest.mark.parametrize("name", ["gpt2", "gpt4"])
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy())
@example(text="000000000000000000\U0003d000'll")  # unassigned U+3D000: tiktoken's engine splits it otherwise
def test_our_patterns_give_tiktokens_ids(name, text):
    """Same merges, tiktoken's OWN published pattern: ids equal, so our PATTERNS[name] splits like tiktoken's
    (on characters both Unicode tables know: `assigned`)."""
    text = assigned(text)
    ours, theirs = _trained_pair(name)
    for t in (text, text + TRAILING[len(text) % len(TRAILING)]):
        assert ours.encode(t, allowed_special="all") == theirs.encode(t, allowed_special="all")
        assert ours.encode_ordinary(t) == theirs.encode_ordinary(t)
        assert splitter(name)(t) == regex.findall(TIKTOKEN_PATTERNS[name], t)


@functools.cache
def _trained_pair(name: str):
    import tiktoken

    tok = trained_tokenizer(name)
    ranks = {tok.id_to_token(i): i for i in range(tok.vocab_size) if i not in set(tok.special_tokens.values())}
    return tok, tiktoken.Encoding(name=f"ref-{name}", pat_str=TIKTOKEN_PATTERNS[name], mergeable_ranks=ranks,
                                  special_tokens=tok.special_tokens)
