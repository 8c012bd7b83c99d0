"""The doc's provenance bullets: the code and the machine that trained a finding's runs, from the provenance record
the findings command kept when the sweep started (provenance.py; meta["provenance"] in finding.json and the data).

    provenance_lines(meta)   # "- Code: git commit ..., setup hash ...", "- Since registration: ...", "- Software ..."

States: the git commit and whether the tree was dirty (naming up to SHOWN of the tracked files that differed), the
setup hash with how to recompute it, the files outside the finding's own that changed between the registration and
the run (or that the registration did not record the code, for registrations made before it did), Python, torch, the
CPU model and GPU, the threads per run (meta["threads"], from the runs' summaries), and a resumed attempt's code when
it differed. A sweep without the record (started before it existed) gets one line saying so.
Not handled: computing any of it (provenance.py at run time, from_data.py for the threads).
"""

from __future__ import annotations

from typing import Any

SHOWN = 12  # files named in a list before "and N more"


def _files(paths: list[str], notes: list[str] | None = None) -> str:
    """`a`, `b` (note), ... and N more."""
    notes = notes or [""] * len(paths)
    shown = ", ".join(f"`{p}`" + (f" ({n})" if n else "") for p, n in zip(paths[:SHOWN], notes))
    return shown + (f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else "")


def _code(p: dict[str, Any]) -> str:
    tree = p.get("tree") or {}
    dirs = ", ".join(f"{d}/" for d in tree.get("dirs", []))
    if p.get("commit") is None:
        where = "not a git checkout (every file under those dirs was hashed)"
    elif p.get("dirty"):
        files = p.get("dirty_files") or []
        where = (f"git commit `{p['commit']}`, the tree dirty: {len(files)} tracked file"
                 f"{'s' if len(files) != 1 else ''} differed from it ({_files(files)})")
    else:
        where = f"git commit `{p['commit']}`, the tree clean"
    return (f"- Code: {where}. Setup hash `{tree.get('sha256')}`: the sha256 of the sha256sum listing of the "
            f"{tree.get('files')} git-tracked files under {dirs} as they were when the sweep started (in a checkout "
            "of that state: `git ls-files -z arch tokenizer experiments conf | xargs -0 sha256sum | sha256sum`).")


def _since(p: dict[str, Any], registered: str | None) -> str:
    since = p.get("since_registration") or {}
    when = f" on {registered}" if registered else ""
    if not since.get("recorded"):
        return (f"- Since the registration{when}: not known: the registration did not record the code outside the "
                "finding's own files (registrations made before the setup hash existed do not).")
    changed = since.get("changed") or []
    if not changed:
        return (f"- Since the registration{when}: no file under those dirs changed outside the finding's own files "
                f"(the registration's setup hash `{since.get('sha256')}`).")
    listed = _files([c["path"] for c in changed], [c["change"] for c in changed])
    return (f"- Since the registration{when}: {len(changed)} file{'s' if len(changed) != 1 else ''} outside the "
            f"finding's own changed (registered setup hash `{since.get('sha256')}`): {listed}.")


def provenance_lines(meta: dict[str, Any]) -> list[str]:
    """The bullets (module docstring); one line when the sweep recorded no provenance."""
    p = meta.get("provenance")
    if not p:
        return ["- Provenance (commit, setup hash, software, machine): not recorded (the sweep started before the "
                "findings command recorded it)."]
    threads = meta.get("threads") or []
    gpu = ", ".join(p["gpu"]) if p.get("gpu") else "none"
    lines = [_code(p), _since(p, (meta.get("setup") or {}).get("registered")),
             f"- Software and machine: Python {p.get('python')}, torch {p.get('torch') or 'not installed'}; "
             f"{p.get('platform') or ''}, CPU {p.get('cpu')}; GPU {gpu}; torch threads per run: "
             f"{', '.join(map(str, threads)) or 'not recorded'} (the runs' summary.json `num_threads`)."]
    resumed = [a for a in p.get("resumed") or [] if a.get("tree_sha256") != (p.get("tree") or {}).get("sha256")]
    if resumed:
        lines.append(f"- Resumed with other code: {len(resumed)} later attempt{'s' if len(resumed) != 1 else ''} "
                     "started from a different tree (setup hash " + ", ".join(f"`{a['tree_sha256']}` at "
                                                                               f"`{a.get('commit')}`" for a in resumed)
                     + "), so the runs they continued or started trained on that code.")
    elif p.get("resumed"):
        lines.append(f"- Resumed {len(p['resumed'])} time{'s' if len(p['resumed']) != 1 else ''}, each with the same "
                     "setup hash.")
    return lines
