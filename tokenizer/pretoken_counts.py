"""Counting pre-tokens for BPE training: streamed file chunks, parallel workers, one deduplicated word -> count map.

The trainer never sees the corpus itself, only `{pre-token bytes: count}`; this module produces that map.

* Files are read in chunks of `CHUNK_BYTES` and decoded incrementally as UTF-8, so a multi-byte character is never
  split and the whole corpus is never in memory. Invalid UTF-8 is replaced by U+FFFD (`errors="replace"`
  semantics, one U+FFFD per maximal invalid sequence) and the replacements are counted, not raised.
* A chunk is cut only where a pre-token cannot span the cut (see `safe_cut`): before the last special token
  (specials split the text anyway), or else, for the registered `gpt2`/`gpt4` patterns, right after a newline
  that sits between two non-space characters, or before a space that sits between a letter/digit and a letter.
  If a chunk has no such place, more is read (and only the new part is searched).
  For a custom regex only special tokens are cut points, so a large file without special tokens is read whole.
* Iterator input: every string is its own document (pre-tokens never span two strings); strings are batched into
  tasks of about `CHUNK_BYTES` characters, and a very long string is cut like a file.
* Counting runs in `workers` processes (`tokenizer.workers.WorkerPool`, whose stop on Ctrl-C cannot hang; one task
  per worker in flight, so memory stays flat); `workers=1`
  counts in this process, as does a corpus of fewer than `MIN_POOL_TASKS` chunks. Counts are added up, so the
  result does not depend on `workers` or chunking.

Not handled: surrogates in `str` input are not valid Unicode; as in the encoder (`bpe_encode.fix_surrogates`),
a valid surrogate pair is read as its character and a lone surrogate as U+FFFD, like invalid bytes.
"""

from __future__ import annotations

import codecs
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, islice

import regex

from tokenizer.bpe_encode import fix_surrogates
from tokenizer.pretokenize import PATTERNS, special_splitter, split_special, splitter
from tokenizer.workers import WorkerPool

CHUNK_BYTES = 1024 * 1024  # file read / task size; tests set it small to exercise chunk boundaries
MAX_DEFAULT_WORKERS = 8
SLICE_CHARS = 256 * 1024  # count_texts pre-tokenizes at most about this much at once (gpt2/gpt4)
MIN_POOL_TASKS = 3  # fewer chunks than this (about 3 MB) are counted in this process, whatever `workers` is
REPLACEMENT_ERRORS = "archlab-count-replace"  # codecs error handler: like "replace", but counts what it replaces

_replaced = [0]  # invalid UTF-8 sequences replaced so far (module-global; the file readers are single-threaded)


def _count_replace(exc: UnicodeDecodeError) -> tuple[str, int]:
    _replaced[0] += 1
    return "\ufffd", exc.end


codecs.register_error(REPLACEMENT_ERRORS, _count_replace)

# gpt2/gpt4: no pre-token spans "<non-space>\n|<non-space>" or "<letter|digit>| <letter>" (`|` = the cut).
# Checked by hand against both patterns, and every place it allows is checked by a property test
# (tests/tokenizer/test_train_chunks.py::test_every_candidate_cut_point_is_safe).
_SAFE_CUT = regex.compile(r"(?<=\S\n)(?=\S)|(?<=[\p{L}\p{N}])(?= \p{L})")
_CUTTABLE = (PATTERNS["gpt2"], PATTERNS["gpt4"])  # the patterns _SAFE_CUT is valid for
_SAFE_CUT_REACH = 3  # a match at i looks at text[i-2 : i+2]: rescan this much of an old tail


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_DEFAULT_WORKERS))


def safe_cut(text: str, pattern: str, specials: Sequence[str]) -> int:
    """The last index i > 0 such that pre-tokenizing text[:i] and text[i:] separately equals pre-tokenizing
    text, whatever text follows; 0 if this chunk has no such place yet.

    >>> safe_cut("ab\\n<|endoftext|>cd", PATTERNS["gpt2"], ["<|endoftext|>"])
    3
    >>> safe_cut("ab cd", PATTERNS["gpt2"], [])
    2
    """
    return find_cut(text, pattern, specials)[0]


def find_cut(text: str, pattern: str, specials: Sequence[str], resume: tuple[int, int] = (0, 0)
             ) -> tuple[int, tuple[int, int]]:
    """`safe_cut`, resumable: returns (cut, resume). When cut is 0, pass `resume` with the same text plus more
    appended, and only the new part is scanned (so a long stretch without cut points costs linear time)."""
    special_from, pattern_from = resume
    splitter = special_splitter(tuple(specials))
    if splitter is not None:
        # Only a special that starts at least max_len before the end: then no longer special starting earlier
        # can run past the end, so the matches up to the cut are those of the full text. A scan resumes only
        # where the full text's left-to-right scan would be (after a match, or past positions with none).
        limit = len(text) - max(len(s) for s in specials)
        cut = 0
        next_from = max(special_from, limit + 1)
        for m in splitter.finditer(text, special_from):
            if m.start() > limit:
                break
            cut = m.start()
            next_from = max(m.end(), limit + 1)
        special_from = max(special_from, next_from)
        if cut > 0:
            return cut, (0, 0)
    if pattern in _CUTTABLE:
        # Scan suffixes of growing length (the regex is slow, and the end nearly always has a cut point);
        # the last match in a suffix is the last one overall. Lookbehinds see text before `start`.
        window = 4096
        while True:
            start = max(pattern_from, len(text) - window)
            last = None
            for last in _SAFE_CUT.finditer(text, start):
                pass
            if last is not None and last.start() > 0:
                return last.start(), (0, 0)
            if start == pattern_from:
                break
            window *= 8
        pattern_from = max(pattern_from, len(text) - _SAFE_CUT_REACH)
    return 0, (special_from, pattern_from)


def iter_file_texts(paths: Sequence[str | os.PathLike], pattern: str, specials: Sequence[str],
                    chunk_bytes: int | None = None, on_bytes: Callable[[int], None] | None = None) -> Iterator[str]:
    """Yield the files' text in chunks of about `chunk_bytes`, each cut at a safe place (see module docstring).

    Each file ends its last chunk (files are separate documents). `on_bytes(n)` is called as bytes are read.
    """
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    for path in paths:
        decoder = codecs.getincrementaldecoder("utf-8")(errors=REPLACEMENT_ERRORS)
        buf = ""
        resume = (0, 0)
        with open(path, "rb") as f:
            while True:
                raw = f.read(chunk_bytes)
                if on_bytes is not None:
                    on_bytes(len(raw))
                buf += decoder.decode(raw, final=not raw)
                if not raw:
                    break
                if len(buf) < chunk_bytes:
                    continue
                cut, resume = find_cut(buf, pattern, specials, resume)
                if cut > 0:
                    yield buf[:cut]
                    buf = buf[cut:]
        if buf:
            yield buf


def count_texts(texts: Sequence[str], pattern: str, specials: Sequence[str]) -> Counter[str]:
    """{pre-token: count} over `texts`, each one document; specials are cut out and not counted.

    >>> count_texts(["a a<|endoftext|>a"], PATTERNS["gpt2"], ["<|endoftext|>"])
    Counter({'a': 2, ' a': 1})
    """
    split = splitter(pattern)  # = regex findall, with a faster path for ASCII text under gpt2/gpt4
    counts: Counter[str] = Counter()
    for text in texts:
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:  # surrogates: fixed before splitting, exactly as the encoder does
                text = fix_surrogates(text)
        for piece, is_special in split_special(text, specials):
            if is_special:
                continue
            # split() returns a list of every pre-token: feed it slices, to keep that list small
            for part in _split_long(piece, pattern, (), SLICE_CHARS) if len(piece) > 2 * SLICE_CHARS else (piece,):
                counts.update(split(part))
    return counts


def batch_texts(texts: Iterable[str], pattern: str, specials: Sequence[str],
                batch_chars: int | None = None) -> Iterator[list[str]]:
    """Group strings into lists of about `batch_chars` characters (one worker task each). A string longer than
    twice that is cut at safe places (`find_cut`) first, so one huge document is still counted in parallel."""
    batch_chars = batch_chars or CHUNK_BYTES
    batch: list[str] = []
    size = 0
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"training texts must be str, got {type(text).__name__}")
        for piece in _split_long(text, pattern, specials, batch_chars):
            batch.append(piece)
            size += len(piece)
            if size >= batch_chars:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _split_long(text: str, pattern: str, specials: Sequence[str], size: int) -> Iterator[str]:
    """`text` in pieces of about `size` (at least `size`, cut at `find_cut` places) that join back to it."""
    if not specials and pattern not in _CUTTABLE:
        yield text  # no cut point can ever be found
        return
    pos = 0
    while len(text) - pos > 2 * size:
        end = pos + size
        cut, resume = 0, (0, 0)
        while end < len(text):
            cut, resume = find_cut(text[pos:end], pattern, specials, resume)
            if cut:
                break
            end += size
        if not cut:
            break
        yield text[pos:pos + cut]
        pos += cut
    yield text[pos:]


def count_batches(batches: Iterable[list[str]], pattern: str, specials: Sequence[str], workers: int,
                  on_batch: Callable[[int], None] | None = None) -> Counter[str]:
    """Add up `count_texts` over `batches`, in `workers` processes (in this process when workers == 1 or there
    are fewer than MIN_POOL_TASKS batches). `on_batch(n_texts)` is called as each batch is done."""
    total: Counter[str] = Counter()
    batches = iter(batches)
    first = list(islice(batches, MIN_POOL_TASKS))
    few = len(first) < MIN_POOL_TASKS
    batches = chain(first, batches)
    del first
    if workers <= 1 or few:  # a worker pool would cost more (start-up time, memory) than it saves
        for batch in batches:
            total.update(count_texts(batch, pattern, specials))
            if on_batch is not None:
                on_batch(len(batch))
        return total
    # Tasks are read lazily (one per worker in flight, one ahead): memory stays flat whatever the corpus size.
    sizes: list[int] = []  # number of texts in each task, for on_batch

    def tasks() -> Iterator[tuple]:
        for batch in batches:
            sizes.append(len(batch))
            yield batch, pattern, tuple(specials)

    with WorkerPool(workers) as pool:
        for i, counts in pool.imap_unordered(count_texts, tasks()):
            total.update(counts)
            del counts
            if on_batch is not None:
                on_batch(sizes[i])
    return total


def to_byte_counts(counts: Counter[str]) -> dict[bytes, int]:
    """{pre-token str: count} -> {UTF-8 bytes: count}, emptying `counts` as it goes (so the two maps are never
    both whole in memory). `count_texts` has already fixed surrogates, so every pre-token is valid text."""
    out: dict[bytes, int] = {}
    while counts:
        word, n = counts.popitem()
        out[word.encode("utf-8")] = n
    return out


def replaced_count() -> int:
    """Invalid UTF-8 sequences replaced since import by the readers that use REPLACEMENT_ERRORS (the training
    file reader here, `stream.iter_binary_text`); read it before and after a run."""
    return _replaced[0]
