"""The metadata comment that opens every finding doc (docs/findings/<name>.md): its one writer and reader.

    meta_line({"name": "rope_vs_learned_v2", "verdict": "reproduced", ...})
        -> '<!-- archlab-finding: {"name": "rope_vs_learned_v2", "verdict": "reproduced", ...} -->'
    read_meta(Path("docs/findings/rope_vs_learned_v2.md"))   # that dict, or None

doc.py writes the line (its keys: name, verdict, key_number, smoke, pipeline, setup, registered, generated, runs);
index.py reads it for the findings table, and a finding that compares itself with another (kaplan_aspect_ratio_mup)
reads the other's verdict from it. This module imports nothing from the findings package, so a claim module can
use it without an import circle through the registry.
Not handled: the doc's prose (doc.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

META_RE = re.compile(r"^<!-- archlab-finding: (\{.*\}) -->$", re.M)


def meta_line(head: dict[str, Any]) -> str:
    """The doc's first line: `head` as JSON in an HTML comment (invisible when the markdown is rendered)."""
    return f"<!-- archlab-finding: {json.dumps(head, ensure_ascii=False)} -->"


def read_meta(doc_path: Path) -> dict[str, Any] | None:
    """The metadata comment of a finding doc, or None (no file, no comment, bad JSON)."""
    try:
        m = META_RE.search(Path(doc_path).read_text())
        return json.loads(m.group(1)) if m else None
    except (OSError, ValueError):
        return None
