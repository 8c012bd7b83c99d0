"""The embedded default corpus: real English text that ships inside every CPython install.

It is the text of Python's interactive help topics (`pydoc_data.topics`, the language reference sections that
`help("assignment")` shows): about 0.47 MB of technical English prose with code samples, 79 documents.
No download and no files outside the Python install are needed, so `make demo` and the lab's default data work
on a fresh machine with no network. Documents are returned in sorted-topic order, so the corpus is the same on
every run of the same Python version (it differs slightly between Python versions).
"""

from __future__ import annotations

from pydoc_data.topics import topics

EMBEDDED_NAME = "pydoc-topics"
DOC_SEPARATOR = "<|endoftext|>"


def embedded_documents() -> list[str]:
    """The documents of the embedded corpus, one string each, in a fixed order."""
    return [topics[key] for key in sorted(topics)]


def embedded_text(separator: str = DOC_SEPARATOR) -> str:
    """The whole embedded corpus as one string, documents joined by `separator` (an end-of-text token)."""
    return separator.join(embedded_documents())
