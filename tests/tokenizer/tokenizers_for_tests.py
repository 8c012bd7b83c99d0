"""Tokenizers shared by the encoder/format/CLI tests, built once per session (functools.cache).

* `hand_tokenizer()`: a few hand-written merges + two special tokens (no trainer involved).
* `trained_tokenizer(pattern)`: trained by `train_bpe_from_iterator` on the embedded corpus (no shared data).
* `gpt2_tokenizer(data)` / `tiktoken_gpt2(data)`: GPT-2 from ../shared/data/cs336 and the matching tiktoken
  `Encoding`, built from the same files and tiktoken's own pattern (never `tiktoken.get_encoding`, which downloads).
* `TIKTOKEN_PATTERNS`: the split patterns exactly as tiktoken publishes them (gpt2/r50k, cl100k), so a tiktoken
  reference is never built with OUR pattern (which would leave our pattern unchecked).
* `text_strategy()`: hypothesis text: arbitrary UTF-8-encodable unicode mixed with special tokens, their
  look-alikes and whitespace/digit runs that stress the split patterns.
"""

from __future__ import annotations

import json
import os
import unicodedata
from functools import cache
from pathlib import Path

from hypothesis import strategies as st

from tokenizer.corpus import embedded_documents
from tokenizer.tokenizer import Tokenizer

MAX_EXAMPLES = int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "200"))
EOT = "<|endoftext|>"

# tiktoken's published split patterns. r50k (= gpt2's) is a module-level constant of tiktoken_ext.openai_public;
# cl100k's is a literal inside cl100k_base() (which downloads its ranks), copied verbatim from tiktoken 0.14.0's
# tiktoken_ext/openai_public.py (test_encode_tiktoken.py checks the installed file still holds it).
from tiktoken_ext.openai_public import r50k_pat_str as TIKTOKEN_GPT2_PATTERN  # noqa: E402

TIKTOKEN_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
TIKTOKEN_PATTERNS = {"gpt2": TIKTOKEN_GPT2_PATTERN, "gpt4": TIKTOKEN_CL100K_PATTERN}

LOOKALIKES = [
    EOT, EOT + EOT, "<|endoftext|", "<|endoftext", "|endoftext|>", "<|", "|>", "<", "<|pad|>", "<|pad|", "<|endoftext|><|pad|>",
    " ", "  ", "\n", "\r\n", " \n\n ", "\t", "'s", "'ll", "123456", " 42", "Hello", " world", "é", "日本語", "🙂",
    "\u00a0", "\u3000", "\x1c", "\u0085",
]


def assigned(text: str) -> str:
    """`text` with every code point that Python's Unicode tables (unicodedata, 14.0 on 3.11) leave unassigned
    replaced by U+FFFD, for comparisons with a peer library. Each regex engine reads letter / number classes from its
    own Unicode version: `regex` (ours; Unicode 17 since 2025.9) knows characters that tiktoken 0.14's and tokenizers
    0.23's engines do not (U+323B0 and U+3D000, CJK Extension J, Unicode 17: letters to us, not to them; measured),
    and then the split differs. That is a difference of Unicode tables, not of BPE (docs/tokenizer.md), so the
    comparisons keep to characters both know; round trips still cover every code point."""
    return "".join(c if unicodedata.category(c) != "Cn" else "\ufffd" for c in text)


def text_strategy(max_parts: int = 12) -> st.SearchStrategy[str]:
    parts = st.one_of(st.text(alphabet=st.characters(codec="utf-8"), max_size=20), st.sampled_from(LOOKALIKES))
    return st.lists(parts, max_size=max_parts).map("".join)


@cache
def hand_tokenizer() -> Tokenizer:
    merges = [(b"a", b"b"), (b"ab", b"c"), (b" ", b"t"), (b" t", b"h"), (b" th", b"e"), (b"\n", b"\n"), (b"e", b"r")]
    return Tokenizer(merges, special_tokens=[EOT, "<|pad|>"])


@cache
def trained_tokenizer(pattern: str = "gpt2", vocab_size: int = 1000) -> Tokenizer:
    from tokenizer.train import train_bpe_from_iterator

    return train_bpe_from_iterator(embedded_documents(), vocab_size, special_tokens=[EOT, "<|pad|>"], pattern=pattern, workers=1)


@cache
def gpt2_tokenizer(data: Path) -> Tokenizer:
    return Tokenizer.from_gpt2_files(data / "cs336" / "gpt2_vocab.json", data / "cs336" / "gpt2_merges.txt")


@cache
def tiktoken_gpt2(data: Path):
    import tiktoken
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # independent of tokenizer.formats

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    encoder = json.loads((data / "cs336" / "gpt2_vocab.json").read_text(encoding="utf-8"))
    ranks = {bytes(byte_of[c] for c in s): i for s, i in encoder.items() if s != EOT}
    return tiktoken.Encoding(name="gpt2-local", pat_str=TIKTOKEN_GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={EOT: 50256})
