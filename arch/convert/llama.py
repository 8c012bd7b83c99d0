"""Llama both ways: HF `LlamaForCausalLM` <-> our Transformer.

Our Llama family is `pos=rope, norm=pre, block=sequential, norm_type=rmsnorm, activation=swiglu`, no qk_norm,
no window; any `n_kv_heads` (GQA / MQA), `d_head` (HF: `head_dim`, as long as d_model divides by n_heads),
`bias` (HF: attention_bias = mlp_bias), tied or untied head (`tie_word_embeddings`), `layer_norm_eps`
(`rms_norm_eps`). Weights: our fused `c_attn` is q_proj | k_proj | v_proj stacked by rows, swiglu's fused
`c_fc` is gate_proj | up_proj, `c_proj`s are o_proj / down_proj. Both sides rotate "rotate-half" pairs (dim i
with i + d_head/2), so q / k rows need no permutation.
RoPE: rope_theta = pos.rope_base; rope_type `default` / `linear` / `yarn` (beta_fast 32, beta_slow 1, the
paper's attention factor) map onto pos.rope_scaling None / linear / yarn. Our static `ntk` is plain rope at the
base `rope_base * s^(D/(D-2))`, so it exports as `default` with that rope_theta (and comes back as plain rope).
Refused: HF `dynamic` (its base grows with the sequence; ours is static), `llama3`, `longrope`, partial rotary
dims, yarn with other betas / mscale / attention_factor, attention_bias != mlp_bias, hidden_act other than silu.
transformers is imported only inside `to_hf` / `hf_config`. Dropout: HF Llama drops only attention
probabilities (`attention_dropout` = our dropout); ours also drops embeddings and residual branches, so the two
train alike only at dropout 0 (inference is equal either way). HF -> ours sets dropout 0.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from arch.build import build_model
from arch.config import ModelConfig, PosConfig
from arch.convert.common import (check_all_used, load_exact, no_archlab_equivalent, no_hf_equivalent,
                                 param_device, param_dtype)
from arch.model import Transformer

POS_KIND = "rope"  # the pos.kind that selects this family in arch.convert.to_hf
_SILU = ("silu", "swish")  # HF's names of one function


# ---------------------------------------------------------------------- HF -> ours
def _rope_parameters(c: Any) -> dict[str, Any]:
    """One flat dict with rope_type and rope_theta, from transformers 5's `rope_parameters` or 4's
    `rope_theta` + `rope_scaling` (whose type key was once `type`)."""
    params = getattr(c, "rope_parameters", None)
    params = dict(params) if isinstance(params, dict) and params else dict(getattr(c, "rope_scaling", None) or {})
    params.setdefault("rope_theta", getattr(c, "rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    return params


def _pos_from_hf(c: Any) -> PosConfig:
    p = _rope_parameters(c)
    kind = p["rope_type"]
    partial = p.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", None))
    if partial not in (None, 1, 1.0):
        raise no_archlab_equivalent(c, "partial_rotary_factor", partial, "ours rotates every dim of a head")
    base = float(p["rope_theta"])
    if kind == "default":
        return PosConfig(kind="rope", rope_base=base)
    if kind == "linear":
        return PosConfig(kind="rope", rope_base=base, rope_scaling="linear", rope_scaling_factor=float(p["factor"]))
    if kind == "yarn":
        original = int(p.get("original_max_position_embeddings") or c.max_position_embeddings)
        s = p.get("factor") or c.max_position_embeddings / original  # HF's fallback when factor is None
        for key, ours in (("beta_fast", 32), ("beta_slow", 1)):
            if p.get(key) not in (None, ours):
                raise no_archlab_equivalent(c, key, p[key], f"ours is fixed at the paper's {ours}")
        if p.get("truncate", True) is not True:
            raise no_archlab_equivalent(c, "truncate", p["truncate"], "ours floors / ceils the correction range")
        ours_factor = 0.1 * math.log(s) + 1.0 if s > 1 else 1.0
        theirs = p.get("attention_factor")
        if theirs is None and p.get("mscale") and p.get("mscale_all_dim"):
            theirs = (0.1 * p["mscale"] * math.log(s) + 1.0) / (0.1 * p["mscale_all_dim"] * math.log(s) + 1.0) \
                if s > 1 else 1.0
        if theirs is not None and abs(theirs - ours_factor) > 1e-12:
            raise no_archlab_equivalent(c, "attention_factor", theirs, f"ours is 0.1 ln(s) + 1 = {ours_factor:.6g}")
        return PosConfig(kind="rope", rope_base=base, rope_scaling="yarn", rope_scaling_factor=float(s),
                         original_n_ctx=None if original == c.max_position_embeddings else original)
    why = ("HF's dynamic NTK grows the base with the sequence length; ours (pos.rope_scaling=ntk) is static"
           if kind == "dynamic" else "ours: default, linear, yarn (and static ntk)")
    raise no_archlab_equivalent(c, "rope_type", kind, why)


def config_from_hf(c: Any) -> ModelConfig:
    """Our ModelConfig for a transformers.LlamaConfig (refuses what has no counterpart, one line)."""
    act = getattr(c, "hidden_act", "silu")
    if act not in _SILU:
        raise no_archlab_equivalent(c, "hidden_act", act, "ours is SwiGLU, i.e. silu")
    attn_bias, mlp_bias = bool(getattr(c, "attention_bias", False)), bool(getattr(c, "mlp_bias", False))
    if attn_bias != mlp_bias:
        raise no_archlab_equivalent(c, "mlp_bias", mlp_bias, f"ours has one bias switch; attention_bias={attn_bias}")
    n_heads = c.num_attention_heads
    n_kv = getattr(c, "num_key_value_heads", None) or n_heads
    return ModelConfig(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.hidden_size,
        n_layers=c.num_hidden_layers, n_heads=n_heads, d_head=getattr(c, "head_dim", None) or c.hidden_size // n_heads,
        n_kv_heads=None if n_kv == n_heads else n_kv, d_mlp=c.intermediate_size, activation="swiglu",
        pos=_pos_from_hf(c), norm="pre", block="sequential", norm_type="rmsnorm", bias=attn_bias,
        tie_embeddings=bool(getattr(c, "tie_word_embeddings", False)), layer_norm_eps=c.rms_norm_eps, dropout=0.0,
    )


def from_hf(hf_model: Any) -> Transformer:
    """HF LlamaForCausalLM -> our Transformer with identical logits.

    >>> ours = from_hf(LlamaForCausalLM(LlamaConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
    ...                                             intermediate_size=96, num_hidden_layers=2))).eval()
    """
    cfg = config_from_hf(hf_model.config)
    sd = hf_model.state_dict()
    used: set[str] = set()

    def take(key: str) -> Tensor:
        used.add(key)
        return sd[key]

    def cat(prefix: str, names: tuple[str, ...], kind: str) -> Tensor:
        return torch.cat([take(f"{prefix}.{n}.{kind}") for n in names], dim=0)

    ours = {"wte.weight": take("model.embed_tokens.weight"), "ln_f.weight": take("model.norm.weight")}
    for i in range(cfg.n_layers):
        hf, me = f"model.layers.{i}", f"blocks.{i}"
        ours[f"{me}.ln_1.weight"] = take(f"{hf}.input_layernorm.weight")
        ours[f"{me}.ln_2.weight"] = take(f"{hf}.post_attention_layernorm.weight")
        kinds = ("weight", "bias") if cfg.bias else ("weight",)
        for kind in kinds:
            ours[f"{me}.attn.c_attn.{kind}"] = cat(f"{hf}.self_attn", ("q_proj", "k_proj", "v_proj"), kind)
            ours[f"{me}.attn.c_proj.{kind}"] = take(f"{hf}.self_attn.o_proj.{kind}")
            ours[f"{me}.mlp.c_fc.{kind}"] = cat(f"{hf}.mlp", ("gate_proj", "up_proj"), kind)
            ours[f"{me}.mlp.c_proj.{kind}"] = take(f"{hf}.mlp.down_proj.{kind}")
    if "lm_head.weight" in sd:
        head = take("lm_head.weight")
        if not cfg.tie_embeddings:
            ours["lm_head.weight"] = head
    elif not cfg.tie_embeddings:
        raise ValueError("untied Llama config but no lm_head.weight in the state dict")
    check_all_used({k: v for k, v in sd.items() if not k.endswith("rotary_emb.inv_freq")}, used, "Llama")  # old HF
    model = build_model(cfg).to(ours["wte.weight"].dtype)
    load_exact(model, ours, "Llama", optional=("lm_head.weight",) if cfg.tie_embeddings else ())
    return model


# ---------------------------------------------------------------------- ours -> HF
def claims(model: object) -> bool:
    """True for the models this family converts: our decoder with pos.kind == POS_KIND."""
    return isinstance(model, Transformer) and model.cfg.pos.kind == POS_KIND


def problem(cfg: ModelConfig) -> ValueError | None:
    """The first knob of `cfg` (pos.kind=rope) that Llama has no counterpart for, as a refusal; else None."""
    if cfg.norm != "pre":
        return no_hf_equivalent("model.norm", cfg.norm, "Llama is pre-norm")
    if cfg.block != "sequential":
        return no_hf_equivalent("model.block", cfg.block, "Llama blocks are sequential")
    if cfg.norm_type != "rmsnorm":
        return no_hf_equivalent("model.norm_type", cfg.norm_type, "Llama uses RMSNorm")
    if cfg.activation != "swiglu":
        return no_hf_equivalent("model.activation", cfg.activation, "Llama's MLP is SwiGLU")
    if cfg.qk_norm is not None:
        return no_hf_equivalent("model.qk_norm", cfg.qk_norm, "Llama has no QK-norm")
    if cfg.window is not None:
        return no_hf_equivalent("model.window", cfg.window, "Llama attends to the whole causal prefix")
    if cfg.d_model % cfg.n_heads:
        return no_hf_equivalent("model.d_head", cfg.d_head, f"LlamaConfig needs d_model={cfg.d_model} divisible "
                                f"by n_heads={cfg.n_heads}, even with head_dim set")
    return None


def _rope_to_hf(cfg: ModelConfig) -> dict[str, Any]:
    pos, s = cfg.pos, cfg.pos.rope_scaling_factor
    if pos.rope_scaling == "ntk":  # static NTK-aware scaling is a plain rope with a larger base
        return {"rope_type": "default", "rope_theta": pos.rope_base * s ** (cfg.d_head / (cfg.d_head - 2))}
    if pos.rope_scaling == "linear":
        return {"rope_type": "linear", "factor": s, "rope_theta": pos.rope_base}
    if pos.rope_scaling == "yarn":
        return {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": pos.original_n_ctx or cfg.n_ctx,
                "rope_theta": pos.rope_base}
    return {"rope_type": "default", "rope_theta": pos.rope_base}


def hf_config(cfg: ModelConfig, **overrides: Any):
    """transformers.LlamaConfig for `cfg` (bos / eos / pad token ids None unless given in `overrides`)."""
    from transformers import LlamaConfig

    rope = _rope_to_hf(cfg)
    if "rope_parameters" in getattr(LlamaConfig, "__annotations__", {}):  # transformers >= 5
        rope_kw: dict[str, Any] = {"rope_parameters": rope}
    else:
        scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
        rope_kw = {"rope_theta": rope["rope_theta"],
                   "rope_scaling": None if rope["rope_type"] == "default" else scaling}
    kwargs = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
                  num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                  num_key_value_heads=cfg.n_kv_heads or cfg.n_heads, head_dim=cfg.d_head, hidden_act="silu",
                  max_position_embeddings=cfg.n_ctx, rms_norm_eps=cfg.layer_norm_eps,
                  tie_word_embeddings=cfg.tie_embeddings, attention_bias=cfg.bias, mlp_bias=cfg.bias,
                  attention_dropout=cfg.dropout, bos_token_id=None, eos_token_id=None, pad_token_id=None, **rope_kw)
    kwargs.update(overrides)
    return LlamaConfig(**kwargs)


def to_hf(model: Transformer, **config_overrides: Any):
    """Our Llama-family Transformer -> transformers.LlamaForCausalLM with equal logits (eval mode, our dtype, device)."""
    from transformers import LlamaForCausalLM

    cfg = model.cfg
    if (err := problem(cfg)) is not None:
        raise err
    ours = model.state_dict()  # a tied lm_head.weight is listed too (the same tensor as wte.weight)
    used: set[str] = set()

    def take(key: str) -> Tensor:
        used.add(key)
        return ours[key]

    state = {"model.embed_tokens.weight": take("wte.weight"), "model.norm.weight": take("ln_f.weight"),
             "lm_head.weight": take("lm_head.weight")}
    H, Hkv, D = cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, cfg.d_head
    for i in range(cfg.n_layers):
        hf, me = f"model.layers.{i}", f"blocks.{i}"
        state[f"{hf}.input_layernorm.weight"] = take(f"{me}.ln_1.weight")
        state[f"{hf}.post_attention_layernorm.weight"] = take(f"{me}.ln_2.weight")
        for kind in ("weight", "bias") if cfg.bias else ("weight",):
            q, k, v = take(f"{me}.attn.c_attn.{kind}").split((H * D, Hkv * D, Hkv * D), dim=0)
            gate, up = take(f"{me}.mlp.c_fc.{kind}").chunk(2, dim=0)
            state.update({f"{hf}.self_attn.q_proj.{kind}": q, f"{hf}.self_attn.k_proj.{kind}": k,
                          f"{hf}.self_attn.v_proj.{kind}": v,
                          f"{hf}.self_attn.o_proj.{kind}": take(f"{me}.attn.c_proj.{kind}"),
                          f"{hf}.mlp.gate_proj.{kind}": gate, f"{hf}.mlp.up_proj.{kind}": up,
                          f"{hf}.mlp.down_proj.{kind}": take(f"{me}.mlp.c_proj.{kind}")})
    check_all_used(ours, used, "Llama")
    hf_model = LlamaForCausalLM(hf_config(cfg, **config_overrides)).to(param_device(model), param_dtype(model))
    load_exact(hf_model, state, "Llama")
    return hf_model.eval()
