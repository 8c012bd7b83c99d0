"""archlab's model builder: a GPT-style decoder built from a plain ModelConfig dataclass, or an encoder-decoder
from an EncDecConfig (arch.encdec); torch only.

    from arch import ModelConfig, PosConfig, build_model
    model = build_model(ModelConfig(vocab_size=512, n_ctx=128, d_model=128, n_layers=2, n_heads=4,
                                    pos=PosConfig(kind="rope")))
"""

from arch.accounting import count_params, flops_per_token, shape_for
from arch.config import EncDecConfig, ModelConfig, PosConfig
from arch.encdec import EncoderDecoder
from arch.model import Transformer, build_model

__all__ = ["EncDecConfig", "EncoderDecoder", "ModelConfig", "PosConfig", "Transformer", "build_model", "count_params",
           "flops_per_token", "shape_for"]
