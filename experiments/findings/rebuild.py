"""The findings commands that write a doc again without training, and where a doc goes.

    python -m experiments.findings NAME --from-sweep multirun/findings/NAME/<time>   # judge that sweep dir again
    python -m experiments.findings NAME --from-data [--doc PATH] [--docs-dir DIR]    # from DIR/NAME/data.json alone

--from-sweep (from_sweep) judges an earlier sweep dir of this finding again: its report, measurement, data and doc
(judge.py), under the sweep dir's lock (out_dir.py). --from-data (from_data) reads the finding's data file,
`<docs-dir>/<name>/data.json` (docs/findings/<name>/data.json: the one a full run commits), and builds the doc and
its figures from it alone (from_data.build): no training, no measurement, no data file of ../shared/data, nothing
written but the doc (default `<docs-dir>/<name>.md`) and its figure dir. Bad input is one line `findings: error: ...`
(exit 2) before anything is written: options that belong to a run, no data file, a file that is not readable JSON,
not a finding's data or of another version of the format, the data of another finding (or of a version of this
finding grouped by other keys), a smoke run's data with a doc inside docs/findings/.
Not handled: running or judging (cli.py, judge.py); a data file elsewhere than <docs-dir>/<name>/ (copy it there,
or point --docs-dir at its parent's parent).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.findings import rundata
from experiments.findings.attempts import settled
from experiments.findings.from_data import build
from experiments.findings.judge import judge
from experiments.findings.out_dir import OutDir
from experiments.findings.registry import Finding
from tokenizer.cli_args import UsageError

DOCS_DIR = Path("docs") / "findings"  # relative to the cwd, like multirun/; the repo root in practice
REPO_DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings"


def inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def doc_path(f: Finding, args: argparse.Namespace, sweep_dir: Path, smoke: bool) -> Path:
    """--doc, else <docs-dir>/<name>.md, else for a smoke run <sweep dir>/<name>.md; UsageError for a smoke doc
    inside docs/findings/ (a smoke run is not a result)."""
    doc = args.doc or (sweep_dir / f"{f.name}.md" if smoke else args.docs_dir / f"{f.name}.md")
    if smoke and any(inside(doc, d) for d in {DOCS_DIR, REPO_DOCS, args.docs_dir}):
        raise UsageError(f"--smoke never writes into {args.docs_dir}/ (a smoke run is not a result); "
                         f"--doc {doc} is inside it")
    return doc


def read_meta(f: Finding, sweep_dir: Path, option: str) -> dict[str, Any]:
    """The finding.json of an earlier run of finding `f` in sweep_dir; UsageError naming `option` otherwise."""
    try:
        meta = json.loads((sweep_dir / "finding.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"{option} {sweep_dir}: no readable finding.json (not a findings sweep dir)") from None
    if meta.get("name") != f.name:
        raise UsageError(f"{option} {sweep_dir} holds finding {meta.get('name')!r}, not {f.name!r}")
    return meta


def from_sweep(f: Finding, args: argparse.Namespace, point_overrides) -> int:
    """--from-sweep: the report, data and doc of an earlier run of this finding, without training.
    `point_overrides`: cli.point_overrides (one sweep point's settings, for the measurement)."""
    sweep_dir = args.from_sweep
    with OutDir(sweep_dir, fresh=False, option="--from-sweep") as out:
        meta = read_meta(f, sweep_dir, "--from-sweep")
        if args.overrides or args.smoke or args.out_dir or args.data_file is not None or args.from_data:
            raise UsageError("--from-sweep takes no overrides, --smoke, --data-file, --out-dir or --from-data (they "
                             "are those of the earlier run)")
        path = doc_path(f, args, sweep_dir, bool(meta.get("smoke")))
        rc = judge(f, sweep_dir, settled(meta), path, point_overrides(meta.get("overrides", [])))
        out.keep()
        return rc


def from_data(f: Finding, args: argparse.Namespace) -> int:
    """--from-data: the doc and figures of f from <docs-dir>/<name>/data.json alone (module docstring)."""
    if args.overrides or args.smoke or args.jobs is not None or args.packed or args.data_file is not None \
            or args.out_dir or args.resume or args.from_sweep or args.register or args.note is not None:
        raise UsageError("--from-data takes no overrides, --smoke, --jobs, --packed, --data-file, --out-dir, --resume, "
                         "--from-sweep, --register or --note (the data holds the run); only --doc and --docs-dir")
    path = Path(args.docs_dir) / f.name / rundata.DATA_NAME
    try:
        data = rundata.load(path, f.name)
    except rundata.DataError as e:
        raise UsageError(str(e)) from None
    if data["by"] != list(f.by):
        raise UsageError(f"{path}: its runs are grouped by {', '.join(data['by']) or 'nothing'}, {f.name} by "
                         f"{', '.join(f.by)}: not data of this finding's setup")
    doc = args.doc or Path(args.docs_dir) / f"{f.name}.md"
    if data["meta"].get("smoke") and any(inside(doc, d) for d in (DOCS_DIR, REPO_DOCS)):
        raise UsageError(f"{path} is a smoke run's data, and a smoke doc never goes into {DOCS_DIR}/ (a smoke run "
                         f"is not a result): pass --doc outside it")
    if inside(doc, path) or doc.resolve() == path.resolve():
        raise UsageError(f"--doc {doc} would replace the data file")
    return build(f, data, doc)[0]
