"""KV-cache memory in closed form: the bytes that incremental decoding caches per token.

    kv_cache_bytes_per_token(cfg)                        # 2 · n_layers · n_kv_heads · d_head · 4 (fp32)
    kv_cache_bytes_per_token(cfg, dtype=torch.bfloat16)  # the same at 2 bytes an element

Per token and per sequence, each layer caches one key and one value vector per key/value head (arch.components
.kv_cache.KVCache holds k, v of shape (B, Hkv, T, D) per layer), so the cache grows by
2 (K and V) × n_layers × n_kv_heads × d_head × element size bytes per token and batch row. Grouped-query attention
divides it by n_heads / n_kv_heads (MQA, n_kv_heads = 1: by n_heads). A sliding window does not shrink it here: the
cache keeps every position and the mask hides the old ones (no rolling buffer).
Encoder-decoder (EncDecConfig): the decoder's self-attention only, per target token (n_decoder_layers layers; the
encoder caches nothing). The cross-attention keys / values are per source token, computed once per source:
another 2 × n_decoder_layers × n_kv_heads × d_head × element size per source token, not in this number.
Not counted: the cache's transient copies (each step's torch.cat), activations, the weights.
"""

from __future__ import annotations

import torch

from arch.config import EncDecConfig, ModelConfig


def kv_cache_bytes_per_token(cfg: ModelConfig | EncDecConfig, dtype: torch.dtype = torch.float32) -> int:
    """Bytes the KV cache holds per token per sequence: 2 · layers · n_kv_heads · d_head · dtype.itemsize
    (an EncDecConfig: the decoder's self-attention, per target token; see the module docstring).

    >>> kv_cache_bytes_per_token(ModelConfig(vocab_size=8, n_ctx=8, d_model=64, n_layers=2, n_heads=4, n_kv_heads=1))
    256
    """
    n_layers = cfg.n_decoder_layers if isinstance(cfg, EncDecConfig) else cfg.n_layers
    n_kv_heads = cfg.n_kv_heads or cfg.n_heads
    return 2 * n_layers * n_kv_heads * cfg.d_head * dtype.itemsize
