"""The fast splitter (`pretokenize.splitter`) must give exactly the plain `regex` pattern's findall.

For gpt2 and gpt4 it runs an ASCII translation of the pattern through the stdlib `re` on ASCII stretches and
the `regex` pattern on stretches around non-ASCII characters, cut at places where no pre-token can span the
cut. Checked here: the ASCII character classes one by one, the ASCII translations on ASCII text (all 128
characters, contractions in every case, whitespace and control characters), the hybrid on mixed Unicode text,
every cut point the hybrid may choose, and the real corpora (also with non-ASCII characters sprinkled in).
"""

from __future__ import annotations

import os
import random
import re

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenizer.bpe_encode import merge_cache, merge_ids, piece_encoder
from tokenizer.pretokenize import (
    ASCII_PATTERNS,
    GPT2_PATTERN,
    GPT4_PATTERN,
    PATTERNS,
    _cut_after,
    _cut_before,
    compile_pattern,
    pretokens,
    splitter,
)

MAX_EXAMPLES = int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "300"))
NAMES = ["gpt2", "gpt4"]

ASCII_PIECES = [chr(i) for i in range(128)] + [
    "'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'Re", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'lL", "'Ll", "'d",
    "'D", "''s", "' s", "  ", "   ", "\r\n", "\n\n", " \n", "\t\n ", "\n ", " \r", "123", "12345", " 42", "Hello",
    " world", "ab", ".\n", "!!\r\n", ". \n", "\x0b\x0c", "\x1c\x1d\x1e\x1f", " \x1c", "\x1c ", "\x00", "\x7f",
]
UNICODE_PIECES = [
    "\x85", "\xa0", "\u2028", "\u2029", "\u3000", "\u1680", "\u200b", "\ufeff", "é", "É", "ſ", "\u212a", "ı", "İ",
    "٣", "²", "Ⅻ", "½", "日本", "😀", "—", "“", "”", "’", "\ufffd", "ß", "ﬀ", "\u0301", "Ω",
]
ascii_text = st.lists(
    st.one_of(st.sampled_from(ASCII_PIECES), st.text(st.characters(max_codepoint=127), max_size=8)), max_size=40
).map("".join)
mixed_text = st.lists(
    st.one_of(
        st.sampled_from(ASCII_PIECES),
        st.sampled_from(UNICODE_PIECES),
        st.text(st.characters(codec="utf-8"), max_size=6),
        st.text(st.characters(max_codepoint=127), max_size=12),
    ),
    max_size=40,
).map("".join)


def plain(name: str, text: str) -> list[str]:
    return compile_pattern(PATTERNS[name]).findall(text)


# ---------------------------------------------------------------- the translations, piece by piece
@pytest.mark.parametrize("ch", [chr(i) for i in range(128)])
def test_ascii_character_classes_equal_regex(ch):
    """The classes the ASCII patterns are built from, for every ASCII character (\\x1c-\\x1f are \\S here)."""
    assert bool(regex.fullmatch(r"\p{L}", ch)) == bool(re.fullmatch(r"[A-Za-z]", ch))
    assert bool(regex.fullmatch(r"\p{N}", ch)) == bool(re.fullmatch(r"[0-9]", ch))
    assert bool(regex.fullmatch(r"\s", ch)) == bool(re.fullmatch(r"[\t\n\x0b\x0c\r ]", ch))
    assert bool(regex.fullmatch(r"(?i:[sdmt])", ch)) == (ch in "sdmtSDMT")
    assert bool(regex.fullmatch(r"(?i:ll|ve|re)", ch * 2)) == (ch in "lL")
    for name in NAMES:
        assert splitter(name)(ch) == plain(name, ch) == re.findall(ASCII_PATTERNS[PATTERNS[name]], ch)


@pytest.mark.parametrize("name", NAMES)
def test_all_ascii_pairs_and_contraction_cases(name):
    """Exhaustive over short strings: every pair of ASCII characters, alone, after a "'", a letter or a space,
    and followed by a letter (so "'LLx" tells a contraction from "'" + letters)."""
    ascii_findall = re.compile(ASCII_PATTERNS[PATTERNS[name]]).findall
    full_findall = compile_pattern(PATTERNS[name]).findall
    for i in range(128):
        for j in range(128):
            for prefix in ("", "'", "a", " "):
                for suffix in ("", "x"):
                    s = prefix + chr(i) + chr(j) + suffix
                    assert ascii_findall(s) == full_findall(s), repr(s)


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=ascii_text)
def test_ascii_text_equals_regex(text):
    for name in NAMES:
        want = plain(name, text)
        assert re.compile(ASCII_PATTERNS[PATTERNS[name]]).findall(text) == want
        assert splitter(name)(text) == want


@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=mixed_text)
def test_mixed_unicode_text_equals_regex(text):
    for name in NAMES:
        assert splitter(name)(text) == plain(name, text)


def test_lone_surrogates_and_edges():
    for text in ["", "a\ud800b", "\udfff", "x \ud83d\ude42 \ud83d end", "é", "é ", " é", "a\né\nb", "ab é cd\n", "\né\n"]:
        for name in NAMES:
            assert splitter(name)(text) == plain(name, text)
            assert list(pretokens(text, name)) == plain(name, text)


# ---------------------------------------------------------------- cut points
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(text=mixed_text)
def test_every_cut_point_the_hybrid_may_choose_is_safe(text):
    """Splitting at any cut `_cut_before` / `_cut_after` can return gives the whole text's pre-tokens."""
    cuts = {_cut_after(text, j) for j in range(1, len(text) + 1)}
    cuts |= {_cut_before(text, 0, i) for i in range(len(text))}
    for name in NAMES:
        whole = plain(name, text)
        for c in sorted(cuts):
            assert 0 <= c <= len(text)
            assert plain(name, text[:c]) + plain(name, text[c:]) == whole, (name, text, c)


def test_cuts_are_found():
    """The properties above are vacuous if no cut is ever taken: both kinds occur, and islands stay small."""
    text = "one two é three four"
    i = text.index("é")
    assert _cut_before(text, 0, i) == text.index(" two")  # (A): letter | space letter
    assert _cut_after(text, i + 1) == text.index(" four")
    text = "a.\nb“c” x\ny z"
    assert _cut_before(text, 0, text.index("“")) == text.index("b")  # (B): non-space \n | non-space
    assert _cut_after(text, text.index("”") + 1) == text.index("y")
    assert _cut_before(text, 3, text.index("“")) == 3 and _cut_after("é x", 1) == 3


# ---------------------------------------------------------------- real text
CORPORA = ["tinyshakespeare.txt", "cs336/address.txt", "cs336/german.txt", "cs336/tinystories_sample.txt", "cs336/corpus.en",
           "cs336/special_token_double_newlines_non_whitespace.txt", "cs336/special_token_trailing_newlines.txt",
           "bench/eltec_eng_novels.txt", "bench/wikitext2_raw_test.txt", "bench/tinystories_v1_train_head.txt"]


def read_head(path, n=1_000_000) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read(n)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("file", CORPORA)
def test_real_corpora_equal_regex(shared_data, file, name):
    path = shared_data / file
    if not path.exists():
        pytest.skip(f"{path} not present")
    text = read_head(path)
    assert splitter(name)(text) == plain(name, text)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("density", [100, 1000, 10000, 100000])
def test_real_text_with_non_ascii_sprinkled_in(shared_data, name, density):
    """English text with non-ASCII characters (spaces, letters, digits, punctuation) put at random places, so the
    hybrid cuts inside ordinary words, numbers, whitespace runs and line ends; sparse to dense (where it joins
    runs one by one, then skips to ASCII windows)."""
    text = read_head(shared_data / "tinyshakespeare.txt", 300_000)
    rng = random.Random(density)
    chars = list(text)
    for _ in range(density):
        chars[rng.randrange(len(chars))] = rng.choice(UNICODE_PIECES)
    text = "".join(chars)
    assert splitter(name)(text) == plain(name, text)
    for start in range(0, 2000, 37):  # also every kind of start and end of the string
        piece = text[start : start + 500]
        assert splitter(name)(piece) == plain(name, piece)


@pytest.mark.parametrize("name", NAMES)
def test_non_latin_text(shared_data, name):
    """Text whose letters are all non-ASCII (few or no cut points) and text with one accented word in two."""
    text = read_head(shared_data / "tinyshakespeare.txt", 200_000)
    cyrillic = text.translate(str.maketrans("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                                            "абцдефгхийклмнопярстуввхызАБЦДЕФГХИЙКЛМНОПЯРСТУВВХЫЗ"))
    accented = " ".join(w + "ü" if i % 2 else w for i, w in enumerate(text.split(" ")))
    for t in (cyrillic, accented, "日本語 テキスト、 " * 2000 + text[:5000]):
        assert splitter(name)(t) == plain(name, t)


def test_custom_pattern_uses_plain_regex():
    pat = r"\w+|\s+|[^\w\s]+"
    assert splitter(pat)("héllo, wörld  x") == regex.findall(pat, "héllo, wörld  x")
    assert splitter("gpt2") is splitter(GPT2_PATTERN) and splitter("gpt4") is splitter(GPT4_PATTERN)
    # capturing groups: still the whole matches (findall would give the groups and drop text)
    grouped = r"(a)b|(\s)+|."
    assert splitter(grouped)("ab  ab c") == list(pretokens("ab  ab c", grouped)) == ["ab", "  ", "ab", " ", "c"]


# ---------------------------------------------------------------- the fast piece encoder
@settings(deadline=None, max_examples=MAX_EXAMPLES)
@given(
    pairs=st.dictionaries(st.tuples(st.integers(0, 8), st.integers(0, 8)), st.integers(0, 20), max_size=30),
    text=st.text(st.sampled_from("abcdefgh\x00\x01é"), max_size=300),
    layout=st.sampled_from(["identity", "permutation", "offset"]),
)
def test_piece_encoder_equals_merge_ids(pairs, text, layout):
    """`piece_encoder` / `merge_cache` (packed int keys) == `merge_ids` (tuple keys) for random merge tables, byte
    ids that are the byte values, a permutation of them (GPT-2) or neither, short pieces and pieces long enough
    for the heap merge."""
    byte_ids = list(range(256))
    if layout == "permutation":
        random.Random(len(text)).shuffle(byte_ids)
    elif layout == "offset":
        byte_ids = [b + 300 for b in range(256)]
    first = max(byte_ids) + 1  # merged ids: rank r -> first + r

    def tok(x: int) -> int:  # 0..7: the bytes "a".."h"; 8: the token made by rank 0
        return byte_ids[97 + x] if x < 8 else first

    pair_rank = {}
    for (a, b), r in sorted(pairs.items(), key=lambda kv: kv[1]):
        if r not in pair_rank.values() and (tok(a), tok(b)) not in pair_rank:
            pair_rank[(tok(a), tok(b))] = r
    rank_id = [first + r for r in range(21)]
    want = tuple(merge_ids([byte_ids[x] for x in text.encode()], pair_rank, rank_id))
    assert piece_encoder(pair_rank, rank_id, byte_ids)(text) == want
    cache = merge_cache(pair_rank, rank_id, byte_ids, max_piece_len=100)
    assert cache[text] == want and cache.encode_piece(text) == want
    assert (text in cache) == (len(text) <= 100)
