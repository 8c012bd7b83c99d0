"""What the tuned findings need from the findings machinery, on hand-made numbers (no training): the readings of
readings.py (equivalence against a SESOI, the shape spread and its trend, the lr sensitivity) against scipy.stats
and hand computation, the CPU-hours and data-seen numbers of budget.py and the doc paragraphs rendered from them
(doc_budget.py), EXTRA_FILES hashed and diffed by a registration, and the data a finding's YAML selects
(data.run_data). The v2 findings themselves: test_findings_v2.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import numpy as np
import pytest
from scipy import stats

from experiments.findings import FINDINGS, Evidence, RunRecord
from experiments.findings import data as data_lib
from experiments.findings import registration
from experiments.findings.budget import cost, data_seen
from experiments.findings.data import ELTEC, DataError, run_data
from experiments.findings.doc import render_doc
from experiments.findings.evidence import difference
from experiments.findings.readings import (equivalence, equivalence_of, init_cap, lr_sensitivity, p_below,
                                           shape_spread, spread_trend)

from .conftest import REPO
from .test_findings import _comparison

GRID = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)


def _rec(keys: dict, seed, value, status="completed", group=None, **more) -> RunRecord:
    return RunRecord(group or " ".join(f"{k}={v}" for k, v in keys.items()), dict(keys), seed, status,
                     {"final val/loss": value, "vocab_size": 2048, **more})


def _arm(keys: dict, values, **more) -> list[RunRecord]:
    return [_rec(keys, s, v, **more) for s, v in enumerate(values)]


# ------------------------------------------------------------------------------------------------ readings


def test_equivalence_paired_matches_scipy_two_one_sided_tests():
    base = [3.00, 3.10, 3.05, 2.95, 3.02]
    d = np.array([0.004, -0.006, 0.011, 0.001, -0.003])
    e = equivalence_of(_arm({"k": "b"}, base + d), _arm({"k": "a"}, base), 0.02)
    assert e.test == "paired" and e.diff == pytest.approx(d.mean())
    assert e.p_low == pytest.approx(stats.ttest_1samp(d, -0.02, alternative="greater").pvalue, rel=1e-9)
    assert e.p_high == pytest.approx(stats.ttest_1samp(d, 0.02, alternative="less").pvalue, rel=1e-9)
    assert e.p == pytest.approx(min(1, 2 * max(e.p_low, e.p_high)))
    lo, hi = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert e.ci == pytest.approx((lo, hi)) and e.inside == (-0.02 < lo and hi < 0.02) and e.inside
    shifted = equivalence_of(_arm({"k": "b"}, base + d + 0.03), _arm({"k": "a"}, base), 0.02)
    assert not shifted.inside and shifted.p > 0.05


def test_equivalence_welch_matches_scipy_and_p_reads_as_the_interval():
    x, y = np.array([3.01, 3.04, 2.99, 3.02]), np.array([3.00, 3.03, 2.98, 3.06, 3.01])
    d = difference(_arm({"k": "b"}, x), [_rec({"k": "a"}, s + 10, v) for s, v in enumerate(y)], "final val/loss",
                   higher_better=False)
    e = equivalence(d, 0.05)
    assert e.test == "welch"
    assert e.p_low == pytest.approx(stats.ttest_ind(x + 0.05, y, equal_var=False, alternative="greater").pvalue,
                                    rel=1e-9)
    assert e.p_high == pytest.approx(stats.ttest_ind(x - 0.05, y, equal_var=False, alternative="less").pvalue,
                                     rel=1e-9)
    rng = np.random.default_rng(0)  # p < 0.05 exactly when the 95% interval lies inside ±sesoi
    for _ in range(200):
        a, b = rng.normal(0, 0.02, 4), rng.normal(rng.normal(0, 0.02), 0.02, 4)
        e = equivalence_of(_arm({"k": "b"}, 3 + b), _arm({"k": "a"}, 3 + a), 0.03)
        assert (e.p < 0.05) == e.inside
    assert equivalence(None, 0.02) is None
    one = equivalence_of(_arm({"k": "b"}, [3.0]), _arm({"k": "a"}, [3.1]), 0.02)
    assert one.ci is None and one.p is None and not one.inside


def test_p_below_is_the_doubled_one_sided_t_test():
    g = [0.021, 0.034, 0.027]
    t = (np.mean(g) - 0.03) / (np.std(g, ddof=1) / math.sqrt(3))
    assert p_below(g, 0.03) == pytest.approx(min(1.0, 2 * stats.t.cdf(t, 2)), rel=1e-9)
    assert p_below([0.01, 0.012, 0.011], 0.03) < 0.05 and p_below([0.01], 0.03) is None


def test_shape_spread_and_its_trend_by_hand():
    losses = {2: [3.00, 3.10, 3.05], 4: [3.02, 3.08, 3.10], 8: [3.20, 3.30, 3.25]}  # best 2 (3.05), worst 8 (3.25)
    recs = [_rec({"n_layers": L}, s, v) for L, vs in losses.items() for s, v in enumerate(vs)]
    recs.append(_rec({"n_layers": 8}, 9, 2.0, status="diverged"))  # not completed: never read
    s = shape_spread(recs, "n_layers")
    g = [(3.20 - 3.00) / 3.00, (3.30 - 3.10) / 3.10, (3.25 - 3.05) / 3.05]
    assert (s.best, s.worst) == (2, 8) and s.per_seed == pytest.approx(g)
    assert s.ci == pytest.approx(stats.t.interval(0.95, 2, loc=np.mean(g), scale=stats.sem(g)))
    small = [r for r in recs if r.status == "completed"]
    large_losses = {2: [2.80, 2.85, 2.82], 8: [2.84, 2.86, 2.88]}
    large = [_rec({"n_layers": L}, sd, v) for L, vs in large_losses.items() for sd, v in enumerate(vs)]
    t = spread_trend(shape_spread(small, "n_layers"), shape_spread(large, "n_layers"))
    gl = [(2.84 - 2.80) / 2.80, (2.86 - 2.85) / 2.85, (2.88 - 2.82) / 2.82]
    welch = stats.ttest_ind(gl, g, equal_var=False)
    assert t.test == "welch" and t.diff == pytest.approx(np.mean(gl) - np.mean(g))
    assert t.ci == pytest.approx(tuple(welch.confidence_interval(0.95))) and t.p == pytest.approx(welch.pvalue)
    assert shape_spread(recs[:3], "n_layers") is None  # one shape


def test_lr_sensitivity_by_hand():
    grid = [1e-3, 2e-3, 4e-3, 8e-3]
    runs = [_rec({}, 1000, 3.5, lr=1e-3), _rec({}, 1000, 3.0, lr=2e-3),
            _rec({}, 1000, None, status="diverged", lr=4e-3),
            _rec({}, 1000, 3.2, lr=8e-3), _rec({}, 1001, 3.4, lr=8e-3),  # two tune seeds: mean 3.3
            _rec({}, 1000, 2.0, lr=1.6e-2),  # a widened point: not on the declared grid, left out
            _rec({}, 1000, 9.9, status="failed", lr=1e-3)]  # failed: left out
    s = lr_sensitivity(runs, grid, cap=7.0)
    # capped: 3.5, 3.0, min(inf, 7.0) = 7.0, 3.3; best 3.0; S = (0.5 + 0 + 4.0 + 0.3) / 4 = 1.2
    assert s.value == pytest.approx(1.2) and s.best == 3.0 and s.points[2] == (4e-3, math.inf)
    assert lr_sensitivity(runs, [1e-1], cap=7.0).value is None
    assert init_cap([_rec({}, 0, 3.0, init_loss=7.6), _rec({}, 1, 3.0, init_loss=7.8)], 2048)[0] == pytest.approx(7.7)
    assert init_cap([_rec({}, 0, 3.0)], 2048)[0] == pytest.approx(math.log(2048))


# ------------------------------------------------------------------------------------------------ cost, doc


def test_cost_is_the_sum_of_wall_time_times_threads_and_the_doc_states_it():
    finals = [_rec({"model.pos.kind": "rope"}, s, 3.0, wall_time_s=w, num_threads=n, device="cpu", tokens=4e6,
                   non_embedding_params=8e5, epochs=e) for s, (w, n, e) in enumerate([(1800, 1, 0.2), (2000, 2, 0.25)])]
    tuning = [_rec({"model.pos.kind": "rope"}, 1000, 3.1, wall_time_s=900, num_threads=1, device="cuda:0",
                   epochs=0.07), _rec({"model.pos.kind": "rope"}, 1000, None, status="running")]
    c = cost(finals, tuning, wall_s=7200.0, cpus=16)
    by_hand = (1800 * 1 + 2000 * 2 + 900 * 1) / 3600  # 1.861 h
    assert c.cpu_hours == pytest.approx(by_hand) and c.tuning_cpu_hours == pytest.approx(0.25)
    assert (c.runs, c.uncounted, c.machine_hours, c.devices, c.cpus) == (3, 1, 2.0, ["cpu", "cuda:0"], 16)
    seen = data_seen(finals, tuning)
    assert seen["tokens_per_param"] == {finals[0].group: 5.0} and seen["epochs_max"] == 0.25

    f = FINDINGS["rope_vs_learned"]  # any finding: the paragraphs come from meta
    base = _arm({"model.pos.kind": "learned"}, [3.0, 3.1, 3.05])
    recs = base + [_rec({"model.pos.kind": "rope"}, s, v - 0.05) for s, v in enumerate([3.0, 3.1, 3.05])]
    comparison = {**_comparison(recs, {"model.pos.kind": "learned"}), "protocol": "tuned: each arm at its own best "
                  "lr, fresh seeds"}
    tuning_meta = {"protocol": comparison["protocol"], "text": "optim.lr over [...]", "key": "optim.lr",
                   "grid": list(GRID), "tune_seeds": [1000], "seeds": [0, 1, 2], "fraction": 0.25, "widen": 2,
                   "horizon": [{"key": "train.tokens", "full": 4000000, "tuning": 1000000}], "tuning_runs": 10,
                   "final_runs": 6, "head": ["arm", "best lr", "optimum"],
                   "rows": [["model/pos=learned", "0.002", "interior"], ["model/pos=rope", "0.008", "edge (high)"]]}
    meta = {"name": f.name, "smoke": False, "args": [], "attempts": 1, "cost": c.to_meta(), "seen": seen,
            "tuning": tuning_meta, "config": {}, "data": {"source": "embedded"}}
    text = render_doc(f, f.rule(Evidence(comparison, recs)), comparison, recs, meta, ["basin.png"], f.name)
    assert f"CPU-hours: {by_hand:.2f} (the sum over the 3 runs, tuning runs included" in text
    assert "of which tuning runs 0.25" in text and "1 run(s) without wall_time_s or num_threads" in text
    assert "machine-hours: 2.00" in text and "Ran on: cpu, cuda:0" in text and "a host with 16 CPUs" in text
    assert "max 0.250 over the" in text and f"{finals[0].group}: 5" in text
    assert "**Protocol: tuned: each arm at its own best lr, fresh seeds.**" in text and "best-vs-best" in text
    assert "| model/pos=rope | 0.008 | edge (high) |" in text
    other = render_doc(f, f.rule(Evidence(comparison, recs)), comparison, recs,
                       {**meta, "cost": cost(finals[:1], [], 3600.0, 2).to_meta()}, [], f.name)
    assert "CPU-hours: 0.50 (the sum over the 1 runs" in other and "a host with 2 CPUs" in other  # computed


# ------------------------------------------------------------------------------------------------ registration


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A temp repo with swiglu_vs_gelu's module and YAML and conf/finding/ffn/, nothing registered."""
    root = tmp_path / "repo"
    for rel in [*registration.setup_paths("swiglu_vs_gelu").values(), "conf/finding/ffn/gelu.yaml",
                "conf/finding/ffn/swiglu.yaml"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, root / rel)
    monkeypatch.setattr(registration, "ROOT", root)
    return root


def test_extra_files_are_hashed_and_diffed_like_the_module(root):
    extra = ["conf/finding/ffn/*.yaml"]
    path = registration.register("swiglu_vs_gelu", date="2026-11-26", extra=extra)
    files = json.loads(path.read_text())["files"]
    assert set(files) == {"module", "sweep", "extra:conf/finding/ffn/gelu.yaml", "extra:conf/finding/ffn/swiglu.yaml"}
    swiglu = root / "conf/finding/ffn/swiglu.yaml"
    assert files["extra:conf/finding/ffn/swiglu.yaml"]["sha256"] == hashlib.sha256(swiglu.read_bytes()).hexdigest()
    assert registration.check("swiglu_vs_gelu", extra).status == "unchanged"

    swiglu.write_text(swiglu.read_text().replace("d_mlp: 341", "d_mlp: 342"))
    c = registration.check("swiglu_vs_gelu", extra)
    assert c.status == "changed" and c.changed_paths() == ["conf/finding/ffn/swiglu.yaml"]
    assert "-  d_mlp: 341\n+  d_mlp: 342\n" in c.diff()
    assert registration.check("swiglu_vs_gelu").status == "changed"  # a registered extra file is checked anyway

    swiglu.write_text(swiglu.read_text().replace("d_mlp: 342", "d_mlp: 341"))
    (root / "conf/finding/ffn/relu.yaml").write_text("model:\n  activation: relu\n")  # a new file the glob matches
    c = registration.check("swiglu_vs_gelu", extra)
    assert c.changed_paths() == ["conf/finding/ffn/relu.yaml"] and "did not record" in c.diff()
    (root / "conf/finding/ffn/relu.yaml").unlink()
    (root / "conf/finding/ffn/gelu.yaml").unlink()
    c = registration.check("swiglu_vs_gelu", extra)
    assert c.changed_paths() == ["conf/finding/ffn/gelu.yaml"] and "(the file is missing)" in c.diff()
    with pytest.raises(registration.RegistrationError, match="missing"):
        registration.register("other", extra=["conf/finding/nope/*.yaml"])


# ------------------------------------------------------------------------------------------------ data


def test_data_the_yaml_selects_is_checked_and_other_data_said_how(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ../shared here
    with pytest.raises(DataError, match="eltec_eng_novels.txt is not here .* --data-file .* finding/data=tinystories"):
        run_data("eltec", [], None, smoke=False)
    with pytest.raises(DataError, match="data=tinystories: this finding's YAML selects its data"):
        run_data("eltec", ["data=tinystories"], None, smoke=True)
    assert run_data("eltec", [], None, smoke=True) == ([], True)  # the smoke picks the embedded corpus
    assert run_data("eltec", ["finding/data=tinystories"], None, smoke=False) == ([], False)
    copy = tmp_path / "copy.txt"
    copy.write_text("not the novels")
    with pytest.raises(DataError, match="is not the pre-registered data"):
        run_data("eltec", [], copy, smoke=False)
    same = data_lib.DataFile("eltec", "x", copy.stat().st_size, hashlib.sha256(copy.read_bytes()).hexdigest(), "w", "h")
    monkeypatch.setitem(data_lib.DATA_FILES, "eltec", same)
    assert run_data("eltec", [], copy, smoke=False) == ([f"data.paths=[{copy}]"], False)
    assert run_data("tinystories", [], None, smoke=True) == ([], False)  # v1: the YAML keeps the embedded corpus


def test_the_real_eltec_file_passes_its_check(shared_data):
    assert ELTEC.path == "../shared/data/bench/eltec_eng_novels.txt"
    assert data_lib.yaml_data(ELTEC, shared_data / "bench" / "eltec_eng_novels.txt")[0].startswith("data.paths=[")
