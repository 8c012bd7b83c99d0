"""Train a byte-level BPE tokenizer: `train_bpe(paths, ...)` for files, `train_bpe_from_iterator(texts, ...)` for
any iterable of strings (e.g. a `datasets` column). Both stream their input and return a `Tokenizer`.

Pipeline: special tokens are cut out -> the split regex makes pre-tokens -> distinct pre-tokens are counted in
worker processes (`tokenizer.pretoken_counts`) -> merges are learned with incremental pair counts and a lazy
max-heap (`tokenizer.merge`). Merges never cross a pre-token boundary or a special token.

Handled: UTF-8 files of any size (read in chunks, never whole); invalid UTF-8 (replaced by U+FFFD with one
warning giving the count); gpt2/gpt4/custom split patterns; min_frequency; corpora too small for `vocab_size`
(a warning says the size reached). Not handled: text normalisation (text is used exactly as given), other
encodings than UTF-8, and resuming or extending an existing tokenizer.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from tokenizer.progress import progress_bar
from tokenizer.merge import learn_merges
from tokenizer.pretoken_counts import (
    batch_texts,
    count_batches,
    default_workers,
    iter_file_texts,
    replaced_count,
    to_byte_counts,
)
from tokenizer.pretokenize import resolve_pattern
from tokenizer.tokenizer import Tokenizer

PathLike = str | os.PathLike


def train_bpe(paths: Sequence[PathLike] | PathLike, vocab_size: int, special_tokens: Sequence[str] = (),
              pattern: str = "gpt2", workers: int | None = None, min_frequency: int = 1, *,
              progress: bool | None = None, chunk_bytes: int | None = None) -> Tokenizer:
    """Train byte-level BPE on UTF-8 text files; each file is a separate document.

    `vocab_size` counts the 256 byte tokens, the merges and the special tokens, so the number of merges is
    `vocab_size - 256 - len(special_tokens)`. Id layout of the result: 0..255 bytes, 256 + i = merges[i], then
    the special tokens in the order given.

    Tie-break: each step merges the pair with the highest count; among equal counts, the lexicographically
    greatest pair of byte strings, comparing `(bytes_a, bytes_b)` tuples: (b"b", b"a") beats (b"a", b"z") and
    (b"a", b"bc") beats (b"a", b"b"). This is the CS336 reference's rule; it makes training deterministic.

    Special tokens are cut out before pre-tokenization (longest first): they are never merged or counted.
    Pairs seen fewer than `min_frequency` times are never merged. If no pair qualifies before `vocab_size` is
    reached, training stops early with a warning that gives the size reached. Invalid UTF-8 is decoded as
    U+FFFD (one U+FFFD per invalid sequence), with one warning giving the count. `workers` processes count
    pre-tokens (None: min(cpu count, 8)); the result does not depend on it. `progress`: tqdm bars (None: only
    when stderr is a terminal). `chunk_bytes`: read size, default `pretoken_counts.CHUNK_BYTES`.

    >>> tok = train_bpe(["corpus.txt"], vocab_size=1000, special_tokens=["<|endoftext|>"])  # doctest: +SKIP
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("no training files given")
    for path in paths:
        if not os.path.exists(path):
            raise FileNotFoundError(f"training file not found: {os.fspath(path)}")
        if os.path.isdir(path):
            raise IsADirectoryError(f"training path is a directory, not a file: {os.fspath(path)}")
    specials, regex_pattern, n_merges, workers = _check_args(vocab_size, special_tokens, pattern, workers,
                                                             min_frequency, chunk_bytes)
    show = _show_progress(progress)
    where = ", ".join(os.fspath(p) for p in paths)
    word_counts = _count_files(paths, regex_pattern, specials, workers, chunk_bytes, show, where)
    merges = _merges(word_counts, n_merges, min_frequency, specials, vocab_size, where, show)
    return _tokenizer(merges, specials, pattern)


def _count_files(paths: list[PathLike], regex_pattern: str, specials: list[str], workers: int,
                 chunk_bytes: int | None, show: bool, where: str) -> dict[bytes, int]:
    total_bytes = sum(os.path.getsize(p) for p in paths)
    replaced_before = replaced_count()
    with progress_bar(show, total=total_bytes, unit="B", unit_scale=True, desc="count pre-tokens") as bar:
        texts = iter_file_texts(paths, regex_pattern, specials, chunk_bytes, on_bytes=bar.update)
        counts = count_batches(([t] for t in texts), regex_pattern, specials, workers)
    replaced = replaced_count() - replaced_before
    if replaced:
        warnings.warn(f"{replaced} invalid UTF-8 sequence(s) in {where} were replaced by U+FFFD", stacklevel=3)
    return to_byte_counts(counts)


def train_bpe_from_iterator(texts: Iterable[str], vocab_size: int, special_tokens: Sequence[str] = (),
                            pattern: str = "gpt2", workers: int | None = None, min_frequency: int = 1, *,
                            progress: bool | None = None, chunk_bytes: int | None = None) -> Tokenizer:
    """Train byte-level BPE on an iterable of strings, consumed once, streamed; each string is one document
    (pre-tokens never span two strings). Same rules and arguments as `train_bpe`; surrogates (not valid
    Unicode) are read as the encoder reads them: a valid pair as its character, a lone one as U+FFFD.

    >>> train_bpe_from_iterator(["aaabdaaabac"], vocab_size=259).merges  # doctest: +SKIP
    [(b'a', b'a'), (b'aa', b'a'), (b'aaa', b'b')]
    """
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of strings, not one string; wrap it: [text]")
    specials, regex_pattern, n_merges, workers = _check_args(vocab_size, special_tokens, pattern, workers,
                                                             min_frequency, chunk_bytes)
    show = _show_progress(progress)
    with progress_bar(show, unit="doc", desc="count pre-tokens") as bar:
        batches = batch_texts(texts, regex_pattern, specials, chunk_bytes)
        word_counts = to_byte_counts(count_batches(batches, regex_pattern, specials, workers, on_batch=bar.update))
    merges = _merges(word_counts, n_merges, min_frequency, specials, vocab_size, "the given texts", show)
    return _tokenizer(merges, specials, pattern)


def _check_args(vocab_size: int, special_tokens: Sequence[str], pattern: str, workers: int | None,
                min_frequency: int, chunk_bytes: int | None) -> tuple[list[str], str, int, int]:
    if isinstance(special_tokens, str):
        raise TypeError("special_tokens must be a list of strings, not one string; wrap it: [token]")
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
    if len(set(specials)) != len(specials):
        raise ValueError(f"duplicate special tokens in {specials}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
    minimum = 256 + len(specials)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size {vocab_size} is too small: it must be at least 256 (bytes) + "
                         f"{len(specials)} (special tokens) = {minimum}")
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 0:
        raise ValueError(f"min_frequency must be an int >= 0, got {min_frequency!r}")
    if chunk_bytes is not None and (isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int)
                                    or chunk_bytes < 1):
        raise ValueError(f"chunk_bytes must be a positive int or None, got {chunk_bytes!r}")
    if workers is None:
        workers = default_workers()
    elif isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int or None, got {workers!r}")
    return specials, resolve_pattern(pattern), vocab_size - minimum, workers


def _merges(word_counts: dict[bytes, int], n_merges: int, min_frequency: int, specials: list[str],
            vocab_size: int, where: str, show: bool) -> list[tuple[bytes, bytes]]:
    if not word_counts:
        raise ValueError(f"corpus is empty: no text outside special tokens in {where}")
    with progress_bar(show, total=n_merges, unit="merge", desc="merge") as bar:
        merges = learn_merges(_drain(word_counts), n_merges, min_frequency, on_merge=lambda _: bar.update(1))
    if len(merges) < n_merges:
        reached = 256 + len(merges) + len(specials)
        why = "no pairs are left" if min_frequency <= 1 else f"no pair occurs at least {min_frequency} times"
        warnings.warn(f"stopped at vocab size {reached} of the requested {vocab_size}: {why} in {where}",
                      stacklevel=3)
    return merges


def _drain(d: dict[bytes, int]) -> Iterator[tuple[bytes, int]]:
    """Items of `d`, removed as they are yielded: the merge loop copies words, so the dict need not stay."""
    while d:
        yield d.popitem()


def _tokenizer(merges: list[tuple[bytes, bytes]], specials: list[str], pattern: str) -> Tokenizer:
    return Tokenizer(merges, special_tokens=specials, pattern=pattern)


def _show_progress(progress: bool | None) -> bool:
    if progress is None:
        return sys.stderr.isatty()
    return bool(progress)
