"""Judge a finished finding sweep: its report, the finding's own measurement, the rule's verdict and the doc.

    rc = judge(finding, sweep_dir, meta, doc_path, point_overrides)   # 0 done, 1 no run to judge / some runs faulty

`meta` is the sweep's finding.json (cli.py writes it before the sweep); judge() adds what the doc needs (the first
run's config, the budget, the data actually used with its sha256, the setup check as the files are now, the cost
and the data seen (budget.py), and for a tuned sweep its tuning section (tuned.py)) and writes it back. A tuned
sweep is compared on its final runs only; its tuning runs go to the rule apart (Evidence.tuning_records).
A smoke sweep is judged for its pipeline only: its doc says "pipeline OK" or "pipeline failed" (failed or
interrupted runs, a failed measurement, a rule that raised) and shows no verdict.
Not handled: running the sweep or reading arguments (cli.py), rendering (doc.py).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import registration
from experiments.findings.budget import cost, data_seen
from experiments.findings.data import used_data
from experiments.findings.doc import render_doc, shell_join, write_doc
from experiments.findings.evidence import Evidence, matches, records_from_groups
from experiments.findings.registry import Finding, versions
from experiments.findings.tuned import split_sweep, tuning_meta
from experiments.rundir.layout import RunStatus

RESULTS = tuple(s for s in RunStatus if s.has_result)    # completed, diverged: what a verdict is judged on
FAULTS = tuple(s for s in RunStatus if not s.has_result)  # failed, interrupted, running: the command exits 1


def _setup_now(f: Finding) -> dict[str, Any] | None:
    """The registration check as the files are now (None when the record is unreadable: the doc then shows only
    the run-time check)."""
    try:
        return registration.check(f.name, f.extra_files).to_meta()
    except registration.RegistrationError as e:
        print(f"findings: warning: {e}", file=sys.stderr)
        return None


def smoke_problems(runs: list, extra: dict[str, Any] | None) -> list[str]:
    """What failed in a smoke sweep, for the doc's "Pipeline failed" line (empty: pipeline OK)."""
    problems = [f"run `{r.name}` {r.status}" + (f" ({r.reason[:200]})" if r.reason else "")
                for r in runs if r.status in FAULTS]
    if extra and extra.get("error"):
        problems.append(f"the measurement failed ({extra['error']})")
    return problems


def judge(f: Finding, sweep_dir: Path, meta: dict[str, Any], doc_path: Path, overrides: Sequence[str]) -> int:
    """Report, measurement, rule and doc for a finished sweep; returns the exit status. `overrides`: one sweep
    point's settings (cli.point_overrides), for the finding's measurement."""
    from experiments.compare import RunsError, build_report, check_keys, group_runs, read_runs
    from experiments.compare.stats import budgets
    from experiments.compare.tables import budget_text

    try:
        runs = read_runs([str(sweep_dir)])
    except RunsError as e:
        print(f"findings: error: the sweep produced no runs ({e}); training exit status {meta.get('train_rc')}",
              file=sys.stderr)
        return 1
    try:
        part = split_sweep(sweep_dir, runs)  # a tuned sweep: its final runs are compared, its tuning runs read apart
    except RunsError as e:
        print(f"findings: error: {e}", file=sys.stderr)
        return 1
    produced = [r for r in part.finals if r.status in RESULTS]
    if not produced:
        reasons = "; ".join(dict.fromkeys(f"{r.status}: {r.reason}" for r in runs))
        print(f"findings: error: no run completed or diverged in {sweep_dir} ({len(runs)} runs; {reasons[:300]})",
              file=sys.stderr)
        return 1
    by = list(f.by)
    try:
        check_keys(runs, by)
    except RunsError as e:
        print(f"findings: error: {e}", file=sys.stderr)
        return 1
    groups = group_runs(part.finals, by)
    base = next((g.index for g in groups if matches(dict(zip(by, g.values)), f.baseline)), None)
    extra = None
    if f.measure is not None:
        print(f"findings: {f.name}: its own measurement ({f.measure.__module__}.measure) ...", file=sys.stderr,
              flush=True)
        try:
            extra = f.measure(list(overrides), bool(meta.get("smoke")), sweep_dir / "init")
        except Exception as e:  # the sweep's part of the verdict still stands; the doc says the measurement failed
            extra = {"rows": [], "error": f"{type(e).__name__}: {e}"}
            print(f"findings: warning: the measurement failed ({extra['error']})", file=sys.stderr)
    command = shell_join(["python", "-m", "experiments.train", *meta["train_argv"]])
    try:  # a tuned sweep is read from its dir, so that the report finds tuning.json (its final runs, basin.png)
        report = (build_report([str(sweep_dir)], out_dir=sweep_dir / "report", by=by, baseline=base, command=command)
                  if part.tuned else
                  build_report(None, out_dir=sweep_dir / "report", by=by, runs=runs, baseline=base, command=command))
    except RunsError as e:
        print(f"findings: error: the report was not built: {e}", file=sys.stderr)
        return 1
    comparison = json.loads((report.parent / "comparison.json").read_text())
    records = records_from_groups(groups, by)
    tuning_records = records_from_groups(group_runs(part.tuning, by), by) if part.tuning else []
    smoke = bool(meta.get("smoke"))
    problems = smoke_problems(runs, extra) if smoke else []
    try:
        verdict = f.rule(Evidence(comparison, records, extra, part.record, tuning_records))
    except Exception as e:  # a smoke run reports it as the pipeline's failure; a full run's rule must not fail
        if not smoke:
            raise
        verdict, problems = None, [*problems, f"the rule raised {type(e).__name__}: {e}"]
    first = produced[0]
    config = {k: v for k, v in first.flat.items() if not k.startswith(("hydra", "logger"))}
    meta.update({"by": by, "config": config, "budget_text": budget_text({"budget": budgets(groups)}),
                 "device": first.summary.get("device"), "generated": time.strftime("%Y-%m-%d %H:%M"),
                 "verdict": None if smoke else verdict.outcome, "key_number": None if smoke else verdict.key_number,
                 "doc": str(doc_path), "data": meta.get("data") or used_data(config),
                 "setup_doc": _setup_now(f), "tuning": tuning_meta(part, comparison),
                 "protocol": comparison.get("protocol"), "seen": data_seen(records, tuning_records),
                 "cost": cost(records, tuning_records, meta.get("wall_s"), meta.get("cpus")).to_meta()})
    if smoke:
        meta["pipeline"] = {"ok": not problems, "problems": problems}
    sources = {p.name: p for p in report.parent.glob("*.png")}
    if extra and extra.get("figure"):
        sources[extra["figure"]] = sweep_dir / "init" / extra["figure"]
    names = versions(f.name)
    newer = names[names.index(f.name) + 1:]
    write_doc(doc_path, lambda figs, fig_dir: render_doc(f, verdict, comparison, records, meta, figs, fig_dir, newer),
              [sources[name] for name in f.figures if name in sources])
    (sweep_dir / "finding.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    said = (f"pipeline {'failed' if problems else 'OK'} (smoke run: no verdict)" if smoke else
            f"{verdict.outcome} ({verdict.key_number})")
    print(f"findings: {f.name}: {said}", file=sys.stderr)
    print(doc_path)
    faults = [r for r in runs if r.status in FAULTS]
    if faults:
        print(f"findings: error: {len(faults)} of {len(runs)} runs did not complete "
              f"({', '.join(sorted({r.status for r in faults}))}); the doc covers the others: {doc_path}", file=sys.stderr)
        return 1
    return 0
