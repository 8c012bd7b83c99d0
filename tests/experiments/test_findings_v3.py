"""The v3 findings (docs/findings/PLAN_v3.md): their YAMLs hold protocol v3 (checked against numbers computed here
by hand, not by the code under test), the per-size rule (experiments/findings/sized.py) against scipy on hand-made
runs, the pilot's pooled noise against the sums-of-squares formula, and the archlab_ratio resolver."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from experiments.config.compose import compose_config
from experiments.config.resolvers import ratio
from experiments.findings import FINDINGS, Evidence, RunRecord
from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.pilot import pooled_noise
from experiments.findings.sized import across_sizes

V3_SIZED = ["rope_vs_learned_v3", "swiglu_vs_gelu_v3"]  # the three-size findings (sized.py)
V3 = [*V3_SIZED, "gqa_vs_mha_v3", "tied_vs_untied_v3"]  # and issue 32 §3.2's at size L: test_findings_v3_l.py
# (d_model, heads, non-embedding params of the GELU model): 12 d² per layer (attention 4 d², MLP 8 d²) plus biases
# (attention 4 d, MLP 4 d + d) and two LayerNorms (4 d) per layer, and the final LayerNorm (2 d)
HAND = {"s": 32, "m": 64, "l": 128}


def _non_embedding(d: int, layers: int = 4) -> int:
    return layers * (12 * d * d + 13 * d) + 2 * d


# ------------------------------------------------------------------------------------------------ the YAMLs


@pytest.mark.parametrize("name", V3_SIZED)
@pytest.mark.parametrize("size", ["s", "m", "l"])
def test_each_v3_yaml_composes_to_protocol_v3_at_every_size(name, size):
    f = FINDINGS[name]
    arm = {"rope_vs_learned_v3": "model/pos=rope", "swiglu_vs_gelu_v3": "finding/ffn_v3=swiglu"}[name]
    cfg = compose_config([f"experiment={f.experiment}", f"finding/size={size}", arm], return_hydra_config=True)
    d = HAND[size]
    m, t, data, sw = cfg.model, cfg.train, cfg.data, cfg.hydra.sweeper
    assert (m.d_model, m.n_layers, m.n_heads, m.d_model // m.n_heads) == (d, 4, d // 32, 32)
    assert _non_embedding(d) == v3.SIZES[size][2]
    steps = math.ceil(5 * _non_embedding(d) / 2048)  # 5 tokens per non-embedding parameter, whole steps
    assert (t.tokens, steps) == (steps * 2048, v3.SIZES[size][3])
    assert abs(t.tokens / _non_embedding(d) - 5) < 0.04 and abs(t.eval_interval / steps - 0.1) < 0.01
    assert (t.batch_size, t.n_ctx, t.num_threads, t.sampler, t.max_epochs) == (16, 128, 1, "epoch", 1)
    assert (data.doc_separator, data.split_by, data.val_fraction, data.test_fraction) == \
        ("<|endoftext|>", "documents", 0.042, 0.042)
    assert list(data.extra_eval) == ["wikitext2"] and data.test_max_tokens == 2048 * 128
    assert (sw.confirm, sw.confirm_widen, tuple(sw.tune["optim.lr"]), tuple(sw.tune_seeds)) == \
        (True, 1, v3.GRID, v3.TUNE_SEEDS)
    assert sw.params["finding/size"] == "s,m,l" and len(sw.seeds) <= v3.SEED_CAP
    assert not set(sw.seeds) & set(sw.tune_seeds) and not set(sw.seeds) & set(v3.PILOT_SEEDS)
    if name == "swiglu_vs_gelu_v3":  # equal MLP parameters: 3 d · d_mlp against GELU's 2 d · 4 d, within 0.5%
        assert m.activation == "swiglu" and m.d_mlp == round(8 * d / 3)
        assert abs(3 * d * m.d_mlp / (8 * d * d) - 1) < 0.005
    assert set(v3.SHARED_FILES) <= set(f.extra_files) and f.sesoi == v3.SESOI and f.by[1] == "model.d_model"


def test_archlab_ratio_rounds_and_refuses_non_numbers():
    assert [ratio(d, 8, 3) for d in (32, 64, 128)] == [85, 171, 341]
    for bad in (("32", 8, 3), (32, 8, 0), (True, 8, 3)):
        with pytest.raises(ValueError):
            ratio(*bad)


# ------------------------------------------------------------------------------------------------ the rule


def _records(per_size: dict[int, tuple[list[float], list[float], list[float]]]) -> list[RunRecord]:
    """Runs of 'rope' and 'learned' per d_model: (learned test losses, rope − learned per seed, second corpus
    differences per seed)."""
    out = []
    for d, (base, diffs, second) in per_size.items():
        for seed, (b, x, y) in enumerate(zip(base, diffs, second)):
            for kind, test, wt in (("learned", b, 5.0), ("rope", b + x, 5.0 + y)):
                values = {"final test/loss": test, "final test/wikitext2/loss": wt, "final val/loss": test,
                          "non_embedding_params": _non_embedding(d)}
                out.append(RunRecord(f"pos={kind} d_model={d}", {"model.pos.kind": kind, "model.d_model": d}, seed,
                                     "completed", values))
    return out


def _by_hand(diffs: list[float], level: float) -> tuple[float, float]:
    x = np.asarray(diffs)
    half = stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean() - half, x.mean() + half


def test_per_size_labels_read_the_bonferroni_interval_and_the_second_corpus_sign():
    rng = np.random.default_rng(0)
    base = list(5 + rng.normal(0, 0.05, 6))
    sizes = {32: [-0.030, -0.034, -0.027, -0.031, -0.029, -0.033],  # clearly below 0: reproduced
             64: [-0.030, -0.034, -0.027, -0.031, -0.029, -0.033],  # the same, but WikiText-2 says the other sign
             128: [0.004, -0.006, 0.002, -0.003, 0.005, -0.001]}   # inside ±0.02 at 98.3%: equivalent
    second = {32: [-0.02] * 6, 64: [0.01, 0.02, 0.015, 0.01, 0.02, 0.012], 128: [0.001] * 6}
    ev = Evidence({}, _records({d: (base, sizes[d], second[d]) for d in sizes}))
    v = across_sizes(ev, {"model.pos.kind": "rope"}, {"model.pos.kind": "learned"}, ("rope", "learned"),
                     claim="lower", sesoi=0.02)
    labels = [p[1] for p in v.parts]
    assert labels == ["reproduced", "inconclusive", "equivalent"] and v.outcome == "partly"
    lo, hi = _by_hand(sizes[128], 1 - 0.05 / 3)
    assert -0.02 < lo and hi < 0.02  # the hand interval is inside ±SESOI: the equivalent label is right
    assert f"[{lo:.3f}, {hi:.3f}]" in v.parts[2][2]
    lo32, hi32 = _by_hand(sizes[32], 1 - 0.05 / 3)
    assert hi32 < 0 and f"[{lo32:.3f}, {hi32:.3f}]" in v.parts[0][2]
    slope = stats.linregress([math.log2(_non_embedding(d)) for d in sizes for _ in range(6)],
                             [x for d in sizes for x in sizes[d]])
    assert v.tables[1].rows[0][0] == f"{slope.slope:+.4f}"
    assert [r[6] for r in v.tables[0].rows] == ["yes", "no", "yes"]


def test_overall_is_the_shared_label_or_inconclusive_without_a_reproduced_size():
    base = [5.0, 5.1, 4.9, 5.05]
    wide = [0.05, -0.06, 0.04, -0.05]  # covers 0 and ±0.02: inconclusive
    ev = Evidence({}, _records({d: (base, wide, [0.0] * 4) for d in (32, 64, 128)}))
    v = across_sizes(ev, {"model.pos.kind": "rope"}, {"model.pos.kind": "learned"}, ("rope", "learned"),
                     claim="lower", sesoi=0.02)
    assert [p[1] for p in v.parts] == ["inconclusive"] * 3 and v.outcome == "inconclusive"


# ------------------------------------------------------------------------------------------------ the pilot


def test_pooled_noise_is_the_sums_of_squares_pool():
    diffs = [0.01, -0.02, 0.03, 0.00]
    ss = sum((x - np.mean(diffs)) ** 2 for x in diffs)
    n = pooled_noise(diffs, (0.0096, 2, "v2"))
    assert n.df == 5 and math.isclose(n.sd, math.sqrt((ss + 0.0096 ** 2 * 2) / 5), rel_tol=1e-12)
    assert math.isclose(pooled_noise(diffs, None).sd, float(np.std(diffs, ddof=1)), rel_tol=1e-12)
    only_prior = pooled_noise([0.01], (0.0104, 2, "v2"))
    assert (only_prior.df, only_prior.sd, only_prior.source) == (2, 0.0104, "v2")
    assert pooled_noise([0.01], None) is None
