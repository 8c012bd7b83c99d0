"""A finding's runs as data (experiments/findings/rundata.py, curve_data.py, from_data.py, figdata.py) and
`python -m experiments.findings NAME --from-data`.

Default tier: every committed docs/findings/<name>/data.json rebuilds its doc byte for byte (text) with the same
plotted data per figure; the session's one real tuned smoke sweep (conftest.tuned_smoke, shared with
test_findings.py) whose own doc --from-data gives again, whose data survives export(materialize(d)), and whose
data-built comparison equals the one built from the runs' full curves; a synthetic sweep (tests/experiments/synthetic_runs.py: a diverged run, 201 train and 100 eval
lines per run) whose comparison.json and every number a rule reads are the same from the data as from the raw
files; curves against an obvious reference (hypothesis); --from-data's bad inputs (one line, exit 2, nothing
written). References are independent of the code under test: the raw run files read by experiments.compare, the
arrays a figure was drawn from.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.findings import FINDINGS, rundata
from experiments.findings.cli import main
from experiments.findings.curve_data import CURVE_KEYS, MAX_POINTS, ROUND_DIGITS, decimate, expand, kind

from . import synthetic_runs
from .conftest import REPO, TUNED_SMOKE, file_bytes

DOCS = REPO / "docs" / "findings"
COMMITTED = sorted(DOCS.glob("*/data.json"))
SMOKE = TUNED_SMOKE


def _plots(fig_dir: Path) -> dict[str, object]:
    return {p.name: json.loads(p.read_text()) for p in sorted(fig_dir.glob("*.plot.json"))}


# ------------------------------------------------------------------------------------------- committed data


@pytest.mark.parametrize("data_file", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_committed_data_rebuilds_its_doc(data_file, tmp_path, capsys):
    name = data_file.parent.name
    doc = tmp_path / f"{name}.md"
    before = file_bytes(DOCS)
    assert main([name, "--from-data", "--docs-dir", str(DOCS), "--doc", str(doc)]) == 0, capsys.readouterr().err
    assert doc.read_text() == (DOCS / f"{name}.md").read_text()
    committed = _plots(DOCS / name)
    shown = re.findall(rf"!\[[^]]*\]\({re.escape(name)}/([^)]+)\.png\)", doc.read_text())
    assert sorted(f"{png}.plot.json" for png in shown) == sorted(committed), f"{name}: a figure without its data"
    assert _plots(tmp_path / name) == committed
    assert file_bytes(DOCS) == before


# ------------------------------------------------------------------------------------------- a real smoke sweep


@pytest.fixture
def smoke(tuned_smoke):
    """The session's tuned smoke with the sweeper's confirm phase, judged (conftest.tuned_smoke: built once for
    test_findings.py and this file): (sweep dir, data file)."""
    assert tuned_smoke.returncode == 0, tuned_smoke.stderr[-3000:]
    assert tuned_smoke.docs_unchanged  # a smoke run's data never goes into docs/findings/
    return tuned_smoke.sweep, tuned_smoke.sweep / SMOKE / rundata.DATA_NAME


def test_smoke_from_data_gives_the_smokes_own_doc_and_plotted_data(smoke, tmp_path, capsys):
    sweep, data_file = smoke
    before = file_bytes(sweep)
    doc = tmp_path / "again" / f"{SMOKE}.md"
    assert main([SMOKE, "--from-data", "--docs-dir", str(sweep), "--doc", str(doc)]) == 0
    assert capsys.readouterr().out.strip() == str(doc)
    assert doc.read_text() == (sweep / f"{SMOKE}.md").read_text()
    plots = _plots(sweep / SMOKE)
    assert set(plots) == {"basin.plot.json", "curve_val_loss.plot.json", "final_val_loss.plot.json"}
    assert _plots(doc.with_suffix("")) == plots
    assert file_bytes(sweep) == before  # --from-data wrote nothing but its doc and figures
    text = doc.read_text()
    p = rundata.load(data_file, SMOKE)["meta"]["provenance"]
    assert f"git commit `{p['commit']}`" in text and f"Setup hash `{p['tree']['sha256']}`" in text
    assert len(p["commit"]) == 40 and p["tree"]["files"] > 100 and p["python"] in text


def test_smoke_data_round_trips_and_reexports_the_same(smoke, tmp_path):
    sweep, data_file = smoke
    data = rundata.load(data_file, SMOKE)
    assert rundata.dumps(data) == data_file.read_text()
    again = rundata.export(rundata.materialize(data, tmp_path / "m"))
    assert rundata.dumps(again) == rundata.dumps(data)
    # the sweep dir itself, judged: its finding.json gives back the same meta (the doc's derived keys left out)
    assert rundata.dumps(rundata.export(sweep)) == data_file.read_text()
    phases = [r["phase"] for r in data["runs"]]
    tuning = data["tuning"]  # every list of runs in tuning.json gives its runs their phase
    assert {p: phases.count(p) for p in set(phases)} == {"tuning": len(tuning["runs"]), "final": len(tuning["finals"]),
                                                         "confirm": len(tuning["confirm_runs"])}
    assert len(tuning["confirm_runs"]) > 0
    assert all(r["arm"]["model.pos.kind"] in ("learned", "rope") for r in data["runs"])


def test_smoke_comparison_from_data_equals_the_one_from_the_runs(smoke, tmp_path):
    from experiments.compare import build_report

    sweep, data_file = smoke
    m = rundata.materialize(rundata.load(data_file, SMOKE), tmp_path / "m")
    build_report([str(m)], out_dir=tmp_path / "report", by=list(FINDINGS[SMOKE].by), baseline=0)
    got = json.loads((tmp_path / "report" / "comparison.json").read_text())
    want = json.loads((sweep / "report" / "comparison.json").read_text())
    assert got == want


# ------------------------------------------------------------------------------------------- a synthetic sweep


@pytest.fixture
def synthetic(tmp_path, monkeypatch):
    """synthetic_runs' sweep with every step logged (201 train lines) and an eval every 2 steps (100 lines)."""
    monkeypatch.setattr(synthetic_runs, "TRAIN_EVERY", 1)
    monkeypatch.setattr(synthetic_runs, "EVAL_EVERY", 2)
    root = tmp_path / "raw"
    for run in synthetic_runs.write_sweep(root):  # the trainer's summary holds the run's FLOPs (synthetic's does not)
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "flops": max(line["flops"] for line in lines)}))
    return root


def _records(sweep: Path, by: list[str]) -> list:
    from experiments.compare import group_runs, read_runs
    from experiments.findings.evidence import records_from_groups

    return records_from_groups(group_runs(read_runs([str(sweep)]), by), by)


def test_synthetic_data_gives_the_raw_runs_numbers(synthetic, tmp_path):
    from experiments.compare import build_report

    by = ["model.pos.kind", "model.norm", "model.n_layers"]
    data = rundata.export(synthetic, by=by, meta={"name": "x"}, keys=rundata.curve_keys(["grad_norm_per_layer.png"]))
    m = rundata.materialize(data, tmp_path / "m")
    assert rundata.dumps(rundata.export(m)) == rundata.dumps(data)
    for d in (synthetic, m):
        build_report([str(d)], out_dir=d / "report", by=by, baseline=0)
    assert json.loads((m / "report/comparison.json").read_text()) == \
        json.loads((synthetic / "report/comparison.json").read_text())
    raw, back = _records(synthetic, by), _records(m, by)
    assert [r.group for r in raw] == [r.group for r in back]
    for a, b in zip(raw, back):  # every number a rule reads (nan == nan: the diverged run)
        assert json.dumps(a.values, sort_keys=True) == json.dumps(b.values, sort_keys=True)
    run = data["runs"][0]["curve"]
    assert len(run["train"]["step"]) == MAX_POINTS and len(run["eval"]["step"]) == MAX_POINTS
    assert any(k.startswith("grad_norm/layer_") for k in run["train"])  # the figure's keys come along
    assert "lr" not in run["train"] and "val/ppl" not in run["eval"]  # nothing else does


def test_a_run_of_a_full_sweeps_shape_fits_the_budget(tmp_path, monkeypatch):
    """The budget, <= ~200 KB for ~150 runs: 2,000 logged steps and 10 evals a run (a v2 final run's shape)."""
    for k, v in {"STEPS": 2000, "TRAIN_EVERY": 1, "EVAL_EVERY": 200}.items():
        monkeypatch.setattr(synthetic_runs, k, v)
    synthetic_runs.write_sweep(tmp_path / "raw", groups=synthetic_runs.GROUPS[:2], extrap=False, grad_layers=False)
    data = rundata.export(tmp_path / "raw", by=["model.pos.kind"], meta={"name": "x"})
    per_run = [len(json.dumps(r, separators=(",", ":")).encode()) for r in data["runs"]]
    assert max(per_run) < 200_000 / 150, per_run  # measured 1.07-1.09 KB
    assert all(len(r["curve"]["train"]["step"]) == MAX_POINTS for r in data["runs"])


# ------------------------------------------------------------------------------------------- curves


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


CURVES = {"train/loss", "val/loss", "test/ts/loss"}  # curve_data.CURVE_KEYS' matches among LINE's keys
LINE = st.fixed_dictionaries(
    {"step": st.integers(0, 10_000)},
    optional={"tokens": st.integers(0, 10**7),
              "train/loss": st.floats(allow_nan=True, allow_infinity=True, width=64),
              "val/loss": st.floats(0, 20), "test/ts/loss": st.floats(0, 20), "val/ppl": st.floats(0, 1e6),
              "attn_max_logit": st.one_of(st.none(), st.floats(-1e3, 1e3)), "lr": st.floats(0, 1)})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINE, max_size=120))
def test_curves_keep_first_last_and_best_exactly_and_are_their_own_decimation(lines):
    c = decimate(lines)
    assert json.dumps(decimate(expand(c))) == json.dumps(c)
    back = expand(c)
    kept = {"step", "tokens", *CURVES, "attn_max_logit"}
    assert all(set(line) <= kept for line in back)
    for k in ("train", "eval"):
        raw = [ln for ln in ({x: v for x, v in line.items() if x in kept and v is not None} for line in lines)
               if set(ln) - {"step", "tokens"} and kind(ln) == k]
        mine = [ln for ln in back if kind(ln) == k]
        assert len(mine) <= max(MAX_POINTS, 3 * len(kept))
        if len(raw) <= MAX_POINTS:  # every line with a curve value is kept (a points-only line only at an anchor)
            assert [ln["step"] for ln in mine if set(ln) & CURVES] == [ln["step"] for ln in raw if set(ln) & CURVES]
        for key in kept - {"step", "tokens"}:
            want = [ln[key] for ln in raw if _finite(ln.get(key))]
            got = [ln[key] for ln in mine if _finite(ln.get(key))]
            if want:  # what compare reads: the first, the last and (a loss) the best value, exact
                assert (got[0], got[-1]) == (want[0], want[-1])
                if key.endswith("loss"):
                    assert min(got) == min(want)
            for v in got:  # any other value is a raw value, rounded
                assert any(math.isclose(v, w, rel_tol=10 ** (1 - ROUND_DIGITS)) for w in want)
            if key not in CURVES and want:  # a point key: its first, last and best values only
                assert set(got) <= {want[0], want[-1], *([min(want)] if key.endswith("loss") else [])}


def test_a_long_curve_keeps_max_points_evenly_spread():
    lines = [{"step": s, "tokens": 128 * s, "train/loss": 10 / (1 + s) + 0.001 * (s % 7)} for s in range(1, 2001)]
    c = decimate(lines)["train"]
    assert len(c["step"]) == MAX_POINTS and c["step"][0] == 1 and c["step"][-1] == 2000
    gaps = [b - a for a, b in zip(c["step"], c["step"][1:])]
    assert max(gaps) <= 2 * 2000 / (MAX_POINTS - 1)  # evenly spread, not bunched at one end
    assert c["train/loss"][-1] == lines[-1]["train/loss"]  # the final value exact
    assert c["train/loss"][5] == float(f"{lines[c['step'][5] - 1]['train/loss']:.{ROUND_DIGITS}g}")
    assert decimate(lines, keys=[k for k in CURVE_KEYS if k != "train/loss"]) == {}  # no key kept: no line


# ------------------------------------------------------------------------------------------- figures


def test_plotted_data_is_what_the_figure_was_drawn_from(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.compare.plots import _save
    from experiments.findings.figdata import capture, plot_json

    xs, ys = [1.0, 2.0, 3.0], [0.5, 0.25, 1 / 3]
    with capture() as written:
        fig, ax = plt.subplots()
        ax.plot(xs, ys, label="a")
        ax.scatter([4.0, 5.0], [1.5, math.nan])
        ax.bar([0.0], [2.5], width=0.5)
        _save(fig, tmp_path / "through_atomic_write.png")  # compare's way: a temp file, then a rename
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        fig.savefig(tmp_path / "plain.png")
    assert sorted(written) == [plot_json(tmp_path / "plain.png"), plot_json(tmp_path / "through_atomic_write.png")]
    got = json.loads(plot_json(tmp_path / "through_atomic_write.png").read_text())["axes"][0]
    assert got["lines"] == [{"label": "a", "xy": [[1.0, 0.5], [2.0, 0.25], [3.0, 0.333333]]}]
    assert got["collections"][0]["offsets"] == [[4.0, 1.5], [None, None]]  # matplotlib masks a non-finite point
    assert got["bars"] == [[-0.25, 0.0, 0.5, 2.5]]
    assert not list(tmp_path.glob(".*.tmp"))


# ------------------------------------------------------------------------------------------- --from-data


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """<tmp>/docs with rope_vs_learned/data.json made from a synthetic sweep (by model.pos.kind, as the finding)."""
    monkeypatch.setattr(synthetic_runs, "GROUPS", synthetic_runs.GROUPS[:2])
    synthetic_runs.write_sweep(tmp_path / "raw", diverged=None)
    meta = {"name": "rope_vs_learned", "smoke": False, "args": [], "train_argv": [], "sweep_dir": "multirun/x",
            "wall_s": 60.0, "cpus": 2, "jobs": 2, "launcher": "joblib_2", "generated": "2026-01-01 00:00"}
    data = rundata.export(tmp_path / "raw", by=["model.pos.kind"], meta=meta)
    docs = tmp_path / "docs"
    rundata.write(data, docs / "rope_vs_learned" / rundata.DATA_NAME)
    return docs


def test_from_data_on_hand_made_data_is_the_same_doc_twice(data_dir, tmp_path, capsys):
    first, second = tmp_path / "a" / "rope_vs_learned.md", tmp_path / "b" / "rope_vs_learned.md"
    for doc in (first, second):
        assert main(["rope_vs_learned", "--from-data", "--docs-dir", str(data_dir), "--doc", str(doc)]) == 0
    assert first.read_text() == second.read_text() and "**Verdict: reproduced.**" in first.read_text()
    assert _plots(first.with_suffix("")) == _plots(second.with_suffix(""))
    assert "Provenance (commit, setup hash, software, machine): not recorded" in first.read_text()
    assert main(["rope_vs_learned", "--from-data", "--docs-dir", str(data_dir)]) == 0  # default: <docs-dir>/NAME.md
    assert (data_dir / "rope_vs_learned.md").read_text() == first.read_text()
    assert capsys.readouterr().out.strip().splitlines()[-1] == str(data_dir / "rope_vs_learned.md")


def _edit(path: Path, how) -> None:
    data = json.loads(path.read_text())
    how(data)
    path.write_text(json.dumps(data))


BAD = {
    "no data file": (lambda p: p.unlink(), [], "no data file"),
    "not JSON": (lambda p: p.write_text("{oops"), [], "not readable as JSON"),
    "not a data file": (lambda p: p.write_text('{"runs": []}'), [], "is not a finding's data file"),
    "another version": (lambda p: _edit(p, lambda d: d.update(version=2)), [], "data version 2"),
    "another finding": (lambda p: _edit(p, lambda d: d.update(name="gqa_vs_mha")), [], "of finding 'gqa_vs_mha'"),
    "other keys": (lambda p: _edit(p, lambda d: d.update(by=["model.norm"])), [], "grouped by model.norm"),
    "no run": (lambda p: _edit(p, lambda d: d.update(runs=[])), [], "holds no run"),
    "a run outside": (lambda p: _edit(p, lambda d: d["runs"][0].update(dir="../x")), [], "no usable \"dir\""),
    "runs not a list": (lambda p: _edit(p, lambda d: d.update(runs={})), [], "\"runs\" is missing"),
    "--smoke": (None, ["--smoke"], "--from-data takes no overrides"),
    "an override": (None, ["seed=1"], "--from-data takes no overrides"),
    "--register": (None, ["--register"], "--from-data takes no overrides"),
    "a smoke's data into docs/findings": (lambda p: _edit(p, lambda d: d["meta"].update(smoke=True)),
                                          ["--doc", str(DOCS / "rope_vs_learned.md")], "a smoke run's data"),
}


@pytest.mark.parametrize("case", BAD)
def test_from_data_bad_input_is_one_line_exit_2_and_writes_nothing(case, data_dir, capsys):
    spoil, extra, said = BAD[case]
    if spoil is not None:
        spoil(data_dir / "rope_vs_learned" / rundata.DATA_NAME)
    before, docs_before = file_bytes(data_dir.parent), file_bytes(DOCS)
    rc = main(["rope_vs_learned", "--from-data", "--docs-dir", str(data_dir), *extra])
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("findings: error: ") and said in err[0], err
    assert "Traceback" not in captured.err and captured.out == ""
    assert file_bytes(data_dir.parent) == before and file_bytes(DOCS) == docs_before


def test_data_of_a_sweep_with_a_run_without_config_or_summary_round_trips(tmp_path):
    raw = tmp_path / "raw"
    synthetic_runs.write_sweep(raw, groups=synthetic_runs.GROUPS[:1], seeds=(0,))
    synthetic_runs.write_unfinished_run(raw / "9", "failed", "config error: boom")
    shutil.rmtree(raw / "0" / ".hydra")
    (raw / "8").mkdir()
    (raw / "8" / "metrics.jsonl").write_text('{"step": 1, "train/loss": NaN}\n')  # killed: no summary, no config
    data = rundata.export(raw, by=["model.pos.kind"], meta={"name": "x"})
    statuses = {r["dir"]: (r["status"], r["config"] is None, r["summary"] is None) for r in data["runs"]}
    assert statuses["8"] == ("running", True, True) and statuses["9"][0] == "failed"
    again = rundata.export(rundata.materialize(data, tmp_path / "m"))
    assert rundata.dumps(again) == rundata.dumps(data)
    assert os.path.getsize(tmp_path / "m" / "8" / "metrics.jsonl") > 0


def test_a_measurement_figure_is_redrawn_from_the_measurements_result(tmp_path):
    """xiong_postln_warmup's init_grad_norms.png from the result in the data (no model is built again): each line
    is the mean over seeds of the grad norms the result holds."""
    from experiments.findings.figdata import capture, plot_json
    from experiments.findings.from_data import REDRAW, plotters, redraw

    assert sorted(plotters()) == sorted(REDRAW)
    rows = [{"init": init, "norm": norm, "n_layers": 2, "seed": seed,
             "grad_norms": [1.0 + seed + (norm == "post"), 2.0 * (1 + seed)]}
            for init in ("gpt2", "xavier") for norm in ("pre", "post") for seed in (0, 1)]
    extra = {"rows": rows, "figure": "init_grad_norms.png"}
    with capture():
        path = redraw(FINDINGS["xiong_postln_warmup"], extra, tmp_path, smoke=False)
    assert path == tmp_path / "init" / "init_grad_norms.png" and path.is_file()
    lines = [ln["xy"] for ln in json.loads(plot_json(path).read_text())["axes"][0]["lines"] if len(ln["xy"]) == 2]
    for norm in ("pre", "post"):  # one line per (norm, init), the same values for both inits
        mean = [[1.0, 1.5 + (norm == "post")], [2.0, 3.0]]
        assert lines.count(mean) >= 2, lines
    assert redraw(FINDINGS["xiong_postln_warmup"], {**extra, "error": "boom"}, tmp_path / "x", smoke=False) is None
    assert redraw(FINDINGS["rope_vs_learned"], extra, tmp_path / "y", smoke=False) is None  # not its figure
