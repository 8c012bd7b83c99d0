"""`Tokenizer.encode_pretokens`: ids of text already cut into pre-tokens, each string merged on its own (no
splitting, no special tokens), checked against the slow reference encoder (tests/tokenizer/reference_encode.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.reference_encode import reference_for
from tests.tokenizer.tokenizers_for_tests import EOT, MAX_EXAMPLES, hand_tokenizer, text_strategy, trained_tokenizer


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(pieces=st.lists(text_strategy(3), max_size=6), pattern=st.sampled_from(["gpt2", "gpt4"]))
def test_each_string_is_merged_as_one_pretoken(pieces, pattern):
    tok = trained_tokenizer(pattern)
    ref = reference_for(tok)
    assert tok.encode_pretokens(pieces) == [i for p in pieces for i in ref.encode_piece(p.encode("utf-8"))]


def test_strings_are_neither_joined_nor_split():
    tok = hand_tokenizer()
    # strings are neither joined ("ab" + "c" would merge to "abc", 257) nor split at the space ("c the" is one piece
    # here, so " the" merges inside it: 260)
    assert tok.encode_pretokens(["ab", "c the"]) == [256, 99, 260]
    assert tok.encode_ordinary("abc the") == [257, 260]
    assert tok.encode_pretokens([EOT]) == tok.encode_ordinary(EOT)  # special-token text is ordinary text here
