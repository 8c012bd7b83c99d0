"""Every registry combination (pos x norm x norm_type x activation x attention = 432): shapes, finite loss,
causality, a gradient reaching every parameter, count_params == numel. The default suite runs a pairwise cover of
them (every value of each axis meets every value of every other axis: 25 combinations); the other combinations are
`slow` (`make test-all` runs all 432). A covering subset (every pos x norm pair, the other axes rotating) also
trains for a few steps; plus the loss contract,
dropout, determinism and non-default switches (bias=False, untied, d_head / d_mlp overrides).
The decoder knobs (n_kv_heads, window, qk_norm, block, rope_scaling, init) go through the same checks with every
pos x attention kernel (norm placement rotating; the full product with every placement is `slow`), and
parallel blocks are checked against a functional reference like the sequential ones."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
import torch.nn.functional as F

from arch import ModelConfig, PosConfig, build_model, count_params
from arch.config import ACTIVATIONS, ATTENTION_IMPLS, BLOCK_KINDS, NORM_PLACEMENTS, NORM_TYPES, POS_KINDS

from .knobs import KNOBS, ROPE_SCALED, kernel_rotation

V, T, CTX = 32, 8, 8
AXES = (POS_KINDS, NORM_PLACEMENTS, NORM_TYPES, ACTIVATIONS, ATTENTION_IMPLS)
ALL = list(itertools.product(*AXES))


def pairwise_cover(combos: list[tuple]) -> list[tuple]:
    """Combinations from `combos` in which every pair of values of two axes that occurs in `combos` occurs at least
    once. Greedy: each step takes the first combination that covers the most pairs not yet covered.
    Example: of the 8 combinations of three yes/no axes, 4 cover every pair: nnn, nyy, yny, yyn."""
    def pairs(c: tuple) -> set[tuple]:  # (axis i, value, axis j, value)
        return {(i, c[i], j, c[j]) for i, j in itertools.combinations(range(len(c)), 2)}

    uncovered = set().union(*map(pairs, combos))
    chosen = []
    while uncovered:
        best = max(combos, key=lambda c: len(pairs(c) & uncovered))
        chosen.append(best)
        uncovered -= pairs(best)
    return chosen


PAIRWISE = pairwise_cover(ALL)  # the default suite's combinations
# covering subset for the training check: every (pos, norm) pair; the other three axes rotate so that every
# value of each appears with every pos
COVER = [(p, n, NORM_TYPES[(i + j) % 2], ACTIVATIONS[(i + j) % 3], ATTENTION_IMPLS[(i + 2 * j) % 3])
         for (i, p), (j, n) in itertools.product(enumerate(POS_KINDS), enumerate(NORM_PLACEMENTS))]


def make_cfg(pos, norm, norm_type, activation, attention, **kw) -> ModelConfig:
    base = dict(vocab_size=V, n_ctx=CTX, d_model=16, n_layers=2, n_heads=2, pos=PosConfig(kind=pos), norm=norm,
                norm_type=norm_type, activation=activation, attention=attention)
    return ModelConfig(**{**base, **kw})


def inert_params(cfg: ModelConfig) -> set[str]:
    """Parameters that rightly get no gradient: with window=1 each query sees only itself, so its softmax has a
    single entry and a score bias (the relative table) cannot change anything."""
    return {"pos.rel_bias.weight"} if cfg.window == 1 else set()


def check_model(cfg: ModelConfig) -> None:
    torch.manual_seed(0)
    model = build_model(cfg)
    assert count_params(cfg) == sum(p.numel() for p in model.parameters())
    t = 4  # rows 0 and 1 agree up to position t, differ after it
    ids = torch.randint(0, V, (2, T))
    ids[1, : t + 1] = ids[0, : t + 1]
    ids[1, t + 1:] = (ids[0, t + 1:] + 1) % V
    logits = model(ids)
    assert logits.shape == (2, T, V)
    torch.testing.assert_close(logits[1, : t + 1], logits[0, : t + 1], atol=1e-6, rtol=0)  # causal
    assert not torch.allclose(logits[1, t + 1:], logits[0, t + 1:])  # ... and the later tokens do matter
    loss = F.cross_entropy(logits.view(-1, V), ids.roll(-1, 1).view(-1))
    assert torch.isfinite(loss)
    loss.backward()
    for name, p in model.named_parameters():
        if name in inert_params(cfg):
            assert p.grad is None or not p.grad.any(), name
            continue
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("combo", [pytest.param(c, id="-".join(c), marks=() if c in PAIRWISE else pytest.mark.slow)
                                   for c in ALL])
def test_every_combination(combo):
    check_model(make_cfg(*combo))


def test_the_default_combinations_meet_every_pair_of_values():
    """Checked here apart from pairwise_cover's own bookkeeping: for any two axes, every pair of their values is in
    some default combination; and the cover is much smaller than the product."""
    for (a, values_a), (b, values_b) in itertools.combinations(enumerate(AXES), 2):
        for x, y in itertools.product(values_a, values_b):
            assert any(c[a] == x and c[b] == y for c in PAIRWISE), (x, y)
    assert set(PAIRWISE) <= set(ALL) and len(PAIRWISE) <= 30
    assert pairwise_cover(list(itertools.product("ny", "ny", "ny"))) == [("n", "n", "n"), ("n", "y", "y"),
                                                                          ("y", "n", "y"), ("y", "y", "n")]


@pytest.mark.parametrize("kw", [dict(bias=False), dict(tie_embeddings=False), dict(d_head=6, d_mlp=20),
                                dict(bias=False, tie_embeddings=False, d_head=6)], ids=str)
@pytest.mark.parametrize("pos", POS_KINDS)
def test_switches(pos, kw):
    combo = (pos, "sandwich", "layernorm", "swiglu", "sdpa")
    cfg = make_cfg(*combo, **kw)
    check_model(cfg)
    names = [n for n, _ in build_model(cfg).named_parameters()]
    assert any(n.endswith(".bias") for n in names) == cfg.bias
    assert ("lm_head.weight" in names) == (not cfg.tie_embeddings)


def knob_cfg(knob: str, pos: str, norm: str, attention: str, **kw) -> ModelConfig:
    """make_cfg with the knob(s) `knob` ("+"-joined names of KNOBS / ROPE_SCALED) on top."""
    model_kw = {k: v for name in knob.split("+") for k, v in KNOBS.get(name, {}).items()}
    pos_cfg = PosConfig(kind=pos)
    for name in knob.split("+"):
        if name in ROPE_SCALED:
            pos_cfg = PosConfig(**ROPE_SCALED[name])
    norm_type = "rmsnorm" if model_kw.get("qk_norm") == "layernorm" else "layernorm"
    activation = "swiglu" if knob.startswith("all") else "gelu"
    cfg = make_cfg(pos_cfg.kind, norm, norm_type, activation, attention, **{**model_kw, **kw})
    return dataclasses.replace(cfg, pos=pos_cfg)


# (knob, pos, attention): every knob with every pos encoding and kernel (rope scaling: rope only), the norm
# placement rotating; the full product with every norm placement is the slow test below
KNOB_COMBOS = [(k, p, a) for k in KNOBS for p in POS_KINDS for a in ATTENTION_IMPLS] + \
              [(k, "rope", a) for k in [*ROPE_SCALED, "all+rope_yarn"] for a in ATTENTION_IMPLS]


@pytest.mark.parametrize("knob, pos, attention", kernel_rotation(KNOB_COMBOS))
def test_every_knob_with_every_pos_and_kernel(knob, pos, attention):
    i = KNOB_COMBOS.index((knob, pos, attention))
    check_model(knob_cfg(knob, pos, NORM_PLACEMENTS[i % 3], attention))


@pytest.mark.slow
@pytest.mark.parametrize("norm", NORM_PLACEMENTS)
@pytest.mark.parametrize("knob, pos, attention", KNOB_COMBOS, ids=["-".join(c) for c in KNOB_COMBOS])
def test_every_knob_with_every_norm_placement(knob, pos, attention, norm):
    check_model(knob_cfg(knob, pos, norm, attention))


@pytest.mark.parametrize("block", BLOCK_KINDS)
@pytest.mark.parametrize("norm", NORM_PLACEMENTS)
def test_block_kind_and_placement_parameter_names(block, norm):
    model = build_model(make_cfg("none", norm, "layernorm", "gelu", "sdpa", block=block))
    names = {n for n, _ in model.named_parameters()}
    has = lambda part: any(f".{part}." in n for n in names)  # noqa: E731
    assert has("ln_1") and has("attn") and has("mlp")
    assert has("ln_2") == (block == "sequential")  # a parallel block has one input norm
    assert has("ln_1_out") == (norm == "sandwich") and has("ln_2_out") == (norm == "sandwich" and block == "sequential")
    assert ("ln_f.weight" in names) == (norm != "post")


@pytest.mark.parametrize("combo", COVER, ids=["-".join(c) for c in COVER])
def test_loss_decreases(combo):
    torch.manual_seed(0)
    model = build_model(make_cfg(*combo))
    ids = torch.randint(0, V, (4, T))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(4):
        loss = model.loss(ids[:, :-1], ids[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.05, losses


def test_loss_is_mean_ce_ignoring_minus_100():
    torch.manual_seed(0)
    model = build_model(make_cfg("rope", "pre", "layernorm", "gelu", "sdpa"))
    ids = torch.randint(0, V, (2, T))
    targets = torch.randint(0, V, (2, T))
    targets[0, :3] = -100
    targets[1, 5] = -100
    logits = model(ids).double()
    keep = [(b, t) for b in range(2) for t in range(T) if targets[b, t] != -100]
    want = sum(-torch.log_softmax(logits[b, t], -1)[targets[b, t]] for b, t in keep) / len(keep)
    torch.testing.assert_close(model.loss(ids, targets).double(), want, atol=1e-5, rtol=1e-5)


def test_initialisation_is_gpt2():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=2000, n_ctx=64, d_model=128, n_layers=8, n_heads=4)
    model = build_model(cfg)
    sd = model.state_dict()
    assert abs(sd["wte.weight"].std().item() - 0.02) < 1e-3
    assert abs(sd["blocks.0.attn.c_attn.weight"].std().item() - 0.02) < 1e-3
    for name in ("blocks.3.attn.c_proj.weight", "blocks.3.mlp.c_proj.weight"):
        assert abs(sd[name].std().item() - 0.02 / 4.0) < 3e-4, name  # 1 / sqrt(2 * 8) = 1/4
    assert (sd["blocks.0.attn.c_attn.bias"] == 0).all() and (sd["blocks.0.ln_1.weight"] == 1).all()


def test_determinism_and_dropout():
    cfg = make_cfg("relative", "pre", "layernorm", "gelu", "sdpa", dropout=0.3)
    ids = torch.randint(0, V, (2, T))
    torch.manual_seed(1)
    a = build_model(cfg)
    torch.manual_seed(1)
    b = build_model(cfg)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)
    a.train(), b.train()
    torch.manual_seed(2)
    out_a = a(ids)
    torch.manual_seed(2)
    assert torch.equal(out_a, b(ids))  # same seed, same dropout masks
    assert not torch.allclose(out_a, a(ids))  # dropout is on in train mode
    # eval turns every dropout off: equal to the same weights in a model built without dropout (the reference)
    ref = build_model(dataclasses.replace(cfg, dropout=0.0))
    ref.load_state_dict(a.state_dict())
    torch.testing.assert_close(a.eval()(ids), ref.eval()(ids), atol=1e-6, rtol=1e-5)
    # dropout=0: train and eval agree exactly, for every attention kernel
    for att in ATTENTION_IMPLS:
        m = build_model(make_cfg("alibi", "pre", "layernorm", "gelu", att))
        assert torch.equal(m.train()(ids), m.eval()(ids))


@pytest.mark.parametrize("att", ATTENTION_IMPLS)
def test_attention_dropout_is_applied(att):
    # only attention-prob dropout can change the output here: resid/embedding dropout modules are disabled
    torch.manual_seed(0)
    m = build_model(make_cfg("none", "pre", "layernorm", "gelu", att, dropout=0.5)).train()
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    ids = torch.randint(0, V, (2, T))
    assert not torch.allclose(m(ids), m.eval()(ids))


def _reference_block(block, x, norm, kind="sequential"):
    """One block re-implemented from its raw weights with plain functional ops (no module forward calls)."""
    def ln(mod, h):
        return F.layer_norm(h, (h.shape[-1],), mod.weight, mod.bias, 1e-5)

    def attn(h):
        B, T, C = h.shape
        q, k, v = F.linear(h, block.attn.c_attn.weight, block.attn.c_attn.bias).split(C, -1)
        q, k, v = (t.view(B, T, 2, C // 2).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / (C // 2) ** 0.5 + torch.full((T, T), float("-inf")).triu(1)
        z = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        return F.linear(z, block.attn.c_proj.weight, block.attn.c_proj.bias)

    def mlp(h):
        hid = F.gelu(F.linear(h, block.mlp.c_fc.weight, block.mlp.c_fc.bias), approximate="tanh")
        return F.linear(hid, block.mlp.c_proj.weight, block.mlp.c_proj.bias)

    if kind == "parallel":  # attn and mlp read the same input; one norm in, (sandwich) one norm out
        if norm == "pre":
            h = ln(block.ln_1, x)
            return x + attn(h) + mlp(h)
        if norm == "post":
            return ln(block.ln_1, x + attn(x) + mlp(x))
        h = ln(block.ln_1, x)
        return x + ln(block.ln_1_out, attn(h) + mlp(h))
    if norm == "pre":
        x = x + attn(ln(block.ln_1, x))
        return x + mlp(ln(block.ln_2, x))
    if norm == "post":
        x = ln(block.ln_1, x + attn(x))
        return ln(block.ln_2, x + mlp(x))
    x = x + ln(block.ln_1_out, attn(ln(block.ln_1, x)))
    return x + ln(block.ln_2_out, mlp(ln(block.ln_2, x)))


@pytest.mark.parametrize("kind", BLOCK_KINDS)
@pytest.mark.parametrize("norm", NORM_PLACEMENTS)
@torch.no_grad()
def test_block_topology_matches_functional_reference(norm, kind):
    torch.manual_seed(0)
    model = build_model(make_cfg("none", norm, "layernorm", "gelu", "sdpa", block=kind)).eval()
    for p in model.parameters():  # move norms off their identity init so that every norm matters
        p.add_(0.1 * torch.randn_like(p))
    ids = torch.randint(0, V, (2, T))
    logits, acts = model.run_with_cache(ids)
    for i, block in enumerate(model.blocks):
        torch.testing.assert_close(acts[f"resid_post.{i}"],
                                   _reference_block(block, acts[f"resid_pre.{i}"], norm, kind))
    if norm == "post":  # no final norm: the last block's output goes straight to the head
        torch.testing.assert_close(acts["final"], acts["resid_post.1"])
    else:
        torch.testing.assert_close(acts["final"], F.layer_norm(acts["resid_post.1"], (16,), model.ln_f.weight,
                                                               model.ln_f.bias, 1e-5))
