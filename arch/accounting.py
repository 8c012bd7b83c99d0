"""Closed-form parameter and FLOP accounting for `ModelConfig`, and a shape solver for parameter budgets.

Everything here is arithmetic on the config: no model is built and torch is not imported, so it runs on a
175B-parameter shape as fast as on a toy one. `tests/arch/test_accounting.py` checks `count_params` against
`sum(p.numel())` of the built model for every registry combination.

Conventions (the choices that papers disagree on):

* **Non-embedding parameters** (`count_params(cfg, non_embedding=True)`) exclude every vocabulary matrix
  (the token embedding `wte` and, when `tie_embeddings=False`, the separate `lm_head`) and every *position*
  parameter (learned `wpe`, the relative-bias table). This is Kaplan et al. 2020's N. It differs from nanoGPT's
  `get_num_params(non_embedding=True)`, which subtracts only `wpe` and keeps the tied `wte`. Because all
  position parameters are excluded, the non-embedding count is the same for every `pos.kind`, so position
  variants compare at one budget.
* **FLOPs per token** follow PaLM (Chowdhery et al. 2022, appendix B): training = `6·N + 12·L·H·D·T`, forward
  only = `2·N + 4·L·H·D·T`, where `N = non-embedding params + vocab_size·d_model` counts every parameter that
  takes part in a matmul (the unembedding projection does, tied or not; embedding look-ups and position
  tables do not), and `T` is the sequence length (`n_ctx` by default). The attention term counts `QKᵀ` and
  `A·V` over all `T` keys; causal masking's skipped half is *not* subtracted (PaLM, nanoGPT `estimate_mfu`).
  With a sliding window (`cfg.window = w`) each query is counted against `min(T, w)` keys instead of `T` (the
  same convention: the band's own masked triangle is not subtracted), i.e. what a banded kernel would compute;
  the kernels here compute the full masked (T, T) scores, so measured FLOPs exceed this when w < T.
  Grouped-query attention (`n_kv_heads`) shrinks N (a smaller c_attn) but not the attention term: every one of
  the H query heads still scores all its keys.
  For a tied learned-position GPT-2 this `N` equals nanoGPT's `get_num_params()`.
* Not counted: buffers (sinusoidal tables, RoPE frequencies, ALiBi slopes, causal masks), softmax / norm /
  activation FLOPs, and the optimizer.
* **Encoder-decoder** (`EncDecConfig`): the counts add up both stacks (each built from its ModelConfig view) and
  the decoder's cross-attention (per layer the same matrices as a self-attention, plus its input norm, two with
  sandwich, and its q/k norms), and with `embed_norm` one embedding norm per stack (in `norms`, so
  non-embedding). `token_embedding` counts the input matrices once per distinct matrix, `lm_head` is 0 when tied
  to one of them, plus vocab_size with `logits_bias` (not non-embedding, not a matmul); both stacks have their
  own position parameters. `flops_per_token` is per
  TARGET token of a pair with a source of `src_len` tokens (default `seq_len`) and a target of `seq_len`:
  forward per pair `2·S·(N_enc + N_kv) + 4·L_enc·H·D·S² + 2·T·N_dec + 4·L_dec·H·D·T·(T + S)`, divided by T,
  where N_enc = the encoder's non-embedding params, N_kv = the cross-attention key/value projections (run once per
  source token), N_dec = the rest of the decoder + vocab_size·d_model; the `T·S` term is cross-attention's QKᵀ
  and A·V. At S = T this is `2·N + 4·H·D·T·(L_enc + 2·L_dec)` with N = matmul_params; training is 3x forward.
  `kaplan_params` and `shape_for` are decoder-only.

References: Kaplan et al. 2020 (arXiv:2001.08361) table 1; PaLM (arXiv:2204.02311) appendix B.
"""

from __future__ import annotations

import math
from typing import Any

from arch.config import EncDecConfig, ModelConfig

# norms per block by (block kind, placement): sandwich adds output norms; a parallel block has one sublayer
_NORMS_PER_BLOCK = {("sequential", "pre"): 2, ("sequential", "post"): 2, ("sequential", "sandwich"): 4,
                    ("parallel", "pre"): 1, ("parallel", "post"): 1, ("parallel", "sandwich"): 2}
_FINAL_NORM = {"pre": 1, "post": 0, "sandwich": 1}  # post-LN blocks end in a norm already, so no ln_f
_MLP_IN_MATRICES = {"gelu": 1, "gelu_exact": 1, "relu": 1, "swiglu": 2}  # swiglu: a gate and an up projection


def _d_head(cfg: ModelConfig) -> int:
    return cfg.d_head if cfg.d_head is not None else cfg.d_model // cfg.n_heads


def _d_mlp(cfg: ModelConfig) -> int:
    return cfg.d_mlp if cfg.d_mlp is not None else 4 * cfg.d_model


def _per_norm(cfg: ModelConfig | EncDecConfig) -> int:
    """Parameters of one d_model-wide norm: LayerNorm has weight (+ bias when cfg.bias); RMSNorm a weight only."""
    return cfg.d_model * (2 if (cfg.norm_type == "layernorm" and cfg.bias) else 1)


def _cross_attention_kv(cfg: EncDecConfig) -> int:
    """Parameters of every decoder layer's cross-attention c_kv (d -> 2·Hkv·D): the part that reads the source."""
    kvd = (cfg.n_kv_heads or cfg.n_heads) * _d_head(cfg)
    return cfg.n_decoder_layers * (cfg.d_model + (1 if cfg.bias else 0)) * 2 * kvd


def _encdec_breakdown(cfg: EncDecConfig) -> dict[str, int]:
    enc, dec = param_breakdown(cfg.encoder_config()), param_breakdown(cfg.decoder_config())
    d, V, Vs, L = cfg.d_model, cfg.vocab_size, cfg.src_vocab_size or cfg.vocab_size, cfg.n_decoder_layers
    # cross-attention: c_q (d -> H·D), c_kv (d -> 2·Hkv·D), c_proj: the very shapes of a self-attention's c_attn
    # and c_proj, so the decoder view's self-attention count again; plus ln_cross (and ln_cross_out) per layer
    # and, with qk_norm, q_norm / k_norm (D each)
    cross = dec["attention"]
    cross_norms = L * (2 if cfg.norm == "sandwich" else 1) * _per_norm(cfg) + (0 if cfg.qk_norm is None else
                                                                               L * 2 * _d_head(cfg))
    shared_inputs = cfg.tie_embeddings in ("all", "inputs")  # encoder.wte is decoder.wte
    return {
        "token_embedding": V * d if shared_inputs else Vs * d + V * d,
        "position": enc["position"] + dec["position"],
        # an untied output matrix, plus the logits bias (BART's final_logits_bias) whether tied or not
        "lm_head": (0 if cfg.tie_embeddings in ("all", "decoder") else V * d) + (V if cfg.logits_bias else 0),
        "attention": enc["attention"] + dec["attention"] + cross,
        "mlp": enc["mlp"] + dec["mlp"],
        "norms": enc["norms"] + dec["norms"] + cross_norms + (2 * _per_norm(cfg) if cfg.embed_norm else 0),
    }


def param_breakdown(cfg: ModelConfig | EncDecConfig) -> dict[str, int]:
    """Parameter count per part of the model, in closed form.

    Keys: `token_embedding`, `position`, `lm_head` (0 when tied), `attention`, `mlp`, `norms`.
    Their sum is `count_params(cfg)`; `attention + mlp + norms` is the non-embedding count. For an EncDecConfig
    both stacks are summed (attention includes the cross-attention; see the module docstring).

    Example (GPT-2 small): {'token_embedding': 38597376, 'position': 786432, 'lm_head': 0,
    'attention': 28348416, 'mlp': 56669184, 'norms': 38400}
    """
    if isinstance(cfg, EncDecConfig):
        return _encdec_breakdown(cfg)
    d, L, V = cfg.d_model, cfg.n_layers, cfg.vocab_size
    hd = cfg.n_heads * _d_head(cfg)  # attention width H·D (= d_model unless d_head is set)
    kvd = (cfg.n_kv_heads or cfg.n_heads) * _d_head(cfg)  # key (and value) width Hkv·D
    f = _d_mlp(cfg)
    b = 1 if cfg.bias else 0

    kind = cfg.pos.kind  # only learned and relative have position parameters (sinusoidal, alibi, rope, none: 0)
    if kind == "learned":
        position = cfg.n_ctx * d  # wpe
    elif kind == "relative":
        position = cfg.pos.num_buckets * cfg.n_heads  # one table shared by all layers (T5)
    else:
        position = 0

    # c_attn: d -> H·D + 2·Hkv·D (fused q, k, v); c_proj: H·D -> d
    qkv = hd + 2 * kvd
    attention = d * qkv + b * qkv + hd * d + b * d
    # in: d -> f (x2 for swiglu's gate and up); out (c_proj): f -> d
    n_in = _MLP_IN_MATRICES[cfg.activation]
    mlp = n_in * (d * f + b * f) + f * d + b * d
    per_norm = _per_norm(cfg)
    n_norms = L * _NORMS_PER_BLOCK[cfg.block, cfg.norm] + _FINAL_NORM[cfg.norm]
    # qk_norm: q_norm and k_norm per layer, each a (d_head,) weight shared by the heads; never a shift
    qk_norms = 0 if cfg.qk_norm is None else L * 2 * _d_head(cfg)

    return {
        "token_embedding": V * d,
        "position": position,
        "lm_head": 0 if cfg.tie_embeddings else V * d,
        "attention": L * attention,
        "mlp": L * mlp,
        "norms": n_norms * per_norm + qk_norms,
    }


def count_params(cfg: ModelConfig | EncDecConfig, non_embedding: bool = False) -> int:
    """Number of parameters of `build_model(cfg)`, without building it (tied weights counted once).

    `non_embedding=True` drops token embedding, untied lm_head and all position parameters (see module doc).

    Example: count_params(PRESETS["gpt2-small"]) == 124_439_808; with non_embedding=True, 85_056_000.
    count_params(encdec_preset_config("transformer-base", vocab_size=37000, n_ctx=256)) == 63_082_496.
    """
    parts = param_breakdown(cfg)
    if non_embedding:
        return parts["attention"] + parts["mlp"] + parts["norms"]
    return sum(parts.values())


def kaplan_params(cfg: ModelConfig) -> int:
    """Kaplan et al.'s approximation of the non-embedding count, N ≈ 12·n_layers·d_model².

    It assumes d_attn = d_model, d_mlp = 4·d_model and a two-matrix MLP, and ignores biases and norms.
    Example: kaplan_params(PRESETS["gpt2-small"]) == 84_934_656 (vs 85_056_000 exact).
    """
    return 12 * cfg.n_layers * cfg.d_model**2


def matmul_params(cfg: ModelConfig | EncDecConfig) -> int:
    """The N of the FLOP formulas: non-embedding parameters plus the unembedding (vocab_size·d_model)."""
    return count_params(cfg, non_embedding=True) + cfg.vocab_size * cfg.d_model


def _encdec_flops_per_token(cfg: EncDecConfig, T: int, S: int, training: bool) -> float:
    """Per target token of a (S source, T target) pair; the formula is in the module docstring."""
    # applied to each source token (with embed_norm, the encoder's ln_emb too)
    n_enc = count_params(cfg.encoder_config(), non_embedding=True) + (_per_norm(cfg) if cfg.embed_norm else 0)
    n_kv = _cross_attention_kv(cfg)  # cross-attention k / v projections: once per source token
    n_dec = count_params(cfg, non_embedding=True) - n_enc - n_kv + cfg.vocab_size * cfg.d_model  # per target token
    hd = cfg.n_heads * _d_head(cfg)  # H·D
    fwd = 2 * S * (n_enc + n_kv) + 4 * cfg.n_encoder_layers * hd * S * S \
        + 2 * T * n_dec + 4 * cfg.n_decoder_layers * hd * T * (T + S)  # one pair, forward
    return (3 if training else 1) * fwd / T


def flops_per_token(cfg: ModelConfig | EncDecConfig, seq_len: int | None = None, training: bool = True,
                    src_len: int | None = None) -> float:
    """FLOPs per token: training `6·N + 12·L·H·D·T` (forward + backward), or forward-only `2·N + 4·L·H·D·T`.

    N = `matmul_params(cfg)`, T = `seq_len` (default `cfg.n_ctx`), or min(T, cfg.window) keys per query with a
    sliding window; see the module docstring for the why.
    Multiply by tokens/s and divide by peak FLOP/s for model FLOPs utilisation (MFU).
    EncDecConfig: per target token, T = seq_len target and S = src_len (default T) source tokens per pair;
    at S = T training is `6·N + 12·H·D·T·(L_enc + 2·L_dec)` (module docstring).

    Example: flops_per_token(PRESETS["gpt2-small"]) == 6 * 123_653_376 + 12 * 12 * 12 * 64 * 1024 ≈ 8.55e8.
    """
    T = cfg.n_ctx if seq_len is None else seq_len
    if isinstance(cfg, EncDecConfig):
        return _encdec_flops_per_token(cfg, T, T if src_len is None else src_len, training)
    if src_len is not None:
        raise ValueError("src_len is for an encoder-decoder (EncDecConfig); a decoder-only model has no source")
    n = matmul_params(cfg)
    keys = T if cfg.window is None else min(T, cfg.window)  # keys counted per query
    attn = cfg.n_layers * cfg.n_heads * _d_head(cfg) * keys  # L·H·D·T
    if training:
        return float(6 * n + 12 * attn)
    return float(2 * n + 4 * attn)


# ----------------------------------------------------------------------------------------------------------
# shape solver


def _with_width(base: dict[str, Any], n_layers: int, d_model: int, n_heads: int | None, d_head: int | None) -> ModelConfig:
    """Config with the given depth/width; heads follow from whichever of n_heads / d_head is fixed."""
    kw = dict(base, n_layers=n_layers, d_model=d_model)
    if n_heads is not None:
        kw["n_heads"] = n_heads
        kw["d_head"] = d_head  # None -> d_model // n_heads
    else:
        kw["n_heads"] = d_model // d_head
        kw["d_head"] = None  # derived value equals d_head since d_model is a multiple of it
    return ModelConfig(**kw)


def _granularity(n_heads: int | None, d_head: int | None, base: dict[str, Any]) -> int:
    # d_model moves in steps of the head size (H = d_model / D stays whole), or of n_heads when H is fixed;
    # rope needs an even d_head, so then d_model moves in steps of 2·n_heads
    if n_heads is not None and d_head is None:
        pos = base.get("pos")
        kind = pos.get("kind", "learned") if isinstance(pos, dict) else getattr(pos, "kind", "learned")
        return 2 * n_heads if kind == "rope" else n_heads
    return d_head


def _solve_width(target: int, n_layers: int, base: dict[str, Any], n_heads: int | None, d_head: int | None) -> ModelConfig:
    """The config at this depth whose non-embedding count is closest to `target` (d_model a multiple of g)."""
    g = _granularity(n_heads, d_head, base)

    def count(m: int) -> int:  # non-embedding params at d_model = m·g; strictly increasing in m
        return count_params(_with_width(base, n_layers, m * g, n_heads, d_head), non_embedding=True)

    # exponential then binary search for the last m with count(m) <= target
    lo, hi = 1, 2
    while count(hi) <= target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count(mid) <= target:
            lo = mid
        else:
            hi = mid
    # lo is the floor multiple (or 1 if even the narrowest model is over budget); hi = lo + 1 is above
    best = min((lo, hi), key=lambda m: (abs(count(m) - target), m))
    return _with_width(base, n_layers, best * g, n_heads, d_head)


def shape_for(
    n_params: int,
    n_layers: int | None = None,
    aspect_ratio: float | None = None,
    n_heads: int | None = None,
    d_head: int | None = None,
    **cfg_kwargs: Any,
) -> ModelConfig:
    """A `ModelConfig` whose NON-EMBEDDING parameter count is as close as the rounding allows to `n_params`.

    Give exactly one of `n_layers` (depth fixed, d_model solved) or `aspect_ratio` (= d_model / n_layers; the
    depth whose solved width gives the aspect ratio closest in log space is chosen, then d_model is solved for
    that depth, so the budget is met as tightly as with a fixed depth and the ratio is approximate).

    d_model is a multiple of the head size `d_head` (default 64; n_heads = d_model // d_head), or, when
    `n_heads` is given without `d_head`, a multiple of n_heads (d_head = d_model // n_heads; of 2·n_heads
    with rope, which needs an even d_head). Of the two
    multiples bracketing the budget, the one with the smaller |count - n_params| is returned (ties: narrower).
    Everything else (vocab_size, n_ctx, activation, pos, norm, ...) comes from `cfg_kwargs`; d_mlp stays derived
    unless given. Use `shape_report` for the real count and the deviation.

    Example: shape_for(85e6, n_layers=12, vocab_size=50257, n_ctx=1024)  ->  d_model=768, n_heads=12
    (the GPT-2 small shape; its non-embedding count 85,056,000 deviates +0.07%).
    """
    if (n_layers is None) == (aspect_ratio is None):
        raise ValueError("shape_for: give exactly one of n_layers or aspect_ratio")
    if n_heads is None and d_head is None:
        d_head = 64
    target = int(round(n_params))
    if target <= 0:
        raise ValueError(f"shape_for: n_params must be positive, got {n_params}")
    for key in ("d_model", "n_layers", "n_heads", "d_head"):
        if key in cfg_kwargs:
            raise ValueError(f"shape_for: {key!r} is solved or passed explicitly, not via cfg_kwargs")
    base = dict(cfg_kwargs)

    if n_layers is not None:
        if n_layers < 1:
            raise ValueError(f"shape_for: n_layers must be >= 1, got {n_layers}")
        return _solve_width(target, n_layers, base, n_heads, d_head)

    if aspect_ratio <= 0:
        raise ValueError(f"shape_for: aspect_ratio must be positive, got {aspect_ratio}")
    # count ≈ 12·L·d² = 12·a²·L³ gives a starting depth; search depths around it
    guess = max(1, round((target / (12 * aspect_ratio**2)) ** (1 / 3)))
    best: tuple[float, int, ModelConfig] | None = None
    for L in range(max(1, guess // 2), 2 * guess + 2):
        cfg = _solve_width(target, L, base, n_heads, d_head)
        key = (abs(math.log(cfg.d_model / L / aspect_ratio)), abs(count_params(cfg, non_embedding=True) - target))
        if best is None or key < best[:2]:
            best = (*key, cfg)
    return best[2]


def shape_report(cfg: ModelConfig, target: float | None = None) -> dict[str, Any]:
    """Real counts of `cfg` and, with a `target` budget, the relative deviation of its non-embedding count.

    Example: shape_report(shape_for(1e6, n_layers=4, n_heads=4, vocab_size=512, n_ctx=128), 1e6)
    -> {'n_layers': 4, 'd_model': 144, 'n_heads': 4, 'd_head': 36, ..., 'non_embedding_params': 1003104,
        'target': 1000000.0, 'deviation': 0.003104}
    """
    non_emb = count_params(cfg, non_embedding=True)
    out: dict[str, Any] = {
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "d_head": _d_head(cfg),
        "aspect_ratio": cfg.d_model / cfg.n_layers,
        "params": count_params(cfg),
        "non_embedding_params": non_emb,
        "kaplan_params": kaplan_params(cfg),
    }
    if target is not None:
        out["target"] = target
        out["deviation"] = (non_emb - target) / target
    return out
