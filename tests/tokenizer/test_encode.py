"""Tokenizer encode/decode: API, special-token semantics, round trips, and the fast encoder vs the slow reference.

Runs without shared data: a hand-merged tokenizer and tokenizers trained on the embedded corpus (gpt2 and gpt4
patterns). GPT-2 vs tiktoken lives in test_encode_tiktoken.py, streaming in test_encode_stream.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.reference_encode import reference_for
from tests.tokenizer.tokenizers_for_tests import EOT, MAX_EXAMPLES, hand_tokenizer, text_strategy, trained_tokenizer
from tokenizer.bpe_encode import HEAP_THRESHOLD, PretokenCache, merge_ids
from tokenizer.corpus import embedded_text
from tokenizer.tokenizer import Tokenizer, default_vocab

TOKENIZERS = {
    "hand": hand_tokenizer,
    "trained-gpt2": lambda: trained_tokenizer("gpt2"),
    "trained-gpt4": lambda: trained_tokenizer("gpt4"),
}


@pytest.fixture(params=sorted(TOKENIZERS))
def tok(request) -> Tokenizer:
    return TOKENIZERS[request.param]()


# ---------------------------------------------------------------- pinned examples
def test_hand_merges_pinned():
    tok = hand_tokenizer()
    # "abc" -> ab (256) -> abc (257); " the" -> " t" (258) -> " th" (259) -> " the" (260)
    assert tok.encode("abc the") == [257, 260]
    assert tok.encode("ab\n\n\nx") == [256, 261, 10, 120]
    assert tok.vocab_size == 256 + 7 + 2
    assert tok.special_tokens == {EOT: 263, "<|pad|>": 264}
    assert tok.encode(f"abc{EOT}", allowed_special="all") == [257, 263]
    assert tok.decode([257, 263, 260]) == f"abc{EOT} the"


def test_zero_merges_is_bytes():
    tok = Tokenizer([])
    s = "héllo, wörld 🙂"
    assert tok.encode(s) == list(s.encode("utf-8"))
    assert tok.vocab_size == 256


def test_default_id_layout():
    tok = hand_tokenizer()
    vocab = tok.vocab
    assert [vocab[i] for i in range(256)] == [bytes([i]) for i in range(256)]
    for i, (a, b) in enumerate(tok.merges):
        assert vocab[256 + i] == a + b
    assert default_vocab(tok.merges) == {i: b for i, b in vocab.items() if i < 256 + len(tok.merges)}


def test_token_lookups():
    tok = hand_tokenizer()
    assert tok.token_to_id(b"abc") == 257
    assert tok.token_to_id(" the") == 260
    assert tok.token_to_id(EOT) == 263
    assert tok.token_to_id(b"zzz") is None
    assert tok.id_to_token(257) == b"abc"
    assert tok.id_to_token(263) == EOT.encode()
    with pytest.raises(ValueError, match="unknown token id 999"):
        tok.id_to_token(999)
    with pytest.raises(ValueError, match="unknown token id 999"):
        tok.decode([1, 999])


# ---------------------------------------------------------------- special tokens (tiktoken semantics)
def test_disallowed_special_raises_naming_the_token():
    tok = hand_tokenizer()
    with pytest.raises(ValueError, match=r"text contains special token '<\|endoftext\|>'.*disallowed_special=\(\)"):
        tok.encode(f"hi {EOT} there")
    with pytest.raises(ValueError, match=r"'<\|pad\|>'"):
        tok.encode("x<|pad|>", allowed_special={EOT})
    with pytest.raises(ValueError, match=r"'<\|endoftext\|>'"):  # explicitly disallowed beats nothing
        tok.encode(EOT, disallowed_special={EOT})


def test_special_token_modes():
    tok = hand_tokenizer()
    s = f"ab{EOT}<|pad|>ab"
    assert tok.encode(s, allowed_special="all") == [256, 263, 264, 256]
    assert tok.encode(s, allowed_special={EOT}, disallowed_special=()) == [256, 263] + tok.encode_ordinary("<|pad|>ab")
    assert tok.encode(s, disallowed_special=()) == tok.encode_ordinary(s)
    assert 263 not in tok.encode_ordinary(s)
    assert tok.decode(tok.encode_ordinary(s)) == s
    with pytest.raises(ValueError, match="not special tokens"):
        tok.encode("x", allowed_special={"<|nope|>"})


def test_longest_special_token_wins():
    tok = Tokenizer([], special_tokens=["<|a|>", "<|a|><|b|>"])
    assert tok.encode("<|a|><|b|><|a|>", allowed_special="all") == [257, 256]


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy())
def test_encode_ordinary_equals_disallowed_empty(text):
    tok = trained_tokenizer("gpt2")
    assert tok.encode_ordinary(text) == tok.encode(text, disallowed_special=())


# ---------------------------------------------------------------- differential: fast vs reference
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy(), name=st.sampled_from(sorted(TOKENIZERS)))
def test_fast_encoder_matches_reference(text, name):
    tok = TOKENIZERS[name]()
    ref = reference_for(tok)
    assert tok.encode_ordinary(text) == ref.encode_ordinary(text)
    assert tok.encode(text, allowed_special="all") == ref.encode(text, allowed=list(tok.special_tokens))


def test_reference_on_embedded_corpus_sample(tok):
    text = embedded_text()[:20000]
    assert tok.encode(text, allowed_special="all") == reference_for(tok).encode(text, allowed=list(tok.special_tokens))


@pytest.mark.parametrize("piece", ["a" * 1000, " " * 700, "ab" * 400, "the " * 300, "🙂" * 200, "x\n" * 500])
def test_long_pieces_take_the_heap_path_and_match(piece):
    tok = trained_tokenizer("gpt2")
    assert len(piece.encode()) > HEAP_THRESHOLD
    ref = reference_for(tok)
    assert tok.encode_ordinary(piece) == ref.encode_ordinary(piece)


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(ids=st.lists(st.integers(0, 5), max_size=HEAP_THRESHOLD * 2 + 10))
def test_list_and_heap_merges_agree(ids):
    # a merge table with overlapping pairs and ranks that are not in creation order
    pair_rank = {(0, 0): 0, (1, 2): 1, (6, 0): 2, (0, 1): 3, (7, 7): 4, (3, 3): 5, (2, 1): 6}
    rank_id = [6, 7, 8, 9, 10, 11, 12]
    from tokenizer.bpe_encode import _merge_heap

    assert merge_ids(list(ids[:HEAP_THRESHOLD]), pair_rank, rank_id) == _merge_heap(list(ids[:HEAP_THRESHOLD]), pair_rank, rank_id)


# ---------------------------------------------------------------- round trips and invariants
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=text_strategy(), name=st.sampled_from(sorted(TOKENIZERS)))
def test_roundtrip(text, name):
    tok = TOKENIZERS[name]()
    ids = tok.encode(text, allowed_special="all")
    assert tok.decode(ids) == text
    assert tok.decode_bytes(ids) == text.encode("utf-8")
    ordinary = tok.encode_ordinary(text)
    assert tok.decode(ordinary) == text
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert len(ordinary) <= len(text.encode("utf-8"))


def test_every_token_decodes_to_its_bytes(tok):
    for i, b in tok.vocab.items():
        assert tok.decode_bytes([i]) == b
        if i not in tok.special_tokens.values():
            assert tok.encode_bytes_piece(b) == [i]  # each token's own bytes merge back to it


def test_decode_is_lossy_by_default_and_strict_on_request():
    tok = hand_tokenizer()
    ids = tok.encode("é")[:1]  # first byte of a 2-byte character
    assert tok.decode(ids) == "\ufffd"
    with pytest.raises(UnicodeDecodeError):
        tok.decode(ids, errors="strict")


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(data=st.binary(max_size=64))
def test_arbitrary_bytes_roundtrip_through_decode_bytes(data):
    tok = trained_tokenizer("gpt2")
    ids = tok.encode_bytes_piece(data)
    assert tok.decode_bytes(ids) == data


# ---------------------------------------------------------------- cache
def test_cache_is_bounded_and_transparent():
    tok = Tokenizer(trained_tokenizer("gpt2").merges, pattern="gpt2")
    tok._cache.maxsize = 50
    text = embedded_text()[:30000]
    ids = tok.encode_ordinary(text)
    assert len(tok._cache) <= 50
    assert len(set(tok._findall(text))) > 500  # the bound was actually exercised
    assert ids == reference_for(tok).encode_ordinary(text)
    tok._cache.max_piece_len = 3
    tok._cache.clear()
    tok.encode_ordinary("a verylongword")
    assert " verylongword" not in tok._cache and "a" in tok._cache


def test_pretoken_cache_eviction_keeps_recent():
    calls = []
    cache = PretokenCache(lambda s: calls.append(s) or (len(s),), maxsize=4)
    for s in "abcdef":
        assert cache[s] == (1,)
    assert len(cache) <= 4 and "f" in cache
    assert calls == list("abcdef")


# ---------------------------------------------------------------- constructor validation
def test_constructor_errors():
    with pytest.raises(ValueError, match="no earlier merge produced"):
        Tokenizer([(b"ab", b"c")])
    with pytest.raises(ValueError, match="given twice"):
        Tokenizer([], special_tokens=["<|x|>", "<|x|>"])
    with pytest.raises(ValueError, match="list of strings"):
        Tokenizer([], special_tokens="<|x|>")
    with pytest.raises(ValueError, match="unknown pattern"):
        Tokenizer([], pattern="gpt3")
    with pytest.raises(ValueError, match="single-byte"):
        Tokenizer([], vocab={i: bytes([i]) for i in range(255)})


# ---------------------------------------------------------------- encode_batch
def test_encode_batch_sequential_and_parallel_agree():
    tok = trained_tokenizer("gpt2")
    texts = [d for d in embedded_text().split(EOT)][:40] + ["", EOT]
    expected = [tok.encode(t, allowed_special="all") for t in texts]
    assert tok.encode_batch(texts, allowed_special="all") == expected  # small: sequential
    assert tok.encode_batch(texts, allowed_special="all", num_workers=2, min_parallel_chars=0) == expected  # pool
    with pytest.raises(ValueError, match="special token"):
        tok.encode_batch(texts)
