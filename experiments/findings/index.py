"""The findings index: the table of docs/findings/README.md, one row per finding at its latest version, and the
pointers that earlier versions' docs carry to the newer ones.

    write_index(list(FINDINGS.values()), Path("docs/findings"))   # the README's table + the pointers

Each row reads only the metadata comment of the docs present (doc.py writes it as the doc's first line): the latest
version that has a full-run doc, its verdict and key number ("not run yet" when no version has one; smoke docs never
count), the newer versions without a doc named with their registration state, its setup check
("unchanged since registration on <date>", or "not recorded" for docs written before registration existed), and
links to the earlier versions' docs with their verdicts. An earlier version's doc gets, between the
newer-version markers under its title, one line linking the newer versions that have a full-run doc; nothing else in it changes.
Not handled: the docs' prose (doc.py), which versions exist (registry.versions).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.doc import NEWER_END, NEWER_START, md_table, newer_block
from experiments.findings.doc_meta import META_RE, read_meta  # noqa: F401 (META_RE: the tests read docs with it)
from experiments.findings.registry import Finding, split_version

INDEX_START, INDEX_END = "<!-- findings-index:start -->", "<!-- findings-index:end -->"


def _full_run(docs_dir: Path, name: str) -> dict[str, Any] | None:
    """The metadata of name's doc when it is a full-run doc, else None."""
    meta = read_meta(docs_dir / f"{name}.md")
    return meta if meta and not meta.get("smoke") else None


def by_base(findings: Sequence[Finding]) -> dict[str, list[Finding]]:
    """The findings grouped by base name (first appearance order), each group oldest version first."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(split_version(f.name)[0], []).append(f)
    return {b: sorted(fs, key=lambda f: split_version(f.name)[1]) for b, fs in groups.items()}


def _setup_cell(meta: dict[str, Any] | None) -> str:
    if meta is None:
        return "—"
    status = meta.get("setup", "not recorded")
    if status == "not recorded":
        return "not recorded (written before registration existed)"
    return f"{status} since registration on {meta.get('registered')}" if meta.get("registered") else status


def _not_run(f: Finding) -> str:
    """`name` (registered <date>, not run yet) | (not registered yet): a version without a full-run doc."""
    from experiments.findings.registration import RegistrationError, load

    try:
        record = load(f.name)
    except RegistrationError:
        record = None
    state = f"registered {record['registered']}, not run yet" if record else "not registered yet"
    return f"`{f.name}` ({state})"


def index_table(findings: Sequence[Finding], docs_dir: Path) -> list[str]:
    """One row per finding: its latest version with a full-run doc (else its latest version, "not run yet"); the
    versions after it that have none are named in the doc cell with their registration state."""
    rows = []
    for versions in by_base(findings).values():
        run = [f for f in versions if _full_run(docs_dir, f.name)]
        latest = run[-1] if run else versions[-1]
        meta = _full_run(docs_dir, latest.name)
        at = versions.index(latest)
        earlier = [f"[{f.name}.md]({f.name}.md) ({m.get('verdict')})" for f in versions[:at]
                   if (m := _full_run(docs_dir, f.name))]
        newer = [_not_run(f) for f in versions[at + 1:]]
        doc = f"[{latest.name}.md]({latest.name}.md)" if meta else f"`{latest.name}`"
        doc += f"; earlier: {', '.join(earlier)}" if earlier else ""
        doc += f"; newer: {', '.join(newer)}" if newer else ""
        verdict = f"**{meta.get('verdict')}**" if meta else "not run yet"
        rows.append([latest.title, latest.paper, verdict, meta.get("key_number", "—") if meta else "—", doc,
                     _setup_cell(meta)])
    return md_table(["claim", "paper", "verdict", "key number (95% CI)", "doc", "setup"], rows)


def mark_superseded(findings: Sequence[Finding], docs_dir: Path) -> list[Path]:
    """Write the newer-version pointer into each earlier version's doc present (replacing the text between the
    markers, or inserting them under the title); a doc whose pointer is already current keeps its bytes. Returns
    the docs rewritten."""
    written = []
    for versions in by_base(findings).values():
        for i, f in enumerate(versions[:-1]):
            path = Path(docs_dir) / f"{f.name}.md"
            if not path.is_file():
                continue
            text = path.read_text()
            newer = [g.name for g in versions[i + 1:] if _full_run(docs_dir, g.name)]  # never a link to no doc
            if not newer:
                continue
            block = "\n".join(newer_block(newer)[:-1])
            if NEWER_START in text and NEWER_END in text:
                before, rest = text.split(NEWER_START, 1)
                new = before + block + rest.split(NEWER_END, 1)[1]
            else:
                m = re.search(r"^# .*\n", text, re.M)
                at = m.end() if m else 0
                new = text[:at] + "\n" + block + "\n" + text[at:]
            if new != text:
                path.write_text(new)
                written.append(path)
    return written


def write_index(findings: Sequence[Finding], docs_dir: Path) -> Path:
    """Rewrite the table between the index markers of docs_dir/README.md (create the file, or append the markers,
    when missing; nothing else in the README changes) and the earlier versions' pointers. Returns the README."""
    docs_dir = Path(docs_dir)
    docs_dir.mkdir(parents=True, exist_ok=True)
    mark_superseded(findings, docs_dir)
    path = docs_dir / "README.md"
    block = "\n".join([INDEX_START, *index_table(findings, docs_dir), INDEX_END])
    text = path.read_text() if path.is_file() else "# Findings\n\n"
    if INDEX_START in text and INDEX_END in text:
        before, rest = text.split(INDEX_START, 1)
        after = rest.split(INDEX_END, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
    return path
