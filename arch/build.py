"""build_model(cfg): the one entry point from a config to a model (arch.build_model).

    build_model(ModelConfig(...))  -> arch.model.Transformer         (decoder-only)
    build_model(EncDecConfig(...)) -> arch.encdec.EncoderDecoder     (encoder-decoder)

The type of the config picks the model; everything else (registries, init, ties) is the model's own business.
Not handled: building from a dict or a DictConfig (ModelConfig.from_dict / EncDecConfig.from_dict first).
"""

from __future__ import annotations

from arch.config import EncDecConfig, ModelConfig
from arch.encdec import EncoderDecoder
from arch.model import Transformer


def build_model(cfg: ModelConfig | EncDecConfig) -> Transformer | EncoderDecoder:
    """build_model(ModelConfig(vocab_size=256, n_ctx=64, d_model=64, n_layers=2, n_heads=4)) -> Transformer;
    an EncDecConfig gives an arch.encdec.EncoderDecoder."""
    if isinstance(cfg, EncDecConfig):
        return EncoderDecoder(cfg)
    return Transformer(cfg)
