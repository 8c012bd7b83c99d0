"""Model presets: a name -> only the ModelConfig fields that differ from its defaults. The one source of truth.

`conf/model/<name>.yaml` holds exactly `PRESETS[name]` (a test composes `model=<name>` and compares it with
ModelConfig's defaults + PRESETS[name], and checks conf/model's files == PRESETS' keys); `python -m arch.info`
builds its table from the published ones. The run-time fields are not part of a preset: `vocab_size` comes from
the tokenizer and `n_ctx` from `train.n_ctx` (PUBLISHED_N_CTX holds the published context lengths for arch.info).
The GPT shapes are the published ones (GPT-2: Radford et al. 2019 table 2, d_head 64; GPT-3: Brown et al. 2020
table 2.1), with ModelConfig's defaults = GPT-2's architecture (learned positions, pre-LN, GELU, biases, tied
embeddings).
ENCDEC_PRESETS are the encoder-decoder shapes (EncDecConfig fields that differ from its defaults; no conf/model
file, the trainer is decoder-only for now): `transformer-base` / `transformer-big` of Vaswani et al. 2017
table 3, `t5-small` / `t5-base` (T5 v1.0) and `bart-base` / `bart-large` (erf GELU), built with
`encdec_preset_config(name, vocab_size=..., n_ctx=...)`.
Not handled: presets that change the architecture knobs that are config groups of their own (model/norm,
model/norm_type, model/activation, model/attention, model/pos): a test keeps those out of PRESETS, so the group
choice on the command line is never overridden by a preset.

    >>> preset_config("tiny", vocab_size=512, n_ctx=64).d_model
    64
"""

from __future__ import annotations

from typing import Any

from arch.config import EncDecConfig, ModelConfig

PRESETS: dict[str, dict[str, Any]] = {
    # laptop / CI sizes
    "tiny": {"d_model": 64, "n_layers": 2, "n_heads": 4},  # CPU smoke tests and the demo
    "small": {"d_model": 128, "n_layers": 4, "n_heads": 4},  # CPU comparisons
    # depth vs width at ~0.8M non-embedding parameters (12 * n_layers * d_model^2)
    "iso800k_l1": {"d_model": 256, "n_layers": 1, "n_heads": 8},
    "iso800k_l2": {"d_model": 180, "n_layers": 2, "n_heads": 3},
    "iso800k_l4": {"d_model": 128, "n_layers": 4, "n_heads": 4},
    "iso800k_l8": {"d_model": 90, "n_layers": 8, "n_heads": 3},
    "iso800k_l16": {"d_model": 64, "n_layers": 16, "n_heads": 2},
    # published shapes
    "gpt2-small": {"d_model": 768, "n_layers": 12, "n_heads": 12},  # 124,439,808 params (HF's count)
    "gpt2-medium": {"d_model": 1024, "n_layers": 24, "n_heads": 16},
    "gpt2-large": {"d_model": 1280, "n_layers": 36, "n_heads": 20},
    "gpt2-xl": {"d_model": 1600, "n_layers": 48, "n_heads": 25},
    "gpt3-175b": {"d_model": 12288, "n_layers": 96, "n_heads": 96},  # d_head 128
}

# The published models' context lengths and vocabulary (arch.info's table; a run takes both from its config).
PUBLISHED_N_CTX = {"gpt2-small": 1024, "gpt2-medium": 1024, "gpt2-large": 1024, "gpt2-xl": 1024, "gpt3-175b": 2048}
GPT2_VOCAB = 50257


def preset_config(name: str, *, vocab_size: int, n_ctx: int, **overrides: Any) -> ModelConfig:
    """ModelConfig(defaults + PRESETS[name] + overrides); an unknown name lists the presets."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose from {', '.join(PRESETS)}")
    return ModelConfig(vocab_size=vocab_size, n_ctx=n_ctx, **{**PRESETS[name], **overrides})


# Vaswani et al. 2017 (https://arxiv.org/abs/1706.03762), table 3: N = 6 + 6 layers, post-LN, ReLU, sinusoidal
# positions at amplitude 1 added to token embeddings scaled by sqrt(d_model) (section 3.4, 3.5), the source,
# target and output matrices shared (section 3.4; tie_embeddings="all" is the default), P_drop. init="xavier"
# (embeddings N(0, 1/d_model), so scaled embeddings have unit variance) follows the tensor2tensor / fairseq code.
ENCDEC_PRESETS: dict[str, dict[str, Any]] = {
    "transformer-base": {  # 63,082,496 params at vocab 37000 (paper: 65M; see docs/arch.md)
        "d_model": 512, "n_encoder_layers": 6, "n_decoder_layers": 6, "n_heads": 8, "d_mlp": 2048,
        "activation": "relu", "norm": "post", "pos": {"kind": "sinusoidal", "scale": 1.0},
        "scale_embeddings": True, "init": "xavier", "dropout": 0.1,
    },
    "transformer-big": {  # 214,245,376 params at vocab 37000 (paper: 213M)
        "d_model": 1024, "n_encoder_layers": 6, "n_decoder_layers": 6, "n_heads": 16, "d_mlp": 4096,
        "activation": "relu", "norm": "post", "pos": {"kind": "sinusoidal", "scale": 1.0},
        "scale_embeddings": True, "init": "xavier", "dropout": 0.3,
    },
    # T5 v1.0 (Raffel et al. 2020, https://arxiv.org/abs/1910.10683): pre-RMSNorm without biases, ReLU, relative
    # buckets (32, up to 128), all three matrices tied with the decoder output x d_model**-0.5; d_kv = 64 =
    # d_model / n_heads. What arch.convert.from_hf gives for HF's t5-small / t5-base configs (but dropout).
    "t5-small": {  # 60,506,624 params at vocab 32128 (= HF's t5-small count)
        "d_model": 512, "n_encoder_layers": 6, "n_decoder_layers": 6, "n_heads": 8, "d_mlp": 2048,
        "activation": "relu", "norm": "pre", "norm_type": "rmsnorm", "bias": False,
        "pos": {"kind": "relative", "num_buckets": 32, "max_distance": 128}, "scale_decoder_output": True,
        "layer_norm_eps": 1e-6, "dropout": 0.1,
    },
    "t5-base": {  # 222,903,552 params at vocab 32128 (= HF's t5-base count)
        "d_model": 768, "n_encoder_layers": 12, "n_decoder_layers": 12, "n_heads": 12, "d_mlp": 3072,
        "activation": "relu", "norm": "pre", "norm_type": "rmsnorm", "bias": False,
        "pos": {"kind": "relative", "num_buckets": 32, "max_distance": 128}, "scale_decoder_output": True,
        "layer_norm_eps": 1e-6, "dropout": 0.1,
    },
    # BART (Lewis et al. 2020, https://arxiv.org/abs/1910.13461): post-LN with biases, learned positions (n_ctx
    # 1024 in the release), a LayerNorm on the embeddings of both stacks, a logits bias, tied matrices, erf GELU.
    "bart-base": {  # 139,467,609 params at vocab 50265, n_ctx 1024; HF counts 139,420,416: + 2 x 2 never-read
        # position rows x 768, - our logits bias (50265; an HF buffer)
        "d_model": 768, "n_encoder_layers": 6, "n_decoder_layers": 6, "n_heads": 12, "d_mlp": 3072,
        "activation": "gelu_exact", "norm": "post", "pos": {"kind": "learned"}, "embed_norm": True, "logits_bias": True,
        "dropout": 0.1,
    },
    "bart-large": {  # 406,337,625 params at vocab 50265, n_ctx 1024 (HF: 406,291,456, the same two differences)
        "d_model": 1024, "n_encoder_layers": 12, "n_decoder_layers": 12, "n_heads": 16, "d_mlp": 4096,
        "activation": "gelu_exact", "norm": "post", "pos": {"kind": "learned"}, "embed_norm": True, "logits_bias": True,
        "dropout": 0.1,
    },
}
TRANSFORMER_VOCAB = 37000  # "a shared source-target vocabulary of about 37000 tokens" (WMT 2014 En-De, section 5.1)


def encdec_preset_config(name: str, *, vocab_size: int, n_ctx: int, **overrides: Any) -> EncDecConfig:
    """EncDecConfig(defaults + ENCDEC_PRESETS[name] + overrides); an unknown name lists the presets.

    >>> encdec_preset_config("transformer-base", vocab_size=TRANSFORMER_VOCAB, n_ctx=256).d_model
    512
    """
    if name not in ENCDEC_PRESETS:
        raise ValueError(f"unknown encoder-decoder preset {name!r}; choose from {', '.join(ENCDEC_PRESETS)}")
    return EncDecConfig(vocab_size=vocab_size, n_ctx=n_ctx, **{**ENCDEC_PRESETS[name], **overrides})
