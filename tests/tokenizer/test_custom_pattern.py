"""A custom split pattern that does not match every character never loses text: the text between its matches
becomes pre-tokens too, for the trainer and the encoder alike, on the whole-text, streaming and file paths."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tokenizer.tokenizers_for_tests import EOT, text_strategy
from tokenizer.pretoken_counts import count_texts
from tokenizer.pretokenize import split_special, splitter
from tokenizer.tokenfile import read_tokens
from tokenizer.train import train_bpe_from_iterator

PATTERNS = [r"\w+", r"[a-z]+", r" ?\p{L}+", r"\d", r"(a)b|(\s)+", r"\w*", r"(?<=a)b"]
SPECIALS = [EOT, "<|pad|>"]
pytestmark = pytest.mark.filterwarnings("ignore:stopped at vocab size")
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("pattern", PATTERNS)
@SETTINGS
@given(text=text_strategy())
def test_splitter_keeps_every_character_and_every_match(pattern, text):
    pieces = splitter(pattern)(text)
    assert "".join(pieces) == text and all(pieces)
    # every non-empty whole match of the plain regex is one of the pieces, in order, at its place
    want = [m.span() for m in regex.finditer(pattern, text) if m.end() > m.start()]
    spans, pos = [], 0
    for p in pieces:
        spans.append((pos, pos + len(p)))
        pos += len(p)
    assert set(want) <= set(spans)


@pytest.mark.parametrize("pattern", PATTERNS)
@SETTINGS
@given(text=text_strategy(), cut=st.integers(1, 7))
def test_trained_with_custom_pattern_roundtrips(pattern, text, cut, tmp_path):
    corpus = [text, "the cat sat on 12 mats, 3 times.\n", "ab ab  abc"]
    tok = train_bpe_from_iterator(corpus, 300, special_tokens=SPECIALS, pattern=pattern, workers=1)
    assert tok.pattern == pattern
    # the trainer counted exactly the encoder's pre-tokens (gaps included), specials cut out
    expected = Counter(p for t in corpus for piece, special in split_special(t, SPECIALS) if not special for p in splitter(pattern)(piece))
    assert count_texts(corpus, pattern, SPECIALS) == expected
    assert sum(len(p) * c for p, c in expected.items()) == sum(len(piece) for t in corpus for piece, sp in split_special(t, SPECIALS) if not sp)
    # whole text
    assert tok.decode(tok.encode(text, allowed_special="all")) == text
    assert tok.decode(tok.encode_ordinary(text)) == text
    # streaming, in chunks of `cut` characters
    chunks = [text[i : i + cut] for i in range(0, len(text), cut)]
    assert tok.decode(list(tok.encode_iterable(chunks, allowed_special="all"))) == text
    # encode_file (the token file)
    src = tmp_path / "in.txt"
    src.write_bytes(text.encode("utf-8"))
    out = tmp_path / "in.bin"
    tok.encode_file(src, out)
    ids, meta = read_tokens(out, expect_fingerprint=tok.fingerprint())
    assert tok.decode_bytes(np.asarray(ids).tolist()) == text.encode("utf-8")
    assert meta["n_bytes"] == len(text.encode("utf-8"))


def test_gaps_are_pre_tokens_for_the_trainer():
    """Under [a-z]+ the digits and punctuation between words are pre-tokens: the trainer merges them too."""
    tok = train_bpe_from_iterator(["ab 1234 ab 1234 ab 1234"], 260, pattern=r"[a-z]+", workers=1)
    learned = {tok.vocab[i] for i in range(256, tok.vocab_size)}
    assert b"ab" in learned and any(b"1" in t or b" " in t for t in learned)
    assert tok.decode(tok.encode("zz 99 ab!")) == "zz 99 ab!"
