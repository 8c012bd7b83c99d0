"""The v3 findings at size L (issue 32 §3.2: gqa_vs_mha_v3, tied_vs_untied_v3): their YAMLs hold protocol v3 at L
(numbers computed here by hand), the arms' parameters counted on the built models against closed forms, the power
plans re-derived from the v1 docs' committed intervals (scipy's t by hand) and power.py, power.py's Bonferroni
family against a seeded simulation, and the one-size rule (experiments/findings/comparisons.py) against scipy on
hand-made runs."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import stats

from experiments.config.compose import compose_config
from experiments.findings import FINDINGS, Evidence, RunRecord
from experiments.findings.claims import gqa_vs_mha_v3 as gqa
from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.claims import protocol_v3_l as l3
from experiments.findings.claims import tied_vs_untied_v3 as tied
from experiments.findings.comparisons import Comparison, at_one_size
from experiments.findings.power import Noise, plan, power_directional, power_equivalence

from .conftest import REPO

V3_L = ["gqa_vs_mha_v3", "tied_vs_untied_v3"]
ARMS = {"gqa_vs_mha_v3": {"mha": "finding/kv=mha", "gqa": "finding/kv=gqa"},
        "tied_vs_untied_v3": {a: f"finding/embed={a}" for a in ("tied", "untied", "untied_equal_total")}}
VOCAB, N_CTX, LAYERS = 2048, 128, 4


def _non_embedding(d: int, d_mlp: int, kv_width: int) -> int:
    """Per layer: Q and O (d² + d each), K and V (d · kv_width + kv_width each), the MLP (2 d · d_mlp + d_mlp + d),
    two LayerNorms (4 d); plus the final LayerNorm (2 d)."""
    attn = 2 * (d * d + d) + 2 * (d * kv_width + kv_width)
    return LAYERS * (attn + 2 * d * d_mlp + d_mlp + d + 4 * d) + 2 * d


def _total(d: int, d_mlp: int, kv_width: int, tied_: bool) -> int:
    """Non-embedding, the token embedding, learned positions, and an output matrix unless tied."""
    return _non_embedding(d, d_mlp, kv_width) + VOCAB * d + N_CTX * d + (0 if tied_ else VOCAB * d)


def _models(name: str) -> dict:
    from arch import build_model
    from experiments.findings.arms import arm_models

    return {arm: (c, build_model(c)) for arm, c in arm_models(f"finding_{name}", {a: [o] for a, o in
                                                                                    ARMS[name].items()}).items()}


def _counts(model) -> tuple[int, int]:
    """(total, non-embedding) parameters of a built model, tied matrices once (torch's parameters() dedupes)."""
    params = dict(model.named_parameters())
    vocab = ("wte.weight", "lm_head.weight", "pos.wpe.weight")
    return sum(p.numel() for p in params.values()), sum(p.numel() for n, p in params.items() if n not in vocab)


# ------------------------------------------------------------------------------------------------ the YAMLs


@pytest.mark.parametrize("name", V3_L)
def test_each_yaml_composes_to_protocol_v3_at_size_l(name):
    f = FINDINGS[name]
    for arm, option in ARMS[name].items():
        cfg = compose_config([f"experiment={f.experiment}", option], return_hydra_config=True)
        t, data, sw = cfg.train, cfg.data, cfg.hydra.sweeper
        steps = math.ceil(5 * _non_embedding(128, 512, 128) / 2048)  # 5 tokens per non-embedding parameter at L
        assert (t.tokens, steps, l3.TOKENS) == (steps * 2048, 1937, steps * 2048)
        assert abs(t.eval_interval / steps - 0.1) < 0.01 and cfg.model.n_layers == LAYERS
        assert (t.batch_size, t.n_ctx, t.num_threads, t.sampler, t.max_epochs) == (16, N_CTX, 1, "epoch", 1)
        assert (data.doc_separator, data.split_by, data.val_fraction, data.test_fraction) == \
            ("<|endoftext|>", "documents", 0.042, 0.042)
        assert list(data.extra_eval) == ["wikitext2"] and cfg.tokenizer.vocab_size == VOCAB
        assert (sw.confirm, sw.confirm_widen, tuple(sw.tune["optim.lr"]), tuple(sw.tune_seeds)) == \
            (True, 1, v3.GRID, v3.TUNE_SEEDS)
        assert list(sw.params) == [option.split("=")[0]] and sw.params[option.split("=")[0]] == ",".join(ARMS[name])
        assert list(sw.seeds) == list(range(10)) == list(l3.SEEDS) and len(sw.seeds) <= v3.SEED_CAP
        assert not set(sw.seeds) & (set(sw.tune_seeds) | set(v3.PILOT_SEEDS))
    assert set(l3.SHARED_FILES) <= set(f.extra_files) and f.sesoi == v3.SESOI and f.metric == "test/loss"
    assert all(list(REPO.glob(p)) for p in f.extra_files), f.extra_files


def test_gqa_arms_equal_non_embedding_parameters_on_the_built_models():
    import torch

    from arch import kv_cache_bytes_per_token

    models = _models("gqa_vs_mha_v3")
    (mha_cfg, mha), (gqa_cfg, gqa_model) = models["mha"], models["gqa"]
    for cfg, n_kv in ((mha_cfg, 8), (gqa_cfg, 2)):
        assert (cfg.d_model, cfg.n_heads, cfg.d_head, cfg.n_kv_heads, cfg.tie_embeddings) == (128, 8, 16, n_kv, True)
    d_mlp = {"mha": 512, "gqa": 608}
    for arm, (cfg, model) in models.items():
        kv_width = cfg.n_kv_heads * 16
        assert cfg.d_mlp == d_mlp[arm]
        assert _counts(model) == (_total(128, d_mlp[arm], kv_width, True), _non_embedding(128, d_mlp[arm], kv_width))
        assert kv_cache_bytes_per_token(cfg, torch.float32) == 2 * LAYERS * cfg.n_kv_heads * 16 * 4
    base = _counts(mha)[1]
    gap = {m: _non_embedding(128, m, 32) - base for m in range(512, 700)}
    assert min(gap, key=lambda m: abs(gap[m])) == 608 == gqa_cfg.d_mlp  # the closest d_mlp: equal as near as can be
    assert _counts(gqa_model)[1] - base == gap[608] == -384 and abs(gap[608]) / base < 0.0005
    assert kv_cache_bytes_per_token(gqa_cfg, torch.float32) * 4 == kv_cache_bytes_per_token(mha_cfg, torch.float32)


def test_tied_arms_equal_hidden_size_and_equal_total_on_the_built_models():
    models = _models("tied_vs_untied_v3")
    counts = {arm: _counts(m) for arm, (_, m) in models.items()}
    for arm, (cfg, _) in models.items():
        tie, d = tied.ARMS[arm]
        assert (cfg.tie_embeddings, cfg.d_model, cfg.n_heads, cfg.d_mlp) == (tie, d, 4, 4 * d)
        assert counts[arm] == (_total(d, 4 * d, d, tie), _non_embedding(d, 4 * d, d))
    assert counts["untied"][1] == counts["tied"][1]  # equal hidden size: equal non-embedding parameters
    assert counts["untied"][0] - counts["tied"][0] == VOCAB * 128  # plus the output matrix
    target = counts["tied"][0]
    closest = min(range(4, 257, 4), key=lambda d: abs(_total(d, 4 * d, d, False) - target))  # multiples of 4 heads
    assert closest == 112 and abs(counts["untied_equal_total"][0] / target - 1) < 0.01
    for arm, (total, non_emb) in counts.items():  # the SETUP states the counts as built
        assert f"{total:,}" in tied.SETUP and f"{non_emb:,}" in tied.SETUP


@pytest.mark.parametrize("name", V3_L)
def test_setup_keeps_protocol_v3s_bullets_word_for_word_and_drops_the_three_sizes(name):
    setup = FINDINGS[name].setup
    shared = v3.shared_setup(arms="")
    for label in l3.KEPT:
        bullet = next(b for b in shared.split("\n- ") if b.lstrip("- ").startswith(f"{label}:"))
        assert bullet.lstrip("- ") in setup, label
    assert "- Sizes:" not in setup and "Bonferroni over the 3 sizes" not in setup and "- Size: L only" in setup
    for said in ("reproduced", "partly", "better (", "worse ("):  # the smoke doc shows the SETUP: no verdict words
        assert said not in setup.lower() and said not in FINDINGS[name].claim.lower()


# ------------------------------------------------------------------------------------------------ the power plans


def _v1_interval(doc: str, group: str) -> tuple[float, float]:
    """The 95% CI of a group's difference to the baseline in a committed v1 doc's Results table."""
    lines = (REPO / "docs" / "findings" / doc).read_text().splitlines()
    row = next(ln for ln in lines if ln.startswith(f"| {group} |"))
    lo, hi = re.search(r"\| [+-]\d\.\d+ \[(-?\d\.\d+), (-?\d\.\d+)\] \|", row).groups()
    return float(lo), float(hi)


NOISES = [  # (module, NOISE key, v1 doc, its group row, test, family)
    (gqa, "gqa − mha", "gqa_vs_mha.md", "n_kv_heads=2 d_mlp=608", "equivalence", 1),
    (tied, "untied − tied", "tied_vs_untied.md", "tie_embeddings=False d_model=128", "directional", 2),
    (tied, "untied_equal_total − tied", "tied_vs_untied.md", "tie_embeddings=False d_model=112", "directional", 2),
]


@pytest.mark.parametrize("module, key, doc, group, test, family", NOISES)
def test_noise_is_the_v1_intervals_sd_and_the_plan_is_power_pys(module, key, doc, group, test, family):
    lo, hi = _v1_interval(doc, group)
    sd = (hi - lo) / 2 * math.sqrt(3) / stats.t.ppf(0.975, 2)  # n = 3 pairs: half-width = t(0.975; 2) · sd / √3
    assert module.NOISE[key][:2] == (round(sd, 4), 2)
    p = plan(test, v3.SESOI, Noise(*module.NOISE[key]), cap=v3.SEED_CAP, family=family)
    setup = " ".join(FINDINGS[module.NAME].setup.split())
    assert f"{module.NOISE[key][0]}" in setup and f"{p.sd_upper:.3g}" in setup
    if p.capped:  # gqa: the cap, with its power stated
        assert f"the cap gives {p.power:.1%} power" in setup and p.n == v3.SEED_CAP
        assert f"80% power needs {plan(test, v3.SESOI, p.noise, cap=100).n} seeds" in setup
    assert p.n <= len(l3.SEEDS)  # the YAMLs' 10 seeds cover every comparison's plan


def test_tied_plan_is_the_larger_of_its_two_comparisons_and_reaches_80_percent_at_10():
    plans = [plan("directional", v3.SESOI, Noise(*tied.NOISE[k]), cap=v3.SEED_CAP, family=2) for k in tied.NOISE]
    assert [p.n for p in plans] == [4, 10] and not any(p.capped for p in plans) and max(p.n for p in plans) == 10
    assert f"{plans[1].power:.1%} at 10" in tied.SETUP and "97.5% CI (Bonferroni over the 2)" in tied.SETUP


@pytest.mark.parametrize("test, n, ratio, family", [("directional", 8, 1.0, 2), ("directional", 12, 0.8, 3),
                                                    ("equivalence", 10, 1.0, 2), ("equivalence", 16, 1.2, 2)])
def test_power_of_a_bonferroni_family_against_simulation(test, n, ratio, family):
    """power.py's `family`: the fraction of seeded simulated experiments (sd 1) whose interval at 1 − α/family
    decides the claim (directional: true effect ratio, entirely above 0; equivalence: true 0, inside ±ratio)."""
    rng = np.random.default_rng(n * 7 + family)
    d = rng.normal(ratio if test == "directional" else 0.0, 1.0, size=(4000, n))
    m, se = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)
    if test == "directional":
        sim = float(np.mean(m - stats.t.ppf(1 - 0.025 / family, n - 1) * se > 0))
        exact = power_directional(n, ratio * 0.02, 0.02, family=family)
    else:
        half = stats.t.ppf(1 - 0.05 / family, n - 1) * se
        sim = float(np.mean((m - half > -ratio) & (m + half < ratio)))
        exact = power_equivalence(n, ratio * 0.02, 0.02, family=family)
    assert abs(exact - sim) < 4 * math.sqrt(max(exact * (1 - exact), 0.01) / 4000), (exact, sim)
    one = (power_directional if test == "directional" else power_equivalence)(n, ratio * 0.02, 0.02)
    assert exact < one  # a stricter level never has more power
    with pytest.raises(ValueError):
        power_directional(n, 0.02, 0.02, family=0)


# ------------------------------------------------------------------------------------------------ the rule


def _records(arms: dict[str, tuple[dict, list[float], list[float]]]) -> list[RunRecord]:
    """Runs per arm: (keys, test losses per seed, WikiText-2 losses per seed)."""
    return [RunRecord(name, keys, seed, "completed", {"final test/loss": t, "final test/wikitext2/loss": w,
                                                      "final val/loss": t, "params": 1000.0,
                                                      "non_embedding_params": 800.0})
            for name, (keys, tests, wts) in arms.items() for seed, (t, w) in enumerate(zip(tests, wts))]


def _by_hand(diffs: list[float], level: float) -> tuple[float, float]:
    x = np.asarray(diffs)
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean() - half, x.mean() + half


def test_two_directional_comparisons_read_at_97_5_and_the_second_corpus_sign():
    base = list(4.0 + np.random.default_rng(1).normal(0, 0.05, 6))
    hidden = [0.030, 0.034, 0.027, 0.031, 0.029, 0.033]  # clearly above 0: reproduced
    total = [0.05, -0.06, 0.04, -0.05, 0.03, -0.02]  # covers 0 and +0.02: inconclusive
    recs = _records({"tied": ({"model.tie_embeddings": True, "model.d_model": 128}, base, [5.0] * 6),
                     "untied": ({"model.tie_embeddings": False, "model.d_model": 128},
                                [b + x for b, x in zip(base, hidden)], [5.01] * 6),
                     "untied_equal_total": ({"model.tie_embeddings": False, "model.d_model": 112},
                                            [b + x for b, x in zip(base, total)], [5.0] * 6)})
    v = tied.rule(Evidence({}, recs))
    assert [p[1] for p in v.parts] == ["reproduced", "inconclusive"] and v.outcome == "partly"
    assert "each comparison read on its 97.5% interval (Bonferroni over the 2)" in v.explanation
    for diffs, part in ((hidden, v.parts[0]), (total, v.parts[1])):
        lo, hi = _by_hand(diffs, 0.975)
        assert f"[{lo:.3f}, {hi:.3f}] (97.5% CI, 2 comparisons)" in part[2]
    assert _by_hand(hidden, 0.975)[0] > 0 and _by_hand(total, 0.975)[1] > 0.02
    # the same runs with WikiText-2 saying the other sign for the equal-hidden comparison: inconclusive
    flipped = [RunRecord(r.group, r.keys, r.seed, r.status, {**r.values, "final test/wikitext2/loss": 4.99})
               if r.group == "untied" else r for r in recs]
    assert [p[1] for p in tied.rule(Evidence({}, flipped)).parts] == ["inconclusive", "inconclusive"]


def test_one_equivalence_comparison_reads_the_90_percent_interval_and_the_second_corpus_band():
    base = list(4.0 + np.random.default_rng(2).normal(0, 0.05, 8))
    diffs = [0.004, -0.006, 0.002, -0.003, 0.005, -0.001, 0.003, -0.002]
    lo, hi = _by_hand(diffs, 0.90)
    assert -0.02 < lo and hi < 0.02  # the hand interval is inside ±SESOI: equivalent

    def ev(second: float, kv: dict | None = None) -> Evidence:
        return Evidence({}, _records({"mha": ({"model.n_kv_heads": 8}, base, [5.0] * 8),
                                      "gqa": ({"model.n_kv_heads": 2}, [b + x for b, x in zip(base, diffs)],
                                              [5.0 + second] * 8)}), extra=kv)

    kv = {"rows": [{"arm": a, "n_kv_heads": n, "d_mlp": m, "params": 1, "non_embedding_params": 1,
                    "kv_bytes_fp32": b, "kv_bytes_bf16": b // 2} for a, n, m, b in (("mha", 8, 512, 4096),
                                                                                      ("gqa", 2, 608, 1024))]}
    v = gqa.rule(ev(0.01, kv))
    assert v.outcome == "reproduced" and f"[{lo:.3f}, {hi:.3f}] (90.0% CI, 1 comparison)" in v.parts[0][2]
    assert "one comparison, read on its 90% interval" in v.explanation
    assert v.key_number.endswith("KV cache ×0.25 of mha's") and v.tables[-1].rows[1][-1] == "0.250"
    assert gqa.rule(ev(0.03)).outcome == "inconclusive"  # WikiText-2's difference outside ±0.02
    wide = at_one_size(ev(0.0), [Comparison("x", {"model.n_kv_heads": 2}, {"model.n_kv_heads": 8}, ("gqa", "mha"),
                                            "equal")] * 2, sesoi=0.02)  # two of them: each at 95%
    lo95, hi95 = _by_hand(diffs, 0.95)
    assert f"[{lo95:.3f}, {hi95:.3f}] (95.0% CI, 2 comparisons)" in wide.parts[0][2]
