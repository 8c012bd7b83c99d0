"""The parts a model is built from, one concept per module (as TransformerLens's transformer_lens/components/).

    positional.py  position encodings behind one interface (embed / attn_bias / rotate); POSITIONAL
    norms.py       LayerNorm, RMSNorm; NORMS, build_norm (also the per-head QK-norm)
    attention.py   self- and cross-attention, the attention kernels (ATTENTION) and Step, a forward pass's state
    mlp.py         the feed-forward sublayer per activation; MLPS
    block.py       the blocks per kind and norm placement (pre / post / sandwich, sequential / parallel, cross)
    kv_cache.py    KVCache, EncDecKVCache for incremental decoding
    masking.py     the causal / sliding-window mask (CausalMasking) and the source padding bias
    init.py        the weight init schemes; INITS

Import from the module that defines a name (`from arch.components.block import BLOCKS`); this package re-exports
nothing. The models that put the parts together are arch.model (Transformer) and arch.encdec (EncoderDecoder).
"""
