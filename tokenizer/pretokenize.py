"""Pre-tokenization: the split-pattern registry, the fast splitter, and special-token splitting.

Byte-level BPE never merges across pre-token boundaries. A pre-token is one match of the split regex
(`PATTERNS["gpt2"]` is GPT-2's, `PATTERNS["gpt4"]` is cl100k's); any other string is taken as a custom regex.
A custom regex need not match every character: the text between two of its matches is a pre-token too, so
no text is ever lost (decode(encode(s)) == s for every pattern).
Special tokens are cut out of the text first, longest first, so they are never split, merged or counted.

`splitter(pattern)` returns a function text -> list of pre-tokens that join back to the text (the `regex`
pattern's `findall` plus the gaps between matches; just the `findall` for `gpt2`/`gpt4`, which leave no gaps).
For `gpt2` and `gpt4` it is faster: ASCII stretches of the text go to the stdlib `re` with an exact
ASCII translation of the pattern (about 2x faster than `regex`), and only small stretches around non-ASCII
characters, cut at places where no pre-token can span the cut, go to the `regex` pattern (see `_hybrid`).
Use it (or `pretokens`, which yields the same pre-tokens) wherever text is pre-tokenized.

Not handled here: normalisation (NFC etc.) — text is used exactly as given, like GPT-2 and tiktoken.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Callable

import re

import regex

# GPT-2 (Radford et al. 2019), as in openai/gpt-2 encoder.py.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# cl100k_base (GPT-3.5/4): case-insensitive contractions, digits in groups of at most 3, newlines kept apart,
# whitespace at the very end one pre-token (`\s++$`: "x  \n  " -> "x", "  \n  "). Same matches as tiktoken's
# published cl100k pat_str (tests/tokenizer/test_encode_tiktoken.py checks the ids against it).
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s++$|\s*[\r\n]|\s+(?!\S)|\s+"""
)

PATTERNS: dict[str, str] = {
    "gpt2": GPT2_PATTERN,
    "gpt4": GPT4_PATTERN,
}


def resolve_pattern(name_or_regex: str) -> str:
    """Registry name -> regex; anything else must compile as a regex itself.

    >>> resolve_pattern("gpt2") == GPT2_PATTERN
    True
    """
    if name_or_regex in PATTERNS:
        return PATTERNS[name_or_regex]
    # A bare identifier that is not a registry name is almost certainly a typo, not a regex.
    if name_or_regex.isidentifier():
        raise ValueError(f"unknown pattern {name_or_regex!r}; choose from {sorted(PATTERNS)} or pass a regex")
    try:
        compile_pattern(name_or_regex)
    except regex.error as e:
        raise ValueError(f"invalid split pattern {name_or_regex!r}: {e}") from None
    return name_or_regex


@lru_cache(maxsize=16)
def compile_pattern(pattern: str) -> regex.Pattern:
    return regex.compile(pattern)


def pretokens(text: str, pattern: str) -> Iterator[str]:
    """The pre-tokens of `text` (no special-token handling), e.g. "hi there" -> "hi", " there"."""
    yield from splitter(pattern)(text)


# --------------------------------------------------------------------------- fast splitting
# Exact ASCII translations. In the `regex` module, for ASCII characters: \p{L} = [A-Za-z], \p{N} = [0-9],
# \s = [\t\n\x0b\x0c\r ] (Unicode White_Space; \x1c-\x1f are NOT in it, although the stdlib's \s and
# str.isspace() include them, so \s is never used below), and (?i) folds only ASCII letters to ASCII letters.
# A negated class may match more than the original outside ASCII; these patterns only ever see ASCII text.
# (tests/tokenizer/test_pretokenize.py checks all of this against `regex` on every ASCII character.)
_S = r"[\t\n\x0b\x0c\r ]"
_NS = r"[^\t\n\x0b\x0c\r ]"
# gpt2: the letter/digit alternatives moved before the contractions: none of them can match at a position where
# a contraction (which starts with "'") can, so the order change gives the same matches, tried faster.
_GPT2_ASCII = rf"""\ ?[A-Za-z]+|\ ?[0-9]+|'s|'t|'re|'ve|'m|'ll|'d|\ ?[^\t\n\x0b\x0c\r A-Za-z0-9]+|{_S}+(?!{_NS})|{_S}+"""
_GPT4_ASCII = (
    r"""'(?:[sdmtSDMT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\nA-Za-z0-9]?+[A-Za-z]+|[0-9]{1,3}"""
    rf"""|\ ?[^\t\n\x0b\x0c\r A-Za-z0-9]++[\r\n]*|{_S}++$|{_S}*[\r\n]|{_S}+(?!{_NS})|{_S}+"""
)
ASCII_PATTERNS: dict[str, str] = {GPT2_PATTERN: _GPT2_ASCII, GPT4_PATTERN: _GPT4_ASCII}

_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ALPHA = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_GRAPH = frozenset(chr(c) for c in range(0x21, 0x7F))  # printable ASCII except space: not \s in any sense
_MAX_TRIES = 64  # spaces/newlines tried when looking for a cut; so non-Latin text costs about what `regex` does
_DENSE_RUNS = 8  # non-ASCII runs joined one by one before `_cut_after_ascii_window` takes over
_WINDOW = 256
_JOIN_GAP = 96  # ASCII characters between two non-ASCII stretches below which they go to `regex` as one

# Cut points. A cut at i is safe when splitting the text at i and pre-tokenizing both sides gives the whole
# text's pre-tokens: no pre-token spans i, and no pre-token before i looks at text[i:] (the only lookahead,
# (?!\S), and greedy runs stopping at text[i] decide the same at text[i] as at the end of the string).
# For gpt2 and gpt4 two kinds are used (ASCII cases of the two kinds of `pretoken_counts._SAFE_CUT`):
#  (A) i where text[i-1] is an ASCII letter/digit, text[i] == " ", text[i+1] an ASCII letter. The pre-token
#      holding text[i-1] is a letter run, a digit run (gpt4: of 1-3) or a contraction, all ending at i since
#      " " is neither; no whitespace run ends at i. At i, " "+letters starts a pre-token (gpt2 " ?\p{L}+",
#      gpt4 "[^\r\n\p{L}\p{N}]?+\p{L}+"), so the scan restarts at i whatever came before.
#  (B) i where text[i-1] == "\n" and text[i-2], text[i] are printable non-space ASCII. The pre-token holding
#      text[i-2] is a letter/digit/punctuation run or contraction and stops at the "\n" (\s) — except gpt4's
#      " ?[^\s\p{L}\p{N}]++[\r\n]*", which takes the "\n" and stops at text[i] (\S) or the string end alike.
#      Otherwise the "\n" is a pre-token of its own in both cases (gpt2: "\s+(?!\S)" fails before text[i] and
#      "\s+" takes "\n", or at the end "\s+(?!\S)" takes it; gpt4: "\s*[\r\n]" takes it).
# Checked by tests/tokenizer/test_pretokenize.py (hypothesis + real corpora) against the plain `regex` findall.


def _cut_before(text: str, lo: int, i: int) -> int:
    """The largest safe cut c with lo <= c <= i (lo itself is a cut), where text[i] is not ASCII; lo when none
    of the last `_MAX_TRIES` candidate places is one (text without ASCII words: leave it all to `regex`)."""
    sp = text.rfind(" ", lo + 1, i)
    nl = text.rfind("\n", lo + 1, i)  # a (B) cut lies at nl + 1 <= i
    tries = _MAX_TRIES
    while (sp > 0 or nl > 0) and tries:
        tries -= 1
        if sp > nl:
            if text[sp - 1] in _ALNUM and text[sp + 1] in _ALPHA:
                return sp
            sp = text.rfind(" ", lo + 1, sp)
        else:
            if text[nl - 1] in _GRAPH and text[nl + 1] in _GRAPH:
                return nl + 1
            nl = text.rfind("\n", lo + 1, nl)
    return lo


def _cut_after(text: str, j: int) -> int:
    """The smallest safe cut c >= j, where text[j - 1] is not ASCII; len(text) if there is none, or none among
    the next `_MAX_TRIES` candidate places (text without ASCII words: leave the rest to `regex`)."""
    n = len(text)
    sp = text.find(" ", j)
    nl = text.find("\n", j)  # a (B) cut lies at nl + 1; nl >= j so text[nl - 1] exists
    if sp < 0:
        sp = n
    if nl < 0:
        nl = n
    tries = _MAX_TRIES
    while (sp < n or nl < n) and tries:
        tries -= 1
        if sp < nl:
            if sp + 1 < n and text[sp - 1] in _ALNUM and text[sp + 1] in _ALPHA:
                return sp
            sp = text.find(" ", sp + 1)
            if sp < 0:
                sp = n
        else:
            if nl + 1 < n and text[nl - 1] in _GRAPH and text[nl + 1] in _GRAPH:
                return nl + 1
            nl = text.find("\n", nl + 1)
            if nl < 0:
                nl = n
    return n


def _cut_after_ascii_window(text: str, j: int) -> int:
    """A safe cut at or after the first `_WINDOW` characters from j on (stepping by `_WINDOW`) that are all ASCII;
    len(text) if there is none."""
    n = len(text)
    while j < n:
        if text[j : j + _WINDOW].isascii():
            return _cut_after(text, j)
        j += _WINDOW
    return n


def _next_non_ascii(text: str, i: int) -> re.Match | None:
    """The first run of non-ASCII characters at or after i. A slice of ASCII characters is an ASCII string
    (isascii() is then O(1)), so blocks (growing from 64 to 4096 characters) are skipped at C speed and `re`
    only scans the block that has one."""
    n = len(text)
    block = 64
    while i < n:
        j = i + block
        if not text[i:j].isascii():
            return _NON_ASCII.search(text, i, j)  # the run may go on past j: _cut_after looks from m.end()
        i = j
        if block < 4096:
            block += block
    return None


def _hybrid(ascii_findall: Callable, full_findall: Callable) -> Callable[[str], list[str]]:
    """findall over text: ASCII stretches by `ascii_findall`, each non-ASCII run widened to the nearest safe
    cuts on both sides by `full_findall` (typically a few words per non-ASCII character)."""

    def findall(text: str) -> list[str]:
        if text.isascii():  # O(1) in CPython: the string knows it is ASCII
            return ascii_findall(text)
        out: list[str] = []
        pos = 0
        m = _next_non_ascii(text, 0)
        while m is not None:
            start = _cut_before(text, pos, m.start())
            end = _cut_after(text, m.end())
            # the next non-ASCII run close by joins this stretch (dense non-ASCII text: fewer, longer calls); after
            # _DENSE_RUNS of them, jump to the next all-ASCII window instead of going run by run
            joined = 0
            while (m := _next_non_ascii(text, end)) is not None and m.start() - end < _JOIN_GAP:
                joined += 1
                end = _cut_after(text, m.end()) if joined < _DENSE_RUNS else _cut_after_ascii_window(text, m.end())
            if start > pos:
                out += ascii_findall(text, pos, start)  # re's endpos acts as the end of the string
            out += full_findall(text[start:end])
            pos = end
        if pos < len(text):
            out += ascii_findall(text, pos)
        return out

    return findall


def splitter(pattern: str) -> Callable[[str], list[str]]:
    """text -> its pre-tokens (a list) that join back to the text: the pattern's whole matches (never the text of
    capturing groups), and, for a pattern that does not match every character, each stretch of text BETWEEN two
    matches as a pre-token of its own (empty matches are dropped). So no character is ever lost, and the trainer
    (`pretoken_counts.count_texts`) and the encoder, which both split with this function, see the same pre-tokens.
    For `gpt2`/`gpt4` (which match every character) this equals the regex's `findall`, and is faster.
    `pattern` is a registry name or a regex. No special-token handling.

    >>> splitter("gpt2")("Hi  there, \u00e9!")
    ['Hi', ' ', ' there', ',', ' \u00e9', '!']
    >>> splitter(r"[a-z]+")("ab, cd!")
    ['ab', ', ', 'cd', '!']
    """
    return _splitter(PATTERNS.get(pattern, pattern))


@lru_cache(maxsize=16)
def _splitter(pattern: str) -> Callable[[str], list[str]]:
    compiled = compile_pattern(pattern)
    ascii_pattern = ASCII_PATTERNS.get(pattern)
    if ascii_pattern is not None:  # gpt2/gpt4: cover every character, no groups
        return _hybrid(re.compile(ascii_pattern).findall, compiled.findall)
    return _covering(compiled.finditer)


def _covering(finditer: Callable) -> Callable[[str], list[str]]:
    """findall that keeps the text between matches: "ab, cd!" under [a-z]+ -> ["ab", ", ", "cd", "!"]."""

    def findall(text: str) -> list[str]:
        out: list[str] = []
        pos = 0
        for m in finditer(text):
            start, end = m.span()
            if start > pos:
                out.append(text[pos:start])
            if end > start:
                out.append(text[start:end])
            pos = end
        if pos < len(text):
            out.append(text[pos:])
        return out

    return findall


@lru_cache(maxsize=64)
def special_splitter(specials: tuple[str, ...]) -> regex.Pattern | None:
    """A regex that captures any of `specials`, longest first (so "<|a|><|b|>" beats "<|a|>")."""
    if not specials:
        return None
    alternatives = sorted(set(specials), key=lambda s: (-len(s), s))
    return regex.compile("(" + "|".join(regex.escape(s) for s in alternatives) + ")")


def split_special(text: str, specials: Sequence[str]) -> list[tuple[str, bool]]:
    """Cut `text` at special tokens: [(piece, is_special), ...]; empty pieces are dropped.

    >>> split_special("a<|endoftext|>b", ["<|endoftext|>"])
    [('a', False), ('<|endoftext|>', True), ('b', False)]
    """
    splitter = special_splitter(tuple(specials))
    if splitter is None:
        return [(text, False)] if text else []
    out = []
    for i, piece in enumerate(splitter.split(text)):
        if piece:
            out.append((piece, i % 2 == 1))  # re.split with one group: odd positions are the separators
    return out
