"""arch.encdec, the encoder-decoder: config and its validation; encoder bidirectionality, decoder causality, a
gradient to every parameter and count_params == numel for every pos x norm (kernels, norm types, activations
rotating) and every tie option; padding invariance (encoder self-attention and cross-attention) for every pos x
kernel; target padding in the loss; cached == uncached decoding and generation for every pos; cross-attention K/V
computed once per source; beam search exact against brute force (length penalty included) and the length penalty
against its formula; HF T5 with copied weights and a functional re-implementation of the post-LN Vaswani model as
independent references; the transformer-base parameter count and FLOPs against FlopCounterMode. The full count
matrix (pos x norm x norm_type x tie x bias) is `slow`; a covering subset runs by default."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from arch import EncDecConfig, EncoderDecoder, ModelConfig, PosConfig, build_model, count_params, flops_per_token
from arch.accounting import matmul_params, param_breakdown
from arch.components.kv_cache import EncDecKVCache
from arch.components.positional import BIDIRECTIONAL_POSITIONAL, POSITIONAL, relative_bucket
from arch.config import ACTIVATIONS, ATTENTION_IMPLS, NORM_PLACEMENTS, NORM_TYPES, POS_KINDS, TIE_EMBEDDINGS
from arch.encdec import TIES
from arch.generate import generate
from arch.presets import ENCDEC_PRESETS, PRESETS, TRANSFORMER_VOCAB, encdec_preset_config

V = 13  # vocabulary (small: brute-force search enumerates V^n continuations)
S, T = 7, 6  # source and target lengths
PAD = 0  # the pad id of the padding tests; real tokens are drawn from 1 .. V-1


def pos_cfg(kind: str) -> PosConfig:
    # relative: 8 buckets up to distance 12, so short sequences reach the log-spaced buckets (bidirectional: 4 per
    # direction, 2 of them exact)
    return PosConfig(kind=kind, num_buckets=8, max_distance=12) if kind == "relative" else PosConfig(kind=kind)


def make_cfg(pos: str | PosConfig = "learned", norm: str = "pre", **kw) -> EncDecConfig:
    base = dict(vocab_size=V, n_ctx=16, d_model=16, n_encoder_layers=2, n_decoder_layers=2, n_heads=2,
                pos=pos if isinstance(pos, PosConfig) else pos_cfg(pos), norm=norm)
    return EncDecConfig(**{**base, **kw})


def make_model(cfg: EncDecConfig, seed: int = 0) -> EncoderDecoder:
    """float64, with weights large enough that every part visibly matters (GPT-2's 0.02 gives near-uniform
    logits): matrices N(0, 0.3), norm weights 1 + N(0, 0.1), biases N(0, 0.1)."""
    torch.manual_seed(seed)
    model = build_model(cfg).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
            else:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def ids(*shape: int, seed: int = 0, low: int = 0, high: int = V) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=torch.Generator().manual_seed(seed))


def gen_model(pos: str, **kw) -> EncoderDecoder:
    """For generation tests: bias-free and untied, whose greedy continuations vary (with biases or tied matrices
    at this weight scale they tend to repeat one token)."""
    return make_model(make_cfg(pos, bias=False, tie_embeddings="none", src_pad_id=PAD, **kw), seed=3)


def numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------------------
# config


def test_config_derives_sizes_round_trips_and_builds_stack_views():
    cfg = make_cfg("relative", norm="post", n_encoder_layers=3, tie_embeddings="decoder", src_vocab_size=20)
    assert (cfg.d_head, cfg.d_mlp) == (8, 64)
    assert EncDecConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.to_dict()["pos"]["kind"] == "relative"
    enc, dec = cfg.encoder_config(), cfg.decoder_config()
    assert isinstance(enc, ModelConfig) and (enc.n_layers, enc.vocab_size) == (3, 20)
    assert (dec.n_layers, dec.vocab_size, dec.norm, dec.pos) == (2, V, "post", cfg.pos)
    assert (enc.block, enc.window) == ("sequential", None)
    # ModelConfig itself is untouched: no encoder-decoder fields
    assert not {"n_encoder_layers", "src_vocab_size", "src_pad_id"} & {f.name for f in dataclasses.fields(ModelConfig)}
    assert isinstance(build_model(ModelConfig(vocab_size=V, n_ctx=8, d_model=16, n_layers=1, n_heads=2)), nn.Module)
    assert set(TIES) == set(TIE_EMBEDDINGS) and set(BIDIRECTIONAL_POSITIONAL) == set(POSITIONAL) == set(POS_KINDS)


@pytest.mark.parametrize("kw, message", [
    (dict(tie_embeddings="shared"),
     r"unknown tie_embeddings 'shared'; choose from \['all', 'decoder', 'inputs', 'none'\]"),
    (dict(tie_embeddings=True), r"unknown tie_embeddings True"),
    (dict(src_vocab_size=20), r"tie_embeddings='all' shares the source and target embeddings, so src_vocab_size"),
    (dict(tie_embeddings="inputs", src_vocab_size=20), r"src_vocab_size must equal vocab_size=13; got 20"),
    (dict(n_encoder_layers=0), r"n_encoder_layers must be a positive int, got 0"),
    (dict(n_decoder_layers=1.5), r"n_decoder_layers must be a positive int"),
    (dict(pos=PosConfig(kind="relative", num_buckets=3, max_distance=8)), r"pos.num_buckets must be >= 4"),
    (dict(src_pad_id=V), r"src_pad_id must be a source token id in \[0, 13\)"),
    (dict(activation="tanh"), r"unknown activation 'tanh'; choose from"),  # ModelConfig's own rules and messages
    (dict(n_heads=3), r"not divisible by n_heads"),
    (dict(n_kv_heads=3, n_heads=4), r"n_kv_heads must be a positive divisor"),
    (dict(d_head=5, pos=PosConfig(kind="rope")), r"d_head must be even"),
])
def test_config_validation_is_one_line_and_names_the_choices(kw, message):
    with pytest.raises(ValueError, match=message) as err:
        make_cfg(**kw)
    assert "\n" not in str(err.value)


def test_config_from_dict_rejects_unknown_keys():
    with pytest.raises(ValueError, match=r"unknown EncDecConfig key\(s\) \['n_layers'\]"):
        EncDecConfig.from_dict({**make_cfg().to_dict(), "n_layers": 2})


# ---------------------------------------------------------------------------------------------------------
# bidirectional position encodings of the encoder

# T5's bidirectional buckets worked by hand (num_buckets=32 -> 16 per direction, max_exact 8, max_distance 128):
#   n < 8: n (+16 for keys after the query); else 8 + floor(ln(n/8) / ln(16) * 8), capped at 15.
#   n=8: 8. n=16: ln 2/ln 16 = 1/4 -> 2 -> 10. n=32: 1/2 -> 4 -> 12. n=100: ln 12.5/ln 16 = .911 -> 7.29 -> 15.
HAND_BIDIRECTIONAL = {0: 0, -3: 3, 3: 19, -7: 7, 7: 23, -8: 8, 8: 24, -16: 10, 16: 26, -32: 12, 32: 28, -100: 15,
                      100: 31, -1000: 15, 1000: 31}


def test_bidirectional_relative_bucket_hand_table():
    rel = torch.tensor(list(HAND_BIDIRECTIONAL))
    assert relative_bucket(rel, 32, 128, bidirectional=True).tolist() == list(HAND_BIDIRECTIONAL.values())


def test_bidirectional_relative_bucket_matches_hf_t5():
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-300, 300)
    for nb, md in [(32, 128), (16, 64), (8, 12), (9, 20), (4, 5)]:
        want = t5.T5Attention._relative_position_bucket(rel, bidirectional=True, num_buckets=nb, max_distance=md)
        assert torch.equal(relative_bucket(rel, nb, md, bidirectional=True), want), (nb, md)


def test_encoder_biases_see_both_directions_and_decoder_biases_stay_causal():
    model = make_model(make_cfg("relative"))
    enc, dec = model.encoder.pos, model.decoder.pos
    w = enc.rel_bias.weight  # (num_buckets, H)
    bias = enc.attn_bias(0, 9)  # (H, 9, 9)
    for i, j in itertools.product(range(9), range(9)):
        assert torch.equal(bias[:, i, j], w[relative_bucket(torch.tensor(j - i), 8, 12, bidirectional=True)])
    assert not torch.equal(bias[:, 2, 5], bias[:, 5, 2])  # 3 after vs 3 before: different buckets
    assert dec.rel_bias is not enc.rel_bias and not dec.bidirectional
    alibi = make_model(make_cfg("alibi")).encoder.pos.attn_bias(0, 6)  # (H, 6, 6)
    assert torch.equal(alibi, alibi.transpose(1, 2)) and alibi[0, 0, 5] < alibi[0, 0, 1] < 0


# ---------------------------------------------------------------------------------------------------------
# the model matrix: every pos x norm, the other axes rotating

MATRIX = [(p, n, NORM_TYPES[(i + j) % 2], ACTIVATIONS[(i + j) % 3], ATTENTION_IMPLS[(i + 2 * j) % 3])
          for (i, p), (j, n) in itertools.product(enumerate(POS_KINDS), enumerate(NORM_PLACEMENTS))]


def check_model(cfg: EncDecConfig) -> None:
    model = make_model(cfg)
    assert count_params(cfg) == numel(model)
    src, tgt = ids(2, S, seed=1, high=cfg.encoder_config().vocab_size), ids(2, T, seed=2)
    logits = model(src, tgt)
    assert logits.shape == (2, T, V) and torch.isfinite(logits).all()
    # encoder: changing the LAST source token changes the encoder output at every earlier position
    src2 = src.clone()
    src2[:, -1] = (src[:, -1] + 1) % cfg.encoder_config().vocab_size
    diff = (model.encode(src2) - model.encode(src)).abs().amax(dim=-1)  # (B, S)
    assert (diff[:, :-1] > 1e-6).all()
    assert not torch.allclose(model(src2, tgt), logits)  # ... and reaches every target position
    # decoder: changing target tokens after position t leaves logits <= t unchanged
    t = 2
    tgt2 = tgt.clone()
    tgt2[:, t + 1:] = (tgt[:, t + 1:] + 1) % V
    out2 = model(src, tgt2)
    torch.testing.assert_close(out2[:, : t + 1], logits[:, : t + 1], atol=1e-12, rtol=0)
    assert not torch.allclose(out2[:, t + 1:], logits[:, t + 1:])
    # a gradient reaches every parameter
    model.train()
    model.loss(src, tgt, ids(2, T, seed=3)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("pos, norm, norm_type, activation, attention", MATRIX, ids=["-".join(c) for c in MATRIX])
def test_every_pos_and_norm(pos, norm, norm_type, activation, attention):
    check_model(make_cfg(pos, norm, norm_type=norm_type, activation=activation, attention=attention))


@pytest.mark.parametrize("kw", [dict(bias=False, tie_embeddings="none", src_vocab_size=17),
                                dict(n_heads=4, n_kv_heads=2, qk_norm="rmsnorm", d_mlp=24, init="xavier"),
                                dict(d_head=6, activation="swiglu", scale_embeddings=True, tie_embeddings="inputs"),
                                dict(n_encoder_layers=1, n_decoder_layers=3, tie_embeddings="decoder",
                                     src_vocab_size=9, qk_norm="layernorm")], ids=str)
@pytest.mark.parametrize("pos", ["relative", "rope"])
def test_switches(pos, kw):
    check_model(make_cfg(pos, "sandwich", **kw))


@pytest.mark.parametrize("tie", TIE_EMBEDDINGS)
def test_tie_options_share_exactly_the_named_matrices(tie):
    kw = {} if tie in ("all", "inputs") else dict(src_vocab_size=11)
    model = make_model(make_cfg("sinusoidal", tie_embeddings=tie, **kw))
    enc, dec, out = model.encoder.wte.weight, model.decoder.wte.weight, model.lm_head.weight
    assert (enc is dec) == (tie in ("all", "inputs"))
    assert (out is dec) == (tie in ("all", "decoder")) and (out is enc) == (tie == "all")
    names = {n for n, _ in model.named_parameters()}
    assert ("decoder.wte.weight" in names) == (tie in ("decoder", "none"))
    assert ("lm_head.weight" in names) == (tie in ("inputs", "none"))
    assert count_params(model.cfg) == numel(model)
    model.loss(ids(2, S, high=11), ids(2, T), ids(2, T, seed=1)).backward()
    assert out.grad is not None and enc.grad is not None and dec.grad is not None


def test_parameter_names_map_onto_hf_layouts():
    model = build_model(make_cfg("relative", "sandwich", bias=False, tie_embeddings="none"))
    names = {n for n, _ in model.named_parameters()}
    for want in ("encoder.wte.weight", "encoder.pos.rel_bias.weight", "encoder.blocks.1.attn.c_attn.weight",
                 "encoder.blocks.0.ln_1_out.weight", "encoder.ln_f.weight", "decoder.wte.weight",
                 "decoder.pos.rel_bias.weight", "decoder.blocks.1.cross_attn.c_q.weight",
                 "decoder.blocks.1.cross_attn.c_kv.weight", "decoder.blocks.0.cross_attn.c_proj.weight",
                 "decoder.blocks.0.ln_cross.weight", "decoder.blocks.0.ln_cross_out.weight", "decoder.ln_f.weight",
                 "lm_head.weight"):
        assert want in names, want
    assert not any("ln_cross" in n or "cross_attn" in n for n in names if n.startswith("encoder."))
    post = {n for n, _ in build_model(make_cfg("none", "post")).named_parameters()}
    assert not any(n.endswith("ln_f.weight") for n in post)  # post-LN: no final norms


# ---------------------------------------------------------------------------------------------------------
# count_params == numel: the full matrix (slow) and a covering subset (default)

COUNT_ALL = list(itertools.product(POS_KINDS, NORM_PLACEMENTS, NORM_TYPES, TIE_EMBEDDINGS, (True, False)))
COUNT_COVER = [(p, NORM_PLACEMENTS[i % 3], NORM_TYPES[i % 2], TIE_EMBEDDINGS[(i + j) % 4], b)
               for (i, p), (j, b) in itertools.product(enumerate(POS_KINDS), enumerate((True, False)))]


def check_count(pos, norm, norm_type, tie, bias):
    kw = {} if tie in ("all", "inputs") else dict(src_vocab_size=19)
    cfg = make_cfg(pos, norm, norm_type=norm_type, tie_embeddings=tie, bias=bias, **kw)
    model = build_model(cfg)
    assert count_params(cfg) == numel(model)
    # non-embedding: all but the vocabulary matrices and the position parameters (an independent count)
    vocab_or_pos = {id(p) for n, p in model.named_parameters()
                    if n.endswith("wte.weight") or n == "lm_head.weight" or ".pos." in n}
    assert count_params(cfg, non_embedding=True) == sum(p.numel() for p in model.parameters()
                                                        if id(p) not in vocab_or_pos)
    parts = param_breakdown(cfg)
    assert sum(parts.values()) == count_params(cfg)


@pytest.mark.parametrize("pos, norm, norm_type, tie, bias", COUNT_COVER, ids=str)
def test_count_params_matches_numel(pos, norm, norm_type, tie, bias):
    check_count(pos, norm, norm_type, tie, bias)


@pytest.mark.slow
@pytest.mark.parametrize("pos, norm, norm_type, tie, bias", COUNT_ALL, ids=str)
def test_count_params_matches_numel_full_matrix(pos, norm, norm_type, tie, bias):
    check_count(pos, norm, norm_type, tie, bias)


# ---------------------------------------------------------------------------------------------------------
# padding


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
@pytest.mark.parametrize("pos", POS_KINDS)
def test_padding_the_source_changes_nothing(pos, attention):
    model = make_model(make_cfg(pos, attention=attention, src_pad_id=PAD))
    src, tgt = ids(2, S, seed=4, low=1), ids(2, T, seed=5)
    want = model(src, tgt)
    padded = torch.cat([src, torch.full((2, 4), PAD)], dim=1)  # (2, S + 4)
    torch.testing.assert_close(model(padded, tgt), want, atol=1e-12, rtol=0)  # mask from src_pad_id
    mask = padded != PAD
    torch.testing.assert_close(model(padded, tgt, src_mask=mask), want, atol=1e-12, rtol=0)  # explicit mask
    # ragged batch: row 1 is 3 tokens shorter; each row equals that row run alone, unpadded
    ragged = padded[:, :S].clone()
    ragged[1, S - 3:] = PAD
    out = model(ragged, tgt)
    torch.testing.assert_close(out[0], want[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(out[1], model(src[1:, : S - 3], tgt[1:])[0], atol=1e-12, rtol=0)
    # and the mask is what does it: without one (another pad id) the pads change the logits
    unmasked = make_model(make_cfg(pos, attention=attention))
    assert not torch.allclose(unmasked(padded, tgt), unmasked(src, tgt))


def test_target_padding_is_ignored_by_the_loss():
    model = make_model(make_cfg("rope", "post"))
    src = ids(2, S, seed=6, low=1)
    tgt = ids(2, T + 1, seed=7)
    n_real = [T, T - 2]  # row 1 has only T - 2 real targets; its tail is padding (any id) labelled -100
    tgt_in, tgt_out = tgt[:, :-1].clone(), tgt[:, 1:].clone()
    tgt_in[1, n_real[1]:] = 5
    tgt_out[1, n_real[1]:] = -100
    # the mean over real targets, each row computed alone on its unpadded target
    total = sum(F.cross_entropy(model(src[b:b + 1], tgt_in[b:b + 1, : n_real[b]])[0], tgt_out[b, : n_real[b]],
                                reduction="sum") for b in range(2))
    want = total / sum(n_real)
    for fused in (True, False):
        torch.testing.assert_close(model.loss(src, tgt_in, tgt_out, fused=fused), want, atol=1e-12, rtol=0)


# ---------------------------------------------------------------------------------------------------------
# KV cache and generation


@pytest.mark.parametrize("pos", POS_KINDS)
def test_cached_decoding_equals_full_forward(pos):
    attention = ATTENTION_IMPLS[POS_KINDS.index(pos) % 3]
    model = make_model(make_cfg(pos, "sandwich", attention=attention, src_pad_id=PAD))
    src = torch.cat([ids(2, S, seed=8, low=1), torch.full((2, 2), PAD)], dim=1)
    src[1, 4:] = PAD  # ragged
    tgt = ids(2, 10, seed=9)
    memory = model.encode(src)
    mask = model.source_mask(src)
    want = model(src, tgt)
    for chunks in ([1] * 10, [3, 1, 4, 2]):
        cache = model.new_kv_cache(2)
        outs, at = [], 0
        for n in chunks:
            outs.append(model.decode(tgt[:, at:at + n], memory, mask, kv_cache=cache))
            at += n
        torch.testing.assert_close(torch.cat(outs, dim=1), want, atol=1e-10, rtol=0)
        assert cache.length == 10 and all(k.shape == (2, 2, S + 2, 8) for k in cache.cross_k)


@torch.no_grad()
def naive_greedy(model: EncoderDecoder, src: torch.Tensor, tgt: torch.Tensor, n: int) -> torch.Tensor:
    """Full encoder + decoder forward every step, argmax of the last position."""
    for _ in range(n):
        tgt = torch.cat([tgt, model(src, tgt)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tgt


@pytest.mark.parametrize("pos", POS_KINDS)
def test_greedy_generation_cached_equals_uncached_and_naive(pos):
    model = gen_model(pos)
    src = ids(3, S, seed=10, low=1)
    src[2, 5:] = PAD
    start = torch.full((3, 1), 1)
    want = naive_greedy(model, src, start, 9)
    assert torch.equal(generate(model, start, 9, temperature=0.0, src=src), want)
    assert torch.equal(generate(model, start, 9, temperature=0.0, src=src, use_cache=False), want)
    assert torch.equal(model.generate(src, start, max_new_tokens=9, temperature=0.0), want)
    assert len(set(want[:, 1:].flatten().tolist())) > 2  # not a degenerate constant continuation
    streamed = []
    generate(model, start, 9, temperature=0.0, src=src, on_token=streamed.append)
    assert torch.equal(torch.stack(streamed, dim=1), want[:, 1:])


@pytest.mark.parametrize("pos", ["relative", "rope", "learned"])
def test_beam_search_cached_equals_uncached(pos):
    model = gen_model(pos, norm="post")
    src = ids(2, S, seed=11, low=1)
    src[0, 3:] = PAD
    start = torch.full((2, 1), 1)
    kw = dict(num_beams=3, eos_id=2, length_penalty=0.7, src=src)
    assert torch.equal(generate(model, start, 7, **kw), generate(model, start, 7, use_cache=False, **kw))


def test_cross_attention_kv_is_computed_once_per_source():
    model = gen_model("rope", n_decoder_layers=3)
    rows: list[int] = []
    for block in model.decoder.blocks:
        block.cross_attn.c_kv.register_forward_hook(lambda mod, args, out: rows.append(args[0].shape[0]))
    src, start = ids(2, S, seed=12, low=1), torch.full((2, 1), 1)
    generate(model, start, 6, temperature=0.0, src=src)
    assert rows == [2, 2, 2]  # one call per layer for the whole generation
    rows.clear()
    generate(model, start, 6, num_beams=4, src=src)
    assert rows == [2, 2, 2]  # per source row, not per beam: the beams gather the cached K/V
    rows.clear()
    generate(model, start, 6, temperature=0.0, src=src, use_cache=False)
    assert rows == [2, 2, 2] * 6  # without the cache: every step recomputes them
    cache = model.new_kv_cache(2)
    assert isinstance(cache, EncDecKVCache) and cache.cross_k == [None] * 3


# ---------------------------------------------------------------------------------------------------------
# beam search: exact against brute force, and the length penalty against its formula


@torch.no_grad()
def brute_force(model, src, mask, start: list[int], n: int, eos_id: int, alpha: float) -> list[int]:
    """Score every canonical continuation of length n (eos-padded after the first eos): sum of log-probs up to
    and including the first eos, divided by that length ** alpha; return the best."""
    conts = [c for c in itertools.product(range(V), repeat=n)
             if eos_id not in c or all(t == eos_id for t in c[c.index(eos_id):])]
    seqs = torch.tensor([start + list(c) for c in conts])  # (N, 1 + n)
    memory = model.encode(src[None].expand(len(conts), -1), mask[None].expand(len(conts), -1))
    logp = torch.log_softmax(model.decode(seqs, memory, mask[None].expand(len(conts), -1)), -1)
    best, best_score = None, -math.inf
    for r, c in enumerate(conts):
        length = c.index(eos_id) + 1 if eos_id in c else n
        score = sum(float(logp[r, len(start) - 1 + j, c[j]]) for j in range(length)) / length**alpha
        if score > best_score:
            best, best_score = start + list(c), score
    return best


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.5])
@pytest.mark.parametrize("pos", ["relative", "sinusoidal"])
def test_beam_search_with_beams_covering_all_prefixes_is_exact(pos, alpha):
    n = 3
    model = gen_model(pos)
    src = ids(2, S, seed=13, low=1)
    src[1, 4:] = PAD
    start, eos = [1], 2
    out = generate(model, torch.tensor([start, start]), n, num_beams=V ** (n - 1), eos_id=eos, length_penalty=alpha,
                   src=src)
    mask = model.source_mask(src)
    for b in range(2):
        assert out[b].tolist() == brute_force(model, src[b], mask[b], start, n, eos, alpha)


class ScriptedSeq2Seq(nn.Module):
    """Stub encoder-decoder whose next-token distribution depends only on the target position. Tokens: 0 = eos,
    1 = a, 2 = b. After the start token: eos 0.5, a 0.5; then a 0.9; then eos 0.9 (0.05 each for the others).
    Hypotheses: [eos] with log-prob ln 0.5 over 1 token, [a, a, eos] with ln 0.5 + 2 ln 0.9 over 3 tokens."""

    max_len = None
    PROBS = [[0.5, 0.5, 1e-9], [0.05, 0.9, 0.05], [0.9, 0.05, 0.05]]

    def source_mask(self, src, src_mask=None):
        return None

    def encode(self, src, src_mask=None):
        return torch.zeros(src.shape[0], 1, 1)

    def decode(self, tgt, memory, src_mask=None, kv_cache=None):
        rows = torch.tensor(self.PROBS, dtype=torch.float64).log()[: tgt.shape[1]]  # (T, 3)
        return rows.expand(tgt.shape[0], -1, -1)

    def new_kv_cache(self, batch_size, memory=None):
        raise AssertionError("use_cache=False")


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.3, 0.6, 1.0])
def test_length_penalty_ranks_by_sum_over_length_to_the_alpha(alpha):
    short = (math.log(0.5), 1)  # [eos]
    long = (math.log(0.5) + 2 * math.log(0.9), 3)  # [a, a, eos]
    # alpha* = ln(long_sum / short_sum) / ln 3 = 0.2418: below it the short hypothesis wins, above it the long one
    want = [0, 0, 0, 0] if short[0] / short[1] ** alpha > long[0] / long[1] ** alpha else [0, 1, 1, 0]
    out = generate(ScriptedSeq2Seq(), torch.tensor([[0]]), 3, num_beams=2, eos_id=0, length_penalty=alpha,
                   use_cache=False, src=torch.zeros(1, 1, dtype=torch.long))
    assert out[0].tolist() == want
    assert (alpha > 0.2418) == (want == [0, 1, 1, 0])


# ---------------------------------------------------------------------------------------------------------
# independent references: HF T5 (copied weights) and a functional post-LN (Vaswani) forward


def t5_pair(seed: int = 0):
    """A random HF T5 (pre-RMSNorm, no biases, ReLU, bidirectional relative buckets in the encoder, shared input
    embedding, untied lm_head) and our model with its weights copied; float64."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    hf_cfg = transformers.T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=24, num_layers=2, num_decoder_layers=3,
                                   num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=12,
                                   dropout_rate=0.0, layer_norm_epsilon=1e-6, feed_forward_proj="relu",
                                   tie_word_embeddings=False, pad_token_id=PAD, decoder_start_token_id=PAD,
                                   eos_token_id=1)
    hf = transformers.T5ForConditionalGeneration(hf_cfg).double().eval()
    with torch.no_grad():  # as make_model: larger matrices (HF's init decodes pad, pad, ...), norms moved off 1
        for name, p in hf.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
            else:
                p.add_(0.1 * torch.randn_like(p))
    cfg = EncDecConfig(vocab_size=V, n_ctx=16, d_model=16, n_encoder_layers=2, n_decoder_layers=3, n_heads=2,
                       d_mlp=24, activation="relu", pos=pos_cfg("relative"), norm="pre", norm_type="rmsnorm",
                       bias=False, tie_embeddings="inputs", layer_norm_eps=1e-6, src_pad_id=PAD)
    ours = build_model(cfg).double().eval()
    hsd = hf.state_dict()
    q_scale = 8**0.5  # T5 does not scale q.k by 1/sqrt(d_kv); ours does, so q is scaled up by sqrt(d_kv)

    def attn(prefix: str) -> dict[str, torch.Tensor]:
        return {"q": hsd[prefix + ".q.weight"] * q_scale, "k": hsd[prefix + ".k.weight"],
                "v": hsd[prefix + ".v.weight"], "o": hsd[prefix + ".o.weight"]}

    sd = {"encoder.wte.weight": hsd["shared.weight"], "lm_head.weight": hsd["lm_head.weight"],
          "encoder.ln_f.weight": hsd["encoder.final_layer_norm.weight"],
          "decoder.ln_f.weight": hsd["decoder.final_layer_norm.weight"]}
    for stack, n in (("encoder", 2), ("decoder", 3)):
        table = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"  # in layer 0 only
        sd[f"{stack}.pos.rel_bias.weight"] = hsd[table]
        for i in range(n):
            hf_b, b = f"{stack}.block.{i}.layer", f"{stack}.blocks.{i}"
            a = attn(f"{hf_b}.0.SelfAttention")
            sd[f"{b}.ln_1.weight"] = hsd[f"{hf_b}.0.layer_norm.weight"]
            sd[f"{b}.attn.c_attn.weight"] = torch.cat([a["q"], a["k"], a["v"]])
            sd[f"{b}.attn.c_proj.weight"] = a["o"]
            mlp = 1
            if stack == "decoder":
                c = attn(f"{hf_b}.1.EncDecAttention")
                sd[f"{b}.ln_cross.weight"] = hsd[f"{hf_b}.1.layer_norm.weight"]
                sd[f"{b}.cross_attn.c_q.weight"] = c["q"]
                sd[f"{b}.cross_attn.c_kv.weight"] = torch.cat([c["k"], c["v"]])
                sd[f"{b}.cross_attn.c_proj.weight"] = c["o"]
                mlp = 2
            sd[f"{b}.ln_2.weight"] = hsd[f"{hf_b}.{mlp}.layer_norm.weight"]
            sd[f"{b}.mlp.c_fc.weight"] = hsd[f"{hf_b}.{mlp}.DenseReluDense.wi.weight"]
            sd[f"{b}.mlp.c_proj.weight"] = hsd[f"{hf_b}.{mlp}.DenseReluDense.wo.weight"]
    missing = {n for n, _ in ours.named_parameters()} - set(sd)
    assert not missing, missing
    ours.load_state_dict(sd, strict=False)  # strict=False: the tied decoder.wte alias is set through encoder.wte
    return hf, ours


def test_matches_hf_t5_logits_loss_and_greedy_decoding():
    hf, ours = t5_pair(seed=1)
    src = ids(3, 9, seed=14, low=2)
    src[1, 6:] = PAD
    src[2, 3:] = PAD
    mask = src != PAD
    tgt_in = torch.cat([torch.full((3, 1), PAD), ids(3, 7, seed=15, low=2)], dim=1)
    labels = torch.cat([tgt_in[:, 1:], torch.full((3, 1), 1)], dim=1)
    labels[2, 5:] = -100
    out = hf(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt_in, labels=labels)
    # 1e-5: HF's T5LayerNorm takes the variance in float32 even in a float64 model
    torch.testing.assert_close(ours(src, tgt_in), out.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours(src, tgt_in, src_mask=mask), out.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.loss(src, tgt_in, labels), out.loss, atol=1e-5, rtol=0)
    # greedy decoding from the decoder start id: HF's generate against ours (cached), token for token. HF runs
    # without its cache: transformers 5.x sizes T5's generation cache by the encoder depth (2 < 3 decoder layers)
    hf_out = hf.generate(input_ids=src, attention_mask=mask.long(), max_new_tokens=8, do_sample=False, num_beams=1,
                         eos_token_id=None, min_length=0, use_cache=False)
    ours_out = ours.generate(src, torch.full((3, 1), PAD), max_new_tokens=8, temperature=0.0)
    assert torch.equal(ours_out, hf_out)
    assert len(set(ours_out[:, 1:].flatten().tolist())) > 2  # not a degenerate constant continuation


def sinusoids(n: int, d: int) -> torch.Tensor:
    """Vaswani et al. section 3.5, entry by entry: PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(same)."""
    return torch.tensor([[math.sin(p / 10000 ** (c / d)) if c % 2 == 0 else math.cos(p / 10000 ** ((c - 1) / d))
                          for c in range(d)] for p in range(n)], dtype=torch.float64)


def functional_post_ln(model: EncoderDecoder, src, tgt, mask) -> torch.Tensor:
    """The post-LN encoder-decoder of Vaswani et al. written out with plain functional ops from the state dict."""
    cfg, P = model.cfg, model.state_dict()
    C, H, D, eps = cfg.d_model, cfg.n_heads, cfg.d_head, cfg.layer_norm_eps

    def lin(x, name):
        return F.linear(x, P[name + ".weight"], P[name + ".bias"])

    def ln(x, name):
        return F.layer_norm(x, (C,), P[name + ".weight"], P[name + ".bias"], eps)

    def heads(x):  # (B, L, H·D) -> (B, H, L, D)
        return x.view(x.shape[0], x.shape[1], H, D).transpose(1, 2)

    def attend(q, k, v, visible):  # visible: bool, broadcast to (B, H, Lq, Lk)
        s = (heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(D)).masked_fill(~visible, -math.inf)
        z = s.softmax(-1) @ heads(v)  # (B, H, Lq, D)
        return z.transpose(1, 2).reshape(q.shape[0], q.shape[1], H * D)

    def ffn(x, name):
        return lin(F.relu(lin(x, name + ".c_fc")), name + ".c_proj")

    W, keys = P["encoder.wte.weight"], mask[:, None, None, :]  # one shared matrix; (B, 1, 1, S)
    x = W[src] * math.sqrt(C) + sinusoids(src.shape[1], C)
    for i in range(cfg.n_encoder_layers):
        b = f"encoder.blocks.{i}"
        q, k, v = lin(x, b + ".attn.c_attn").split(C, dim=-1)
        x = ln(x + lin(attend(q, k, v, keys), b + ".attn.c_proj"), b + ".ln_1")
        x = ln(x + ffn(x, b + ".mlp"), b + ".ln_2")
    memory, n = x, tgt.shape[1]
    y = W[tgt] * math.sqrt(C) + sinusoids(n, C)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for i in range(cfg.n_decoder_layers):
        b = f"decoder.blocks.{i}"
        q, k, v = lin(y, b + ".attn.c_attn").split(C, dim=-1)
        y = ln(y + lin(attend(q, k, v, causal), b + ".attn.c_proj"), b + ".ln_1")
        k, v = lin(memory, b + ".cross_attn.c_kv").split(C, dim=-1)
        y = ln(y + lin(attend(lin(y, b + ".cross_attn.c_q"), k, v, keys), b + ".cross_attn.c_proj"), b + ".ln_cross")
        y = ln(y + ffn(y, b + ".mlp"), b + ".ln_2")
    return y @ W.t()  # tied output projection, no final norm


@pytest.mark.parametrize("attention", ATTENTION_IMPLS)
def test_post_ln_vaswani_model_matches_functional_reference(attention):
    cfg = make_cfg(PosConfig(kind="sinusoidal", scale=1.0), "post", activation="relu",
                   scale_embeddings=True, attention=attention, n_decoder_layers=3)
    model = make_model(cfg, seed=5)
    src = ids(2, 8, seed=16, low=1)
    src[1, 5:] = PAD
    mask = src != PAD
    tgt = ids(2, 6, seed=17)
    # 1e-6: the model keeps its sinusoid table in float32 precision (computed in float64, stored as float32)
    torch.testing.assert_close(model(src, tgt, src_mask=mask), functional_post_ln(model, src, tgt, mask),
                               atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------------------------------
# init, dropout


def test_init_schemes_cover_every_encoder_decoder_matrix():
    torch.manual_seed(0)
    big = dict(d_model=64, n_heads=4, vocab_size=512, n_decoder_layers=8)
    model = build_model(make_cfg("learned", tie_embeddings="inputs", **big))
    sd = model.state_dict()
    assert abs(sd["lm_head.weight"].std().item() - 0.02) < 1e-3  # untied head: GPT-2's N(0, 0.02)
    # residual projections, cross-attention's included, scaled by the decoder's depth: 0.02 / sqrt(2 * 8)
    assert abs(sd["decoder.blocks.3.cross_attn.c_proj.weight"].std().item() - 0.005) < 5e-4
    assert abs(sd["encoder.blocks.1.attn.c_proj.weight"].std().item() - 0.01) < 1e-3  # encoder: 2 layers
    model = build_model(make_cfg("learned", tie_embeddings="none", init="xavier", **big))
    sd = model.state_dict()
    a = math.sqrt(6 / (64 + 512))
    assert sd["lm_head.weight"].abs().max() <= a and sd["lm_head.weight"].abs().max() > 0.9 * a
    k, v = sd["decoder.blocks.0.cross_attn.c_kv.weight"].split(64)  # per logical matrix: fans 64 x 64
    assert k.abs().max() <= math.sqrt(6 / 128) and v.abs().max() > 0.9 * math.sqrt(6 / 128)
    assert abs(sd["decoder.wte.weight"].std().item() - 64**-0.5) < 5e-3


def test_dropout_is_on_in_training_and_generation_runs_in_eval():
    model = make_model(make_cfg("rope", dropout=0.3))
    src, tgt = ids(2, S, seed=18), ids(2, T, seed=19)
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))
    start = torch.full((2, 1), 1)
    out = generate(model, start, 5, temperature=0.0, src=src)
    assert model.training and torch.equal(out, naive_greedy(model.eval(), src, start, 5))


# ---------------------------------------------------------------------------------------------------------
# accounting: transformer-base / big against the paper, FLOPs against FlopCounterMode


def test_transformer_base_parameter_count_against_the_paper():
    cfg = encdec_preset_config("transformer-base", vocab_size=TRANSFORMER_VOCAB, n_ctx=256)
    assert (cfg.d_model, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.n_heads, cfg.d_mlp) == (512, 6, 6, 8, 2048)
    assert (cfg.norm, cfg.activation, cfg.pos.kind, cfg.tie_embeddings) == ("post", "relu", "sinusoidal", "all")
    n = count_params(cfg)
    # per encoder layer: attention 4·512² + 4·512, FFN 2·512·2048 + 2048 + 512, two LayerNorms 2·1024;
    # per decoder layer: two attentions, the FFN, three LayerNorms; one 37000 x 512 matrix for all three roles
    enc_layer = (4 * 512**2 + 4 * 512) + (2 * 512 * 2048 + 2048 + 512) + 2 * 1024
    dec_layer = 2 * (4 * 512**2 + 4 * 512) + (2 * 512 * 2048 + 2048 + 512) + 3 * 1024
    assert count_params(cfg, non_embedding=True) == 6 * enc_layer + 6 * dec_layer == 44_138_496
    assert n == 44_138_496 + 37000 * 512 == 63_082_496
    assert abs(n - 65e6) / 65e6 < 0.03  # Vaswani et al. table 3: 65 x 10^6 (-2.95 %)
    with torch.device("meta"):
        assert numel(build_model(cfg)) == n
    big = count_params(encdec_preset_config("transformer-big", vocab_size=TRANSFORMER_VOCAB, n_ctx=256))
    assert big == 214_245_376 and abs(big - 213e6) / 213e6 < 0.01  # table 3: 213 x 10^6
    assert not set(ENCDEC_PRESETS) & set(PRESETS)  # the decoder-only presets (conf/model) stay separate
    with pytest.raises(ValueError, match="unknown encoder-decoder preset"):
        encdec_preset_config("transformer-huge", vocab_size=10, n_ctx=8)


@pytest.mark.parametrize("kw", [dict(pos=PosConfig(kind="learned")),
                                dict(pos=PosConfig(kind="rope"), activation="swiglu", n_heads=4, n_kv_heads=2,
                                     norm="sandwich", tie_embeddings="none", src_vocab_size=11)], ids=["mha", "gqa"])
def test_flops_per_token_matches_flop_counter(kw):
    # bias=False and explicit attention, as in the decoder-only FLOP test: FlopCounterMode counts matmuls only, so
    # the norm weights (in N, no matmul) are subtracted: per source token for the encoder's, per target token for
    # the decoder's
    cfg = make_cfg(bias=False, attention="explicit", **kw)
    model = build_model(cfg)
    B, Ls, Lt = 3, 9, 5
    src, tgt = ids(B, Ls, seed=20).clamp(max=10), ids(B, Lt, seed=21)
    enc_norms = param_breakdown(cfg.encoder_config())["norms"]
    dec_norms = param_breakdown(cfg)["norms"] - enc_norms
    with FlopCounterMode(display=False) as fwd:
        model(src, tgt)
    per_pair = Lt * flops_per_token(cfg, seq_len=Lt, src_len=Ls, training=False)
    assert fwd.get_total_flops() == pytest.approx(B * (per_pair - 2 * Ls * enc_norms - 2 * Lt * dec_norms), rel=1e-12)
    with FlopCounterMode(display=False) as train:
        model(src, tgt).sum().backward()
    per_pair = Lt * flops_per_token(cfg, seq_len=Lt, src_len=Ls)
    assert train.get_total_flops() == pytest.approx(B * (per_pair - 6 * Ls * enc_norms - 6 * Lt * dec_norms),
                                                    rel=1e-12)


def test_flops_per_token_closed_form_at_equal_lengths():
    cfg = encdec_preset_config("transformer-base", vocab_size=TRANSFORMER_VOCAB, n_ctx=256)
    H_D, Tn = 512, 100
    assert flops_per_token(cfg, seq_len=Tn) == pytest.approx(6 * matmul_params(cfg) + 12 * H_D * Tn * (6 + 2 * 6),
                                                             rel=1e-12)
    assert flops_per_token(cfg) == flops_per_token(cfg, seq_len=256, src_len=256)
    with pytest.raises(ValueError, match="src_len is for an encoder-decoder"):
        flops_per_token(ModelConfig(vocab_size=V, n_ctx=8, d_model=16, n_layers=1, n_heads=2), src_len=4)
