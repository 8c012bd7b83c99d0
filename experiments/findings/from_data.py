"""A finding's report, verdict, doc and figures built from its data alone (rundata.py): what judge() does after every
run, and what `python -m experiments.findings NAME --from-data` does again from the committed file.

    rc, meta = build(finding, data, doc_path)   # 0 done, 1 no run to judge / some runs faulty; meta: finding.json's

The data is materialized into a temp dir that experiments.compare reads exactly as a sweep dir; the report
(comparison.json, figures), the records, the rule's verdict and every number of the doc come from there, and what
the doc says about the sweep beyond its runs (command, wall time, setup check, data used, provenance, the time the
doc was generated) comes from the data's meta, so the same data gives the same doc, byte for byte, on any machine
and at any time. The figures the doc shows are copied beside it, each with its plotted data (figdata.py). A
finding's measurement is not run again: its result is the data's `extra`, and its figure is redrawn from that result
(REDRAW) or, for a measurement that only reads the sweep's runs (FROM_RUNS), by the finding's measure() on the
materialized runs.
A smoke sweep is judged for its pipeline only: its doc says "pipeline OK" or "pipeline failed" (failed or
interrupted runs, a failed measurement, a rule that raised) and shows no verdict.
Not handled: reading or checking the data file (rundata.load), the real sweep (judge.py), rendering (doc.py). A
measurement figure named in neither REDRAW nor FROM_RUNS is not drawn (the doc says so).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from experiments.findings.budget import cost, data_seen
from experiments.findings.doc import render_doc, shell_join, write_doc
from experiments.findings.evidence import Evidence, matches, records_from_groups
from experiments.findings.figdata import capture
from experiments.findings.registry import Finding, versions
from experiments.findings.rundata import materialize
from experiments.findings.tuned import split_sweep, tuning_meta
from experiments.rundir.layout import RunStatus

RESULTS = tuple(s for s in RunStatus if s.has_result)    # completed, diverged: what a verdict is judged on
FAULTS = tuple(s for s in RunStatus if not s.has_result)  # failed, interrupted, running: the command exits 1
REDRAW = ("init_grad_norms.png", "encdec_grad_norms.png")  # drawn again from the measurement's result: plotters()
FROM_RUNS = ("mup_basin.png", "mup_transfer.png")  # drawn by the finding's measure() from the sweep's runs alone


def plotters() -> dict[str, Any]:
    """{figure name: plot(result, path)} of the measurements whose figure is drawn from their result (REDRAW)."""
    from experiments.findings import measure_encdec, measure_init

    return {"init_grad_norms.png": measure_init.plot, measure_encdec.FIGURE: measure_encdec.plot}


def smoke_problems(runs: list, extra: dict[str, Any] | None) -> list[str]:
    """What failed in a smoke sweep, for the doc's "Pipeline failed" line (empty: pipeline OK)."""
    problems = [f"run `{r.name}` {r.status}" + (f" ({r.reason[:200]})" if r.reason else "")
                for r in runs if r.status in FAULTS]
    if extra and extra.get("error"):
        problems.append(f"the measurement failed ({extra['error']})")
    return problems


def redraw(f: Finding, extra: dict[str, Any] | None, sweep_dir: Path, smoke: bool) -> Path | None:
    """The measurement's figure drawn again into sweep_dir/init (module docstring); None when there is none."""
    name = (extra or {}).get("figure")
    if not name or name not in f.figures or extra.get("error"):
        return None
    out = sweep_dir / "init"
    out.mkdir(parents=True, exist_ok=True)
    if name in REDRAW:
        plotters()[name](extra, out / name)
    elif name in FROM_RUNS and f.measure is not None:
        f.measure([], smoke, out)
    return out / name if (out / name).is_file() else None


def build(f: Finding, data: dict[str, Any], doc_path: Path) -> tuple[int, dict[str, Any]]:
    """The doc of `data` at doc_path (module docstring); (exit status, the sweep's finding.json as judged)."""
    with tempfile.TemporaryDirectory(prefix="findings-data-") as tmp:
        sweep = materialize(data, Path(tmp) / "sweep")
        return _build(f, data, sweep, Path(doc_path))


def _error(text: str, meta: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    print(f"findings: error: {text}", file=sys.stderr)
    return 1, meta


def _build(f: Finding, data: dict[str, Any], sweep: Path, doc_path: Path) -> tuple[int, dict[str, Any]]:
    from experiments.compare import RunsError, build_report, check_keys, group_runs, read_runs
    from experiments.compare.stats import budgets
    from experiments.compare.tables import budget_text

    meta, extra = dict(data["meta"]), data.get("extra")
    smoke = bool(meta.get("smoke"))
    try:
        runs = read_runs([str(sweep)])
        part = split_sweep(sweep, runs)  # a tuned sweep: its final runs are compared, its tuning runs read apart
    except RunsError as e:
        return _error(str(e), meta)
    produced = [r for r in part.finals if r.status in RESULTS]
    if not produced:
        reasons = "; ".join(dict.fromkeys(f"{r.status}: {r.reason}" for r in runs))
        return _error(f"no run completed or diverged ({len(runs)} runs; {reasons[:300]})", meta)
    by = list(f.by)
    try:
        check_keys(runs, by)
    except RunsError as e:
        return _error(str(e), meta)
    groups = group_runs(part.finals, by)
    base = next((g.index for g in groups if matches(dict(zip(by, g.values)), f.baseline)), None)
    command = shell_join(["python", "-m", "experiments.train", *meta.get("train_argv", [])])
    with capture():  # every figure drawn here gets its .plot.json beside it
        try:  # a tuned sweep is read from its dir, so that the report finds tuning.json (its final runs, basin.png)
            kw = {"out_dir": sweep / "report", "by": by, "baseline": base, "command": command, "metric": f.metric}
            report = build_report([str(sweep)], **kw) if part.tuned else build_report(None, runs=runs, **kw)
        except RunsError as e:
            return _error(f"the report was not built: {e}", meta)
        figure = redraw(f, extra, sweep, smoke)
    comparison = json.loads((report.parent / "comparison.json").read_text())
    records = records_from_groups(groups, by)
    tuning_records = records_from_groups(group_runs(part.tuning, by), by) if part.tuning else []
    problems = smoke_problems(runs, extra) if smoke else []
    try:
        verdict = f.rule(Evidence(comparison, records, extra, part.record, tuning_records))
    except Exception as e:  # a smoke run reports it as the pipeline's failure; a full run's rule must not fail
        if not smoke:
            raise
        verdict, problems = None, [*problems, f"the rule raised {type(e).__name__}: {e}"]
    config = {k: v for k, v in produced[0].flat.items() if not k.startswith(("hydra", "logger"))}
    everything = [*records, *tuning_records]
    meta.update({"by": by, "config": config, "budget_text": budget_text({"budget": budgets(groups)}),
                 "device": produced[0].summary.get("device"),
                 "verdict": None if smoke else verdict.outcome, "key_number": None if smoke else verdict.key_number,
                 "doc": str(doc_path), "tuning": tuning_meta(part, comparison),
                 "protocol": comparison.get("protocol"), "seen": data_seen(records, tuning_records),
                 "cost": cost(records, tuning_records, meta.get("wall_s"), meta.get("cpus")).to_meta(),
                 "threads": sorted({int(t) for r in everything if (t := r.get("num_threads")) is not None})})
    if smoke:
        meta["pipeline"] = {"ok": not problems, "problems": problems}
    sources = {p.name: p for p in report.parent.glob("*.png")}
    if figure is not None:
        sources[figure.name] = figure
    names = versions(f.name)
    newer = names[names.index(f.name) + 1:] if f.name in names else []
    write_doc(doc_path, lambda figs, fig_dir: render_doc(f, verdict, comparison, records, meta, figs, fig_dir, newer),
              [sources[name] for name in f.figures if name in sources])
    said = (f"pipeline {'failed' if problems else 'OK'} (smoke run: no verdict)" if smoke else
            f"{verdict.outcome} ({verdict.key_number})")
    print(f"findings: {f.name}: {said}", file=sys.stderr)
    print(doc_path)
    faults = [r for r in runs if r.status in FAULTS]
    if faults:
        print(f"findings: error: {len(faults)} of {len(runs)} runs did not complete "
              f"({', '.join(sorted({r.status for r in faults}))}); the doc covers the others: {doc_path}",
              file=sys.stderr)
        return 1, meta
    return 0, meta
