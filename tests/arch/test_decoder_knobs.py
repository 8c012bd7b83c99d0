"""The decoder knobs against independent references.

* n_kv_heads: a GQA / MQA model equals the multi-head model whose c_attn repeats each K/V head (logits and every
  gradient, the shared K/V gradients being the sums over their query heads); n_kv_heads == n_heads is bit-for-bit
  the n_kv_heads=None model (today's layout; that one is checked against HF GPT-2 in test_hf_gpt2.py).
* window: the windowed model equals the full-attention model fed a band mask built here with loops; window=1
  makes a NoPE model position-wise; window >= T is no window.
* qk_norm: one attention layer against a functional re-implementation (norm, then rope as a complex rotation);
  the opposite order differs; logits are invariant to scaling the q / k projections.
* rope_scaling: the frequencies and the cos / sin multiplier against Hugging Face's ROPE_INIT_FUNCTIONS, plus
  closed forms (linear theta/s; ntk's lowest frequency / s; yarn's 0.1 ln s + 1 at position 0).
* init: the std of every initialised matrix against its closed form (xavier: sqrt(2 / (fan_in + fan_out)) per
  q / k / v / gate / up block, embeddings d_model^-0.5; gpt2: 0.02, residual projections 0.02 / sqrt(2 L)).
* experiments.run.eval_lm.length_extrapolation runs on a model with every knob set.
(Parallel blocks are checked against a functional reference in test_model_matrix.py.)
"""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from arch import ModelConfig, PosConfig, build_model
from arch.components.attention import Step
from arch.components.positional import ROPE_SCALING, rope_inv_freq, rope_tables
from arch.config import ATTENTION_IMPLS, POS_KINDS

V = 23


def cfg_of(**kw) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=V, n_ctx=16, d_model=16, n_layers=2, n_heads=4), **kw})


def randomise(model: torch.nn.Module, seed: int = 0, std: float = 0.3) -> torch.nn.Module:
    """float64, weights and biases well away from init (norm weights around 1), so every path matters."""
    model = model.double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = 1.0 if ("ln_" in name or "norm" in name) and name.endswith("weight") else 0.0
            p.copy_(base + std * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


# ---------------------------------------------------------------------------------------------------------
# grouped-query / multi-query attention


def repeat_kv_state(state: dict, cfg: ModelConfig) -> dict:
    """The multi-head state dict equivalent to a GQA one: c_attn's K and V head blocks repeated G times."""
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
    G = H // Hkv

    def rep(t):  # (Hkv·D, ...) -> (H·D, ...): head j's rows become heads j·G .. j·G + G - 1
        return t.reshape(Hkv, D, *t.shape[1:]).repeat_interleave(G, 0).reshape(H * D, *t.shape[1:])

    out = dict(state)
    for name, w in state.items():
        if ".attn.c_attn." in name:
            q, k, v = w.split((H * D, Hkv * D, Hkv * D))
            out[name] = torch.cat([q, rep(k), rep(v)])
    return out


GQA_CASES = [(pos, att, hkv) for pos in ("learned", "relative", "alibi", "rope") for att in ATTENTION_IMPLS
             for hkv in (1, 2)]


@pytest.mark.parametrize("pos, attention, n_kv_heads", GQA_CASES, ids=["-".join(map(str, c)) for c in GQA_CASES])
def test_gqa_equals_mha_with_repeated_kv_heads(pos, attention, n_kv_heads):
    cfg = cfg_of(pos=PosConfig(kind=pos), attention=attention, n_kv_heads=n_kv_heads, qk_norm="rmsnorm")
    torch.manual_seed(0)
    gqa = randomise(build_model(cfg))
    mha = build_model(cfg_of(pos=PosConfig(kind=pos), attention=attention, qk_norm="rmsnorm")).double()
    mha.load_state_dict(repeat_kv_state(gqa.state_dict(), cfg))
    ids = torch.randint(0, V, (2, 12))
    targets = torch.randint(0, V, (2, 12))
    torch.testing.assert_close(gqa(ids), mha(ids))
    gqa.loss(ids, targets).backward()
    mha.loss(ids, targets).backward()
    H, Hkv, D, G = 4, n_kv_heads, 4, 4 // n_kv_heads

    def summed(t):  # (H·D, ...) -> (Hkv·D, ...): the gradients of the G copies of each K / V head, added
        return t.reshape(Hkv, G, D, *t.shape[1:]).sum(1).reshape(Hkv * D, *t.shape[1:])

    for name, p in gqa.named_parameters():
        want = dict(mha.named_parameters())[name].grad
        if ".attn.c_attn." in name:  # a shared K / V head gets the sum of its query heads' gradients
            q, k, v = want.split(H * D)
            want = torch.cat([q, summed(k), summed(v)])
        torch.testing.assert_close(p.grad, want, msg=name)


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_n_kv_heads_equal_to_n_heads_is_bit_for_bit_the_default(attention):
    cfgs = [cfg_of(pos=PosConfig(kind="rope"), attention=attention, n_kv_heads=k) for k in (None, 4)]
    models = []
    for cfg in cfgs:
        torch.manual_seed(0)
        models.append(build_model(cfg))
    a, b = models
    assert list(a.state_dict()) == list(b.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert a.blocks[0].attn.c_attn.weight.shape == (3 * 16, 16)  # GPT-2's fused q | k | v
    ids = torch.randint(0, V, (2, 10))
    assert torch.equal(a(ids), b(ids))
    a.loss(ids, ids).backward()
    b.loss(ids, ids).backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))


# ---------------------------------------------------------------------------------------------------------
# sliding window


def band_mask(start: int, t: int, window: int) -> torch.Tensor:
    """(1, t, start + t): 0 where query start + a may see key j (i - window < j <= i), -inf elsewhere."""
    m = torch.zeros(1, t, start + t, dtype=torch.float64)
    for a in range(t):
        i = start + a
        for j in range(start + t):
            if not (i - window < j <= i):
                m[0, a, j] = float("-inf")
    return m


WINDOW_CASES = [(pos, att, w) for pos in POS_KINDS for att in ATTENTION_IMPLS for w in (1, 4)]


@pytest.mark.parametrize("pos, attention, window", WINDOW_CASES, ids=["-".join(map(str, c)) for c in WINDOW_CASES])
def test_window_equals_full_attention_with_a_band_mask(pos, attention, window):
    torch.manual_seed(0)
    model = randomise(build_model(cfg_of(pos=PosConfig(kind=pos), attention=attention, window=window)))
    ref = build_model(cfg_of(pos=PosConfig(kind=pos), attention=attention)).double()
    ref.load_state_dict(model.state_dict())

    def banded_bias(start, t):  # the reference: full attention, the position bias plus the band built above
        bias = ref.pos.attn_bias(start, t)
        return band_mask(start, t, window) + (0.0 if bias is None else bias)

    ref._attn_bias = banded_bias
    T = 12 if pos != "learned" else 16
    ids = torch.randint(0, V, (2, T))
    got = model(ids)
    torch.testing.assert_close(got, ref(ids))
    del ref._attn_bias  # back to plain causal attention: the band does matter
    assert not torch.allclose(got, ref(ids))
    _, acts = model.run_with_cache(ids)
    pattern = acts["attn_pattern.0"]  # (B, H, T, T)
    assert (pattern.masked_select(torch.isinf(band_mask(0, T, window))[None]) == 0).all()
    torch.testing.assert_close(pattern.sum(-1), torch.ones_like(pattern.sum(-1)))


@torch.no_grad()
def test_window_one_makes_a_nope_model_position_wise():
    model = randomise(build_model(cfg_of(pos=PosConfig(kind="none"), window=1)))
    ids = torch.tensor([[3, 5, 3, 7, 5, 3, 9, 3]])
    logits = model(ids)[0]
    for i in range(8):  # each position sees only itself: equal tokens, equal logits, wherever they are
        for j in range(8):
            if ids[0, i] == ids[0, j]:
                torch.testing.assert_close(logits[i], logits[j])
    assert not torch.allclose(logits[0], logits[1])


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
@torch.no_grad()
def test_window_at_least_the_length_is_no_window(attention):
    torch.manual_seed(0)
    full = build_model(cfg_of(pos=PosConfig(kind="alibi"), attention=attention))
    windowed = build_model(cfg_of(pos=PosConfig(kind="alibi"), attention=attention, window=10))
    windowed.load_state_dict(full.state_dict())
    ids = torch.randint(0, V, (2, 10))
    assert torch.equal(windowed(ids), full(ids))
    ids = torch.randint(0, V, (2, 11))
    assert not torch.allclose(windowed(ids)[:, 10], full(ids)[:, 10])  # position 10 loses key 0


# ---------------------------------------------------------------------------------------------------------
# QK-norm


def reference_attention(attn, x: torch.Tensor, kind: str, base: float, order: str = "norm_then_rope"):
    """One attention layer from raw weights: split, per-head norm over D, rope as a complex rotation, softmax."""
    B, T, C = x.shape
    H, Hkv, D = attn.n_heads, attn.n_kv_heads, attn.d_head
    q, k, v = F.linear(x, attn.c_attn.weight, attn.c_attn.bias).split((H * D, Hkv * D, Hkv * D), -1)
    q, k, v = (t.view(B, T, -1, D).transpose(1, 2) for t in (q, k, v))

    def norm(t, w):
        if kind == "rmsnorm":
            return t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        mu = t.mean(-1, keepdim=True)
        return (t - mu) / torch.sqrt((t - mu).pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(t):  # dims (i, i + D/2) as the complex number t_i + i t_{i+D/2}, turned by p * base^(-2i/D)
        angle = torch.arange(T, dtype=t.dtype)[:, None] * base ** (-torch.arange(0, D, 2, dtype=t.dtype) / D)
        z = torch.complex(t[..., : D // 2], t[..., D // 2:]) * torch.polar(torch.ones_like(angle), angle)
        return torch.cat([z.real, z.imag], -1)

    if order == "norm_then_rope":
        q, k = rope(norm(q, attn.q_norm.weight)), rope(norm(k, attn.k_norm.weight))
    else:
        q, k = norm(rope(q), attn.q_norm.weight), norm(rope(k), attn.k_norm.weight)
    k, v = (t.repeat_interleave(H // Hkv, 1) for t in (k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(D) + torch.full((T, T), float("-inf"), dtype=x.dtype).triu(1)
    z = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, H * D)
    return F.linear(z, attn.c_proj.weight, attn.c_proj.bias)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
@torch.no_grad()
def test_qk_norm_is_per_head_and_before_rope(kind, attention):
    torch.manual_seed(0)
    model = randomise(build_model(cfg_of(pos=PosConfig(kind="rope", rope_base=100.0), attention=attention,
                                         n_kv_heads=2, qk_norm=kind)))
    attn = model.blocks[0].attn
    assert attn.q_norm.weight.shape == attn.k_norm.weight.shape == (4,)  # one (D,) weight shared by the heads
    assert getattr(attn.k_norm, "bias", None) is None  # no shift (see arch/components/norms.py)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    got = attn(x, Step(start=0, bias=None, rotate=model.pos.rotate))
    torch.testing.assert_close(got, reference_attention(attn, x, kind, 100.0))
    assert not torch.allclose(got, reference_attention(attn, x, kind, 100.0, order="rope_then_norm"))


@pytest.mark.parametrize("qk_norm", [None, "rmsnorm", "layernorm"])
@torch.no_grad()
def test_qk_norm_makes_scores_blind_to_the_scale_of_q_and_k(qk_norm):
    torch.manual_seed(0)
    # eps 1e-12: the norms are then scale-invariant to ~1e-12 (1e-5 would show at 1e-4)
    cfg = cfg_of(pos=PosConfig(kind="rope"), qk_norm=qk_norm, bias=False, layer_norm_eps=1e-12)
    model = randomise(build_model(cfg))
    ids = torch.randint(0, V, (2, 10))
    before = model(ids)
    for block in model.blocks:  # scale the q and k projections (not v) by 10
        block.attn.c_attn.weight[: 2 * 16].mul_(10.0)
    after = model(ids)
    if qk_norm is None:
        assert not torch.allclose(after, before, atol=1e-3)
    else:
        torch.testing.assert_close(after, before, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------
# RoPE scaling against Hugging Face's rope init functions

ROPE_CASES = [(16, 10000.0, 4.0, 64), (64, 10000.0, 8.0, 1024), (128, 500000.0, 2.0, 8192), (32, 10000.0, 16.0, 256)]


def hf_rope(scaling: str, d_head: int, base: float, s: float, L: int) -> tuple[torch.Tensor, float]:
    """(inv_freq, attention factor) from transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS."""
    transformers = pytest.importorskip("transformers")
    try:
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError:
        pytest.skip("this transformers has no modeling_rope_utils.ROPE_INIT_FUNCTIONS")
    hf_type = {"linear": "linear", "ntk": "dynamic", "yarn": "yarn"}[scaling]
    if hf_type not in ROPE_INIT_FUNCTIONS:
        pytest.skip(f"this transformers has no {hf_type!r} rope init function")
    # static NTK-aware = HF's dynamic NTK at factor 1 and sequence length s * L: base * s^(D / (D - 2))
    params = {"rope_type": hf_type, "factor": 1.0 if scaling == "ntk" else s, "rope_theta": base}
    if scaling == "yarn":
        params["original_max_position_embeddings"] = L
    kw = dict(hidden_size=4 * d_head, num_attention_heads=4, head_dim=d_head,
              max_position_embeddings=int(s * L) if scaling == "yarn" else L)
    if "rope_parameters" in inspect.signature(transformers.LlamaConfig.__init__).parameters:  # transformers >= 5
        cfg = transformers.LlamaConfig(**kw, rope_parameters=params)
    else:  # 4.x
        cfg = transformers.LlamaConfig(**kw, rope_theta=base, rope_scaling=params)
    inv_freq, factor = ROPE_INIT_FUNCTIONS[hf_type](cfg, "cpu", seq_len=int(s * L) if scaling == "ntk" else None)
    return inv_freq.double(), float(factor)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn"])
@pytest.mark.parametrize("d_head, base, s, L", ROPE_CASES)
def test_rope_scaling_matches_hugging_face(scaling, d_head, base, s, L):
    want, want_factor = hf_rope(scaling, d_head, base, s, L)
    got, factor = ROPE_SCALING[scaling](d_head, base, s, L)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=0)  # HF computes in float32
    assert factor == pytest.approx(want_factor, rel=1e-12)
    assert not torch.allclose(got, rope_inv_freq(d_head, base))  # and it is not the unscaled rope


@pytest.mark.parametrize("d_head, base, s, L", ROPE_CASES)
def test_rope_scaling_closed_forms(d_head, base, s, L):
    theta = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    torch.testing.assert_close(ROPE_SCALING["linear"](d_head, base, s, L)[0], theta / s)
    ntk = ROPE_SCALING["ntk"](d_head, base, s, L)[0]
    assert ntk[0] == 1.0 and ntk[-1].item() == pytest.approx(theta[-1].item() / s, rel=1e-12)  # ends: kept, / s
    yarn, temp = ROPE_SCALING["yarn"](d_head, base, s, L)
    assert temp == pytest.approx(0.1 * math.log(s) + 1.0)
    wavelength = 2 * math.pi / theta
    fast, slow = wavelength < L / 32, wavelength > L  # > 32 rotations over L: kept; < 1 rotation: / s
    torch.testing.assert_close(yarn[fast], theta[fast])
    torch.testing.assert_close(yarn[slow], theta[slow] / s)
    assert ((yarn <= theta + 1e-18) & (yarn >= theta / s - 1e-18)).all()
    torch.testing.assert_close(ROPE_SCALING["yarn"](d_head, base, 1.0, L)[0], theta)  # s = 1: plain rope


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn"])
@torch.no_grad()
def test_scaled_rope_in_the_model(scaling):
    pos = PosConfig(kind="rope", rope_scaling=scaling, rope_scaling_factor=4.0,
                    original_n_ctx=8 if scaling == "yarn" else None)
    model = build_model(cfg_of(pos=pos, n_ctx=16))
    inv_freq, mult = ROPE_SCALING[scaling](4, 10000.0, 4.0, 8)
    angle = torch.arange(40, dtype=torch.float64)[:, None] * inv_freq
    model(torch.zeros(1, 40, dtype=torch.long))  # past n_ctx: the tables regrow with the same scaling
    torch.testing.assert_close(model.pos.cos[:40].double(), angle.cos() * mult, atol=1e-6, rtol=0)
    torch.testing.assert_close(model.pos.sin[:40].double(), angle.sin() * mult, atol=1e-6, rtol=0)
    q = torch.randn(1, 4, 1, 4)
    rq, _ = model.pos.rotate(q, q, 0)  # position 0: cos = mult, sin = 0, so q.k is scaled by mult^2 (yarn's 1/t)
    torch.testing.assert_close(rq, q * (0.1 * math.log(4.0) + 1.0 if scaling == "yarn" else 1.0))
    torch.testing.assert_close(rope_tables(5, 4, 10000.0, scaling, 4.0, 8)[0], (angle.cos() * mult)[:5])


# ---------------------------------------------------------------------------------------------------------
# init schemes


def _std_ok(t: torch.Tensor, want: float, rel: float = 0.03) -> None:
    assert abs(t.double().std().item() - want) < rel * want, (t.shape, t.std().item(), want)


@pytest.mark.parametrize("tie", [True, False])
def test_xavier_init_std_is_the_closed_form(tie):
    torch.manual_seed(0)
    C, H, Hkv, D, F_, L, Vb = 128, 4, 2, 32, 384, 2, 1000
    cfg = ModelConfig(vocab_size=Vb, n_ctx=64, d_model=C, n_layers=L, n_heads=H, n_kv_heads=Hkv, d_mlp=F_,
                      activation="swiglu", init="xavier", tie_embeddings=tie, qk_norm="layernorm")
    model = build_model(cfg)
    xavier = lambda fan_in, fan_out: math.sqrt(2.0 / (fan_in + fan_out))  # noqa: E731
    for block in model.blocks:
        q, k, v = block.attn.c_attn.weight.split((H * D, Hkv * D, Hkv * D))
        _std_ok(q, xavier(C, H * D))  # each logical matrix its own fans, not the fused (H + 2 Hkv) D rows
        _std_ok(k, xavier(C, Hkv * D))
        _std_ok(v, xavier(C, Hkv * D))
        bound = math.sqrt(6.0 / (C + Hkv * D))
        assert k.abs().max() <= bound and k.abs().max() > 0.98 * bound  # uniform on [-a, a], not a normal
        _std_ok(block.attn.c_proj.weight, xavier(H * D, C))  # no 1/sqrt(2L) residual scaling
        gate, up = block.mlp.c_fc.weight.split(F_)
        _std_ok(gate, xavier(C, F_))
        _std_ok(up, xavier(C, F_))
        _std_ok(block.mlp.c_proj.weight, xavier(F_, C))
        for lin in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            assert (lin.bias == 0).all()
        assert (block.ln_1.weight == 1).all() and (block.ln_1.bias == 0).all() and (block.attn.q_norm.weight == 1).all()
    _std_ok(model.wte.weight, C ** -0.5)
    _std_ok(model.pos.wpe.weight, C ** -0.5)
    if tie:
        assert model.lm_head.weight is model.wte.weight
    else:
        _std_ok(model.lm_head.weight, xavier(C, Vb))


def test_xavier_init_of_the_relative_bias_table():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, n_ctx=16, d_model=64, n_layers=1, n_heads=8, init="xavier",
                      pos=PosConfig(kind="relative", num_buckets=256, max_distance=512))
    _std_ok(build_model(cfg).pos.rel_bias.weight, 64 ** -0.5, rel=0.1)  # 2048 entries: ~2 % std error


def test_gpt2_init_std_with_the_new_knobs():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=1000, n_ctx=64, d_model=128, n_layers=8, n_heads=4, n_kv_heads=1,
                      block="parallel", qk_norm="rmsnorm")
    model = build_model(cfg)
    _std_ok(model.wte.weight, 0.02)
    for block in model.blocks[:2]:
        _std_ok(block.attn.c_attn.weight, 0.02)
        _std_ok(block.attn.c_proj.weight, 0.02 / math.sqrt(2 * 8))
        _std_ok(block.mlp.c_proj.weight, 0.02 / math.sqrt(2 * 8))
        assert (block.attn.k_norm.weight == 1).all()


# ---------------------------------------------------------------------------------------------------------
# the length-extrapolation eval runs on a model with every knob


def test_length_extrapolation_runs_with_every_knob():
    evaluate = pytest.importorskip("experiments.run.eval_lm")
    torch.manual_seed(0)
    cfg = cfg_of(n_ctx=8, n_kv_heads=2, window=4, qk_norm="rmsnorm", block="parallel", init="xavier",
                 pos=PosConfig(kind="rope", rope_scaling="yarn", rope_scaling_factor=4.0))
    tokens = np.random.default_rng(0).integers(0, V, 200).astype(np.int64)
    out = evaluate.length_extrapolation(build_model(cfg), tokens, n_ctx=8, factors=(1, 2, 4), max_tokens=200,
                                        device="cpu", batch_size=4)
    assert len(out) == 6 and all(v is not None and math.isfinite(v) for v in out.values()), out
