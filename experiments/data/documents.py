"""Documents: a text file cut into documents at separator lines, the train / val / test choice of whole documents,
and the record of that choice.

    split_on_separator("a\\n<|endoftext|>\\nb", "<|endoftext|>")   # ['a', 'b']
    assign_documents(99, val_fraction=0.1, test_fraction=0.1)      # (train, val, test) document indices
    split_record(docs, train, val, test, ...)                       # counts, bytes, indices: what a doc states

Separator (`data.doc_separator`): a line holding exactly the separator text (a trailing `\\r` allowed: CRLF files)
ends a document; that line and the line break on each side of it belong to no document, so
`split_on_separator("\\n<|endoftext|>\\n".join(docs), "<|endoftext|>") == docs` for documents that hold no such
line (shared/data's concatenated corpora are written that way). Empty documents (a separator first, last or twice in
a row) are dropped. A separator inside a line is ordinary text.

Which documents are held out (`split_by=documents`): with h = val_fraction + test_fraction, document i is held out
when floor((i+1)·h) > floor(i·h) (every ~1/h-th document, evenly spread: the rule validation used alone before a
test split existed); the j-th held-out document goes to test when floor((j+1)·t) > floor(j·t), t =
test_fraction / h, and to validation otherwise, so validation and test alternate along the corpus. With
test_fraction = 0 this is exactly the earlier validation choice. Each document is in exactly one split, whole.
Not handled: choosing documents by length or by topic; a test split for split_by=stream (refused by
experiments.data.corpus.check_source: a cut text is not whole documents).
"""

from __future__ import annotations

from typing import Any

from experiments.config.errors import ConfigError

MAX_LISTED = 1000  # held-out document indices listed in the record up to this many per split (counts always)


def split_on_separator(text: str, separator: str) -> list[str]:
    """The non-empty documents of `text`, cut at every line that holds exactly `separator` (see the module doc).

    >>> split_on_separator("a\\nb\\n<|endoftext|>\\nc\\n<|endoftext|>\\n", "<|endoftext|>")
    ['a\\nb', 'c']
    >>> split_on_separator("x <|endoftext|> y", "<|endoftext|>")
    ['x <|endoftext|> y']
    """
    docs, lines = [], []
    for line in text.split("\n"):
        if line == separator or line == separator + "\r":
            if lines and lines[-1].endswith("\r"):  # CRLF: the \r before the separator's line break is its own
                lines[-1] = lines[-1][:-1]
            docs.append("\n".join(lines))
            lines = []
        else:
            lines.append(line)
    docs.append("\n".join(lines))
    return [d for d in docs if d]


def held_out_indices(n: int, fraction: float) -> list[int]:
    """The indices i < n with floor((i+1)·fraction) > floor(i·fraction): floor(n·fraction) of them, evenly spread.

    >>> held_out_indices(10, 0.25)
    [3, 7]
    """
    return [i for i in range(n) if int((i + 1) * fraction) > int(i * fraction)]


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    """ConfigError unless val_fraction + test_fraction < 1 (some documents must train)."""
    if val_fraction + test_fraction >= 1.0:
        raise ConfigError(f"data.test_fraction: data.val_fraction + data.test_fraction must be < 1 (some documents "
                          f"must train), got {val_fraction} + {test_fraction}")


def assign_documents(n: int, val_fraction: float, test_fraction: float = 0.0) -> tuple[list[int], list[int], list[int]]:
    """(train, val, test) indices of n documents, each sorted, disjoint, together range(n) (see the module doc).
    ConfigError when a split that is asked for gets no document.

    >>> assign_documents(10, 0.2, 0.2)
    ([0, 1, 3, 5, 6, 8], [2, 7], [4, 9])
    """
    check_fractions(val_fraction, test_fraction)
    held = held_out_indices(n, val_fraction + test_fraction)
    if test_fraction <= 0:
        test: list[int] = []
    else:
        test = [held[j] for j in held_out_indices(len(held), test_fraction / (val_fraction + test_fraction))]
    chosen = set(test)
    val = [i for i in held if i not in chosen]
    for what, idx, fraction in (("val", val, val_fraction), ("test", test, test_fraction)):
        if fraction > 0 and not idx:
            raise ConfigError(f"data.{what}_fraction: {fraction} of {n} documents gives the {what} split no whole "
                              f"document; raise it (or data.val_fraction + data.test_fraction) so that each gets one")
    held_set = set(held)
    return [i for i in range(n) if i not in held_set], val, test


def _utf8_len(doc: str) -> int:
    return len(doc.encode("utf-8", errors="surrogatepass"))


def split_record(docs: list[str], train: list[int], val: list[int], test: list[int], *, split_by: str,
                 val_fraction: float, test_fraction: float, separator: str | None) -> dict[str, Any]:
    """What a doc states about a documents split: the rule, and per split its document count, UTF-8 bytes and (up to
    MAX_LISTED) the document indices in source order (0-based)."""
    out: dict[str, Any] = {"split_by": split_by, "documents": len(docs), "doc_separator": separator,
                           "val_fraction": val_fraction, "test_fraction": test_fraction}
    for name, idx in (("train", train), ("val", val), ("test", test)):
        part: dict[str, Any] = {"documents": len(idx), "bytes": sum(_utf8_len(docs[i]) for i in idx)}
        if name != "train" and len(idx) <= MAX_LISTED:
            part["indices"] = list(idx)
        out[name] = part
    return out


def stream_record(docs: list[str], train: list[str], val: list[str], *, val_fraction: float,
                  separator: str | None) -> dict[str, Any]:
    """The record of a split_by=stream split: the documents read, and each side's pieces and UTF-8 bytes (the cut
    document is in both)."""
    return {"split_by": "stream", "documents": len(docs), "doc_separator": separator, "val_fraction": val_fraction,
            "test_fraction": 0.0,
            **{name: {"documents": len(part), "bytes": sum(map(_utf8_len, part))}
               for name, part in (("train", train), ("val", val))}}
