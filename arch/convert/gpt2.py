"""GPT-2 both ways: HF `GPT2LMHeadModel` / `GPT2Model` (or a bare state dict) <-> our Transformer.

Our GPT-2 family is `pos=learned, norm=pre, block=sequential, norm_type=layernorm, bias=true,
activation=gelu|relu` (gelu is the tanh approximation, HF's `gelu_new`), multi-head attention with
`d_head = d_model // n_heads`, no qk_norm, no window; tied or untied head. HF's Conv1D stores weights as
(in, out), the transpose of nn.Linear's (out, in). transformers is imported only inside `to_hf`.
Not handled: scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn / scale_attn_weights=False, GPT-2's
cross-attention, erf-GELU (`gelu`) and other activations.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from arch.build import build_model
from arch.config import ModelConfig, PosConfig
from arch.convert.common import (check_all_used, load_exact, no_archlab_equivalent, no_hf_equivalent,
                                 param_device, param_dtype)
from arch.model import Transformer

POS_KIND = "learned"  # the pos.kind that selects this family in arch.convert.to_hf

# HF suffix inside transformer.h.{i} -> (our suffix inside blocks.{i}, is a Conv1D weight to transpose)
_BLOCK_KEYS = {
    "ln_1.weight": ("ln_1.weight", False),
    "ln_1.bias": ("ln_1.bias", False),
    "attn.c_attn.weight": ("attn.c_attn.weight", True),
    "attn.c_attn.bias": ("attn.c_attn.bias", False),
    "attn.c_proj.weight": ("attn.c_proj.weight", True),
    "attn.c_proj.bias": ("attn.c_proj.bias", False),
    "ln_2.weight": ("ln_2.weight", False),
    "ln_2.bias": ("ln_2.bias", False),
    "mlp.c_fc.weight": ("mlp.c_fc.weight", True),
    "mlp.c_fc.bias": ("mlp.c_fc.bias", False),
    "mlp.c_proj.weight": ("mlp.c_proj.weight", True),
    "mlp.c_proj.bias": ("mlp.c_proj.bias", False),
}
_TOP_KEYS = {"wte.weight": "wte.weight", "wpe.weight": "pos.wpe.weight", "ln_f.weight": "ln_f.weight",
             "ln_f.bias": "ln_f.bias"}
_IGNORED = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")  # causal-mask buffers of older transformers
# our activation <-> HF activation_function (both tanh-GELU spellings load as ours)
_ACTIVATIONS = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu"}
_FROM_HF_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_exact", "relu": "relu"}


def gpt2_config(vocab_size: int, n_ctx: int, d_model: int, n_layers: int, n_heads: int, d_mlp: int | None = None,
                layer_norm_eps: float = 1e-5, tie_embeddings: bool = True, **overrides: Any) -> ModelConfig:
    """The ModelConfig that is exactly GPT-2 at the given sizes."""
    kwargs = dict(vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                  d_mlp=d_mlp, activation="gelu", pos=PosConfig(kind="learned"), norm="pre", norm_type="layernorm",
                  bias=True, tie_embeddings=tie_embeddings, layer_norm_eps=layer_norm_eps)
    kwargs.update(overrides)
    return ModelConfig(**kwargs)


# ---------------------------------------------------------------------- HF -> ours
def _config_from_hf(hf_cfg: Any) -> ModelConfig:
    act = getattr(hf_cfg, "activation_function", "gelu_new")
    if act not in _FROM_HF_ACTIVATIONS:
        raise no_archlab_equivalent(hf_cfg, "activation_function", act,
                                    f"ours are {sorted(_FROM_HF_ACTIVATIONS)}; gelu here is the tanh approximation")
    for flag, fine in (("scale_attn_by_inverse_layer_idx", False), ("reorder_and_upcast_attn", False),
                       ("scale_attn_weights", True), ("add_cross_attention", False)):
        if getattr(hf_cfg, flag, fine) != fine:
            raise no_archlab_equivalent(hf_cfg, flag, getattr(hf_cfg, flag), f"only {flag}={fine} converts")
    return gpt2_config(
        vocab_size=hf_cfg.vocab_size, n_ctx=hf_cfg.n_positions, d_model=hf_cfg.n_embd, n_layers=hf_cfg.n_layer,
        n_heads=hf_cfg.n_head, d_mlp=getattr(hf_cfg, "n_inner", None), layer_norm_eps=hf_cfg.layer_norm_epsilon,
        tie_embeddings=getattr(hf_cfg, "tie_word_embeddings", True), activation=_FROM_HF_ACTIVATIONS[act],
        dropout=0.0,
    )


def _strip(sd: dict[str, Tensor]) -> tuple[dict[str, Tensor], Tensor | None]:
    """Drop the `transformer.` prefix; return (body state dict, lm_head weight or None)."""
    body = {k.removeprefix("transformer."): v for k, v in sd.items() if k != "lm_head.weight"}
    return body, sd.get("lm_head.weight")


def _config_from_state_dict(body: dict[str, Tensor], lm_head: Tensor | None, n_heads: int | None) -> ModelConfig:
    vocab_size, d_model = body["wte.weight"].shape
    n_ctx = body["wpe.weight"].shape[0]
    n_layers = 1 + max(int(m.group(1)) for k in body if (m := re.match(r"^h\.(\d+)\.", k)))
    d_mlp = body["h.0.mlp.c_fc.weight"].shape[1]
    tied = lm_head is None or lm_head.data_ptr() == body["wte.weight"].data_ptr() or torch.equal(
        lm_head, body["wte.weight"])
    return gpt2_config(vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers,
                       n_heads=n_heads if n_heads is not None else d_model // 64, d_mlp=d_mlp, tie_embeddings=tied)


def from_hf_gpt2(model_or_state_dict: Any, n_heads: int | None = None) -> Transformer:
    """HF GPT2LMHeadModel / GPT2Model / their state dict -> our Transformer with identical outputs.

    A model's config is read from its `.config`; a bare state dict's shapes are inferred, but n_heads cannot
    be, so pass it (else d_model // 64, as in every released GPT-2 size).

    >>> ours = from_hf_gpt2(GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=4))).eval()
    """
    if hasattr(model_or_state_dict, "state_dict") and hasattr(model_or_state_dict, "config"):
        cfg = _config_from_hf(model_or_state_dict.config)
        body, lm_head = _strip(model_or_state_dict.state_dict())
    else:
        body, lm_head = _strip(dict(model_or_state_dict))
        cfg = _config_from_state_dict(body, lm_head, n_heads)
    ours: dict[str, Tensor] = {}
    for key, value in body.items():
        if key in _TOP_KEYS:
            ours[_TOP_KEYS[key]] = value
            continue
        m = re.match(r"^h\.(\d+)\.(.+)$", key)
        if m and m.group(2) in _BLOCK_KEYS:
            name, transpose = _BLOCK_KEYS[m.group(2)]
            ours[f"blocks.{m.group(1)}.{name}"] = value.t() if transpose else value
        elif not _IGNORED.match(key):
            raise ValueError(f"unexpected GPT-2 state dict key {key!r}")
    if not cfg.tie_embeddings:
        if lm_head is None:
            raise ValueError("untied GPT-2 config but no lm_head.weight in the state dict")
        ours["lm_head.weight"] = lm_head
    model = build_model(cfg).to(body["wte.weight"].dtype)
    load_exact(model, ours, "GPT-2", optional=("lm_head.weight",) if cfg.tie_embeddings else ())
    return model


# ---------------------------------------------------------------------- ours -> HF
def claims(model: object) -> bool:
    """True for the models this family converts: our decoder with pos.kind == POS_KIND."""
    return isinstance(model, Transformer) and model.cfg.pos.kind == POS_KIND


def problem(cfg: ModelConfig) -> ValueError | None:
    """The first knob of `cfg` (pos.kind=learned) that GPT-2 has no counterpart for, as a refusal; else None."""
    if cfg.norm != "pre":
        return no_hf_equivalent("model.norm", cfg.norm, "GPT-2 is pre-LN")
    if cfg.block != "sequential":
        return no_hf_equivalent("model.block", cfg.block, "GPT-2 blocks are sequential")
    if cfg.norm_type != "layernorm":
        return no_hf_equivalent("model.norm_type", cfg.norm_type, "GPT-2 uses LayerNorm")
    if cfg.activation not in _ACTIVATIONS:
        return no_hf_equivalent("model.activation", cfg.activation, f"GPT-2 takes {sorted(_ACTIVATIONS)}")
    if not cfg.bias:
        return no_hf_equivalent("model.bias", cfg.bias, "GPT-2 has biases in every Linear and LayerNorm")
    if cfg.n_kv_heads not in (None, cfg.n_heads):
        return no_hf_equivalent("model.n_kv_heads", cfg.n_kv_heads, "GPT-2 is multi-head; use pos.kind=rope for "
                                "Llama's grouped-query attention")
    if cfg.d_head * cfg.n_heads != cfg.d_model:
        return no_hf_equivalent("model.d_head", cfg.d_head, "GPT-2's head width is d_model // n_heads")
    if cfg.qk_norm is not None:
        return no_hf_equivalent("model.qk_norm", cfg.qk_norm, "GPT-2 has no QK-norm")
    if cfg.window is not None:
        return no_hf_equivalent("model.window", cfg.window, "GPT-2 attends to the whole causal prefix")
    return None


def hf_config(cfg: ModelConfig, **overrides: Any):
    """transformers.GPT2Config for `cfg` (bos / eos / pad token ids None unless given in `overrides`)."""
    from transformers import GPT2Config

    kwargs = dict(vocab_size=cfg.vocab_size, n_positions=cfg.n_ctx, n_embd=cfg.d_model, n_layer=cfg.n_layers,
                  n_head=cfg.n_heads, n_inner=cfg.d_mlp, activation_function=_ACTIVATIONS[cfg.activation],
                  resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout,  # GPT-2's places = ours
                  layer_norm_epsilon=cfg.layer_norm_eps, tie_word_embeddings=cfg.tie_embeddings,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    kwargs.update(overrides)
    return GPT2Config(**kwargs)


def to_hf(model: Transformer, **config_overrides: Any):
    """Our GPT-2-family Transformer -> transformers.GPT2LMHeadModel with equal logits (eval mode, our dtype, device)."""
    from transformers import GPT2LMHeadModel

    cfg = model.cfg
    if (err := problem(cfg)) is not None:
        raise err
    ours = model.state_dict()  # a tied lm_head.weight is listed too (the same tensor as wte.weight)
    used = {*_TOP_KEYS.values(), "lm_head.weight"}
    state = {f"transformer.{hf}": ours[o] for hf, o in _TOP_KEYS.items()}
    state["lm_head.weight"] = ours["lm_head.weight"]
    for i in range(cfg.n_layers):
        for hf, (o, transpose) in _BLOCK_KEYS.items():
            used.add(name := f"blocks.{i}.{o}")
            state[f"transformer.h.{i}.{hf}"] = ours[name].t() if transpose else ours[name]
    check_all_used(ours, used, "GPT-2")
    hf = GPT2LMHeadModel(hf_config(cfg, **config_overrides)).to(param_device(model), param_dtype(model))
    buffers = tuple(k for k in hf.state_dict() if _IGNORED.match(k.removeprefix("transformer.")))  # older HF
    load_exact(hf, state, "GPT-2", optional=buffers)
    return hf.eval()
