"""Finding mup_lr_transfer_v2 (issue 32 §3.3): the seed bootstrap (lr_bootstrap.py) against closed forms (the OLS
slope against numpy's polyfit; the exact optimum of parabolas; two seeds, whose resamples take three values with
known mass, give the interval's ends exactly); the rule's outcomes on hand-made runs; the figure's drawn data; the
YAML against the module's constants; the smoke's overrides. No training here.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from experiments.config.compose import compose_config
from experiments.findings import FINDINGS, Evidence, RunRecord, Verdict
from experiments.findings import cli, transfer_plot
from experiments.findings.claims import mup_lr_transfer_v2 as m2
from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.cli import main
from experiments.findings.lr_bootstrap import mean_curve, ols_slope, seed_curves, transfer
from experiments.findings.tuned import is_tuned

from .conftest import artist, keep_figures

NAME = "mup_lr_transfer_v2"
GRID = m2.GRID
X = [math.log2(lr) for lr in GRID]
LW = [math.log2(w) for w in m2.WIDTHS]
BASE = X[5] + 0.3  # the d64 optimum of _runs: slopes from -1 to 0 keep every width's optimum inside the grid


def _rec(param: str, width: int, lr: float, seed: int, loss: float | None, second: float | None = None,
         status: str = "completed") -> RunRecord:
    keys = {"model.param": param, "model.d_model": width, "optim.lr": lr}
    return RunRecord(f"param={param} d_model={width} lr={lr:g}", keys, seed, status,
                     {m2.KEY: loss, m2.SECOND: loss if second is None else second, "lr": lr})


def _runs(slopes: dict[str, float], noise: float = 0.0, second_slopes: dict[str, float] | None = None,
          seeds=m2.SEEDS) -> list[RunRecord]:
    """Every run: loss = 3 + 0.05 (log2 lr − c)² with c = BASE + slope · (log2 w − 6) + noise · u, u in
    {-1, -0.5, 0, 0.5, 1} by (seed, width) (an optimum that moves `slope` grid steps per doubling, each seed's and
    width's off by a fixed pattern); the second corpus the same with `second_slopes`."""
    recs = []
    for p, s in slopes.items():
        s2 = (second_slopes or slopes)[p]
        for seed in seeds:
            for i, (w, lw) in enumerate(zip(m2.WIDTHS, LW)):
                u = ((seed * 7 + i * 3) % 5 - 2) / 2
                c, c2 = BASE + s * (lw - 6) + noise * u, BASE + s2 * (lw - 6) + noise * u
                for lr, x in zip(GRID, X):
                    recs.append(_rec(p, w, lr, seed, 3 + 0.05 * (x - c) ** 2, 3 + 0.05 * (x - c2) ** 2))
    return recs


def _verdict(recs) -> Verdict:
    return FINDINGS[NAME].rule(Evidence({}, recs))


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """The rule's tests read clear-cut cases: 300 resamples instead of the registered 2000 (a tenth of the time;
    the bootstrap itself is tested at 2000 below)."""
    monkeypatch.setattr(m2, "N_BOOT", 300)


# ------------------------------------------------------------------------------------------------ the bootstrap


def test_mean_curve_keeps_inf_and_skips_missing_points():
    a = [(1.0, 2.0), (2.0, None), (4.0, math.inf), (8.0, None)]
    b = [(1.0, 4.0), (2.0, 1.0), (4.0, 3.0), (8.0, None)]
    assert mean_curve([a, b]) == [(1.0, 3.0), (2.0, 1.0), (4.0, math.inf), (8.0, None)]


@pytest.mark.parametrize("seed", range(5))
def test_ols_slope_is_numpys_least_squares_fit(seed):
    rng = np.random.default_rng(seed)
    xs, ys = rng.normal(size=7).tolist(), rng.normal(size=7).tolist()
    assert ols_slope(xs, ys) == pytest.approx(np.polyfit(xs, ys, 1)[0], rel=1e-12)


def test_noise_free_parabolas_give_the_exact_slope_and_an_interval_of_one_point():
    recs = _runs({"sp": -1.0})
    curves = {w: seed_curves(recs, {"model.param": "sp", "model.d_model": w}, GRID, m2.SEEDS, m2.KEY)
              for w in m2.WIDTHS}
    t = transfer(curves, n_boot=200)
    assert t.slope.point == pytest.approx(-1.0, abs=1e-9)  # three points of a parabola give its vertex exactly
    assert t.slope.low == pytest.approx(-1.0, abs=1e-9) and t.slope.high == pytest.approx(-1.0, abs=1e-9)
    assert t.optima[256].point == pytest.approx(BASE - 2.0, abs=1e-9) and (t.dropped, t.edges) == (0, 0)


def test_two_seeds_give_the_interval_ends_of_their_three_possible_resamples():
    """With 2 seeds a resample is (0,0), (0,1)/(1,0) or (1,1), with mass 1/4, 1/2, 1/4: the 2.5th and 97.5th
    percentiles of 2000 draws are the slopes of seed 0 alone and seed 1 alone (read each on its own curves)."""
    per_seed = {0: {64: 0.1, 128: -0.2, 256: 0.4, 512: 0.0, 1024: 0.3}, 1: {64: -0.3, 128: 0.2, 256: -0.1,
                                                                             512: 0.5, 1024: -0.6}}
    recs = []
    for seed, offs in per_seed.items():
        for w in m2.WIDTHS:
            c = X[4] + offs[w]
            recs += [_rec("mup", w, lr, seed, 3 + 0.05 * (x - c) ** 2) for lr, x in zip(GRID, X)]
    curves = {w: seed_curves(recs, {"model.param": "mup", "model.d_model": w}, GRID, (0, 1), m2.KEY)
              for w in m2.WIDTHS}
    alone = [ols_slope(LW, [X[4] + per_seed[s][w] for w in m2.WIDTHS]) for s in (0, 1)]
    t = transfer(curves, n_boot=2000, level=0.95)
    assert (t.slope.low, t.slope.high) == pytest.approx((min(alone), max(alone)), abs=1e-9)
    assert t.optima[64].low == pytest.approx(X[4] - 0.3, abs=1e-9) and t.optima[64].high == pytest.approx(X[4] + 0.1)


def test_the_bootstrap_is_deterministic_and_a_width_without_an_optimum_drops_the_resample():
    recs = _runs({"sp": -1.0}, noise=0.2)
    recs = [r if not (r.keys["model.d_model"] == 64 and r.seed == 0) else
            _rec("sp", 64, r.keys["optim.lr"], 0, None, status="diverged") for r in recs]
    curves = {w: seed_curves(recs, {"model.param": "sp", "model.d_model": w}, GRID, m2.SEEDS, m2.KEY)
              for w in m2.WIDTHS}
    a, b = transfer(curves, n_boot=300, rng_seed=7), transfer(curves, n_boot=300, rng_seed=7)
    assert a == b
    assert a.slope.point is None  # seed 0 diverged everywhere at d64: the seed mean is +inf at every lr
    # a resample that draws seed 0 has no optimum at d64 and no slope: 1 - (5/6)^6 = 66.5% of them
    assert abs(a.dropped / 300 - (1 - (5 / 6) ** 6)) < 0.1 and a.slope.low is not None


# ------------------------------------------------------------------------------------------------ the rule


def test_rule_reproduced_when_sp_moves_down_and_mup_stays():
    v = _verdict(_runs({"sp": -1.0, "mup": 0.0}, noise=0.1))
    assert v.outcome == "reproduced", v.explanation
    assert [p[:2] for p in v.parts] == [("sp", "reproduced"), ("mup", "reproduced")]
    assert "SP slope -1.00" in v.key_number and "μP slope +0.00" in v.key_number


@pytest.mark.parametrize("slopes,want,half", [({"sp": 0.0, "mup": 0.0}, "equivalent", "sp"),
                                              ({"sp": 0.8, "mup": 0.0}, "opposite", "sp"),
                                              ({"sp": -1.0, "mup": -0.8}, "not reproduced", "mup")])
def test_rule_not_reproduced_when_sp_stays_or_rises_or_mup_moves(slopes, want, half):
    v = _verdict(_runs(slopes, noise=0.1))
    assert v.outcome == "not reproduced" and dict((p, o) for p, o, _ in v.parts)[half] == want


def test_rule_inconclusive_when_the_seeds_scatter_or_the_second_corpus_disagrees():
    v = _verdict(_runs({"sp": -1.0, "mup": 0.0}, noise=2.0))  # optima up to two grid steps off, by seed and width
    assert v.outcome == "inconclusive" and dict((p, o) for p, o, _ in v.parts)["mup"] == "inconclusive"
    v = _verdict(_runs({"sp": -1.0, "mup": 0.0}, noise=0.1, second_slopes={"sp": 0.3, "mup": 0.0}))
    labels = dict((p, o) for p, o, _ in v.parts)
    assert (v.outcome, labels["sp"], labels["mup"]) == ("inconclusive", "inconclusive", "reproduced")
    assert "second corpus" in dict((p, t) for p, _, t in v.parts)["sp"]


# ------------------------------------------------------------------------------------------------ the figure


@pytest.fixture
def drawn(monkeypatch) -> dict[str, Figure]:
    return keep_figures(monkeypatch, transfer_plot)


def test_the_figure_draws_the_basins_the_optima_with_intervals_and_the_fit(tmp_path, drawn):
    recs = _runs({"sp": -1.0, "mup": 0.0})
    data = transfer_plot.transfer_data(recs, m2.PARAMS, m2.WIDTHS, GRID, m2.SEEDS, m2.KEY, n_boot=50)
    transfer_plot.plot_transfer(tmp_path / transfer_plot.FIGURE, data, GRID)
    assert (tmp_path / "mup_transfer.png").stat().st_size > 0
    sp_ax, mup_ax, opt_ax = drawn["mup_transfer.png"].axes[:3]
    line = artist(sp_ax, "mean sp d256")
    assert list(line.get_xdata()) == list(GRID)
    assert np.allclose(line.get_ydata(), [3 + 0.05 * (x - (BASE - 2)) ** 2 for x in X])
    assert np.allclose(artist(mup_ax, "optimum mup d1024").get_offsets(), [[2 ** BASE, 3.0]])
    pts = artist(opt_ax, "optima sp")
    assert list(pts.get_xdata()) == list(m2.WIDTHS)
    assert np.allclose(pts.get_ydata(), [BASE - (lw - 6) for lw in LW])
    assert np.allclose(artist(opt_ax, "fit mup").get_ydata(), [BASE] * len(m2.WIDTHS))
    assert sp_ax.get_ylabel().startswith("final test/loss")


# ------------------------------------------------------------------------------------------------ the setup


def test_the_yaml_holds_the_setup_of_the_module():
    f = FINDINGS[NAME]
    cfg = compose_config([f"experiment=finding_{NAME}"], return_hydra_config=True)
    assert not is_tuned(f.experiment) and cfg.hydra.launcher.n_jobs == 2
    params = cfg.hydra.sweeper.params
    assert [float(v) for v in str(params["optim.lr"]).split(",")] == list(GRID)
    assert str(params["finding/mup_param"]).split(",") == list(m2.PARAMS)
    assert [int(v) for v in str(params["model.d_model"]).split(",")] == list(m2.WIDTHS)
    assert [int(v) for v in str(params["seed"]).split(",")] == list(m2.SEEDS)
    assert all(b / a == 2 for a, b in zip(GRID, GRID[1:]))
    t = cfg.train
    assert (t.tokens, t.n_ctx, t.batch_size, t.eval_interval) == (m2.TOKENS, m2.N_CTX, m2.BATCH, m2.EVAL_INTERVAL)
    assert (t.sampler, t.max_epochs, t.num_threads, t.extrap, cfg.logger.kind) == ("epoch", 1, 1, "never", "disabled")
    assert (cfg.data.split_by, cfg.data.doc_separator, "wikitext2" in cfg.data.extra_eval) == \
        ("documents", "<|endoftext|>", True)
    assert (cfg.tokenizer.vocab_size, cfg.tokenizer.max_train_bytes) == (v3.VOCAB, v3.MAX_TRAIN_BYTES)
    assert (cfg.schedule.name, cfg.schedule.warmup_ratio, cfg.schedule.min_lr_ratio) == ("cosine", 0.05, 0.1)
    assert f.data == "eltec_v3" and f.figures == ("mup_transfer.png",) and not f.smoke_shape
    text = " ".join(f.setup.split())
    assert f"{m2.N_RUNS} runs" in text and m2.N_RUNS == 540 and "reproduced" not in text.lower()


@pytest.mark.parametrize("width", m2.WIDTHS)
def test_each_width_builds_the_model_of_the_setup_with_the_same_budget(width):
    from arch import count_params
    from experiments.config.check import model_config, validate

    for param in m2.PARAMS:
        c = validate(compose_config([f"experiment=finding_{NAME}", f"finding/mup_param={param}",
                                     f"model.d_model={width}"]))
        m = model_config(c.model, 2048)
        assert (m.d_model, m.n_layers, m.n_heads, m.d_mlp, m.param) == (width, 4, 4, 4 * width, param)
        assert count_params(m, non_embedding=True) == m2.NON_EMBEDDING[width]
        assert c.train.tokens // (c.train.n_ctx * c.train.batch_size) == 1000
    assert f"{m2.NON_EMBEDDING[width]:,}" in " ".join(FINDINGS[NAME].setup.split())


def test_smoke_keeps_every_width_and_three_lrs(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.5))[1])
    assert main([NAME, "--smoke", "--out-dir", str(tmp_path / "s")]) == 1  # (no runs: exit 1)
    argv = seen[0]
    assert "seed=0,1" in argv and "finding/data=embedded" in argv and "optim.lr=5e-4,2e-3,8e-3" in argv
    assert not any(a.startswith(("model.d_model", "model.n_heads", "finding/mup")) for a in argv)
    assert json.loads((tmp_path / "s" / "finding.json").read_text())["tuned"] is False
    capsys.readouterr()


def test_packed_runs_the_sweep_with_the_packed_launcher_and_is_refused_beside_jobs(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.5))[1])
    assert main([NAME, "--smoke", "--packed", "--out-dir", str(tmp_path / "s")]) == 1  # (no runs: exit 1)
    assert "hydra/launcher=packed" in seen[0] and not any("joblib" in a for a in seen[0])
    meta = json.loads((tmp_path / "s" / "finding.json").read_text())
    assert (meta["launcher"], meta["jobs"], "--packed" in meta["args"]) == ("packed", 1, True)
    capsys.readouterr()
    assert main([NAME, "--smoke", "--packed", "--jobs", "2", "--out-dir", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--packed trains one pack at a time" in err[0] and len(seen) == 1
    assert not (tmp_path / "t").exists()


def test_the_doc_says_a_packed_sweep_ran_one_pack_at_a_time():
    from experiments.findings.doc import as_run

    lines = as_run({"launcher": "packed", "jobs": 1, "config": {"train.num_threads": 1}}, [])
    assert any(line.startswith("- Launcher: `packed`: the runs that differ only in seed") for line in lines)
    lines = as_run({"launcher": "joblib_2", "jobs": 2, "config": {"train.num_threads": 1}}, [])
    assert any(line.startswith("- Launcher: `joblib_2`: 2 jobs at a time") for line in lines)
