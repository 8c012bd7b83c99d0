"""Position encodings against closed forms written independently here (python loops over math.*)."""

from __future__ import annotations

import math

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.components.positional import (DEFAULT_SINUSOIDAL_SCALE, alibi_slopes, apply_rope, relative_bucket,
                                        rope_tables)


def cfg_for(kind: str, **kw) -> ModelConfig:
    pos = PosConfig(kind=kind, scale=kw.pop("pos_scale", None))
    return ModelConfig(vocab_size=40, n_ctx=8, d_model=kw.pop("d_model", 16), n_layers=1, n_heads=kw.pop("n_heads", 2),
                       pos=pos, **kw)


@pytest.mark.parametrize("d_model", [16, 15])
def test_sinusoidal_matches_vaswani_closed_form_past_n_ctx(d_model):
    model = build_model(cfg_for("sinusoidal", d_model=d_model, n_heads=1))
    x = torch.zeros(1, 20, d_model)  # 20 > n_ctx = 8: the table grows
    got = model.pos.embed(x, 0)[0] / DEFAULT_SINUSOIDAL_SCALE  # the closed form is added times pos.scale
    for p in range(20):
        for j in range(d_model):
            angle = p / 10000 ** ((j - j % 2) / d_model)
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert abs(got[p, j].item() - want) < 1e-6, (p, j)
    # with a start offset (KV cache), rows are those of the absolute positions
    torch.testing.assert_close(model.pos.embed(torch.zeros(1, 3, d_model), 17)[0] / DEFAULT_SINUSOIDAL_SCALE, got[17:20])


def test_sinusoidal_scale_default_matches_gpt2_init_rms_and_is_configurable():
    assert abs(DEFAULT_SINUSOIDAL_SCALE / math.sqrt(2) - 0.02) < 1e-12  # table RMS 1/sqrt(2) -> 0.02
    model = build_model(cfg_for("sinusoidal", pos_scale=None))
    x = torch.zeros(1, 8, 16)
    custom = build_model(ModelConfig(vocab_size=40, n_ctx=8, d_model=16, n_layers=1, n_heads=2,
                                     pos=PosConfig(kind="sinusoidal", scale=1.0)))
    torch.testing.assert_close(custom.pos.embed(x, 0), model.pos.embed(x, 0) / DEFAULT_SINUSOIDAL_SCALE)
    with pytest.raises(ValueError, match="pos.scale"):
        PosConfig(kind="sinusoidal", scale=0.0)


# Derived by hand from T5's formula (unidirectional, num_buckets=32 -> max_exact=16, max_distance=128):
#   n < 16: bucket n;  else 16 + floor(ln(n/16) / ln(8) * 16), capped at 31.
#   n=16: ln 1 = 0 -> 16. n=20: ln 1.25/ln 8 = 0.1073 -> 16*0.1073 = 1.72 -> 17. n=23: ln 1.4375/ln 8 = .1745 -> 2.79 -> 18.
#   n=32: 1/3 -> 5.33 -> 21. n=45: ln 2.8125/ln 8 = .4973 -> 7.96 -> 23. n=64: 2/3 -> 10.67 -> 26.
#   n=100: ln 6.25/ln 8 = .8813 -> 14.1 -> 30. n=127: ln 7.9375/ln 8 = .9962 -> 15.94 -> 31. n=128: 16 -> 32 -> cap 31.
HAND_BUCKETS = {0: 0, 1: 1, 7: 7, 15: 15, 16: 16, 20: 17, 23: 18, 32: 21, 45: 23, 64: 26, 100: 30, 127: 31,
                128: 31, 500: 31}


def test_relative_bucket_hand_table():
    n = torch.tensor(list(HAND_BUCKETS))
    got = relative_bucket(-n, 32, 128)  # relative_position = key - query = -n
    assert got.tolist() == list(HAND_BUCKETS.values())
    # future keys (positive relative positions) fall in bucket 0; they are masked anyway
    assert relative_bucket(torch.tensor([1, 5]), 32, 128).tolist() == [0, 0]


def test_relative_bucket_matches_hf_t5():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-300, 5)
    for nb, md in [(32, 128), (16, 64), (8, 20)]:
        want = t5.T5Attention._relative_position_bucket(rel, bidirectional=False, num_buckets=nb, max_distance=md)
        assert torch.equal(relative_bucket(rel, nb, md), want)


def test_relative_bias_rows_follow_buckets():
    model = build_model(cfg_for("relative"))
    w = model.pos.rel_bias.weight  # (num_buckets, H)
    bias = model.pos.attn_bias(3, 4)  # queries at 3..6, keys 0..6
    assert bias.shape == (2, 4, 7)
    for h in range(2):
        for i in range(4):
            for j in range(7):
                assert bias[h, i, j].item() == w[HAND_BUCKETS.get(max(3 + i - j, 0), max(3 + i - j, 0)), h].item()


def test_zero_relative_table_equals_nope():
    torch.manual_seed(0)
    rel = build_model(cfg_for("relative"))
    nope = build_model(cfg_for("none"))
    nope.load_state_dict({k: v for k, v in rel.state_dict().items() if "rel_bias" not in k})
    with torch.no_grad():
        rel.pos.rel_bias.weight.zero_()
    ids = torch.randint(0, 40, (2, 12))
    torch.testing.assert_close(rel(ids), nope(ids))


def test_alibi_slopes_closed_form():
    assert alibi_slopes(8) == pytest.approx([2.0 ** -(i + 1) for i in range(8)])  # 2^(-8 i / 8)
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-0.5 * (i + 1)) for i in range(16)])
    # non-power-of-two (paper's interpolation): the 4-head slopes, then every other 8-head slope
    assert alibi_slopes(6) == pytest.approx([2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3])
    assert alibi_slopes(12) == pytest.approx([2.0 ** -(i + 1) for i in range(8)] + [2 ** -0.5, 2 ** -1.5,
                                                                                    2 ** -2.5, 2 ** -3.5])


def test_alibi_bias_is_linear_in_distance():
    model = build_model(cfg_for("alibi", n_heads=4, d_model=16))
    bias = model.pos.attn_bias(10, 3)  # past n_ctx = 8: table grows
    assert bias.shape == (4, 3, 13)
    slopes = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]
    for h in range(4):
        for i in range(3):
            for j in range(10 + i + 1):  # visible keys
                assert bias[h, i, j].item() == pytest.approx(-slopes[h] * (10 + i - j))
    assert [n for n, _ in model.named_parameters() if n.startswith("pos.")] == []  # no learned parameters


def test_rope_dot_product_depends_only_on_offset():
    torch.manual_seed(0)
    d = 16
    cos, sin = rope_tables(64, d, 10000.0)
    q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)

    def rot(x, p):
        return apply_rope(x[None, None, None], cos[p:p + 1], sin[p:p + 1])[0, 0, 0]

    for m, n in [(0, 0), (5, 2), (9, 30), (40, 1)]:
        base = torch.dot(rot(q, m), rot(k, n))
        for s in (1, 7, 20):
            torch.testing.assert_close(torch.dot(rot(q, m + s), rot(k, n + s)), base)
    assert not torch.allclose(torch.dot(rot(q, 5), rot(k, 2)), torch.dot(rot(q, 5), rot(k, 3)))
    torch.testing.assert_close(rot(q, 0), q)  # position 0 is the identity
    torch.testing.assert_close(rot(q, 13).norm(), q.norm())  # a rotation


def test_rope_rotate_half_pairs_dim_i_with_i_plus_half():
    cos, sin = rope_tables(4, 4, 10000.0)
    x = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)  # pairs (0, 2) and (1, 3)
    y = apply_rope(x[None, None, None], cos[3:4], sin[3:4])[0, 0, 0]
    torch.testing.assert_close(y, torch.tensor([math.cos(3.0), 0.0, math.sin(3.0), 0.0], dtype=torch.float64))


def test_learned_refuses_past_n_ctx_with_clear_error():
    model = build_model(cfg_for("learned"))
    assert model.max_len == 8
    model(torch.zeros(1, 8, dtype=torch.long))
    with pytest.raises(ValueError, match=r"learned positions cover n_ctx=8; got T=9; use a non-learned"):
        model(torch.zeros(1, 9, dtype=torch.long))


@pytest.mark.parametrize("kind", ["sinusoidal", "relative", "alibi", "rope", "none"])
def test_non_learned_run_past_n_ctx(kind):
    model = build_model(cfg_for(kind))
    assert model.max_len is None
    logits = model(torch.randint(0, 40, (2, 37)))  # n_ctx = 8
    assert logits.shape == (2, 37, 40) and torch.isfinite(logits).all()
