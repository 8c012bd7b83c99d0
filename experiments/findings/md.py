"""Markdown pieces the finding docs share.

    md_table(["group", "n"], [["pos=rope", 3]])   # -> ["| group | n |", "|---|---|", "| pos=rope | 3 |"]

Not handled: alignment, escaping beyond `|` and newlines in a cell.
"""

from __future__ import annotations

from typing import Any, Sequence


def cell(s: Any) -> str:
    """A table cell: `|` escaped, newlines as spaces."""
    return str(s).replace("|", "\\|").replace("\n", " ")


def md_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
