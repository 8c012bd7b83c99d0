"""Judge a finished finding sweep: its report for humans, the finding's own measurement, its data, and from the data
alone the verdict and the doc.

    rc = judge(finding, sweep_dir, meta, doc_path, point_overrides)   # 0 done, 1 no run to judge / some runs faulty

`meta` is the sweep's finding.json (cli.py writes it before the sweep, with the provenance of the code that trains
the runs); judge() adds what only the real sweep and this moment can say (the data actually used with its sha256,
the setup check as the files are now, the time the doc is generated), runs the measurement, exports the sweep as
data (rundata.py) and writes it to data_path(), then builds the report, verdict, doc and figures FROM that data
(from_data.build), so that `--from-data` later gives the same doc. The real sweep dir still gets its own report/
(its full curves, for a human who looks at the runs), and its finding.json gets the judged meta back.
Where the data goes: beside the doc's figures, `<doc without .md>/data.json` (docs/findings/<name>/data.json for a
full run); a smoke sweep's always into its sweep dir, `<sweep dir>/<name>/data.json`, whatever --doc says.
A tuned sweep is compared on its final runs only; its tuning runs go to the rule apart (Evidence.tuning_records).
Not handled: running the sweep or reading arguments (cli.py), rendering (doc.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import registration, rundata
from experiments.findings.data import used_data
from experiments.findings.doc import shell_join
from experiments.findings.evidence import matches
from experiments.findings.from_data import FAULTS, RESULTS, build, smoke_problems  # noqa: F401 (the tests' names)
from experiments.findings.registry import Finding
from experiments.findings.tuned import split_sweep


def _setup_now(f: Finding) -> dict[str, Any] | None:
    """The registration check as the files are now (None when the record is unreadable: the doc then shows only
    the run-time check)."""
    try:
        return registration.check(f.name, f.extra_files).to_meta()
    except registration.RegistrationError as e:
        print(f"findings: warning: {e}", file=sys.stderr)
        return None


def data_path(f: Finding, sweep_dir: Path, doc_path: Path, smoke: bool) -> Path:
    """Where judge() writes the sweep's data (module docstring)."""
    return (Path(sweep_dir) / f.name if smoke else Path(doc_path).with_suffix("")) / rundata.DATA_NAME


def judge(f: Finding, sweep_dir: Path, meta: dict[str, Any], doc_path: Path, overrides: Sequence[str]) -> int:
    """Report, measurement, data, rule and doc for a finished sweep; returns the exit status. `overrides`: one sweep
    point's settings (cli.point_overrides), for the finding's measurement."""
    from experiments.compare import RunsError, build_report, check_keys, group_runs, read_runs

    try:
        runs = read_runs([str(sweep_dir)])
    except RunsError as e:
        print(f"findings: error: the sweep produced no runs ({e}); training exit status {meta.get('train_rc')}",
              file=sys.stderr)
        return 1
    try:
        part = split_sweep(sweep_dir, runs)
        produced = [r for r in part.finals if r.status in RESULTS]
        if not produced:
            reasons = "; ".join(dict.fromkeys(f"{r.status}: {r.reason}" for r in runs))
            raise RunsError(f"no run completed or diverged in {sweep_dir} ({len(runs)} runs; {reasons[:300]})")
        check_keys(runs, list(f.by))
    except RunsError as e:
        print(f"findings: error: {e}", file=sys.stderr)
        return 1
    extra = None
    if f.measure is not None:
        print(f"findings: {f.name}: its own measurement ({f.measure.__module__}.measure) ...", file=sys.stderr,
              flush=True)
        try:
            extra = f.measure(list(overrides), bool(meta.get("smoke")), sweep_dir / "init")
        except Exception as e:  # the sweep's part of the verdict still stands; the doc says the measurement failed
            extra = {"rows": [], "error": f"{type(e).__name__}: {e}"}
            print(f"findings: warning: the measurement failed ({extra['error']})", file=sys.stderr)
    by = list(f.by)
    groups = group_runs(part.finals, by)
    base = next((g.index for g in groups if matches(dict(zip(by, g.values)), f.baseline)), None)
    command = shell_join(["python", "-m", "experiments.train", *meta["train_argv"]])
    try:  # the humans' report, from the runs' full curves (a tuned sweep is read from its dir: tuning.json)
        kw = {"out_dir": sweep_dir / "report", "by": by, "baseline": base, "command": command, "metric": f.metric}
        build_report([str(sweep_dir)], **kw) if part.tuned else build_report(None, runs=runs, **kw)
    except RunsError as e:
        print(f"findings: error: the report was not built: {e}", file=sys.stderr)
        return 1
    config = {k: v for k, v in produced[0].flat.items() if not k.startswith(("hydra", "logger"))}
    meta = {**meta, "data": meta.get("data") or used_data(config), "setup_doc": _setup_now(f),
            "generated": time.strftime("%Y-%m-%d %H:%M")}
    data = rundata.export(sweep_dir, by=by, meta=meta, extra=extra, keys=rundata.curve_keys(f.figures))
    where = rundata.write(data, data_path(f, sweep_dir, doc_path, bool(meta.get("smoke"))))
    print(f"findings: {f.name}: its runs as data -> {where}", file=sys.stderr)
    rc, judged = build(f, data, doc_path)
    judged.update(extra=extra, curve_keys=data["curve"]["keys"], curve_points=data["curve"]["points"])
    (sweep_dir / "finding.json").write_text(json.dumps(judged, indent=2, default=str) + "\n")
    return rc
