"""Special tokens: the ids they get, and tiktoken's rules for which special-token text one `encode` call turns
into special ids (`allowed_special`) and which makes it raise (`disallowed_special`).

    assign_special_ids(["<|endoftext|>"], base)                   # {"<|endoftext|>": max(base) + 1}
    special_sets({"<|a|>": 300, "<|b|>": 301}, {"<|a|>"}, "all")  # (("<|a|>",), ("<|b|>",))

Cutting text at special tokens is `pretokenize.split_special` (training uses it too). Not handled: HF's
lstrip / rstrip / normalized options for added tokens: a special token matches its exact text, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from tokenizer.pretokenize import special_splitter

AllowedSpecial = Literal["all"] | set[str] | frozenset[str] | Sequence[str]
DisallowedSpecial = Literal["all"] | set[str] | frozenset[str] | Sequence[str]


def assign_special_ids(special_tokens: Sequence[str] | Mapping[str, int], base: dict[int, bytes]) -> dict[str, int]:
    """Special tokens -> ids: a mapping is taken as is; a sequence gets ids after the largest base id, in order.

    `base` is the non-special vocab (id -> bytes); a special id may not collide with it or with another special.
    """
    if isinstance(special_tokens, str):
        raise ValueError(f"special_tokens must be a list of strings, not the string {special_tokens!r}")
    if isinstance(special_tokens, Mapping):
        specials = {str(s): int(i) for s, i in special_tokens.items()}
    else:
        specials = {}
        next_id = max(base) + 1
        for s in special_tokens:
            if not isinstance(s, str):
                raise ValueError(f"special tokens must be strings, got {s!r}")
            if s in specials:
                raise ValueError(f"special token {s!r} given twice")
            specials[s] = next_id
            next_id += 1
    for s, i in specials.items():
        if not s:
            raise ValueError("a special token cannot be the empty string")
        if i in base:
            raise ValueError(f"special token {s!r} has id {i}, which a regular token already uses")
    if len(set(specials.values())) < len(specials):
        raise ValueError("two special tokens share an id")
    return specials


def special_sets(
    specials: Mapping[str, int], allowed_special: AllowedSpecial, disallowed_special: DisallowedSpecial
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Resolve the tiktoken-style arguments to (allowed, disallowed) sorted tuples of special tokens.

    "all" allows every special token of `specials`; allowing an unknown one raises. "all" disallows every special
    token not allowed; any other strings may be disallowed (they then raise wherever they occur in the text).
    """
    if allowed_special == "all":
        allowed = set(specials)
    elif isinstance(allowed_special, str):
        raise ValueError(f"allowed_special must be 'all' or a set of special tokens, not {allowed_special!r}")
    else:
        allowed = set(allowed_special)
        unknown = allowed - set(specials)
        if unknown:
            raise ValueError(
                f"allowed_special names {sorted(unknown)!r}, which are not special tokens of this tokenizer "
                f"(its special tokens: {sorted(specials)!r})"
            )
    if disallowed_special == "all":
        disallowed = set(specials) - allowed
    elif isinstance(disallowed_special, str):
        raise ValueError(f"disallowed_special must be 'all' or a set of strings, not {disallowed_special!r}")
    else:
        disallowed = set(disallowed_special)
    return tuple(sorted(allowed)), tuple(sorted(disallowed))


def check_disallowed(text: str, disallowed: tuple[str, ...]) -> None:
    """ValueError naming the first disallowed special token in `text` (the longest at that place), if any.

    `disallowed` is not empty (callers skip the search when nothing is disallowed)."""
    match = special_splitter(disallowed).search(text)
    if match:
        token = match.group()
        raise ValueError(
            f"text contains special token {token!r}; pass allowed_special={{{token!r}}} (or 'all') to encode it "
            f"as a special token, or disallowed_special=() to encode it as ordinary text"
        )
