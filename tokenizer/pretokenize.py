"""Pre-tokenization: the split-pattern registry and special-token splitting.

Byte-level BPE never merges across pre-token boundaries. A pre-token is one match of the split regex
(`PATTERNS["gpt2"]` is GPT-2's, `PATTERNS["gpt4"]` is cl100k's); any other string is taken as a custom regex.
Special tokens are cut out of the text first, longest first, so they are never split, merged or counted.

Not handled here: normalisation (NFC etc.) — text is used exactly as given, like GPT-2 and tiktoken.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache

import regex

# GPT-2 (Radford et al. 2019), as in openai/gpt-2 encoder.py.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# cl100k_base (GPT-3.5/4): case-insensitive contractions, digits in groups of at most 3, newlines kept apart.
GPT4_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
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
    for m in compile_pattern(pattern).finditer(text):
        yield m.group()


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
