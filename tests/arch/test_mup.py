"""μP (arch/mup.py) against independent references: at the proxy's width it is SP bit for bit; at any width the
per-parameter init std, AdamW lr and weight decay, and the readout's output equal those of the same model written
with Microsoft's `mup` package (MuReadout / MuSharedReadout, set_base_shapes, mup.init.normal_, MuAdamW); the
attention scale is the paper's 1/d (Yang et al. 2022, Table 3). The coordinate check is tests/arch/test_mup_coord.py.

`mup` is a test-only reference, installed by make with --no-deps (its requirements pull torchvision and a CUDA torch):
without it the package comparisons skip with the reason.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from arch import EncDecConfig, ModelConfig, build_model
from arch.components.init import INITS
from arch.mup import attention_scale, base_config, infshapes, lr_multipliers, rescale_init
from experiments.config.schema import OptimConfig
from experiments.run.optim import build_optimizer

LR, WD = 1e-3, 0.1


def adamw(lr: float = LR, weight_decay: float = WD) -> OptimConfig:
    return OptimConfig(name="adamw", lr=lr, betas=[0.9, 0.95], eps=1e-8, weight_decay=weight_decay,
                       decay_embeddings=False)


def cfg_of(**kw) -> ModelConfig:
    base = dict(vocab_size=96, n_ctx=16, d_model=128, n_layers=2, n_heads=4, param="mup", base_width=32)
    return ModelConfig(**{**base, **kw})


def per_param(optimizer: torch.optim.Optimizer, model: nn.Module) -> dict[str, tuple[float, float]]:
    """{name: (lr the loop trains it at, weight decay)}: group lr x lr_mult, as experiments/run/loop.py sets it."""
    by_id = {}
    for g in optimizer.param_groups:
        for p in g["params"]:
            by_id[id(p)] = (g["lr"] * g.get("lr_mult", 1.0), g["weight_decay"])
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": False}, {"pos": {"kind": "rope"}, "activation": "swiglu"},
                                {"n_kv_heads": 2, "qk_norm": "rmsnorm", "norm": "post"}])
def test_at_the_proxy_width_mup_is_sp_bit_for_bit(kw):
    torch.manual_seed(0)
    mup = build_model(cfg_of(d_model=32, **kw))
    torch.manual_seed(0)
    sp = build_model(cfg_of(d_model=32, param="sp", base_width=None, **kw))
    for (name, a), (_, b) in zip(mup.named_parameters(), sp.named_parameters()):
        assert torch.equal(a, b), name
    ids = torch.randint(0, 96, (2, 16))
    assert torch.equal(mup(ids), sp(ids)) and torch.equal(mup.loss(ids, ids), sp.loss(ids, ids))
    assert [g.get("lr_mult", 1.0) for g in build_optimizer(mup, adamw(), torch.device("cpu")).param_groups] \
        == [1.0, 1.0]


def test_attention_is_one_over_d_and_the_readout_divides_by_the_width():
    """Table 3: attention logits q.k / d (times a constant: sqrt(d_head) of the proxy, so m = 1 is SP)."""
    for width in (32, 64, 256):
        cfg = cfg_of(d_model=width)
        d_head, base_d_head = width // 4, 32 // 4
        assert attention_scale(cfg) == pytest.approx(math.sqrt(base_d_head) / d_head)
        model = build_model(cfg)
        assert model.blocks[0].attn.scale == attention_scale(cfg)
        assert model.lm_head.input_mult == pytest.approx(32 / width)
    assert attention_scale(cfg_of(param="sp", base_width=None)) == 1 / math.sqrt(32)


def test_infinite_dims_follow_the_shapes():
    kinds = {name: s.ninf for name, s in infshapes(build_model(cfg_of(pos={"kind": "relative"}))).items()}
    assert kinds["blocks.0.attn.c_attn.weight"] == kinds["blocks.1.mlp.c_proj.weight"] == 2   # hidden matrices
    assert kinds["wte.weight"] == kinds["blocks.0.ln_1.weight"] == kinds["blocks.0.mlp.c_fc.bias"] == 1  # vectors
    assert kinds["pos.rel_bias.weight"] == 0  # (num_buckets, n_heads): nothing grows with width


def test_config_refuses_what_mup_cannot_do():
    with pytest.raises(ValueError, match="needs base_width"):
        cfg_of(base_width=None)
    with pytest.raises(ValueError, match="init='gpt2'"):
        cfg_of(init="xavier")
    with pytest.raises(ValueError, match="set param='mup'"):
        cfg_of(param="sp", base_width=64)
    with pytest.raises(ValueError, match="unknown param .ntk.; choose from"):
        cfg_of(param="ntk")


# ------------------------------------------------------------------------------------------------- the mup package


def gpt2_std(name: str, n_layers: int) -> float:
    """GPT-2's SP init (Radford et al. 2019): N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layers))."""
    return 0.02 / math.sqrt(2 * n_layers) if name.endswith(("attn.c_proj", "mlp.c_proj")) else 0.02


def reference(cfg, seed: int):
    """The model of `cfg` written against the mup package: the SP model with its readout a MuReadout (untied) or a
    MuSharedReadout (tied to wte), set_base_shapes against the SP proxy, every weight drawn with mup.init.normal_
    at GPT-2's SP std, in module order (as arch's init draws them), biases 0, norms 1."""
    mup = pytest.importorskip("mup", reason="the mup package (test-only; make installs it with pip --no-deps)")
    sp_cfg = dataclasses.replace(cfg, param="sp", base_width=None)

    def with_mu_readout(c) -> nn.Module:
        model = build_model(c)
        if c.tie_embeddings:
            model.lm_head = mup.MuSharedReadout(model.wte.weight, bias=False)
        else:
            model.lm_head = mup.MuReadout(c.d_model, c.vocab_size, bias=False)
        return model

    model = with_mu_readout(sp_cfg)
    mup.set_base_shapes(model, with_mu_readout(base_config(cfg)), rescale_params=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                mup.init.normal_(module.weight, std=gpt2_std(name, cfg.n_layers))
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
    return model, mup


@pytest.mark.parametrize("kw", [{}, {"tie_embeddings": False}, {"n_kv_heads": 1, "activation": "swiglu"},
                                {"d_model": 256, "pos": {"kind": "rope"}, "qk_norm": "layernorm"}])
def test_init_lr_and_readout_equal_the_mup_packages(kw):
    cfg = cfg_of(**kw)
    ref, mup = reference(cfg, seed=3)
    ours = build_model(cfg)
    torch.manual_seed(3)  # redraw from the reference's RNG state: what the constructor ends with
    INITS[cfg.init](ours)
    rescale_init(ours)
    ref_params = dict(ref.named_parameters())
    for name, p in ours.named_parameters():  # the same draws: N(0, s) x r^-1/2 here, N(0, s r^-1/2) there
        torch.testing.assert_close(p, ref_params[name], rtol=1e-5, atol=1e-8, msg=name)
    m = cfg.d_model / cfg.base_width
    assert ours.blocks[0].mlp.c_fc.weight.std().item() == pytest.approx(0.02 / math.sqrt(m), rel=0.05)

    groups = [{"params": [p for n, p in ref.named_parameters() if p.ndim >= 2 and n != "wte.weight"
                          and ".pos." not in f".{n}"], "weight_decay": WD},
              {"params": [p for n, p in ref.named_parameters() if p.ndim < 2 or n == "wte.weight"
                          or ".pos." in f".{n}"], "weight_decay": 0.0}]  # our decay rule: matrices, not embeddings
    want = per_param(mup.MuAdamW(groups, lr=LR), ref)
    got = per_param(build_optimizer(ours, adamw(), torch.device("cpu")), ours)
    assert got.keys() == want.keys()
    for name in got:
        assert got[name] == pytest.approx(want[name], rel=1e-12), name
    assert {round(lr / LR, 6) for lr, _ in got.values()} == {1.0, round(1 / m, 6)}

    x = torch.randn(2, 5, cfg.d_model)
    torch.testing.assert_close(ours.lm_head(x), ref.lm_head(x), rtol=1e-6, atol=0)


def test_encoder_decoder_init_and_lr_equal_the_mup_packages():
    """Both stacks, cross-attention, the shared embedding and the readout (tie_embeddings='all')."""
    mup = pytest.importorskip("mup", reason="the mup package (test-only; make installs it with pip --no-deps)")
    cfg = EncDecConfig(vocab_size=64, n_ctx=16, d_model=96, n_encoder_layers=1, n_decoder_layers=2, n_heads=2,
                       param="mup", base_width=32)
    torch.manual_seed(0)
    ours = build_model(cfg)
    lrs = lr_multipliers(ours)
    assert lrs["decoder.blocks.0.cross_attn.c_kv.weight"] == lrs["encoder.blocks.0.attn.c_attn.weight"] == 1 / 3
    assert lrs["encoder.wte.weight"] == lrs["decoder.blocks.1.ln_1.weight"] == 1.0

    base = build_model(base_config(cfg))
    sp = build_model(dataclasses.replace(cfg, param="sp", base_width=None))
    for model in (sp, base):
        model.lm_head = mup.MuSharedReadout(model.decoder.wte.weight, bias=False)
    mup.set_base_shapes(sp, base, rescale_params=False)
    want = per_param(mup.MuAdamW([{"params": list(sp.parameters()), "weight_decay": 0.0}], lr=LR), sp)
    got = {n: lr for n, (lr, _) in per_param(build_optimizer(ours, adamw(weight_decay=0.0),
                                                             torch.device("cpu")), ours).items()}
    assert got == pytest.approx({n: lr for n, (lr, _) in want.items()}, rel=1e-12)
    std = {n: p.std().item() for n, p in ours.named_parameters() if p.ndim == 2 and p.numel() >= 4096}
    assert std["decoder.blocks.0.mlp.c_fc.weight"] == pytest.approx(0.02 / math.sqrt(3), rel=0.05)
    assert std["encoder.wte.weight"] == pytest.approx(0.02, rel=0.05)


# ------------------------------------------------------------------------------------------------- export


@pytest.mark.parametrize("kw", [{}, {"pos": {"kind": "rope"}, "norm_type": "rmsnorm", "activation": "swiglu",
                                     "bias": False, "n_kv_heads": 2}])
def test_export_to_hf_folds_the_multipliers(kw):
    """GPT-2 and Llama families: the exported model's logits equal ours; the same weights read as SP differ (so the
    multipliers had to be folded, not dropped)."""
    pytest.importorskip("transformers", reason="transformers is the HF reference (dev extra)")
    from arch.convert import to_hf

    cfg = cfg_of(d_model=64, base_width=16, tie_embeddings=False, **kw)
    torch.manual_seed(0)
    ours = build_model(cfg).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # biases and gains away from 0 / 1
    ids = torch.randint(0, 96, (2, 16))
    hf = to_hf(ours)
    torch.testing.assert_close(hf(ids).logits, ours(ids), rtol=0, atol=1e-5)
    sp = build_model(dataclasses.replace(cfg, param="sp", base_width=None)).eval()
    sp.load_state_dict(ours.state_dict())
    assert (sp(ids) - ours(ids)).abs().max() > 0.1


@pytest.mark.parametrize("kw, knob", [({}, "tie_embeddings=true"), ({"tie_embeddings": False, "qk_norm": "layernorm"},
                                                                    "qk_norm=layernorm")])
def test_export_refuses_what_cannot_be_folded_in_one_line(kw, knob):
    from arch.convert import hf_problem, to_hf

    model = build_model(cfg_of(**kw))
    with pytest.raises(ValueError, match=f"model.param=mup with {knob}") as e:
        to_hf(model)
    assert "\n" not in str(e.value) and str(hf_problem(model)) == str(e.value)


def test_a_config_saved_before_param_existed_is_the_same_model():
    """Checkpoints and config.yaml written before `param` / `base_width` existed resume (resume compares configs)."""
    from arch import config_diff

    cfg = cfg_of(param="sp", base_width=None)
    saved = {k: v for k, v in cfg.to_dict().items() if k not in ("param", "base_width")}
    assert config_diff(saved, cfg) == []
    assert config_diff(saved, cfg_of()) == ["base_width", "param"]
    assert config_diff({**saved, "n_layers": 3}, cfg) == ["n_layers"]
