"""arch.convert.from_hf for encoder-decoders: HF T5 / BART (random small configs, no download) -> our
EncoderDecoder with equal logits and loss on a ragged, padded batch (attention_mask); plus the EncDecConfig knobs
the two need (embed_norm, scale_decoder_output, logits_bias) on our side alone.

Measured max |Δlogits| in fp32 (CPU, torch 2.13, transformers 5.24; the test prints them, `pytest -s`), on a
ragged batch of 3 with attention_mask and on the same batch unmasked; logits up to ~8 in magnitude:
  HF T5 -> ours     6 configs: v1.0 tied relu 2+3; v1.1 gated-silu, separate head, 3+1, d_kv 12 (H·D != C);
                    v1.1 config as transformers 5 builds it (tied, unscaled); gelu_new 1+4; separate head,
                    32 buckets; wide (d_model 128, 4+2, S 64 / T 48)                                      2.9e-6
                    (T5 has no 1/sqrt(d_kv) in its scores: folded into every q matrix as x sqrt(d_kv))
  HF BART -> ours   6 configs: tied 2+3; untied 4+1; scale_embedding + relu; gelu_pytorch_tanh 2 heads; own
                    source embedding (tie "decoder"); wide (d_model 128, 3+2, S 64 / T 48)              1.2e-6
                    (2 of the 6 bit-equal)
  greedy generation (HF generate vs our cached decoder): equal token for token, both families
Asserted: atol 1e-5, rtol 0 (logits and loss).
"""

from __future__ import annotations

import math

import pytest
import torch

from arch import EncDecConfig, PosConfig, build_model, count_params
from arch.convert import FROM_HF, from_hf, hf_problem, to_hf
from arch.encdec import EncoderDecoder

transformers = pytest.importorskip("transformers")

ATOL = 1e-5
PAD = 1  # pad id of the padded batches (HF's attention_mask does the masking; the id itself is arbitrary)


def _max_diff(a, b) -> float:
    return (a - b).abs().max().item()


def _report(what, d, logits):
    print(f"\n  max |Δlogits| {what}: {d:.2e} (max |logit| {logits.abs().max().item():.1f})")
    assert d <= ATOL, f"{what}: {d}"


def _jitter(model, seed=0):
    """Norm weights 1, biases 0 and a zero final_logits_bias would hide a mix-up between them: randomise them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in [*model.parameters(), *model.buffers()]:
            if p.ndim == 1 or (p.ndim == 2 and p.shape[0] == 1):  # norms, biases, final_logits_bias (1, V)
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def hf_t5(seed=0, untie_head=False, **kw):
    """A random HF T5. transformers 5 always ties lm_head to `shared` (T5 v1.1's tie_word_embeddings=False
    survives only as scale_decoder_outputs=False); untie_head gives it its own matrix, as transformers 4 does."""
    torch.manual_seed(seed)
    base = dict(vocab_size=101, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=20, dropout_rate=0.0,
                pad_token_id=0, decoder_start_token_id=0, eos_token_id=None)
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(**{**base, **kw}))
    if untie_head:
        hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    if not hf.config.scale_decoder_outputs:  # HF's N(0, 1) head unscaled gives logits ~30: keep them ~5, as v1.0's
        with torch.no_grad():
            hf.lm_head.weight.mul_(hf.config.d_model**-0.5)
    return _jitter(hf.eval(), seed)


def _spread(hf, std=0.3):
    """Larger matrices for the generation tests (at HF's init a small model greedily repeats one token)."""
    with torch.no_grad():
        for p in hf.parameters():
            if p.ndim == 2:
                p.normal_(0.0, std)
    return hf


def hf_bart(seed=0, **kw):
    torch.manual_seed(seed)
    base = dict(vocab_size=101, d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=24,
                activation_function="gelu_new", dropout=0.0, init_std=0.1, pad_token_id=PAD, bos_token_id=0,
                eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)
    return _jitter(transformers.BartForConditionalGeneration(transformers.BartConfig(**{**base, **kw})).eval(), seed)


def batch(vocab: int, S: int = 11, T: int = 9, seed: int = 0):
    """A ragged batch of 3: source rows of S, S - 4 and 3 real tokens (right-padded, attention_mask marks them),
    target inputs, and labels with row 2's tail ignored (-100)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (3, S), generator=g)
    mask = torch.ones(3, S, dtype=torch.bool)
    mask[1, S - 4:] = False
    mask[2, 3:] = False
    src[~mask] = PAD
    tgt = torch.randint(3, vocab, (3, T + 1), generator=g)
    labels = tgt[:, 1:].clone()
    labels[2, T - 3:] = -100
    return src, mask, tgt[:, :-1], labels


def check_equal(hf, what: str, S: int = 11, T: int = 9) -> EncoderDecoder:
    """from_hf(hf): logits (with and without padding) and loss equal to HF's; parameter count as built."""
    ours = from_hf(hf).eval()
    assert isinstance(ours, EncoderDecoder)
    assert count_params(ours.cfg) == sum(p.numel() for p in ours.parameters())
    src, mask, tgt_in, labels = batch(hf.config.vocab_size, S, T)
    with torch.no_grad():
        out = hf(input_ids=src, attention_mask=mask.long(), decoder_input_ids=tgt_in, labels=labels)
        _report(f"HF {what} -> ours (ragged batch, attention_mask)", _max_diff(ours(src, tgt_in, src_mask=mask),
                                                                            out.logits), out.logits)
        torch.testing.assert_close(ours.loss(src, tgt_in, labels, src_mask=mask), out.loss, atol=ATOL, rtol=0)
        full = hf(input_ids=src, decoder_input_ids=tgt_in).logits  # no mask: pads are read, on both sides
        _report(f"HF {what} -> ours (no mask)", _max_diff(ours(src, tgt_in), full), full)
    return ours


# ---------------------------------------------------------------------------------------------------------
# T5

T5_CASES = {
    "v1.0-tied-relu": dict(),
    "v1.1-untied-gated-silu": dict(feed_forward_proj="gated-silu", tie_word_embeddings=False, untie_head=True,
                                   num_layers=3, num_decoder_layers=1, d_kv=12),  # H·D = 48 != d_model
    "v1.1-tied-in-hf5": dict(feed_forward_proj="gated-silu", tie_word_embeddings=False),  # no scaling, tied
    "gelu_new-deeper-decoder": dict(feed_forward_proj="gelu_new", num_layers=1, num_decoder_layers=4,
                                    vocab_size=97, layer_norm_epsilon=1e-5),
    "untied-relu-32-buckets": dict(tie_word_embeddings=False, untie_head=True, relative_attention_num_buckets=32,
                                   relative_attention_max_distance=128, num_heads=2, d_kv=16),
    "erf-gelu": dict(feed_forward_proj="gelu"),
    "wide": dict(d_model=128, d_kv=32, d_ff=256, num_layers=4, num_decoder_layers=2, vocab_size=500,
                 relative_attention_num_buckets=32, relative_attention_max_distance=64),
}


@pytest.mark.parametrize("case", list(T5_CASES))
def test_t5_from_hf_logits_and_loss(case):
    kw = T5_CASES[case]
    hf = hf_t5(**kw)
    if case == "wide":
        ours = check_equal(hf, f"T5 [{case}]", S=64, T=48)
    else:
        ours = check_equal(hf, f"T5 [{case}]")
    cfg = ours.cfg
    assert (cfg.norm, cfg.norm_type, cfg.bias, cfg.pos.kind) == ("pre", "rmsnorm", False, "relative")
    assert cfg.tie_embeddings == ("inputs" if kw.get("untie_head") else "all")
    assert cfg.scale_decoder_output == kw.get("tie_word_embeddings", True)
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers) == (hf.config.num_layers, hf.config.num_decoder_layers)
    assert cfg.d_head == hf.config.d_kv and cfg.src_pad_id is None and cfg.dropout == 0.0
    assert cfg.activation == {"gated-silu": "swiglu", "gelu_new": "gelu", "gelu": "gelu_exact"}.get(
        kw.get("feed_forward_proj"), "relu")
    # every HF parameter has exactly one counterpart: the counts agree
    assert count_params(cfg) == sum(p.numel() for p in hf.parameters())


def test_t5_query_scale_is_folded_into_the_weights():
    hf = hf_t5(d_kv=16)
    ours = from_hf(hf)
    q = hf.state_dict()["decoder.block.1.layer.1.EncDecAttention.q.weight"]
    torch.testing.assert_close(ours.decoder.blocks[1].cross_attn.c_q.weight, q * 4.0, atol=0, rtol=0)  # sqrt(16)
    qkv = ours.encoder.blocks[0].attn.c_attn.weight.split(4 * 16)
    torch.testing.assert_close(qkv[1], hf.state_dict()["encoder.block.0.layer.0.SelfAttention.k.weight"])


def test_t5_greedy_generation_matches():
    hf = _spread(hf_t5(seed=3, num_decoder_layers=2))  # equal depths: HF 5 sizes T5's generation cache by
    # the encoder's depth
    ours = from_hf(hf).eval()
    src, mask, _, _ = batch(101, seed=4)
    want = hf.generate(input_ids=src, attention_mask=mask.long(), max_new_tokens=8, do_sample=False, num_beams=1,
                       min_length=0)
    got = ours.generate(src, torch.zeros(3, 1, dtype=torch.long), max_new_tokens=8, temperature=0.0,
                        src_mask=mask)
    assert torch.equal(got, want)
    assert len(set(got[:, 1:].flatten().tolist())) > 2  # not a degenerate constant continuation


@pytest.mark.parametrize("kw, msg", [
    (dict(feed_forward_proj="gated-gelu"),
     "T5Config feed_forward_proj='gated-gelu' has no archlab equivalent (a GELU-gated MLP (GEGLU); ours gates "
     "with silu only (swiglu); convertible: relu, gated-silu, gelu_new, gelu_pytorch_tanh, gelu)"),
], ids=["gated-gelu"])
def test_t5_refusals_are_one_line(kw, msg):
    with pytest.raises(ValueError) as e:
        from_hf(hf_t5(**kw))
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------------------
# BART

BART_CASES = {
    "tied": dict(),
    "default-erf-gelu": dict(activation_function="gelu"),  # BartConfig's default: every released BART
    "untied-deeper-encoder": dict(tie_word_embeddings=False, encoder_layers=4, decoder_layers=1),
    "scaled-relu": dict(scale_embedding=True, activation_function="relu", vocab_size=97),
    "gelu_pytorch_tanh-2-heads": dict(activation_function="gelu_pytorch_tanh", encoder_attention_heads=2,
                                      decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=40),
    "wide": dict(d_model=128, encoder_layers=3, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=256, decoder_ffn_dim=256, vocab_size=500,
                 max_position_embeddings=64, init_std=0.05),
}


@pytest.mark.parametrize("case", list(BART_CASES))
def test_bart_from_hf_logits_and_loss(case):
    kw = BART_CASES[case]
    hf = hf_bart(**kw)
    ours = check_equal(hf, f"BART [{case}]", *((64, 48) if case == "wide" else (11, 9)))
    cfg = ours.cfg
    tied = kw.get("tie_word_embeddings", True)
    assert (cfg.norm, cfg.norm_type, cfg.bias, cfg.pos.kind, cfg.embed_norm, cfg.logits_bias) == (
        "post", "layernorm", True, "learned", True, True)
    # transformers 5 unties all three when tie_word_embeddings=False (`shared` is then read by nothing)
    assert cfg.tie_embeddings == ("all" if tied else "none") and not cfg.scale_decoder_output
    assert cfg.scale_embeddings == kw.get("scale_embedding", False) and cfg.n_ctx == hf.config.max_position_embeddings
    # HF counts the 2 never-read position rows per stack (and an unread `shared` when untied); ours counts the
    # logits bias (an HF buffer) instead
    n_hf = sum(p.numel() for p in hf.parameters())
    assert count_params(cfg) == n_hf - 2 * 2 * cfg.d_model + cfg.vocab_size - (0 if tied else cfg.vocab_size
                                                                                * cfg.d_model)
    torch.testing.assert_close(ours.encoder.pos.wpe.weight, hf.model.encoder.embed_positions.weight[2:], atol=0,
                               rtol=0)


def test_bart_with_its_own_source_embedding_ties_only_the_decoder():
    """Give the encoder a separate embedding: the converter reads embed_tokens (what HF's forward uses), not
    `shared`, and the ties from the tensors -> tie_embeddings="decoder"."""
    hf = hf_bart(seed=5)
    emb = transformers.models.bart.modeling_bart.BartScaledWordEmbedding(101, 32, PAD)
    torch.nn.init.normal_(emb.weight, std=0.1)
    hf.model.encoder.embed_tokens = emb
    ours = check_equal(hf, "BART [own source embedding]")
    assert ours.cfg.tie_embeddings == "decoder"


def test_bart_greedy_generation_matches():
    hf = _spread(hf_bart(seed=6, decoder_layers=2))
    ours = from_hf(hf).eval()
    src, mask, _, _ = batch(101, seed=7)
    want = hf.generate(input_ids=src, attention_mask=mask.long(), max_new_tokens=8, do_sample=False, num_beams=1,
                       min_length=0, eos_token_id=None, forced_bos_token_id=None, forced_eos_token_id=None,
                       no_repeat_ngram_size=0)
    got = ours.generate(src, torch.full((3, 1), 2), max_new_tokens=8, temperature=0.0, src_mask=mask)
    assert torch.equal(got, want)
    assert len(set(got[:, 1:].flatten().tolist())) > 2


@pytest.mark.parametrize("kw, msg", [
    (dict(activation_function="silu"), "BartConfig activation_function='silu' has no archlab equivalent (no such "
                                       "MLP here; convertible: gelu_new, gelu_pytorch_tanh, gelu, relu)"),
    (dict(decoder_attention_heads=2), "BartConfig decoder_attention_heads=2 has no archlab equivalent (ours has "
                                      "one value for both stacks; encoder_attention_heads=4)"),
    (dict(decoder_ffn_dim=40), "BartConfig decoder_ffn_dim=40 has no archlab equivalent"),
], ids=["silu", "heads", "ffn"])
def test_bart_refusals_are_one_line(kw, msg):
    with pytest.raises(ValueError) as e:
        from_hf(hf_bart(**kw))
    assert str(e.value).startswith(msg) and "\n" not in str(e.value)


def test_unknown_modules_are_refused_and_to_hf_refuses_encoder_decoders():
    hf = hf_bart()
    hf.model.encoder.extra = torch.nn.Linear(2, 2)  # a module no converter knows is refused, not dropped
    with pytest.raises(ValueError, match=r"^BART conversion: \['model.encoder.extra.bias', "):
        from_hf(hf)
    assert {"T5ForConditionalGeneration", "BartForConditionalGeneration"} <= set(FROM_HF)
    ours = from_hf(hf_t5())
    msg = "EncoderDecoder has no HF converter; families: ['gpt2', 'llama']"
    assert str(hf_problem(ours)) == msg
    with pytest.raises(ValueError) as e:
        to_hf(ours)
    assert str(e.value) == msg


# ---------------------------------------------------------------------------------------------------------
# the knobs on our side: embed_norm, scale_decoder_output, logits_bias


def knob_model(seed=0, **kw) -> EncoderDecoder:
    base = dict(vocab_size=23, n_ctx=16, d_model=16, n_encoder_layers=2, n_decoder_layers=3, n_heads=2,
                embed_norm=True, scale_decoder_output=True, logits_bias=True)
    torch.manual_seed(seed)
    model = build_model(EncDecConfig(**{**base, **kw})).double()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p)) if p.ndim == 1 else p.normal_(0.0, 0.3)
    return model.eval()


@pytest.mark.parametrize("kw", [dict(), dict(norm="post", tie_embeddings="none", src_vocab_size=19),
                                dict(norm_type="rmsnorm", bias=False, tie_embeddings="inputs"),
                                dict(norm="sandwich", tie_embeddings="decoder", src_vocab_size=19, bias=False)],
                         ids=["pre-all", "post-none", "rms-inputs", "sandwich-decoder"])
def test_knobs_count_names_gradients_and_formula(kw):
    model = knob_model(**kw)
    cfg = model.cfg
    names = {n for n, _ in model.named_parameters()}
    assert {"encoder.ln_emb.weight", "decoder.ln_emb.weight", "lm_head.bias"} <= names
    assert count_params(cfg) == sum(p.numel() for p in model.parameters())
    plain = build_model(EncDecConfig(**{**cfg.to_dict(), "embed_norm": False, "scale_decoder_output": False,
                                        "logits_bias": False}))
    assert not any("ln_emb" in n or n == "lm_head.bias" for n, _ in plain.named_parameters())
    assert isinstance(plain.encoder.ln_emb, torch.nn.Identity) and plain.decoder.out_scale == 1.0
    # the formula: x d_model**-0.5 after ln_f, + bias after lm_head (ln_emb: the next test)
    src, tgt = torch.randint(0, 19, (2, 7)), torch.randint(0, 23, (2, 5))
    with torch.no_grad():
        h = model.hidden(src, tgt)
        torch.testing.assert_close(model(src, tgt), h @ model.lm_head.weight.T + model.lm_head.bias, atol=1e-12,
                                   rtol=0)
        assert model.decoder.out_scale == 16**-0.5
        model.decoder.out_scale = 1.0
        torch.testing.assert_close(model.hidden(src, tgt) / math.sqrt(16), h, atol=1e-12, rtol=0)
        model.decoder.out_scale = 16**-0.5
    # a gradient reaches every parameter, the new ones included; fused=True falls back to the unfused path
    model.train()
    labels = torch.randint(0, 23, (2, 5))
    loss = model.loss(src, tgt, labels, fused=True)
    torch.testing.assert_close(loss, model.loss(src, tgt, labels, fused=False), atol=0, rtol=0)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_embed_norm_normalises_the_embedding_sum_in_both_stacks():
    model = knob_model(norm_type="layernorm", bias=True)
    src, tgt = torch.randint(0, 23, (2, 7)), torch.randint(0, 23, (2, 5))
    seen = {}
    for stack in ("encoder", "decoder"):
        getattr(model, stack).ln_emb.register_forward_hook(lambda m, a, out, s=stack: seen.update({s: (a[0], out)}))
    with torch.no_grad():
        model(src, tgt)
        for stack, ids in (("encoder", src), ("decoder", tgt)):
            m = getattr(model, stack)
            x_in, out = seen[stack]
            torch.testing.assert_close(x_in, m.pos.embed(m.wte(ids), 0), atol=0, rtol=0)
            want = torch.nn.functional.layer_norm(x_in, (16,), m.ln_emb.weight, m.ln_emb.bias, 1e-5)
            torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


def test_knobs_keep_cached_decoding_exact():
    model = knob_model(pos=PosConfig(kind="learned"))
    src, tgt = torch.randint(0, 23, (2, 7)), torch.randint(0, 23, (2, 8))
    with torch.no_grad():
        want = model(src, tgt)
        memory = model.encode(src)
        cache = model.new_kv_cache(2, memory)
        got = torch.cat([model.decode(tgt[:, i:i + 1], memory, kv_cache=cache) for i in range(8)], dim=1)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


@pytest.mark.parametrize("name", ["embed_norm", "scale_decoder_output", "logits_bias"])
def test_knob_validation_is_one_line(name):
    with pytest.raises(ValueError, match=rf"^{name} must be true or false, got 1$"):
        EncDecConfig(vocab_size=23, n_ctx=16, d_model=16, n_encoder_layers=1, n_decoder_layers=1, n_heads=2,
                     **{name: 1})
    cfg = EncDecConfig(vocab_size=23, n_ctx=16, d_model=16, n_encoder_layers=1, n_decoder_layers=1, n_heads=2,
                       **{name: True})
    assert EncDecConfig.from_dict(cfg.to_dict()) == cfg


# ---------------------------------------------------------------------------------------------------------
# presets: the T5 / BART shapes are what from_hf makes of HF's configs, and count what HF counts


@pytest.mark.parametrize("name, hf_kw", [
    ("t5-small", dict()),  # T5Config's defaults are t5-small
    ("t5-base", dict(d_model=768, d_ff=3072, num_layers=12, num_heads=12)),
    ("bart-base", dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                       decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)),
    ("bart-large", dict()),  # BartConfig's defaults are bart-large
])
def test_presets_are_the_hf_shapes(name, hf_kw):
    from arch.convert import bart, t5
    from arch.presets import encdec_preset_config

    family, cls = (t5, "T5") if name.startswith("t5") else (bart, "Bart")
    hf_cfg = getattr(transformers, f"{cls}Config")(**hf_kw)  # BART's own erf GELU: our gelu_exact
    want = family.config_from_hf(hf_cfg, "all")
    preset = encdec_preset_config(name, vocab_size=want.vocab_size, n_ctx=want.n_ctx, dropout=0.0)
    assert preset == want
    with torch.device("meta"):  # no memory: only the parameter count is read
        hf = getattr(transformers, f"{cls}ForConditionalGeneration")(hf_cfg)
    n_hf = sum(p.numel() for p in hf.parameters())
    extra = 0 if family is t5 else preset.vocab_size - 2 * 2 * preset.d_model  # logits bias; 2 unread rows / stack
    assert count_params(preset) == n_hf + extra


def test_knob_accounting_in_flops():
    """embed_norm's norms count in N like every norm (per source token for the encoder's, per target token for the
    decoder's); logits_bias and scale_decoder_output are no matmul parameters: FLOPs unchanged."""
    from arch import flops_per_token

    base = dict(vocab_size=23, n_ctx=16, d_model=16, n_encoder_layers=2, n_decoder_layers=3, n_heads=2)
    S, T, per_norm = 9, 5, 2 * 16  # LayerNorm weight + bias
    plain = flops_per_token(EncDecConfig(**base), seq_len=T, src_len=S)
    normed = flops_per_token(EncDecConfig(**base, embed_norm=True), seq_len=T, src_len=S)
    assert normed - plain == pytest.approx(3 * 2 * (S + T) * per_norm / T, rel=1e-12)
    assert flops_per_token(EncDecConfig(**base, logits_bias=True, scale_decoder_output=True), seq_len=T,
                           src_len=S) == plain
