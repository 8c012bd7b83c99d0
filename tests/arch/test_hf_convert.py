"""arch.convert.from_hf / to_hf against transformers (random small configs, no download): equal logits both ways.

Measured max |Δlogits| in fp32 (CPU, torch 2.13, transformers 5.24; the test prints them, `pytest -s`):
  HF Llama -> ours   7 configs (MHA, GQA, MQA tied, odd sizes + head_dim + bias, linear, yarn, theta 5e5)   2.4e-7
  HF GPT-2 -> ours   2 configs (tied gelu, untied relu)                                                     7.5e-8
  ours -> HF         GPT-2 family, 4 configs                                                                6.0e-8
                     Llama family, 10 configs (GQA, MQA, bias + d_head, base, linear, ntk, yarn x2)         2.4e-7
                     Llama, xavier init (logits up to ~4, so 5e-7 relative; the same vs our own sdpa)       2.0e-6
  ours -> HF -> ours every config above: 0 (bit-equal), except the xavier case built with the manual kernel
                     vs the converted-back sdpa model                                                      1.9e-6
  ours -> save_pretrained -> AutoModelForCausalLM.from_pretrained (offline), 3 configs                      2.4e-7
  slow sweep (d_model 192-256, 4-6 layers, T=128): ours -> HF                                               1.2e-6
Asserted: atol 1e-5, rtol 0.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.convert import from_hf, hf_problem, to_hf

transformers = pytest.importorskip("transformers")

ATOL = 1e-5


def _jitter(model, seed=0):
    """Norm weights 1 and biases 0 at init would hide a mix-up between them: randomise both."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def _max_diff(a, b) -> float:
    return (a - b).abs().max().item()


def _report(what, d):
    print(f"\n  max |Δlogits| {what}: {d:.2e}")
    assert d <= ATOL, f"{what}: {d}"


def hf_llama(seed=0, **kw):
    torch.manual_seed(seed)
    base = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=32, rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None)
    return _jitter(transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**base, **kw})).eval(), seed)


def hf_gpt2(seed=0, **kw):
    torch.manual_seed(seed)
    base = dict(n_layer=2, n_embd=48, n_head=3, vocab_size=101, n_positions=32, bos_token_id=None, eos_token_id=None)
    return _jitter(transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**base, **kw})).eval(), seed)


LLAMA_CASES = {
    "mha": dict(),
    "gqa": dict(num_key_value_heads=2),
    "mqa-tied": dict(num_key_value_heads=1, tie_word_embeddings=True),
    "odd-bias": dict(vocab_size=97, hidden_size=60, num_attention_heads=6, num_key_value_heads=3, head_dim=14,
                     intermediate_size=70, attention_bias=True, mlp_bias=True, rms_norm_eps=1e-6),
    "linear": dict(rope_scaling={"rope_type": "linear", "factor": 2.0}),
    "yarn": dict(rope_scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16},
                 max_position_embeddings=32),
    "theta": dict(rope_theta=500000.0, num_key_value_heads=2),
}


@pytest.mark.parametrize("case", sorted(LLAMA_CASES))
def test_llama_from_hf_logits_and_loss(case):
    hf = hf_llama(**LLAMA_CASES[case])
    ours = from_hf(hf).eval()
    assert ours.cfg.pos.kind == "rope" and ours.cfg.norm_type == "rmsnorm" and ours.cfg.activation == "swiglu"
    assert (ours.cfg.n_kv_heads or ours.cfg.n_heads) == hf.config.num_key_value_heads
    ids = torch.randint(0, hf.config.vocab_size, (2, 32))
    with torch.no_grad():
        out = hf(ids, labels=ids)
        _report(f"HF Llama -> ours [{case}]", _max_diff(ours(ids), out.logits))
        torch.testing.assert_close(ours.loss(ids[:, :-1], ids[:, 1:]), out.loss, atol=ATOL, rtol=0)


def test_llama_from_hf_greedy_generation_matches():
    hf = hf_llama(num_key_value_heads=2)
    ours = from_hf(hf).eval()
    ids = torch.randint(0, 101, (1, 5))
    want = hf.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)  # HF's cache vs ours below
    assert torch.equal(ours.generate(ids, max_new_tokens=8, temperature=0.0), want)


@pytest.mark.parametrize("kw", [dict(), dict(tie_word_embeddings=False, activation_function="relu", n_inner=40)],
                         ids=["tied", "untied-relu"])
def test_gpt2_from_hf_dispatch(kw):
    hf = hf_gpt2(**kw)
    if not hf.config.tie_word_embeddings:
        with torch.no_grad():
            hf.lm_head.weight.normal_()
    ours = from_hf(hf).eval()
    ids = torch.randint(0, 101, (2, 32))
    with torch.no_grad():
        _report(f"HF GPT-2 -> ours [{'tied' if not kw else 'untied-relu'}]", _max_diff(ours(ids), hf(ids).logits))


def ours(seed=0, **kw):
    torch.manual_seed(seed)
    base = dict(vocab_size=89, n_ctx=24, d_model=48, n_layers=2, n_heads=4)
    return _jitter(build_model(ModelConfig(**{**base, **kw})).eval(), seed)


LLAMA = dict(pos=PosConfig(kind="rope"), norm_type="rmsnorm", activation="swiglu", bias=False)
OURS_CASES = {
    "gpt2": dict(),
    "gpt2-untied": dict(tie_embeddings=False, d_mlp=72, layer_norm_eps=1e-6),
    "gpt2-relu": dict(activation="relu", n_heads=3),
    "gpt2-dropout": dict(dropout=0.1),  # eval mode: dropout is off on both sides
    "llama": dict(LLAMA),
    "llama-gqa": dict(LLAMA, n_kv_heads=2, tie_embeddings=False),
    "llama-mqa": dict(LLAMA, n_kv_heads=1, d_mlp=100),
    "llama-bias-dhead": dict(LLAMA, bias=True, d_head=10, n_heads=6, n_kv_heads=3),
    "llama-base": dict(LLAMA, pos=PosConfig(kind="rope", rope_base=500000.0), layer_norm_eps=1e-6),
    "llama-linear": dict(LLAMA, pos=PosConfig(kind="rope", rope_scaling="linear", rope_scaling_factor=4.0)),
    "llama-ntk": dict(LLAMA, pos=PosConfig(kind="rope", rope_scaling="ntk", rope_scaling_factor=4.0)),
    "llama-yarn": dict(LLAMA, pos=PosConfig(kind="rope", rope_scaling="yarn", rope_scaling_factor=4.0)),
    "llama-yarn-orig": dict(LLAMA, pos=PosConfig(kind="rope", rope_scaling="yarn", rope_scaling_factor=2.0,
                                                 original_n_ctx=12)),
    "llama-init": dict(LLAMA, init="xavier", attention="manual"),  # init / kernel: not model identity
}


@pytest.mark.parametrize("case", sorted(OURS_CASES))
def test_round_trip_ours_hf_ours(case):
    model = ours(**OURS_CASES[case])
    hf = to_hf(model)
    assert type(hf).__name__ == ("GPT2LMHeadModel" if case.startswith("gpt2") else "LlamaForCausalLM")
    assert not hf.training and hf.config.bos_token_id is None
    back = from_hf(hf).eval()
    ids = torch.randint(0, 89, (2, 24))
    with torch.no_grad():
        want = model(ids)
        _report(f"ours -> HF [{case}]", _max_diff(hf(ids).logits, want))
        _report(f"ours -> HF -> ours [{case}]", _max_diff(back(ids), want))
    if case == "llama-ntk":  # static NTK is plain rope at base * s^(D/(D-2)); it comes back in that form
        assert back.cfg.pos.rope_scaling is None and back.cfg.pos.rope_base == pytest.approx(10000 * 4 ** (12 / 10))
    else:
        skip = {"dropout", "init", "attention", "n_kv_heads"}
        a, b = model.cfg.to_dict(), back.cfg.to_dict()
        assert {k: v for k, v in a.items() if k not in skip} == {k: v for k, v in b.items() if k not in skip}
        assert (a["n_kv_heads"] or a["n_heads"]) == (b["n_kv_heads"] or b["n_heads"])


@pytest.mark.parametrize("case", ["gpt2-untied", "llama-mqa", "llama-yarn-orig"])
def test_save_pretrained_loads_offline(case, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = ours(**OURS_CASES[case])
    to_hf(model, bos_token_id=0, eos_token_id=0).save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config.eos_token_id == 0
    ids = torch.randint(0, 89, (2, 24))
    with torch.no_grad():
        _report(f"ours -> save_pretrained -> AutoModelForCausalLM [{case}]", _max_diff(loaded(ids).logits, model(ids)))


REFUSED = [
    (dict(pos=PosConfig(kind="alibi")), "model.pos.kind=alibi has no HF equivalent"),
    (dict(pos=PosConfig(kind="sinusoidal")), "model.pos.kind=sinusoidal has no HF equivalent"),
    (dict(norm="post"), "model.norm=post has no HF equivalent"),
    (dict(norm="sandwich", **LLAMA), "model.norm=sandwich has no HF equivalent"),
    (dict(block="parallel"), "model.block=parallel has no HF equivalent"),
    (dict(norm_type="rmsnorm"), "model.norm_type=rmsnorm has no HF equivalent"),
    (dict(activation="swiglu"), "model.activation=swiglu has no HF equivalent"),
    (dict(bias=False), "model.bias=false has no HF equivalent"),
    (dict(n_kv_heads=2), "model.n_kv_heads=2 has no HF equivalent"),
    (dict(d_head=16), "model.d_head=16 has no HF equivalent"),
    (dict(qk_norm="rmsnorm", **LLAMA), "model.qk_norm=rmsnorm has no HF equivalent"),
    (dict(window=8, **LLAMA), "model.window=8 has no HF equivalent"),
    (dict(LLAMA, norm_type="layernorm"), "model.norm_type=layernorm has no HF equivalent"),
    (dict(LLAMA, activation="gelu"), "model.activation=gelu has no HF equivalent"),
    (dict(LLAMA, n_heads=3, d_head=10), "model.d_head=10 has no HF equivalent"),
]


@pytest.mark.parametrize("kw,msg", REFUSED, ids=[m.split(" ")[0] for _, m in REFUSED])
def test_configs_without_hf_equivalent_are_refused_in_one_line(kw, msg):
    model = build_model(ModelConfig(**{**dict(vocab_size=50, n_ctx=8, d_model=40, n_layers=1, n_heads=4), **kw}))
    assert str(hf_problem(model)).startswith(msg)
    with pytest.raises(ValueError) as e:
        to_hf(model)
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


@pytest.mark.parametrize("kw,msg", [
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), "rope_type='dynamic' has no archlab equivalent"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 16}), "rope_type='llama3' has no archlab equivalent"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0, "beta_fast": 16}), "beta_fast=16 has no archlab"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 2.0, "attention_factor": 1.0}), "attention_factor=1.0"),
    (dict(hidden_act="gelu"), "hidden_act='gelu' has no archlab equivalent"),
    (dict(attention_bias=True), "mlp_bias=False has no archlab equivalent"),
], ids=["dynamic", "llama3", "yarn-beta", "yarn-attn-factor", "act", "bias"])
def test_hf_configs_without_archlab_equivalent_are_refused(kw, msg):
    with pytest.raises(ValueError, match="^LlamaConfig .*" + msg.replace("(", r"\(").replace(")", r"\)")) as e:
        from_hf(hf_llama(**kw))
    assert "\n" not in str(e.value)


def test_gpt2_erf_gelu_converts_both_ways():
    hf = hf_gpt2(activation_function="gelu")  # exact erf GELU -> our gelu_exact
    ours = from_hf(hf).eval()
    assert ours.cfg.activation == "gelu_exact"
    ids = torch.randint(0, ours.cfg.vocab_size, (2, 7))
    with torch.no_grad():
        assert torch.allclose(ours(ids), hf(ids).logits, atol=1e-5, rtol=0)
        assert to_hf(ours).config.activation_function == "gelu"


def test_gpt2_refusals_and_unknown_class():
    with pytest.raises(ValueError, match="activation_function='silu' has no archlab equivalent"):
        from_hf(hf_gpt2(activation_function="silu"))
    with pytest.raises(ValueError, match="scale_attn_weights=False"):
        from_hf(hf_gpt2(scale_attn_weights=False))
    with pytest.raises(ValueError, match="^dict has no archlab converter; supported: "):
        from_hf({})
    with pytest.raises(ValueError, match="^str has no HF converter"):
        to_hf("model")
    for kw in (dict(), LLAMA):  # a parameter no converter knows is refused, not dropped
        model = ours(**kw)
        model.blocks[0].extra = torch.nn.Linear(2, 2)
        with pytest.raises(ValueError, match=r"conversion: \['blocks.0.extra.bias', .* have no counterpart"):
            to_hf(model)


def test_import_arch_does_not_import_transformers():
    code = "import sys, arch, arch.convert, experiments.use.export; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.slow
@pytest.mark.parametrize("kw", [
    dict(d_model=256, n_layers=6, n_heads=8, vocab_size=1000, n_ctx=128),
    dict(LLAMA, d_model=256, n_layers=6, n_heads=8, n_kv_heads=2, vocab_size=1000, n_ctx=128, d_mlp=688),
    dict(LLAMA, d_model=192, n_layers=4, n_heads=6, n_kv_heads=1, vocab_size=1000, n_ctx=128,
         pos=PosConfig(kind="rope", rope_scaling="yarn", rope_scaling_factor=8.0, original_n_ctx=32)),
], ids=["gpt2-wide", "llama-gqa-wide", "llama-mqa-yarn"])
def test_sweep_wider_models(kw, request):
    name = request.node.callspec.id
    model = ours(**kw)
    hf = to_hf(model)
    ids = torch.randint(0, kw["vocab_size"], (2, kw["n_ctx"]))
    with torch.no_grad():
        want = model(ids)
        _report(f"ours -> HF [slow {name}]", _max_diff(hf(ids).logits, want))
        _report(f"ours -> HF -> ours [slow {name}]", _max_diff(from_hf(hf).eval()(ids), want))
