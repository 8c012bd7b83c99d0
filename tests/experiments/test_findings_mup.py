"""Finding mup_lr_transfer (docs/findings/PLAN_mup.md): the optimum reading (lr_transfer.py) against parabolas
worked out by hand, the edge and unrefined flags, diverged runs as +inf; the rule's three outcomes on hand-made
runs; the basin figure's drawn data (mup_basin.py, read from the matplotlib artists, not pixels); the YAML and the
config groups against the module's constants and SETUP text; the smoke's overrides; the registration.

No training here: the smoke run end to end is test_findings.py's (slow) smoke test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from experiments.config.compose import compose_config
from experiments.findings import FINDINGS, Evidence, RunRecord, Verdict
from experiments.findings import cli
from experiments.findings import mup_basin
from experiments.findings import registration
from experiments.findings.claims import mup_lr_transfer as mup
from experiments.findings.claims import protocol_v2 as v2
from experiments.findings.cli import main
from experiments.findings.data import ELTEC
from experiments.findings.lr_transfer import basin, optimum, shift
from experiments.findings.tuned import is_tuned

from .conftest import REPO, artist, keep_figures

NAME = "mup_lr_transfer"
GRID = mup.GRID
X = [math.log2(lr) for lr in GRID]  # log2 of the grid: one unit apart


def _rec(param: str, width: int, lr: float, seed: int, loss: float | None, status: str = "completed") -> RunRecord:
    keys = {"model.param": param, "model.d_model": width, "optim.lr": lr}
    return RunRecord(f"param={param} d_model={width} lr={lr:g}", keys, seed, status,
                     {"final val/loss": loss, "lr": lr, "vocab_size": 2048})


def _curve(losses) -> list:
    return list(zip(GRID, losses))


# ------------------------------------------------------------------------------------------------ the reading


def test_the_optimum_is_the_vertex_of_the_parabola_through_the_argmin_and_its_neighbours():
    # argmin at GRID[3] (4e-3); y- = 3.30, y0 = 3.25, y+ = 3.40 one log2 step either side:
    # offset = (y- - y+) / (2 (y- - 2 y0 + y+)) = -0.10 / 0.40 = -0.25 steps
    # value = y0 - (y+ - y-)^2 / (8 (y- - 2 y0 + y+)) = 3.25 - 0.01 / 1.6 = 3.24375
    o = optimum(_curve([4.0, 3.6, 3.30, 3.25, 3.40, 3.9, 5.0]))
    assert o.index == 3 and o.edge is None and not o.unrefined and o.flag == ""
    assert o.log2_lr == pytest.approx(X[3] - 0.25) and o.lr == pytest.approx(GRID[3] * 2 ** -0.25)
    assert o.loss == pytest.approx(3.24375)
    # the same minimum mirrored: +0.25 steps
    assert optimum(_curve([5.0, 3.9, 3.40, 3.25, 3.30, 3.6, 4.0])).log2_lr == pytest.approx(X[3] + 0.25)
    # samples of an exact parabola in log2(lr) give its vertex back, between grid points
    c = X[1] + 0.4
    o = optimum(_curve([3.0 + 0.05 * (x - c) ** 2 for x in X]))
    assert o.log2_lr == pytest.approx(c) and o.loss == pytest.approx(3.0)
    # a tie goes to the smaller lr: argmin GRID[1], offset (4.0 - 3.5) / (2 (4.0 - 7.0 + 3.5)) = +0.5 steps
    o = optimum(_curve([4.0, 3.5, 3.5, 3.6, 3.7, 3.9, 5.0]))
    assert o.index == 1 and o.log2_lr == pytest.approx(X[1] + 0.5) and o.loss == pytest.approx(3.5 - 0.25 / (8 * 0.5))


def test_an_argmin_at_a_grid_edge_stays_there_flagged():
    low = optimum(_curve([3.1, 3.2, 3.4, 3.6, 3.9, 4.4, 5.0]))
    assert (low.index, low.edge, low.flag, low.log2_lr, low.loss) == (0, "low", "edge (low)", X[0], 3.1)
    high = optimum(_curve([5.0, 4.4, 3.9, 3.6, 3.4, 3.2, 3.1]))
    assert (high.index, high.edge, high.log2_lr) == (6, "high", X[6])


def test_diverged_runs_count_as_inf():
    inf = math.inf
    # a diverged neighbour: the argmin stays at its grid lr, flagged unrefined
    o = optimum(_curve([4.0, 3.6, 3.4, 3.3, inf, inf, inf]))
    assert (o.index, o.unrefined, o.flag, o.log2_lr) == (3, True, "unrefined", X[3])
    assert optimum(_curve([inf] * 7)) is None and optimum(_curve([None] * 7)) is None
    # a diverged run's last finite loss never counts: +inf whatever it logged; a failed run has no value
    recs = [_rec("sp", 64, lr, 0, v) for lr, v in zip(GRID, [4.0, 3.6, 3.4, 3.3, 3.5, 3.9, 4.5])]
    recs[1] = _rec("sp", 64, GRID[1], 0, 1.0, status="diverged")
    recs[5] = _rec("sp", 64, GRID[5], 0, 2.0, status="failed")
    curve = basin(recs, {"model.param": "sp", "model.d_model": 64}, GRID, seed=0)
    assert [v for _, v in curve] == [4.0, inf, 3.4, 3.3, 3.5, None, 4.5]
    assert optimum(curve).index == 3
    # the seed mean: +inf where a seed diverged, else the mean of the seeds with a result
    recs += [_rec("sp", 64, lr, 1, v + 0.1) for lr, v in zip(GRID, [4.0, 3.6, 3.4, 3.3, 3.5, 3.9, 4.5])]
    mean = basin(recs, {"model.param": "sp", "model.d_model": 64}, GRID)
    assert mean[1][1] == inf and mean[0][1] == pytest.approx(4.05) and mean[5][1] == pytest.approx(4.0)
    assert shift([optimum(mean), None]) is None


# ------------------------------------------------------------------------------------------------ the rule


def _runs(centres: dict, drop: tuple = (), diverge_above: dict | None = None) -> list[RunRecord]:
    """Every (param, width, lr, seed) run, loss = 3 + 0.05 (log2 lr - c)^2 with c = centres[param][seed][width] (a
    log2 lr); runs in `drop` ((param, width)) left out; (param, width) -> lr above which runs diverge."""
    recs = []
    for param, by_seed in centres.items():
        for seed, cs in enumerate(by_seed):
            for width, c in zip(mup.WIDTHS, cs):
                if (param, width) in drop:
                    continue
                for lr, x in zip(GRID, X):
                    if diverge_above and lr > diverge_above.get((param, width), math.inf):
                        recs.append(_rec(param, width, lr, seed, None, status="diverged"))
                    else:
                        recs.append(_rec(param, width, lr, seed, 3.0 + 0.05 * (x - c) ** 2 + 0.01 * width / 64))
    return recs


def _verdict(recs) -> Verdict:
    return FINDINGS[NAME].rule(Evidence({}, recs))


B = X[3] + 0.3  # a base optimum between grid points (SP's B - 2 .. B + 1 stay inside the grid)


def test_rule_reproduced_when_mup_stays_and_sp_moves_on_every_curve():
    stays = [B, B + 0.2, B - 0.3, B + 0.1]  # μP: within 0.5 steps
    sp = [B + 1.0, B, B - 1.0, B - 2.0]  # SP: 3 steps, one per doubling (Adam's 1/width)
    v = _verdict(_runs({"mup": [stays, [b + 0.1 for b in stays]], "sp": [sp, [b - 0.2 for b in sp]]},
                       diverge_above={("sp", 512): 8e-3}))  # SP d512 diverges above 8e-3: still read
    assert v.outcome == "reproduced" and v.family is None
    shifts = v.tables[1].rows
    assert shifts[1][:4] == ["mup", "0.50", "0.50", "0.50"] and shifts[0][:4] == ["sp", "3.00", "3.00", "3.00"]
    assert "SP's optimum at d512 − at d64 = -3.00 (seed 0), -3.00 (seed 1), -3.00 (seed mean)" in v.explanation
    assert v.tables[2].rows[3][-1].startswith("inf (inf / inf)")  # SP d512 at the top lr: diverged on both seeds
    assert v.likely_reason == "" and "μP 0.50 / 0.50 / 0.50; SP 3.00 / 3.00 / 3.00" in v.key_number


def test_rule_not_reproduced_when_mup_moves_on_both_seeds_or_sp_stays_on_both():
    moves = [B + 1.0, B + 0.2, B - 0.5, B - 1.0]  # 2 steps
    stays = [B, B + 0.2, B - 0.3, B + 0.1]
    v = _verdict(_runs({"mup": [moves, moves], "sp": [moves, moves]}))
    assert v.outcome == "not reproduced" and v.likely_reason
    v = _verdict(_runs({"mup": [stays, stays], "sp": [stays, [B, B, B + 0.9, B]]}))  # SP 0.5 and 0.9 steps
    assert v.outcome == "not reproduced"
    on_grid = [X[3], X[4], X[4], X[3]]  # SP exactly 1 step (optima on grid points) is not > 1
    v = _verdict(_runs({"mup": [stays, stays], "sp": [on_grid, on_grid]}))
    assert v.outcome == "not reproduced" and v.tables[1].rows[0][1:4] == ["1.00", "1.00", "1.00"]


def test_rule_undecided_when_the_seeds_disagree_or_a_width_is_missing():
    stays = [B, B + 0.2, B - 0.3, B + 0.1]
    sp = [B + 1.0, B, B - 1.0, B - 2.0]
    v = _verdict(_runs({"mup": [stays, stays], "sp": [sp, stays]}))  # SP moves on seed 0 only
    assert v.outcome == "undecided" and "The two seeds (or the seed-mean curves) disagree" in v.likely_reason
    assert Verdict("undecided", "", "").outcome == "undecided"
    v = _verdict(_runs({"mup": [stays, stays], "sp": [sp, sp]}, drop=(("mup", 512),)))  # no μP shift computed
    assert v.outcome == "undecided" and v.tables[1].rows[1][1:4] == ["—", "—", "—"] and "No shift for mup" in v.likely_reason
    # the seeds agree but their mean curve does not: undecided too (SP: 1.2 and 1.2 steps in opposite directions)
    v = _verdict(_runs({"mup": [stays, stays], "sp": [[B + 0.6, B, B - 0.6, B - 0.6], [B - 0.6, B, B + 0.6, B + 0.6]]}))
    assert [r[1:4] for r in v.tables[1].rows if r[0] == "sp"] == [["1.20", "1.20", "0.00"]]
    assert v.outcome == "undecided"


# ------------------------------------------------------------------------------------------------ the figure


@pytest.fixture
def drawn(monkeypatch) -> dict[str, Figure]:
    return keep_figures(monkeypatch, mup_basin)


def test_the_basin_figure_draws_seed_means_seeds_and_the_refined_optimum(tmp_path, drawn):
    sp0 = [4.0, 3.6, 3.30, 3.25, 3.40, 3.9, 5.0]  # seed 0; seed 1 = +0.1: mean = +0.05, same vertex offset
    recs = [_rec("sp", 64, lr, s, v + 0.1 * s) for s in (0, 1) for lr, v in zip(GRID, sp0)]
    recs += [_rec("mup", 64, lr, s, v) for s in (0, 1) for lr, v in zip(GRID, [3.1, 3.2, 3.4, 3.6, 3.9, 4.4, 5.0])]
    recs[6] = _rec("sp", 64, GRID[6], 0, None, status="diverged")  # SP's top lr diverged on seed 0
    panels = mup_basin.basin_panels(recs, ("sp", "mup"), (64,), GRID, (0, 1))
    mup_basin.plot_basins(tmp_path / mup_basin.FIGURE, panels, GRID)
    assert (tmp_path / "mup_basin.png").stat().st_size > 0
    sp_ax, mup_ax = drawn["mup_basin.png"].axes[:2]
    line = artist(sp_ax, "mean d64")
    assert list(line.get_xdata()) == list(GRID[:6])  # the top lr's mean is +inf: not on the line
    assert np.allclose(line.get_ydata(), [v + 0.05 for v in sp0[:6]])
    seeds = artist(sp_ax, "seeds d64").get_offsets()
    assert sorted(map(tuple, np.round(seeds, 6))) == sorted(
        [(lr, round(v, 6)) for lr, v in zip(GRID[:6], sp0[:6])] + [(lr, round(v + 0.1, 6)) for lr, v in zip(GRID, sp0)])
    assert np.allclose(artist(sp_ax, "diverged d64").get_offsets()[:, 0], [GRID[6]])
    # the refined optimum of the seed-mean curve: -0.25 steps from GRID[3] at 3.24375 + 0.05 (hand, as above)
    assert np.allclose(artist(sp_ax, "optimum d64").get_offsets(), [[GRID[3] * 2 ** -0.25, 3.29375]])
    edge = artist(mup_ax, "optimum d64")
    assert np.allclose(edge.get_offsets(), [[GRID[0], 3.1]])  # the red star at the low edge
    assert np.allclose(edge.get_facecolor()[0], to_rgba(mup_basin.EDGE_COLOR))
    assert "0.00 grid steps" in sp_ax.get_title() and sp_ax.get_xscale() == "log"
    assert [t.get_text() for t in sp_ax.get_xticklabels()] == [f"{lr:g}" for lr in GRID]


# ------------------------------------------------------------------------------------------------ the setup


def test_the_yaml_and_the_groups_hold_the_setup_of_the_module():
    f = FINDINGS[NAME]
    cfg = compose_config([f"experiment=finding_{NAME}"], return_hydra_config=True)
    assert not is_tuned(f.experiment) and cfg.hydra.launcher.n_jobs == 2
    params = cfg.hydra.sweeper.params
    assert [float(v) for v in str(params["optim.lr"]).split(",")] == list(GRID)
    assert str(params["finding/mup_param"]).split(",") == list(mup.PARAMS)
    assert str(params["finding/mup_width"]).split(",") == [f"d{w}" for w in mup.WIDTHS]
    assert str(params["seed"]).split(",") == [str(s) for s in mup.SEEDS]
    assert str(cfg.hydra.sweep.dir).startswith(f"multirun/findings/{NAME}/") and cfg.experiment_name == f"finding_{NAME}"
    assert (cfg.data.source, list(cfg.data.paths), cfg.data.val_fraction) == ("text", [ELTEC.path], 0.01)
    assert (cfg.tokenizer.vocab_size, cfg.tokenizer.max_train_bytes) == (v2.VOCAB, v2.MAX_TRAIN_BYTES)
    t = cfg.train
    assert (t.sampler, t.max_epochs, t.n_ctx, t.batch_size, t.eval_batches, t.eval_batch_size) == \
        ("epoch", 1, 64, 8, 40, 16)
    assert (t.num_threads, t.progress, t.extrap, cfg.logger.kind) == (1, False, "never", "disabled")
    assert (cfg.schedule.name, cfg.schedule.warmup_ratio, cfg.schedule.min_lr_ratio) == ("cosine", 0.05, 0.1)
    assert (list(cfg.optim.betas), cfg.optim.weight_decay, t.grad_clip) == ([0.9, 0.95], 0.1, 1.0)
    assert f.data == "eltec" and f.figures == ("mup_basin.png",) and set(v2.SHARED_FILES) <= set(f.extra_files)
    assert "arXiv:2203.03466" in f.citation and not f.smoke_shape
    for path in f.extra_files:  # a claim module's at its place now (registration.moved)
        assert list(REPO.glob(registration.moved(path).as_posix())), path
    text = " ".join(f.setup.split())
    assert f"[{', '.join(f'{v:g}' for v in GRID)}]" in text and "112 runs" in text
    assert "reproduced" not in text.lower() and "partly" not in text  # a smoke doc shows the setup, never a verdict


@pytest.mark.parametrize("width", mup.WIDTHS)
@pytest.mark.parametrize("param", mup.PARAMS)
def test_each_width_and_parametrization_builds_the_model_and_budget_of_the_setup(param, width):
    from arch import count_params
    from experiments.config.check import model_config, validate

    overrides = [f"experiment=finding_{NAME}", f"finding/mup_param={param}", f"finding/mup_width=d{width}"]
    c = validate(compose_config(overrides))
    m = model_config(c.model, 2048)
    assert (m.d_model, m.n_layers, m.n_heads, m.d_head, m.d_mlp) == (width, 4, 4, width // 4, 4 * width)
    assert (m.tie_embeddings, m.norm, m.norm_type, m.activation, m.pos.kind, m.init) == \
        (True, "pre", "layernorm", "gelu", "learned", "gpt2")
    assert (m.param, m.base_width) == (param, 64 if param == "mup" else None)
    assert count_params(m, non_embedding=True) == mup.NON_EMBEDDING[width]
    assert compose_config(overrides, return_hydra_config=True).hydra.runtime.choices["model/param"] == param
    steps = c.train.tokens // (8 * 64)
    assert c.train.tokens == 1000 * width and steps * 512 == c.train.tokens
    assert c.train.eval_interval == c.train.ckpt_interval == mup.EVAL_INTERVAL[width]
    assert abs(c.train.eval_interval / steps - 0.1) < 0.005
    text = " ".join(FINDINGS[NAME].setup.split())
    assert f"{mup.NON_EMBEDDING[width]:,}" in text and f"{1000 * width:,}" in text and f"{steps:,}" in text


def test_smoke_keeps_the_grid_and_the_widths(tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.5))[1])
    assert main([NAME, "--smoke", "--out-dir", str(tmp_path / "s")]) == 1  # (no runs: exit 1)
    argv = seen[0]
    assert "seed=0,1" in argv and "finding/data=embedded" in argv and "train.tokens=384" in argv
    assert not any(a.startswith(("model.d_model", "model.n_heads", "model.n_layers", "optim.lr", "finding/mup",
                                 "hydra.sweeper")) for a in argv)
    assert json.loads((tmp_path / "s" / "finding.json").read_text())["tuned"] is False
    capsys.readouterr()


def test_the_registration_is_the_setup_as_it_is_now():
    f = FINDINGS[NAME]
    check = registration.check(NAME, f.extra_files)
    assert check.status == "unchanged", check.changed_paths()
    record = json.loads((REPO / "experiments" / "findings" / "registered" / f"{NAME}.json").read_text())
    paths = {v["path"] for v in record["files"].values()}
    assert {"experiments/findings/lr_transfer.py", "experiments/findings/mup_basin.py",
            "conf/finding/mup_width/d512.yaml", "conf/finding/mup_param/mup.yaml",
            "conf/model/param/mup.yaml"} <= paths
