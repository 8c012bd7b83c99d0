"""arch.hooks and arch.hook_points: hook points checked against hand-written forward passes (patching and reading), bit-identical logits
with reading hooks for every kernel, the context manager, the KV-cache path, the logit lens, the untouched default
path."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from arch import ModelConfig, PosConfig, build_model
from arch.components.attention import ATTENTION, explicit_attention
from arch.config import ATTENTION_IMPLS
from arch.hook_points import BLOCK_POINTS, HOOK_POINTS, PointHooks
from arch.hooks import hook_names

V, C, H, D, T = 29, 16, 4, 4, 7
EXPLICIT = ("attn.hook_attn_scores", "attn.hook_pattern")  # the points that make their layer compute explicitly


def make(n_layers=2, dtype=torch.float64, **kw):
    torch.manual_seed(0)
    kw.setdefault("pos", PosConfig(kind="learned"))
    cfg = ModelConfig(vocab_size=V, n_ctx=8, d_model=C, n_layers=n_layers, n_heads=H, **kw)
    return build_model(cfg).to(dtype).eval()


def ids_(B=2, t=T, seed=1):
    return torch.randint(0, V, (B, t), generator=torch.Generator().manual_seed(seed))


def causal_softmax(q, k):
    """Hand-written causal attention probabilities: q, k (B, H, T, D) -> (B, H, T, T)."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    return s.masked_fill(~mask, float("-inf")).softmax(-1)


def heads(x):  # (B, T, H*D) -> (B, H, T, D)
    B, t, _ = x.shape
    return x.view(B, t, -1, D).transpose(1, 2)


def gelu_mlp(mlp, x):
    return mlp.c_proj(F.gelu(mlp.c_fc(x), approximate="tanh"))


def save_to(store):
    def fn(x, hook):
        store[hook.name] = x.clone()
    return fn


# ---------------------------------------------------------------- names, shapes, errors


def test_every_point_fires_with_the_documented_shape():
    model = make(n_kv_heads=2, activation="swiglu", d_mlp=12)  # Hkv = 2, F = 2·M = 24
    ids = ids_()
    names = model.hook_names()
    assert names[0] == "hook_embed" and names[-1] == "hook_final"
    assert len(names) == 2 + 2 * len(BLOCK_POINTS)
    seen = []
    model.run_with_hooks(ids, [(lambda n: True, lambda x, hook: seen.append((hook.name, hook.layer, x.shape)))])
    assert [n for n, _, _ in seen] == names  # every point, once, in the documented order
    dims = {"B": 2, "T": T, "Tk": T, "C": C, "H": H, "Hkv": 2, "D": D, "M": 12, "F": 24}
    for name, layer, shape in seen:
        template = next(k for k in HOOK_POINTS if k.replace("{i}", str(layer)) == name)
        want = tuple(dims[d.strip()] for d in HOOK_POINTS[template].strip("()").split(","))
        assert tuple(shape) == want, name
        assert layer == (None if name in ("hook_embed", "hook_final") else int(name.split(".")[1]))


def test_parallel_blocks_have_no_resid_mid_and_names_are_checked():
    model = make(block="parallel")
    assert "blocks.0.hook_resid_mid" not in hook_names(model)
    with pytest.raises(ValueError, match="unknown hook point 'blocks.0.hook_resid_mid'"):
        model.run_with_hooks(ids_(), [("blocks.0.hook_resid_mid", lambda x, h: None)])
    with pytest.raises(ValueError, match="close matches: blocks.1.hook_resid_pre"):
        model.run_with_hooks(ids_(), [("blocks.1.hook_resid_pr", lambda x, h: None)])
    with pytest.raises(TypeError):
        model.run_with_hooks(ids_(), [("hook_embed",)])
    assert model._hook_set is None


def test_replacement_of_another_shape_is_refused():
    model = make()
    with pytest.raises(ValueError, match=r"hook on blocks.1.attn.hook_z returned \(2, 7, 16\); expected None or a "
                                         r"tensor of shape \(2, 7, 4, 4\)"):
        model.run_with_hooks(ids_(), [("blocks.1.attn.hook_z", lambda z, h: z.flatten(2))])


# ---------------------------------------------------------------- patching, against hand-written forwards


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_zero_ablating_a_head_equals_a_hand_computed_forward(attention):
    """Zero head 2's z in layer 1 (the last block) and recompute block 1, ln_f and lm_head by hand."""
    model = make(attention=attention)
    ids = ids_()

    def ablate(z, hook):  # z (B, T, H, D)
        z = z.clone()
        z[:, :, 2] = 0.0
        return z

    with torch.no_grad():
        got = model.run_with_hooks(ids, [("blocks.1.attn.hook_z", ablate)])
        _, acts = model.run_with_cache(ids)
        blk = model.blocks[1]
        x = acts["resid_pre.1"]  # block 0 is untouched by the ablation
        q, k, v = (heads(t) for t in blk.attn.c_attn(blk.ln_1(x)).split(C, dim=-1))
        z = causal_softmax(q, k) @ v  # (B, H, T, D)
        z[:, 2] = 0.0
        x = x + blk.attn.c_proj(z.transpose(1, 2).reshape(2, T, C))
        x = x + gelu_mlp(blk.mlp, blk.ln_2(x))
        want = model.lm_head(model.ln_f(x))
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        assert (got - model(ids)).abs().max() > 1e-3  # the ablation did something


@pytest.mark.parametrize("norm", ["pre", "post", "sandwich"])
def test_patching_resid_mid_reruns_the_rest_of_the_block(norm):
    model = make(norm=norm)
    ids = ids_()
    R = torch.randn(2, T, C, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        reads = {}
        got = model.run_with_hooks(ids, [("blocks.1.hook_resid_mid", lambda x, h: R),
                                         ("blocks.1.hook_resid_pre", save_to(reads))])
        blk = model.blocks[1]
        if norm == "pre":
            x = R + gelu_mlp(blk.mlp, blk.ln_2(R))
        elif norm == "post":
            x = blk.ln_2(R + gelu_mlp(blk.mlp, R))
        else:
            x = R + blk.ln_2_out(gelu_mlp(blk.mlp, blk.ln_2(R)))
        torch.testing.assert_close(got, model.lm_head(model.ln_f(x)), rtol=0, atol=1e-12)
        _, plain = model.run_with_cache(ids, names=["blocks.1.hook_resid_pre"])
        assert torch.equal(reads["blocks.1.hook_resid_pre"], plain["blocks.1.hook_resid_pre"])  # upstream unchanged


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_patching_the_pattern_to_uniform_gives_the_prefix_mean_of_v(attention):
    model = make(n_layers=1, attention=attention)
    ids = ids_()
    uniform = torch.ones(T, T, dtype=torch.float64).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    with torch.no_grad():
        got = model.run_with_hooks(ids, [("blocks.0.attn.hook_pattern", lambda a, h: uniform.expand_as(a))])
        blk = model.blocks[0]
        x = model.pos.embed(model.wte(ids), 0)
        _, _, v = (heads(t) for t in blk.attn.c_attn(blk.ln_1(x)).split(C, dim=-1))
        z = torch.cumsum(v, dim=2) / torch.arange(1, T + 1, dtype=torch.float64)[:, None]  # mean of v[0..t]
        x = x + blk.attn.c_proj(z.transpose(1, 2).reshape(2, T, C))
        x = x + gelu_mlp(blk.mlp, blk.ln_2(x))
        torch.testing.assert_close(got, model.lm_head(model.ln_f(x)), rtol=0, atol=1e-12)


def test_patching_mlp_post_and_q():
    """mlp.hook_post replaced by zeros: the MLP adds only c_proj's bias; hook_q doubled: scores doubled."""
    model = make(n_layers=1)
    ids = ids_()
    blk = model.blocks[0]
    with torch.no_grad():
        got = model.run_with_hooks(ids, [("blocks.0.mlp.hook_post", lambda h, hook: torch.zeros_like(h)),
                                         ("blocks.0.attn.hook_q", lambda q, hook: 2 * q)])
        x = model.pos.embed(model.wte(ids), 0)
        q, k, v = (heads(t) for t in blk.attn.c_attn(blk.ln_1(x)).split(C, dim=-1))
        x = x + blk.attn.c_proj((causal_softmax(2 * q, k) @ v).transpose(1, 2).reshape(2, T, C))
        x = x + blk.mlp.c_proj.bias
        torch.testing.assert_close(got, model.lm_head(model.ln_f(x)), rtol=0, atol=1e-12)


def test_embed_patch_and_logit_lens_first_layer():
    model = make()
    ids = ids_()
    with torch.no_grad():
        zero = model.run_with_hooks(ids, [("hook_embed", lambda x, h: torch.zeros_like(x))])
        other = model.run_with_hooks(ids_(seed=5), [("hook_embed", lambda x, h: torch.zeros_like(x))])
        assert torch.equal(zero, other)  # nothing of the ids is left
        lens = model.logit_lens(ids)
        _, acts = model.run_with_cache(ids)
        assert torch.equal(lens[0], model.lm_head(model.ln_f(acts["embed"])))


# ---------------------------------------------------------------- reading: where each point sits


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_reads_sit_where_the_docs_say(attention):
    model = make(attention=attention)
    ids = ids_()
    with torch.no_grad():
        logits, a = model.run_with_cache(ids, names=lambda n: True)
        _, short = model.run_with_cache(ids)
        if attention == "explicit":  # the pattern hook keeps this kernel; the others go explicit for the call
            assert torch.equal(logits, model(ids))
        for key, name in [("embed", "hook_embed"), ("final", "hook_final"), ("resid_pre.1", "blocks.1.hook_resid_pre"),
                          ("attn_pattern.0", "blocks.0.attn.hook_pattern"), ("resid_post.1", "blocks.1.hook_resid_post")]:
            assert torch.equal(short[key], a[name])
        x = a["hook_embed"]
        for i, blk in enumerate(model.blocks):
            p = f"blocks.{i}."
            assert torch.equal(a[p + "hook_resid_pre"], x)
            q, k, v = (heads(t) for t in blk.attn.c_attn(blk.ln_1(x)).split(C, dim=-1))
            for name, want in (("attn.hook_q", q), ("attn.hook_k", k), ("attn.hook_v", v)):
                torch.testing.assert_close(a[p + name], want, rtol=0, atol=1e-12)
            torch.testing.assert_close(a[p + "attn.hook_pattern"], causal_softmax(q, k), rtol=0, atol=1e-12)
            z = (causal_softmax(q, k) @ v).transpose(1, 2)  # (B, T, H, D)
            torch.testing.assert_close(a[p + "attn.hook_z"], z, rtol=0, atol=1e-12)
            attn_out = blk.attn.c_proj(z.reshape(2, T, C))
            torch.testing.assert_close(a[p + "hook_attn_out"], attn_out, rtol=0, atol=1e-12)
            mid = x + attn_out
            torch.testing.assert_close(a[p + "hook_resid_mid"], mid, rtol=0, atol=1e-12)
            pre = blk.mlp.c_fc(blk.ln_2(mid))
            torch.testing.assert_close(a[p + "mlp.hook_pre"], pre, rtol=0, atol=1e-12)
            post = F.gelu(pre, approximate="tanh")
            torch.testing.assert_close(a[p + "mlp.hook_post"], post, rtol=0, atol=1e-12)
            torch.testing.assert_close(a[p + "hook_mlp_out"], blk.mlp.c_proj(post), rtol=0, atol=1e-12)
            x = mid + blk.mlp.c_proj(post)
            torch.testing.assert_close(a[p + "hook_resid_post"], x, rtol=0, atol=1e-12)
            x = a[p + "hook_resid_post"]
        torch.testing.assert_close(a["hook_final"], model.ln_f(x), rtol=0, atol=0)


def test_rope_q_and_k_are_read_after_the_rotation():
    model = make(pos=PosConfig(kind="rope"), qk_norm="rmsnorm")
    ids = ids_()
    with torch.no_grad():
        _, a = model.run_with_cache(ids, names=["blocks.0.hook_resid_pre", "blocks.0.attn.hook_q",
                                                 "blocks.0.attn.hook_k"])
        attn = model.blocks[0].attn
        q, k, _ = (heads(t) for t in attn.c_attn(model.blocks[0].ln_1(a["blocks.0.hook_resid_pre"])).split(C, -1))
        q, k = model.pos.rotate(attn.q_norm(q), attn.k_norm(k), 0)
        assert torch.equal(a["blocks.0.attn.hook_q"], q) and torch.equal(a["blocks.0.attn.hook_k"], k)


# ---------------------------------------------------------------- hooks present, nothing changed


CONFIGS = {
    "pre-learned": dict(),
    "post-alibi-parallel": dict(norm="post", block="parallel", pos=PosConfig(kind="alibi")),
    "sandwich-rope-gqa-swiglu-qknorm-window": dict(norm="sandwich", pos=PosConfig(kind="rope"), n_kv_heads=2,
                                                   activation="swiglu", qk_norm="rmsnorm", window=3),
}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_reading_hooks_leave_logits_bit_identical(attention, config):
    model = make(attention=attention, dtype=torch.float32, **CONFIGS[config])
    ids = ids_()
    with torch.no_grad():
        plain = model(ids)
        read_all_but_pattern = model.run_with_hooks(ids, [(lambda n: not n.endswith(EXPLICIT), lambda x, h: None)])
        assert torch.equal(read_all_but_pattern, plain)
        # a scores / pattern hook computes that layer explicitly: bit-identical to the explicit kernel, close to the others
        explicit = copy.deepcopy(model)
        for blk in explicit.blocks:
            blk.attn.kernel = explicit_attention
        read_all = model.run_with_hooks(ids, [(lambda n: True, lambda x, h: None)])
        assert torch.equal(read_all, explicit(ids))
        torch.testing.assert_close(read_all, plain, rtol=1e-5, atol=1e-6)


def test_reading_hooks_in_training_with_dropout_change_nothing():
    model = make(dtype=torch.float32, dropout=0.3).train()
    ids = ids_()
    torch.manual_seed(7)
    plain = model.loss(ids, ids)
    torch.manual_seed(7)
    with model.hooks([(lambda n: not n.endswith(EXPLICIT), lambda x, h: None)]):
        hooked = model.loss(ids, ids)
    assert torch.equal(plain, hooked)


def test_no_hook_code_runs_without_hooks(monkeypatch):
    """With no hook set, no PointHooks method runs and every layer calls its own kernel (sdpa here); a layer
    without hooks keeps its kernel while another layer is hooked."""
    model = make(dtype=torch.float32, attention="sdpa")
    ids = ids_()
    calls = []
    for i, blk in enumerate(model.blocks):
        kernel = blk.attn.kernel
        blk.attn.kernel = lambda *a, _k=kernel, _i=i, **kw: (calls.append(_i), _k(*a, **kw))[1]

    def boom(*a, **kw):
        raise AssertionError("hook code ran")

    for name in ("fire", "has"):
        monkeypatch.setattr(PointHooks, name, boom)
    with torch.no_grad():
        model(ids)
        model.loss(ids, ids)
        model.generate(ids[:, :3], max_new_tokens=2)
    assert calls and set(calls) == {0, 1}
    monkeypatch.undo()
    calls.clear()
    with torch.no_grad():
        model.run_with_hooks(ids, [("blocks.0.attn.hook_pattern", lambda a, h: None)])
    assert calls == [1]  # layer 0 went explicit for its pattern; layer 1 still ran sdpa
    assert ATTENTION["sdpa"] is not ATTENTION["explicit"]


# ---------------------------------------------------------------- context manager


def test_context_manager_removes_hooks_also_after_an_exception():
    model = make()
    ids = ids_()
    plain = model(ids)
    calls = []

    def zero(x, hook):
        calls.append(hook.name)
        return torch.zeros_like(x)

    with pytest.raises(RuntimeError, match="inside"):
        with model.hooks([("blocks.0.hook_resid_post", zero)]):
            assert not torch.equal(model(ids), plain)
            raise RuntimeError("inside")
    assert model._hook_set is None
    calls.clear()
    assert torch.equal(model(ids), plain) and calls == []
    # nested blocks add up; leaving the inner one restores the outer one's hooks
    with model.hooks([("hook_final", lambda x, h: calls.append("outer"))]):
        with model.hooks([("hook_final", lambda x, h: calls.append("inner"))]):
            model(ids)
        model(ids)
    assert calls == ["outer", "inner", "outer"]
    assert model._hook_set is None
    with model.hooks([(lambda n: False, zero)]):  # a filter matching nothing sets nothing
        assert model._hook_set is None


# ---------------------------------------------------------------- KV cache


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_kv_cache_reads_are_the_new_positions_of_a_full_forward(attention):
    model = make(pos=PosConfig(kind="rope"), n_kv_heads=2, attention=attention)
    ids = ids_()
    points = ["blocks.1.attn.hook_q", "blocks.1.attn.hook_k", "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_z",
              "blocks.0.mlp.hook_post", "blocks.1.hook_resid_post", "hook_final"]
    with torch.no_grad():
        full_logits, full = model.run_with_cache(ids, names=points)
        cache = model.new_kv_cache(2)
        model(ids[:, :4], kv_cache=cache)
        logits, part = model.run_with_cache(ids[:, 4:], kv_cache=cache, names=points)
    torch.testing.assert_close(logits, full_logits[:, 4:], rtol=0, atol=1e-12)
    for name in points:
        axis = 2 if name.endswith(("hook_q", "hook_k", "hook_pattern")) else 1  # (B, H, T, .) or (B, T, ...)
        want = full[name].narrow(axis, 4, T - 4)
        torch.testing.assert_close(part[name], want, rtol=0, atol=1e-12, msg=name)
    assert part["blocks.1.attn.hook_pattern"].shape == (2, H, 3, T)  # new queries against every cached key


def test_generate_inside_hooks_fires_at_every_step_and_patches_propagate():
    model = make(pos=PosConfig(kind="rope"))
    prompt = ids_()[:, :3]
    seen = []
    with torch.no_grad(), model.hooks([("hook_final", lambda x, h: seen.append(x.shape[1]))]):
        model.generate(prompt, max_new_tokens=3, temperature=0.0)
    assert seen == [3, 1, 1]  # the prompt, then one new position per cached step (the last token is not fed)
    # an ablation applied through the cache equals the same ablation on full recomputation
    ablate = [("blocks.0.attn.hook_v", lambda v, h: 0.5 * v)]
    with torch.no_grad(), model.hooks(ablate):
        cached = model.generate(prompt, max_new_tokens=4, temperature=0.0)
        uncached = model.generate(prompt, max_new_tokens=4, temperature=0.0, use_cache=False)
    assert torch.equal(cached, uncached)


# ---------------------------------------------------------------- logit lens


@pytest.mark.parametrize("kw", [dict(), dict(norm="post"), dict(norm="sandwich", tie_embeddings=False),
                                dict(block="parallel", norm_type="rmsnorm")])
def test_logit_lens_last_layer_is_the_model_logits(kw):
    model = make(n_layers=3, dtype=torch.float32, **kw)
    ids = ids_()
    with torch.no_grad():
        lens = model.logit_lens(ids)
        assert lens.shape == (4, 2, T, V)
        assert torch.equal(lens[-1], model(ids))
        # (the default run_with_cache captures patterns, so its layers run explicit attention: name the points)
        _, acts = model.run_with_cache(ids, names=lambda n: n.endswith("hook_resid_post"))
        for i in range(3):
            assert torch.equal(lens[i + 1], model.lm_head(model.ln_f(acts[f"blocks.{i}.hook_resid_post"])))
