"""BART from Hugging Face: `BartForConditionalGeneration` -> our EncoderDecoder (arch.encdec) with equal logits.

Our BART is `norm=post, norm_type=layernorm, bias=true, pos=learned`, `embed_norm=true` (HF's
`layernorm_embedding` in both stacks -> `{encoder,decoder}.ln_emb`), `logits_bias=true` (`final_logits_bias` ->
`lm_head.bias`), `scale_embeddings` = `scale_embedding`, `d_mlp` = the ffn dim, uneven depths, layer_norm_eps
1e-5 (torch's LayerNorm default, which BART uses), no dropout (HF's dropout / attention_dropout /
activation_dropout / layerdrop are training-only; ours would be one `dropout`).
* Positions: BART's table has max_position_embeddings + 2 rows and reads row p + 2 for position p (a fairseq
  leftover); rows 0 and 1 are never read, so `pos.wpe` = rows 2.. and n_ctx = max_position_embeddings.
* Ties come from the tensors (which of the two embed_tokens and lm_head share storage): `all` by default;
  transformers 5 unties all three under tie_word_embeddings=False (`none`; `shared` is then read by nothing).
* Activation: gelu_new / gelu_pytorch_tanh -> gelu (the tanh approximation), BART's default `gelu` (exact erf)
  -> gelu_exact, relu -> relu.
* Training differences, not forward ones: HF's final_logits_bias is a buffer (never trained), ours a parameter;
  HF's embeddings keep a zero gradient at padding_idx (pad_token_id), ours do not.
* Heads and ffn widths must be equal in the two stacks (one n_heads / d_mlp here); `src_pad_id` stays None
  (HF's forward does not mask pads by itself either): pass `src_mask=attention_mask.bool()`.
Weights: `self_attn.{q,k,v}_proj` -> `attn.c_attn` rows, `out_proj` -> `attn.c_proj`, `encoder_attn.q_proj` ->
`cross_attn.c_q`, `k_proj | v_proj` -> `cross_attn.c_kv`, `out_proj` -> `cross_attn.c_proj`,
`self_attn_layer_norm / encoder_attn_layer_norm / final_layer_norm` -> `ln_1 / ln_cross / ln_2`, `fc1 / fc2` ->
`mlp.c_fc / c_proj`. Not handled: ours -> HF, mBART (pre-LN + final norms).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from arch.config import EncDecConfig, PosConfig
from arch.convert.common import build_loaded_encdec, check_all_used, encdec_tie, no_archlab_equivalent
from arch.encdec import EncoderDecoder

POS_OFFSET = 2  # BartLearnedPositionalEmbedding.offset: position p reads row p + 2
_ACTIVATIONS = {"gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu": "gelu_exact", "relu": "relu"}


def config_from_hf(c: Any, tie_embeddings: str) -> EncDecConfig:
    """Our EncDecConfig for a transformers.BartConfig (tie_embeddings read from the model's tensors)."""
    act = c.activation_function
    if act not in _ACTIVATIONS:
        why = "no such MLP here"
        raise no_archlab_equivalent(c, "activation_function", act, f"{why}; convertible: {', '.join(_ACTIVATIONS)}")
    for ours, theirs in (("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim",
                                                                                    "decoder_ffn_dim")):
        if getattr(c, ours) != getattr(c, theirs):
            raise no_archlab_equivalent(c, theirs, getattr(c, theirs), f"ours has one value for both stacks; "
                                        f"{ours}={getattr(c, ours)}")
    return EncDecConfig(
        vocab_size=c.vocab_size, n_ctx=c.max_position_embeddings, d_model=c.d_model,
        n_encoder_layers=c.encoder_layers, n_decoder_layers=c.decoder_layers, n_heads=c.encoder_attention_heads,
        d_mlp=c.encoder_ffn_dim, activation=_ACTIVATIONS[act], pos=PosConfig(kind="learned"), norm="post",
        norm_type="layernorm", bias=True, dropout=0.0, tie_embeddings=tie_embeddings,
        scale_embeddings=bool(c.scale_embedding), embed_norm=True, logits_bias=True, layer_norm_eps=1e-5,
    )


def from_hf(hf_model: Any) -> EncoderDecoder:
    """HF BartForConditionalGeneration -> our EncoderDecoder with identical logits (fp32: within 1e-5).

    >>> ours = from_hf(BartForConditionalGeneration(BartConfig(d_model=64, encoder_layers=2, decoder_layers=3,
    ...     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96,
    ...     activation_function="gelu_new"))).eval()
    """
    c, sd = hf_model.config, hf_model.state_dict()
    used: set[str] = {"model.shared.weight"}  # an alias of the embed_tokens
    tie = encdec_tie(c, sd["model.encoder.embed_tokens.weight"], sd["model.decoder.embed_tokens.weight"],
                     sd["lm_head.weight"])
    cfg = config_from_hf(c, tie)

    def take(key: str) -> Tensor:
        used.add(key)
        return sd[key]

    def linear(ours: dict[str, Tensor], me: str, *hf: str) -> None:  # HF Linears stacked by rows -> one of ours
        for kind in ("weight", "bias"):
            ours[f"{me}.{kind}"] = torch.cat([take(f"{h}.{kind}") for h in hf])

    ours = {"encoder.wte.weight": take("model.encoder.embed_tokens.weight"),
            "decoder.wte.weight": take("model.decoder.embed_tokens.weight"),
            "lm_head.weight": take("lm_head.weight"), "lm_head.bias": take("final_logits_bias")[0]}  # (1, V) -> (V,)
    for stack, n_layers in (("encoder", cfg.n_encoder_layers), ("decoder", cfg.n_decoder_layers)):
        hf_stack = f"model.{stack}"
        ours[f"{stack}.pos.wpe.weight"] = take(f"{hf_stack}.embed_positions.weight")[POS_OFFSET:]  # (n_ctx, C)
        linear(ours, f"{stack}.ln_emb", f"{hf_stack}.layernorm_embedding")
        for i in range(n_layers):
            hf, me = f"{hf_stack}.layers.{i}", f"{stack}.blocks.{i}"
            linear(ours, f"{me}.attn.c_attn", *(f"{hf}.self_attn.{p}_proj" for p in "qkv"))
            linear(ours, f"{me}.attn.c_proj", f"{hf}.self_attn.out_proj")
            linear(ours, f"{me}.ln_1", f"{hf}.self_attn_layer_norm")
            if stack == "decoder":
                linear(ours, f"{me}.cross_attn.c_q", f"{hf}.encoder_attn.q_proj")
                linear(ours, f"{me}.cross_attn.c_kv", f"{hf}.encoder_attn.k_proj", f"{hf}.encoder_attn.v_proj")
                linear(ours, f"{me}.cross_attn.c_proj", f"{hf}.encoder_attn.out_proj")
                linear(ours, f"{me}.ln_cross", f"{hf}.encoder_attn_layer_norm")
            linear(ours, f"{me}.mlp.c_fc", f"{hf}.fc1")
            linear(ours, f"{me}.mlp.c_proj", f"{hf}.fc2")
            linear(ours, f"{me}.ln_2", f"{hf}.final_layer_norm")
    check_all_used(sd, used, "BART")
    return build_loaded_encdec(cfg, ours, "BART")
