"""Load Hugging Face GPT-2 weights into our Transformer (the exact-GPT-2 configuration).

`from_hf_gpt2(model_or_state_dict)` accepts a `transformers.GPT2LMHeadModel` / `GPT2Model` (the ModelConfig is
read from its `.config`) or a bare state dict (shapes are inferred; n_heads cannot be, so pass it, else
d_model // 64 as in every released GPT-2 size). HF's Conv1D stores weights as (in, out), the transpose of
nn.Linear's (out, in). transformers itself is never imported here. Not handled: other HF architectures,
GPT-2 variants with scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn, converting back to HF.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import Tensor

from arch.config import ModelConfig, PosConfig
from arch.model import Transformer, build_model

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


def gpt2_config(vocab_size: int, n_ctx: int, d_model: int, n_layers: int, n_heads: int, d_mlp: int | None = None,
                layer_norm_eps: float = 1e-5, tie_embeddings: bool = True, **overrides: Any) -> ModelConfig:
    """The ModelConfig that is exactly GPT-2 at the given sizes."""
    kwargs = dict(vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                  d_mlp=d_mlp, activation="gelu", pos=PosConfig(kind="learned"), norm="pre", norm_type="layernorm",
                  bias=True, tie_embeddings=tie_embeddings, layer_norm_eps=layer_norm_eps)
    kwargs.update(overrides)
    return ModelConfig(**kwargs)


def _config_from_hf(hf_cfg: Any) -> ModelConfig:
    act = getattr(hf_cfg, "activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(f"only GPT-2's tanh GELU is supported; this config uses activation_function={act!r}")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if getattr(hf_cfg, flag, False):
            raise ValueError(f"GPT-2 option {flag}=True is not supported")
    return gpt2_config(
        vocab_size=hf_cfg.vocab_size, n_ctx=hf_cfg.n_positions, d_model=hf_cfg.n_embd, n_layers=hf_cfg.n_layer,
        n_heads=hf_cfg.n_head, d_mlp=getattr(hf_cfg, "n_inner", None), layer_norm_eps=hf_cfg.layer_norm_epsilon,
        tie_embeddings=getattr(hf_cfg, "tie_word_embeddings", True), dropout=0.0,
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
    model = build_model(cfg)
    dtype = body["wte.weight"].dtype
    model.to(dtype)
    missing, unexpected = model.load_state_dict(ours, strict=False)
    missing = [k for k in missing if not (cfg.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"GPT-2 conversion mismatch: missing {missing}, unexpected {unexpected}")
    return model
