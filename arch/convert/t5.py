"""T5 from Hugging Face: `T5ForConditionalGeneration` -> our EncoderDecoder (arch.encdec) with equal logits.

Our T5 is `norm=pre, norm_type=rmsnorm, bias=false, pos=relative` (each stack's bucket table lives in HF's
block 0 and is shared by its layers; the encoder's buckets are bidirectional), `d_head` = `d_kv`, `d_mlp` =
`d_ff`, uneven depths (`num_decoder_layers`), `layer_norm_eps` = `layer_norm_epsilon`, no dropout.
* Attention scale: T5 does not divide q.k by sqrt(d_kv) (Mesh TensorFlow folds it into the init); our kernels
  always do, so every query matrix (self- and cross-attention) is multiplied by sqrt(d_kv) on the way in.
* Output: `scale_decoder_output` = HF's `scale_decoder_outputs` (T5 v1.0: decoder output x d_model**-0.5
  before lm_head; transformers 5 derives it from `tie_word_embeddings` as passed, 4 uses that flag itself).
* Ties come from the tensors, not the config: transformers 5 ties lm_head to `shared` always (a v1.1 config's
  tie_word_embeddings=False survives only as scale_decoder_outputs=False), so a T5 built there comes back
  `all`; a separate head (transformers 4's v1.1, or one assigned by hand) gives `inputs`.
* MLP (`feed_forward_proj`): relu -> relu, gated-silu -> swiglu (`c_fc` = wi_0 | wi_1 rows: gate | up),
  gelu_new / gelu_pytorch_tanh -> gelu (ours is the tanh form). Refused with one line: gated-gelu (T5 v1.1,
  flan-T5: a GELU-gated MLP, which we do not have), erf gelu and the rest.
* `src_pad_id` stays None: HF's forward does not mask pads by itself either, so the same call gives the same
  logits; pass `src_mask=attention_mask.bool()` (or set src_pad_id) for padded batches.
Weights: shared / embed_tokens -> `{encoder,decoder}.wte`, `layer.0.SelfAttention.{q,k,v}` -> `attn.c_attn`
rows (q x sqrt(d_kv)), `.o` -> `attn.c_proj`, `layer.1.EncDecAttention.q` -> `cross_attn.c_q` (x sqrt(d_kv)),
`k | v` -> `cross_attn.c_kv`, `.o` -> `cross_attn.c_proj`, `layer.{0, 1, last}.layer_norm` -> `ln_1, ln_cross,
ln_2`, `DenseReluDense.wi (wi_0 | wi_1) / wo` -> `mlp.c_fc / c_proj`, `final_layer_norm` -> `ln_f`.
Not handled: ours -> HF (`to_hf` refuses encoder-decoders), gated-gelu, MT5 / UMT5 (per-layer bias tables) and
other T5 classes (T5Model, T5EncoderModel) as sources.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from arch.config import EncDecConfig, PosConfig
from arch.convert.common import build_loaded_encdec, check_all_used, encdec_tie, no_archlab_equivalent
from arch.encdec import EncoderDecoder

N_CTX = 512  # relative positions run at any length: n_ctx only sizes tables that regrow (T5 trained at 512)

# (is_gated_act, dense_act_fn) -> our activation
_ACTIVATIONS = {(False, "relu"): "relu", (True, "silu"): "swiglu", (True, "swish"): "swiglu",
                (False, "gelu_new"): "gelu", (False, "gelu_pytorch_tanh"): "gelu", (False, "gelu"): "gelu_exact"}
_CONVERTIBLE = "relu, gated-silu, gelu_new, gelu_pytorch_tanh, gelu"
# HF keys with no counterpart that a T5 checkpoint may hold and no forward reads
_IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)


def _activation(c: Any) -> str:
    gated, act = bool(getattr(c, "is_gated_act", False)), getattr(c, "dense_act_fn", "relu")
    if (gated, act) in _ACTIVATIONS:
        return _ACTIVATIONS[gated, act]
    proj = getattr(c, "feed_forward_proj", act)
    why = ("a GELU-gated MLP (GEGLU); ours gates with silu only (swiglu)" if gated
           else "ours is the tanh approximation (gelu_new)" if act == "gelu" else "no such MLP here")
    raise no_archlab_equivalent(c, "feed_forward_proj", proj, f"{why}; convertible: {_CONVERTIBLE}")


def _scale_decoder_outputs(c: Any) -> bool:
    scale = getattr(c, "scale_decoder_outputs", None)  # transformers >= 5
    return bool(c.tie_word_embeddings if scale is None else scale)


def config_from_hf(c: Any, tie_embeddings: str) -> EncDecConfig:
    """Our EncDecConfig for a transformers.T5Config (tie_embeddings read from the model's tensors)."""
    return EncDecConfig(
        vocab_size=c.vocab_size, n_ctx=N_CTX, d_model=c.d_model, n_encoder_layers=c.num_layers,
        n_decoder_layers=c.num_decoder_layers or c.num_layers, n_heads=c.num_heads, d_head=c.d_kv, d_mlp=c.d_ff,
        activation=_activation(c), pos=PosConfig(kind="relative", num_buckets=c.relative_attention_num_buckets,
                                                 max_distance=c.relative_attention_max_distance),
        norm="pre", norm_type="rmsnorm", bias=False, dropout=0.0, tie_embeddings=tie_embeddings,
        scale_decoder_output=_scale_decoder_outputs(c), layer_norm_eps=c.layer_norm_epsilon,
    )


def from_hf(hf_model: Any) -> EncoderDecoder:
    """HF T5ForConditionalGeneration -> our EncoderDecoder with identical logits (fp32: within 1e-5).

    >>> ours = from_hf(T5ForConditionalGeneration(T5Config(d_model=64, d_kv=16, d_ff=96, num_layers=2,
    ...                                                    num_decoder_layers=3, num_heads=4))).eval()
    """
    c, sd = hf_model.config, hf_model.state_dict()
    used: set[str] = {k for k in _IGNORED if k in sd} | {"shared.weight"}  # shared: an alias of embed_tokens
    tie = encdec_tie(c, sd["encoder.embed_tokens.weight"], sd["decoder.embed_tokens.weight"], sd["lm_head.weight"])
    cfg = config_from_hf(c, tie)
    q_scale = math.sqrt(cfg.d_head)  # T5 scores are q.k; ours are q.k / sqrt(D): scale q up to cancel it

    def take(key: str) -> Tensor:
        used.add(key)
        return sd[key]

    def attn(prefix: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return (take(f"{prefix}.q.weight") * q_scale, take(f"{prefix}.k.weight"), take(f"{prefix}.v.weight"),
                take(f"{prefix}.o.weight"))

    ours = {"encoder.wte.weight": take("encoder.embed_tokens.weight"),
            "decoder.wte.weight": take("decoder.embed_tokens.weight"), "lm_head.weight": take("lm_head.weight")}
    for stack, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        ours[f"{stack}.pos.rel_bias.weight"] = take(f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias"
                                                    f".weight")  # (num_buckets, H), block 0's, used by all
        ours[f"{stack}.ln_f.weight"] = take(f"{stack}.final_layer_norm.weight")
        for i in range(n_layers):
            hf, me = f"{stack}.block.{i}.layer", f"{stack}.blocks.{i}"
            q, k, v, o = attn(f"{hf}.0.SelfAttention")
            ours[f"{me}.ln_1.weight"] = take(f"{hf}.0.layer_norm.weight")
            ours[f"{me}.attn.c_attn.weight"] = torch.cat([q, k, v])  # (3·H·D, C)
            ours[f"{me}.attn.c_proj.weight"] = o
            mlp = 1
            if stack == "decoder":
                q, k, v, o = attn(f"{hf}.1.EncDecAttention")
                ours[f"{me}.ln_cross.weight"] = take(f"{hf}.1.layer_norm.weight")
                ours[f"{me}.cross_attn.c_q.weight"] = q
                ours[f"{me}.cross_attn.c_kv.weight"] = torch.cat([k, v])  # (2·H·D, C)
                ours[f"{me}.cross_attn.c_proj.weight"] = o
                mlp = 2
            ff = f"{hf}.{mlp}.DenseReluDense"
            ours[f"{me}.ln_2.weight"] = take(f"{hf}.{mlp}.layer_norm.weight")
            ours[f"{me}.mlp.c_fc.weight"] = (torch.cat([take(f"{ff}.wi_0.weight"), take(f"{ff}.wi_1.weight")])
                                             if cfg.activation == "swiglu" else take(f"{ff}.wi.weight"))
            ours[f"{me}.mlp.c_proj.weight"] = take(f"{ff}.wo.weight")
    check_all_used(sd, used, "T5")
    return build_loaded_encdec(cfg, ours, "T5")
