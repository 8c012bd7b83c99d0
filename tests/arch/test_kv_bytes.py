"""arch.kv_cache_bytes_per_token: the closed form against the bytes the model's own KV cache holds after it
generated N tokens (model.generate(use_cache=True), arch/components/kv_cache.py), for MHA, GQA and MQA, in fp32
and bf16, and for the encoder-decoder's decoder self-attention."""

from __future__ import annotations

import pytest
import torch

from arch import EncDecConfig, ModelConfig, PosConfig, build_model, kv_cache_bytes_per_token

B, PROMPT, NEW = 3, 5, 7


def cache_of_generation(model, generate_kwargs: dict):
    """The cache model.generate builds for itself (its new_kv_cache, wrapped to keep a reference)."""
    made = []
    new_kv_cache = model.new_kv_cache

    def keep(*args, **kwargs):
        made.append(new_kv_cache(*args, **kwargs))
        return made[-1]

    model.new_kv_cache = keep
    model.generate(**generate_kwargs, max_new_tokens=NEW, use_cache=True)
    assert len(made) == 1
    return made[0]


def held_bytes(tensors) -> int:
    """The bytes of the cached tensors; each owns exactly its storage (no view into a larger buffer)."""
    total = 0
    for t in tensors:
        assert t.untyped_storage().nbytes() == t.nbytes, "the cache holds more memory than its tensor shows"
        total += t.nbytes
    return total


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1], ids=["mha", "gqa2", "mqa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.no_grad()
def test_decoder_cache_bytes_per_token(n_kv_heads, dtype):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=31, n_ctx=32, d_model=48, n_layers=3, n_heads=4, d_head=8, n_kv_heads=n_kv_heads,
                      pos=PosConfig(kind="rope"))
    model = build_model(cfg).eval().to(dtype)
    cache = cache_of_generation(model, dict(ids=torch.randint(0, 31, (B, PROMPT))))
    positions = PROMPT + NEW - 1  # the last generated token is never fed back
    assert cache.length == positions
    assert all(k.shape == (B, n_kv_heads or 4, positions, 8) and k.dtype == dtype for k in cache.k)
    measured = held_bytes([*cache.k, *cache.v]) / (B * positions)
    hkv = n_kv_heads or 4
    assert kv_cache_bytes_per_token(cfg, dtype=dtype) == measured == 2 * 3 * hkv * 8 * (4 if dtype == torch.float32 else 2)


def test_mqa_holds_a_quarter_of_mha_at_four_heads():
    cfg = dict(vocab_size=31, n_ctx=32, d_model=64, n_layers=2, n_heads=4)
    mha, mqa = (kv_cache_bytes_per_token(ModelConfig(**cfg, n_kv_heads=h)) for h in (None, 1))
    assert mha == 4 * mqa == 2 * 2 * 64 * 4


@pytest.mark.parametrize("n_kv_heads", [None, 1])
@torch.no_grad()
def test_encoder_decoder_counts_the_decoder_self_attention(n_kv_heads):
    """Per target token: the decoder self-attention cache; the cross-attention keys / values are per source token
    and not in the number (here: a different encoder depth and source length change nothing)."""
    torch.manual_seed(0)
    cfg = EncDecConfig(vocab_size=23, n_ctx=32, d_model=32, n_encoder_layers=3, n_decoder_layers=2, n_heads=4,
                       n_kv_heads=n_kv_heads)
    model = build_model(cfg).eval()
    src = torch.randint(0, 23, (B, 9))
    cache = cache_of_generation(model, dict(tgt=torch.zeros(B, 1, dtype=torch.long), src=src))
    positions = 1 + NEW - 1
    assert cache.length == positions
    measured = held_bytes([*cache.k, *cache.v]) / (B * positions)
    assert kv_cache_bytes_per_token(cfg) == measured == 2 * 2 * (n_kv_heads or 4) * 8 * 4
    assert all(k.shape[2] == 9 for k in cache.cross_k)  # the cross cache grows with the source, not the target
