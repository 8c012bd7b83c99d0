"""archlab's model builder: a GPT-style decoder built from a plain ModelConfig dataclass, or an encoder-decoder
from an EncDecConfig (arch.encdec); torch only.

Layout: config.py (the dataclasses), build.py (build_model), model.py (Transformer), encdec.py (EncoderDecoder),
components/ (one concept per file: positional, norms, attention, mlp, block, kv_cache, masking, init),
hook_points.py + hooks.py (hook mechanism; run_with_hooks / run_with_cache / logit_lens), generate.py, fused_loss.py,
manual_attention.py, mup.py (μP: model/param=mup), accounting.py / info.py / presets.py (counts, `python -m arch.info`, shapes), kv_bytes.py
(KV-cache bytes per token), convert/ (HF).

    from arch import ModelConfig, PosConfig, build_model
    model = build_model(ModelConfig(vocab_size=512, n_ctx=128, d_model=128, n_layers=2, n_heads=4,
                                    pos=PosConfig(kind="rope")))
"""

from arch.accounting import count_params, flops_per_token, shape_for
from arch.build import build_model
from arch.config import EncDecConfig, ModelConfig, PosConfig, config_diff
from arch.encdec import EncoderDecoder
from arch.kv_bytes import kv_cache_bytes_per_token
from arch.model import Transformer

__all__ = ["EncDecConfig", "EncoderDecoder", "ModelConfig", "PosConfig", "Transformer", "build_model", "config_diff", "count_params",
           "flops_per_token", "kv_cache_bytes_per_token", "shape_for"]
