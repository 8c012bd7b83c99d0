"""The encoder-decoder transformer (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762), built from EncDecConfig.

    src (B, S) -> Encoder: wte (x sqrt(C)) + pos.embed -> ln_emb -> dropout -> blocks (self-attention over
                           every source position, MLP) -> ln_f -> memory (B, S, C)
    tgt (B, T) -> Decoder: wte (x sqrt(C)) + pos.embed -> ln_emb -> dropout -> blocks (causal self-attention,
                           cross-attention over memory, MLP) -> ln_f (x C**-0.5) -> lm_head (+ bias) -> logits (B, T, V)

Everything is the decoder-only model's parts (arch.components): each stack is built from a ModelConfig view of the
EncDecConfig (`cfg.encoder_config()`, `cfg.decoder_config()`), the encoder's blocks are block.BLOCKS run with
`Step(causal=False)`, the decoder's are CROSS_BLOCKS, whose cross-attention is attention.CrossAttention; the
decoder's causal mask and the source padding bias are masking's, the init schemes init's.
Each stack has its own position encoding (the encoder's relative buckets are bidirectional, its ALiBi symmetric;
BIDIRECTIONAL_POSITIONAL) and its own relative-bias table. The cross-attention has no position encoding.
Padding: `src_mask` (B, S) bool, True at real tokens (or derived from cfg.src_pad_id), masks padded source keys
in encoder self-attention and in cross-attention (masking.padding_bias); pads must be on the right (appending
pads changes nothing).
Target padding needs no mask (the decoder is causal): give padded labels -100 and the loss ignores them.
The HF-parity knobs (arch.convert.from_hf): `embed_norm` is the `ln_emb` slot (BART's layernorm_embedding; an
Identity when off), `scale_decoder_output` the x C**-0.5 (T5 v1.0), `logits_bias` lm_head's bias (BART's
final_logits_bias).
Parameter names: `encoder.{wte, pos.wpe | pos.rel_bias, ln_emb, blocks.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2,
mlp.c_fc, mlp.c_proj}, ln_f}`, `decoder.{same, blocks.{i}.{ln_cross, cross_attn.c_q, cross_attn.c_kv,
cross_attn.c_proj}}`, sandwich adds `ln_1_out`, `ln_2_out` (+ `ln_cross_out`), `lm_head` (+ `.bias`); tied
matrices are one Parameter listed once (as encoder.wte.weight under tie_embeddings="all" / "inputs").
Not handled: run_with_cache capture, left-padded sources, sliding windows, parallel blocks, a source row that is
all padding (its softmax has no key: nan).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from arch.components.attention import Step
from arch.components.block import BLOCKS, CROSS_BLOCKS
from arch.components.init import HEAD_INITS, INITS
from arch.components.kv_cache import EncDecKVCache
from arch.components.masking import CausalMasking, padding_bias
from arch.components.norms import build_norm
from arch.components.positional import build_positional
from arch.config import EncDecConfig, ModelConfig
from arch.fused_loss import lm_loss
from arch.generate import generate
from arch.mup import Readout, readout_mult, rescale_init

# tie_embeddings -> (parameter that becomes, parameter it becomes) pairs; each a module path whose .weight is tied
TIES: dict[str, tuple[tuple[str, str], ...]] = {
    "all": (("decoder.wte", "encoder.wte"), ("lm_head", "encoder.wte")),  # Vaswani et al. section 3.4, T5, BART
    "inputs": (("decoder.wte", "encoder.wte"),),  # T5 v1.1 / mT5: shared input embedding, separate output
    "decoder": (("lm_head", "decoder.wte"),),  # target embedding = output (Press & Wolf 2017), own source one
    "none": (),
}


class Encoder(nn.Module):
    """Bidirectional stack: every source position attends to every non-padded source position."""

    def __init__(self, cfg: ModelConfig, embed_scale: float = 1.0, embed_norm: bool = False) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_scale = embed_scale
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = build_positional(cfg, bidirectional=True)
        self.ln_emb = build_norm(cfg) if embed_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(BLOCKS[cfg.norm](cfg, i) for i in range(cfg.n_layers))
        self.ln_f = build_norm(cfg) if BLOCKS[cfg.norm].final_norm else nn.Identity()

    def forward(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S) long, src_mask (B, S) bool (True = token) or None -> memory (B, S, C)."""
        S = src.shape[1]
        x = self.wte(src)  # (B, S, C)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        x = self.drop(self.ln_emb(self.pos.embed(x, 0)))
        bias = self.pos.attn_bias(0, S)  # (H, S, S) or None: both directions, no causal mask
        pad = padding_bias(src_mask, x.dtype)  # (B, 1, 1, S) or None
        if pad is not None:
            bias = pad if bias is None else bias + pad  # (B, H, S, S)
        step = Step(start=0, bias=bias, rotate=self.pos.rotate, causal=False)
        for block in self.blocks:
            x = block(x, step)
        return self.ln_f(x)


class Decoder(CausalMasking, nn.Module):
    """Causal stack whose blocks also cross-attend to the encoder output; returns hidden states (no lm_head)."""

    def __init__(self, cfg: ModelConfig, embed_scale: float = 1.0, embed_norm: bool = False,
                 out_scale: float = 1.0) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_scale = embed_scale
        self.out_scale = out_scale  # applied after ln_f: T5 v1.0's d_model**-0.5 before the output projection
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = build_positional(cfg)
        self.ln_emb = build_norm(cfg) if embed_norm else nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(CROSS_BLOCKS[cfg.norm](cfg, i) for i in range(cfg.n_layers))
        self.ln_f = build_norm(cfg) if CROSS_BLOCKS[cfg.norm].final_norm else nn.Identity()
        self.register_buffer("causal_mask", self._causal_table(cfg.n_ctx), persistent=False)

    @property
    def max_len(self) -> int | None:
        return self.pos.max_len

    def forward(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
                kv_cache: EncDecKVCache | None = None) -> Tensor:
        """tgt (B, T), memory (B, S, C) -> hidden (B, T, C). With kv_cache, tgt are the next T target positions."""
        B, T = tgt.shape
        start = 0
        if kv_cache is not None:
            if not isinstance(kv_cache, EncDecKVCache):
                raise TypeError(f"an encoder-decoder needs an EncDecKVCache (model.new_kv_cache), "
                                f"got {type(kv_cache).__name__}")
            if kv_cache.batch_size != B:
                raise ValueError(f"kv_cache holds batch_size={kv_cache.batch_size}; got tgt with B={B}")
            start = kv_cache.length
        x = self.wte(tgt)  # (B, T, C)
        if self.embed_scale != 1.0:
            x = x * self.embed_scale
        x = self.drop(self.ln_emb(self.pos.embed(x, start)))
        step = Step(start=start, bias=self._attn_bias(start, T), rotate=self.pos.rotate, kv_cache=kv_cache,
                    memory=memory, memory_bias=padding_bias(src_mask, x.dtype))
        for block in self.blocks:
            x = block(x, step)
        if kv_cache is not None:
            kv_cache.advance(T)
        x = self.ln_f(x)
        return x * self.out_scale if self.out_scale != 1.0 else x

    def fill_cross(self, memory: Tensor, kv_cache: EncDecKVCache) -> None:
        """Compute every layer's cross-attention K/V from memory into kv_cache now (no-op where already there)."""
        for block in self.blocks:
            kv_cache.cross(block.cross_attn.layer_idx, lambda attn=block.cross_attn: attn.memory_kv(memory))


class EncoderDecoder(nn.Module):
    """Encoder + decoder + output projection, with the embedding ties of cfg.tie_embeddings (TIES).

    >>> model = EncoderDecoder(EncDecConfig(vocab_size=64, n_ctx=16, d_model=32, n_encoder_layers=2,
    ...                                     n_decoder_layers=2, n_heads=4))
    >>> model(torch.randint(0, 64, (2, 10)), torch.randint(0, 64, (2, 7))).shape
    torch.Size([2, 7, 64])
    """

    def __init__(self, cfg: EncDecConfig) -> None:
        super().__init__()
        if cfg.init not in INITS:
            raise ValueError(f"unknown init {cfg.init!r}; choose from {sorted(INITS)}")
        self.cfg = cfg
        scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        out_scale = cfg.d_model**-0.5 if cfg.scale_decoder_output else 1.0
        self.encoder = Encoder(cfg.encoder_config(), scale, cfg.embed_norm)
        self.decoder = Decoder(cfg.decoder_config(), scale, cfg.embed_norm, out_scale)
        self.lm_head = Readout(cfg.d_model, cfg.vocab_size, bias=cfg.logits_bias, input_mult=readout_mult(cfg))
        for dst, src in TIES[cfg.tie_embeddings]:
            self.get_submodule(dst).weight = self.get_submodule(src).weight  # one Parameter, listed once
        self.fused_loss = True  # loss() default: chunked fused lm_head + cross-entropy (arch.fused_loss)
        INITS[cfg.init](self.encoder)
        INITS[cfg.init](self.decoder)
        with torch.no_grad():
            if self.lm_head.weight is not self.decoder.wte.weight:
                HEAD_INITS[cfg.init](self.lm_head.weight)
            if self.lm_head.bias is not None:
                self.lm_head.bias.zero_()  # BART's final_logits_bias starts (and, as an HF buffer, stays) at 0
        rescale_init(self)  # μP's hidden-matrix init (arch.mup); nothing for SP

    @property
    def max_len(self) -> int | None:
        """Longest target the decoder takes: n_ctx for learned positions, else None."""
        return self.decoder.max_len

    def source_mask(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor | None:
        """The (B, S) bool mask (True = token) in effect: src_mask if given, else src != cfg.src_pad_id, else None."""
        if src_mask is not None:
            if src_mask.shape != src.shape:
                raise ValueError(f"src_mask must have the shape of src {tuple(src.shape)}, got {tuple(src_mask.shape)}")
            return src_mask.bool()
        if self.cfg.src_pad_id is not None:
            return src != self.cfg.src_pad_id
        return None

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S) -> memory (B, S, C), the encoder output that every decoder layer cross-attends to."""
        return self.encoder(src, self.source_mask(src, src_mask))

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None = None,
               kv_cache: EncDecKVCache | None = None) -> Tensor:
        """tgt (B, T), memory (B, S, C) -> logits (B, T, V). src_mask: the mask in effect when encoding
        (`source_mask(src, ...)`), which masks padded source keys here too. With kv_cache, tgt continues it."""
        return self.lm_head(self.decoder(tgt, memory, src_mask, kv_cache))  # (B, T, V)

    def hidden(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Decoder hidden states (B, T, C) after its ln_f (and the scale_decoder_output factor): lm_head's input."""
        src_mask = self.source_mask(src, src_mask)
        return self.decoder(tgt, self.encoder(src, src_mask), src_mask)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S), tgt (B, T) long -> logits (B, T, V): position t predicts tgt's next token."""
        return self.lm_head(self.hidden(src, tgt, src_mask))

    def loss(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, src_mask: Tensor | None = None,
             fused: bool | None = None) -> Tensor:
        """Mean cross-entropy of forward(src, tgt_in) against tgt_out (B, T) != -100 (label padded targets -100).
        fused: as Transformer.loss (None -> self.fused_loss); with cfg.logits_bias always unfused (the fused
        kernel has no bias)."""
        x = self.hidden(src, tgt_in, src_mask)
        fused = (self.fused_loss if fused is None else fused) and self.lm_head.bias is None
        return lm_loss(x, self.lm_head, tgt_out, fused)

    def new_kv_cache(self, batch_size: int, memory: Tensor | None = None) -> EncDecKVCache:
        """An empty decoder cache; with memory (batch_size, S, C) its cross-attention K/V are computed now."""
        cache = EncDecKVCache(self.cfg.n_decoder_layers, batch_size)
        if memory is not None:
            self.decoder.fill_cross(memory, cache)
        return cache

    def generate(self, src: Tensor, tgt: Tensor, **kwargs: Any) -> Tensor:
        """arch.generate.generate(self, tgt, src=src, **kwargs): continue the decoder prompt tgt (B, T0), e.g. a
        column of the start id, given the source src (B, S). Greedy / sampling / beam search (length_penalty)."""
        return generate(self, tgt, src=src, **kwargs)


def build_encdec(cfg: EncDecConfig) -> EncoderDecoder:
    """EncoderDecoder(cfg); arch.build_model(cfg) does the same for an EncDecConfig."""
    return EncoderDecoder(cfg)
