"""The nine v2 findings (docs/findings/PLAN_v2.md): the findings command with a tuned sweep (the sweeper's smoke
seeds, a refused seed override, --resume), each v2 YAML against the shared setup and its own SETUP text, the
computed shapes (GQA's d_mlp, the untied d_model, Kaplan's solved shapes) against what the configs build, each v2
rule's outcomes on hand-made evidence, and the index's nine rows. The machinery they use (readings, cost, doc
paragraphs, EXTRA_FILES, data): test_findings_tuned.py.

No training here but the slow resume test (the tuned smoke runs end to end are test_findings.py's smoke test):
evidence is built by hand, and the command's sweep is replaced where it would train.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from experiments.config.compose import compose_config
from experiments.findings import FINDINGS, Evidence
from experiments.findings import cli, registration
from experiments.findings import index as index_lib
from experiments.findings.claims import kaplan_aspect_ratio_v2 as kaplan_v2
from experiments.findings.claims import protocol_v2 as v2
from experiments.findings.cli import main
from experiments.findings.data import ELTEC
from experiments.findings.registry import SMOKE_TUNED_SEEDS, versions
from experiments.findings.tuned import is_tuned

from .conftest import REPO
from .test_findings import _comparison, findings_env  # noqa: F401 (a fixture)
from .test_findings_tuned import _arm, _rec

V2 = ["alibi_extrapolation_v2", "xiong_postln_warmup_v2", "kaplan_aspect_ratio_v2", "swiglu_vs_gelu_v2",
      "rmsnorm_vs_layernorm_v2", "rope_vs_learned_v2", "qk_norm_lr_sensitivity", "gqa_vs_mha", "tied_vs_untied"]
DOCS = REPO / "docs" / "findings"




# ------------------------------------------------------------------------------------------------ the command


def _no_sweep(monkeypatch) -> list:
    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.5))[1])
    return seen


def test_tuned_smoke_gives_the_sweeper_its_seeds_and_keeps_the_grid(tmp_path, monkeypatch, capsys):
    seen = _no_sweep(monkeypatch)
    assert is_tuned("finding_rope_vs_learned_v2") and not is_tuned("finding_rope_vs_learned")
    assert main(["rope_vs_learned_v2", "--smoke", "--out-dir", str(tmp_path / "s")]) == 1  # (no runs: exit 1)
    argv = seen[0]
    assert "seed=0,1" not in argv and argv[-len(SMOKE_TUNED_SEEDS) - 4:] == [
        *SMOKE_TUNED_SEEDS, "model.d_model=32", "model.n_heads=2", "model.n_layers=2", "finding/data=embedded"]
    assert not any(a.startswith(("hydra.sweeper.tune=", "hydra.sweeper.tune.", "optim.lr")) for a in argv)
    assert json.loads((tmp_path / "s" / "finding.json").read_text())["tuned"] is True
    capsys.readouterr()
    assert main(["rope_vs_learned", "--smoke", "--out-dir", str(tmp_path / "v1")]) == 1
    assert "seed=0,1" in seen[1] and not any(a.startswith("hydra.sweeper") for a in seen[1])
    capsys.readouterr()
    assert main(["rope_vs_learned_v2", "--smoke", "--out-dir", str(tmp_path / "t"), "seed=0,1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed=0,1: rope_vs_learned_v2 is a tuned sweep" in err[0] and "hydra.sweeper.seeds" in err[0]
    assert len(seen) == 2 and not (tmp_path / "t").exists()

    assert main(["rope_vs_learned_v2", "--resume", "--out-dir", str(tmp_path / "s")]) == 1
    assert seen[2] == [*argv, "train.resume=true"]


# ------------------------------------------------------------------------------------------------ the setups


def test_every_v2_yaml_holds_the_shared_setup_and_matches_its_setup_text():
    issue_32 = [n for n in FINDINGS if n.endswith("_v3") or n == "mup_lr_transfer_v2"]
    assert [n for n in FINDINGS if n in V2] == V2 and len(FINDINGS) - len(issue_32) == 17
    for name in V2:
        f = FINDINGS[name]
        cfg = compose_config([f"experiment=finding_{name}"], return_hydra_config=True)
        sw = cfg.hydra.sweeper
        assert is_tuned(f.experiment) and str(cfg.hydra.sweep.dir).startswith(f"multirun/findings/{name}/")
        grid = tuple(sw.tune["optim.lr"])
        assert list(sw.tune) == ["optim.lr"] and len(grid) == 5 and (grid == v2.GRID or name in (
            "qk_norm_lr_sensitivity", "xiong_postln_warmup_v2")), name
        assert (tuple(sw.tune_seeds), tuple(sw.seeds), sw.tune_fraction, sw.widen) == \
            (v2.TUNE_SEEDS, v2.SEEDS, v2.FRACTION, v2.WIDEN)
        assert "seed" not in sw.params and cfg.experiment_name == f"finding_{name}"
        assert (cfg.data.source, list(cfg.data.paths), cfg.data.val_fraction, cfg.data.split_by) == \
            ("text", [ELTEC.path], 0.01, "stream")
        assert (cfg.tokenizer.vocab_size, cfg.tokenizer.max_train_bytes) == (v2.VOCAB, v2.MAX_TRAIN_BYTES)
        t = cfg.train
        assert (t.sampler, t.max_epochs, t.n_ctx, t.eval_batches, t.eval_batch_size) == ("epoch", 1, 128, 40, 16)
        assert (t.num_threads, t.progress, cfg.logger.kind) == (1, False, "disabled")
        assert (cfg.schedule.name, cfg.schedule.warmup_ratio, cfg.schedule.min_lr_ratio) == ("cosine", 0.05, 0.1)
        assert (cfg.optim.betas[0], cfg.optim.betas[1], cfg.optim.weight_decay, t.grad_clip) == (0.9, 0.95, 0.1, 1.0)
        assert cfg.hydra.launcher.n_jobs == 2 and f.data == "eltec" and f.sesoi == 0.02 and f.sesoi_why
        assert "basin.png" in f.figures and set(v2.SHARED_FILES) <= set(f.extra_files)
        assert re.search(r"arXiv:\d{4}\.\d{5}", f.citation), name
        text = f.setup
        assert f"[{', '.join(f'{v:g}' for v in grid)}]" in text, name
        if name != "kaplan_aspect_ratio_v2":  # its budget is per size (below)
            assert f"{t.tokens:,} training tokens per final run" in text, name
            assert f"{v2.steps(t.tokens, t.batch_size):,} steps" in text and f"every {t.eval_interval} steps" in text
            assert t.ckpt_interval == t.eval_interval and abs(t.eval_interval / v2.steps(t.tokens, t.batch_size)
                                                              - 0.1) < 0.002, name
            assert f"batch {t.batch_size} ({t.batch_size * 128:,} tokens per step)" in text
        for path in f.extra_files:  # every extra file exists (a glob matches something; a claim's at its place now)
            assert list(REPO.glob(registration.moved(path).as_posix())), (name, path)
    for size, (n, tokens, every) in kaplan_v2.SIZES.items():
        c = compose_config(["experiment=finding_kaplan_aspect_ratio_v2", f"finding/kaplan_size={size}"])
        assert (c.model.shape.n_params, c.train.tokens, c.train.eval_interval, c.train.ckpt_interval) == \
            (n, tokens, every, every) and tokens == 20 * n
        assert f"{tokens:,} ({v2.steps(tokens):,} steps)" in FINDINGS["kaplan_aspect_ratio_v2"].setup


def _params(exp: str, *overrides: str):
    from arch import count_params
    from experiments.config.check import model_config, validate

    c = validate(compose_config([f"experiment={exp}", *overrides]))
    m = model_config(c.model, 2048)
    return m, count_params(m), count_params(m, non_embedding=True)


def test_the_computed_shapes_are_what_the_configs_build():
    mha = _params("finding_gqa_vs_mha", "finding/kv=mha")
    for arm, n_kv, d_mlp in (("gqa", 2, 608), ("mqa", 1, 624)):
        m, total, non_emb = _params("finding_gqa_vs_mha", f"finding/kv={arm}")
        assert (m.n_heads, m.n_kv_heads, m.d_mlp, m.d_model // m.n_heads) == (8, n_kv, d_mlp, 16)
        assert abs(total / mha[1] - 1) < 0.005 and abs(non_emb / mha[2] - 1) < 0.005
        assert f"`n_kv_heads={n_kv} d_mlp={d_mlp}` ({non_emb:,}" in FINDINGS["gqa_vs_mha"].setup
    tied = _params("finding_tied_vs_untied", "finding/embed=tied")
    untied = _params("finding_tied_vs_untied", "finding/embed=untied")
    equal = _params("finding_tied_vs_untied", "finding/embed=untied_equal_total")
    assert untied[2] == tied[2] and untied[1] - tied[1] == 2048 * 128
    # d_model 112: the multiple of n_heads (4) whose untied total is closest to tied's
    totals = {d: _params("finding_tied_vs_untied", "finding/embed=untied_equal_total", f"model.d_model={d}")[1]
              for d in range(96, 132, 4)}
    assert min(totals, key=lambda d: abs(totals[d] - tied[1])) == equal[0].d_model == 112
    assert f"{equal[1]:,} in all, +{100 * (equal[1] / tied[1] - 1):.2f}% of tied's" in FINDINGS["tied_vs_untied"].setup
    for size, n in (("p100k", 100_000), ("p400k", 400_000)):
        for depth in (2, 4, 8):
            m, total, non_emb = _params("finding_kaplan_aspect_ratio_v2", f"finding/kaplan_size={size}",
                                        f"model.shape.n_layers={depth}")
            assert m.n_layers == depth and not m.tie_embeddings and abs(non_emb / n - 1) < 0.045
            ratio = f"{m.d_model / depth:g}"
            assert f"{depth} × {m.d_model} ({non_emb:,} parameters, aspect ratio {ratio})" in \
                FINDINGS["kaplan_aspect_ratio_v2"].setup.replace("\n  ", " ") or \
                f"{depth} × {m.d_model} ({non_emb:,}, {ratio})" in FINDINGS["kaplan_aspect_ratio_v2"].setup.replace("\n  ", " ")


# ------------------------------------------------------------------------------------------------ the rules


def _ev(records, baseline, extra=None, tuning_records=()) -> Evidence:
    return Evidence(_comparison(records, baseline), records, extra, None, list(tuning_records))


BASE = [3.00, 3.10, 3.05]


@pytest.mark.parametrize("name,key,base,other", [("rope_vs_learned_v2", "model.pos.kind", "learned", "rope"),
                                                 ("swiglu_vs_gelu_v2", "model.activation", "gelu", "swiglu")])
def test_two_group_v2_rules(name, key, base, other):
    rule = FINDINGS[name].rule
    b = _arm({key: base}, BASE)
    better = rule(_ev(b + _arm({key: other}, [v - d for v, d in zip(BASE, (0.04, 0.05, 0.045))]), {key: base}))
    assert better.outcome == "reproduced" and better.family.k == 1
    same = rule(_ev(b + _arm({key: other}, [v + d for v, d in zip(BASE, (0.04, -0.05, 0.005))]), {key: base}))
    assert same.outcome == "not reproduced" and "not distinguishable" in same.explanation


def _rms_ev(diffs, speed):
    recs = _arm({"model.norm_type": "layernorm"}, BASE) + \
        _arm({"model.norm_type": "rmsnorm"}, [v + d for v, d in zip(BASE, diffs)])
    return _ev(recs, {"model.norm_type": "layernorm"}, speed)


def test_rmsnorm_v2_rule_reads_equivalence_and_the_compiled_speed():
    rule = FINDINGS["rmsnorm_vs_layernorm_v2"].rule
    same = (0.001, -0.002, 0.0005)
    fast = {"measurable": True, "rounds": [0.90, 0.92, 0.91, 0.93, 0.90], "ratio": 0.91, "ratio_ci": [0.89, 0.93],
            "seconds": {"layernorm": [0.4] * 5, "rmsnorm": [0.364] * 5}}
    v = rule(_rms_ev(same, fast))
    assert v.outcome == "reproduced" and v.family.k == 2 and v.family.readings == ("equivalent", "faster")
    v = rule(_rms_ev(same, {"measurable": False, "reason": "timing both steps compiled failed (no compiler)"}))
    assert v.outcome == "partly" and v.family.k == 1 and "not measurable here: timing both" in v.explanation
    assert "not measurable" in v.key_number and "equal-quality kernels" in v.likely_reason
    slow = {**fast, "rounds": [1.05, 1.04, 1.06, 1.05, 1.05], "ratio": 1.05}
    assert rule(_rms_ev(same, slow)).outcome == "partly"
    assert rule(_rms_ev((0.05, 0.06, 0.055), slow)).outcome == "not reproduced"


def _qk_ev(none_losses, ln_losses):
    tuning = []
    for key, losses in ((None, none_losses), ("layernorm", ln_losses)):
        for lr, loss in zip((1e-3, 3e-3, 1e-2, 3e-2, 1e-1), losses):
            status = "diverged" if loss is None else "completed"
            tuning.append(_rec({"model.qk_norm": key}, 1000, loss, status=status, lr=lr, init_loss=7.6,
                               attn_max_logit=5.0 if key else 40.0))
    finals = _arm({"model.qk_norm": None}, BASE, lr=3e-3) + _arm({"model.qk_norm": "layernorm"}, BASE, lr=1e-2)
    return _ev(finals, {"model.qk_norm": None}, tuning_records=tuning)


def test_qk_norm_rule_reads_the_sensitivity_of_the_tuning_runs():
    rule = FINDINGS["qk_norm_lr_sensitivity"].rule
    v = rule(_qk_ev([3.4, 3.1, 3.3, None, None], [3.4, 3.15, 3.1, 3.2, 3.5]))
    # none: capped 3.4, 3.1, 3.3, 7.6, 7.6 -> S = (0.3 + 0 + 0.2 + 4.5 + 4.5) / 5 = 1.9
    # layernorm: best 3.1 -> (0.3 + 0.05 + 0 + 0.1 + 0.4) / 5 = 0.17
    assert v.outcome == "reproduced" and "none 1.9000, layernorm 0.1700" in v.explanation and v.family is None
    assert v.tables[0].rows[0][4:6] == ["diverged", "diverged"] and "40.00–40.00" in v.tables[0].rows[0]
    assert rule(_qk_ev([3.4, 3.1, 3.3, 3.5, 3.6], [3.4, 3.15, 3.1, None, None])).outcome == "not reproduced"


def test_gqa_rule_reads_equivalence_against_mha():
    rule = FINDINGS["gqa_vs_mha"].rule
    kv = {"rows": [{"arm": a, "kv_bytes_fp32": 2 * 4 * n * 16 * 4, "kv_bytes_bf16": 2 * 4 * n * 16 * 2,
                    "params": 1_071_872} for a, n in (("mha", 8), ("gqa", 2), ("mqa", 1))]}

    def ev(gqa, mqa):
        recs = _arm({"model.n_kv_heads": 8}, BASE)
        recs += _arm({"model.n_kv_heads": 2}, [v + d for v, d in zip(BASE, gqa)])
        recs += _arm({"model.n_kv_heads": 1}, [v + d for v, d in zip(BASE, mqa)])
        return _ev(recs, {"model.n_kv_heads": 8}, kv)

    v = rule(ev((0.001, -0.001, 0.0005), (0.03, 0.05, 0.04)))
    assert v.outcome == "reproduced" and v.family.readings == ("equivalent", "worse (CI above 0)")
    assert "KV cache ×0.25 of mha's" in v.key_number and "4,096 B" in v.explanation
    assert rule(ev((0.01, -0.03, 0.05), (0.0, 0.0, 0.001))).outcome == "partly"
    assert rule(ev((0.05, 0.06, 0.055), (0.0, 0.0, 0.001))).outcome == "not reproduced"


def test_tied_rule_reads_equal_total_with_holm_over_two():
    rule = FINDINGS["tied_vs_untied"].rule

    def ev(equal_total, untied):
        recs = _arm({"model.tie_embeddings": True, "model.d_model": 128}, BASE)
        recs += _arm({"model.tie_embeddings": False, "model.d_model": 112}, [v + d for v, d in zip(BASE, equal_total)])
        recs += _arm({"model.tie_embeddings": False, "model.d_model": 128}, [v + d for v, d in zip(BASE, untied)])
        return _ev(recs, {"model.tie_embeddings": True})

    v = rule(ev((0.05, 0.06, 0.055), (0.0, 0.01, -0.01)))
    assert v.outcome == "reproduced" and v.family.k == 2 and v.family.readings[0] == "untied worse"
    v = rule(ev((-0.05, -0.06, -0.055), (0.0, 0.01, -0.01)))
    assert v.outcome == "not reproduced" and v.family.readings[0] == "untied better"


def _alibi_ev(d8: dict) -> Evidence:
    recs = []
    for kind, values in d8.items():
        for seed, d in enumerate(values):
            recs.append(_rec({"model.pos.kind": kind}, seed, 3.0, **{"extrap/nonoverlap/loss@1x": 3.0,
                             "extrap/nonoverlap/loss@2x": 3.0 + d / 4, "extrap/nonoverlap/loss@4x": 3.0 + d / 2,
                             "extrap/nonoverlap/loss@8x": 3.0 + d}))
    return _ev(recs, {"model.pos.kind": "alibi"})


def test_alibi_v2_rule_follows_the_papers_figure_1():
    rule = FINDINGS["alibi_extrapolation_v2"].rule
    good = {"alibi": [0.01, 0.02, 0.0], "sinusoidal": [1.0, 1.1, 0.9], "rope": [0.5, 0.62, 0.55],
            "relative": [0.2, 0.3, 0.25]}
    v = rule(_alibi_ev(good))
    assert v.outcome == "reproduced" and v.family.k == 3 and v.family.readings == ("degrades more",) * 3
    assert rule(_alibi_ev({**good, "relative": [0.0, 0.05, -0.04]})).outcome == "partly"
    bad = {"alibi": [0.5, 0.6, 0.55], "sinusoidal": [0.5, 0.62, 0.5], "rope": [0.55, 0.6, 0.5],
           "relative": [0.5, 0.6, 0.56]}
    v = rule(_alibi_ev(bad))
    assert v.outcome == "not reproduced" and "ALiBi's d_8 interval reaches" in v.likely_reason


def _kaplan_ev(small: dict, large: dict) -> Evidence:
    recs = []
    for n, table in ((100_000, small), (400_000, large)):
        for depth, values in table.items():
            recs += _arm({"model.shape.n_params": n, "model.shape.n_layers": depth}, values)
    return _ev(recs, {"model.shape.n_params": 100_000, "model.shape.n_layers": 4})


def test_kaplan_v2_rule_reads_each_size_and_the_trend():
    rule = FINDINGS["kaplan_aspect_ratio_v2"].rule
    tight = {2: [3.00, 3.10, 3.05], 4: [3.01, 3.11, 3.05], 8: [3.02, 3.12, 3.07]}
    tighter = {2: [2.80, 2.90, 2.85], 4: [2.80, 2.90, 2.85], 8: [2.801, 2.902, 2.851]}
    v = rule(_kaplan_ev(tight, tighter))
    assert v.outcome == "reproduced" and v.family.k == 3 and v.family.readings[2] == "shrinks"
    wide = {2: [3.00, 3.10, 3.05], 4: [3.10, 3.21, 3.16], 8: [3.30, 3.40, 3.36]}
    v = rule(_kaplan_ev(wide, tighter))
    assert v.outcome == "partly" and v.family.readings[:2] == ("not shown within 3%", "within 3%")
    assert rule(_kaplan_ev(wide, wide)).outcome == "not reproduced"


def _xiong_ev(post0, pre0, ratios):
    recs = []
    for norm, w0 in (("post", post0), ("pre", pre0)):
        recs += _arm({"model.norm": norm, "schedule.warmup_ratio": 0.05}, BASE)
        recs += _arm({"model.norm": norm, "schedule.warmup_ratio": 0.0}, [v + d for v, d in zip(BASE, w0)])
    rows = [{"norm": n, "seed": s, "ratio": r} for n, rs in ratios.items() for s, r in enumerate(rs)]
    return _ev(recs, {"model.norm": "post", "schedule.warmup_ratio": 0.05}, {"rows": rows})


def test_xiong_v2_rule_reads_a_difference_an_equivalence_and_the_encdec_ratios():
    rule = FINDINGS["xiong_postln_warmup_v2"].rule
    grows_flat = {"post": [5.2, 5.5, 5.0], "pre": [0.9, 1.1, 1.0]}
    v = rule(_xiong_ev((0.2, 0.25, 0.22), (0.001, -0.001, 0.0005), grows_flat))
    assert v.outcome == "reproduced" and [p[1] for p in v.parts] == ["reproduced", "reproduced"]
    assert v.family.k == 2 and v.family.readings[1] == "holds: equivalent"
    v = rule(_xiong_ev((0.2, 0.25, 0.22), (0.2, 0.25, 0.22), {"post": [5.2, 5.5, 5.0], "pre": [0.6, 0.62, 0.61]}))
    assert [p[1] for p in v.parts] == ["partly", "partly"] and v.outcome == "partly"
    v = rule(_xiong_ev((-0.05, 0.04, 0.0), (0.2, 0.25, 0.22), {"post": [0.9, 0.8, 0.7], "pre": [0.4, 0.5, 0.45]}))
    assert v.outcome == "not reproduced"
    assert rule(_xiong_ev((0.2, 0.25, 0.22), (0.001, -0.001, 0.0005), {})).parts[1][1] == "not reproduced"


def test_every_v2_rule_is_covered_above():
    covered = {"rope_vs_learned_v2", "swiglu_vs_gelu_v2", "rmsnorm_vs_layernorm_v2", "qk_norm_lr_sensitivity",
               "gqa_vs_mha", "tied_vs_untied", "alibi_extrapolation_v2", "kaplan_aspect_ratio_v2",
               "xiong_postln_warmup_v2"}
    assert covered == set(V2)


# ------------------------------------------------------------------------------------------------ the index


def test_the_index_lists_nine_findings_the_v1_docs_as_earlier_versions():
    """One row per finding, the newest version with a doc (a v3 that has run takes its v2's row; the v2 is then
    listed as earlier there, after the v1)."""
    rows = index_lib.index_table(list(FINDINGS.values()), DOCS)[2:]
    assert len(rows) == 11  # and the two μP findings'
    cells = {r.split("|")[1].strip(): [c.strip() for c in r.strip("|").split("|")] for r in rows}
    for name in V2:
        ran = [n for n in versions(name) if (DOCS / f"{n}.md").is_file()]
        shown = ran[-1] if ran else versions(name)[-1]  # as index_table picks the row's version
        row = cells[FINDINGS[shown].title]
        assert row[2] == "not run yet" or (DOCS / f"{shown}.md").is_file(), name
        if name.endswith("_v2"):
            v1 = name[:-3]
            assert f"earlier: [{v1}.md]({v1}.md)" in row[4], name
            if shown != name:
                assert f"[{name}.md]({name}.md)" in row[4].split("earlier: ", 1)[1], name


# ------------------------------------------------------------------------------------------------ resume, end to end


@pytest.mark.slow
def test_resume_continues_a_tuned_finding_sweep(tmp_path, findings_env, capfd):
    """A tuned smoke sweep whose last two final runs are gone (as after a stop): --resume launches exactly those
    (the sweeper's train.resume=true), leaves every other run's summary as it was, and writes the doc again."""
    sweep = tmp_path / "s"
    assert main(["rope_vs_learned_v2", "--smoke", "--out-dir", str(sweep)]) == 0, capfd.readouterr().err[-3000:]
    finals = [sweep / f["run_dir"] for f in json.loads((sweep / "tuning.json").read_text())["finals"]]
    gone = finals[-2:]
    kept = {p: p.read_bytes() for p in sweep.glob("*/summary.json") if p.parent not in gone}
    for d in gone:
        shutil.rmtree(d)
    (sweep / "rope_vs_learned_v2.md").unlink()
    capfd.readouterr()
    assert main(["rope_vs_learned_v2", "--resume", "--out-dir", str(sweep)]) == 0, capfd.readouterr().err[-3000:]
    err = capfd.readouterr().err
    assert err.count("Launching 1 jobs locally") + err.count("Launching 2 jobs locally") >= 1
    assert all(json.loads((d / "summary.json").read_text())["status"] == "completed" for d in gone)
    assert {p: p.read_bytes() for p in kept} == kept
    meta = json.loads((sweep / "finding.json").read_text())
    assert meta["attempts"] == 2 and meta["tuning"]["phase"] == "done"
    assert "the sum of 2 attempts" in (sweep / "rope_vs_learned_v2.md").read_text()
