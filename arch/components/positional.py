"""Position encodings behind one interface with three no-op hooks, and the POSITIONAL registry.

An encoding acts in (at most) one of three places, so the model never asks "which kind?":
  * `embed(x, start)`        adds to the token embeddings (learned, sinusoidal);
  * `attn_bias(start, t)`    an additive score bias (H, t, start+t), shared by all layers (relative, alibi);
  * `rotate(q, k, start)`    rotates queries and keys (rope).
`start` is the absolute position of the first of the `t` new tokens (non-zero only with a KV cache), so every
hook works on absolute positions. The causal mask is NOT part of `attn_bias`: the model folds it in.
Everything except `learned` runs at any length: tables are cached as non-persistent buffers and regrown
(at least doubling) when a longer sequence arrives. Sinusoidal is added as `pos.scale` x table (see
SinusoidalPositional). RoPE can be scaled for length extrapolation (`pos.rope_scaling`: the ROPE_SCALING
registry, linear / ntk / yarn, static). `build_positional(cfg, bidirectional=True)` gives an encoder's
(arch.encdec) variant from BIDIRECTIONAL_POSITIONAL: T5's bidirectional relative buckets and a symmetric ALiBi
penalty; the other kinds are direction-free and the same classes. Not handled: dynamic NTK (the scale growing
with the sequence), LongRoPE / Llama-3 rope scaling, partial rotary dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from arch.config import ModelConfig

# sinusoidal table multiplier when pos.scale is None: table RMS (1/sqrt 2) x this = 0.02, GPT-2's embedding init std
DEFAULT_SINUSOIDAL_SCALE = 0.02 * math.sqrt(2)


class Positional(nn.Module):
    """Base class: every hook is a no-op. `max_len` is None when any sequence length works."""

    max_len: int | None = None

    def embed(self, x: Tensor, start: int) -> Tensor:  # x (B, T, C)
        return x

    def attn_bias(self, start: int, t: int) -> Tensor | None:  # -> (H, t, start + t) or None
        return None

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:  # q, k (B, H, T, D)
        return q, k


class NoPositional(Positional):
    """NoPE: no position information at all; the causal mask alone breaks symmetry.
    https://arxiv.org/abs/2203.16634 (Haviv et al. 2022)"""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()


class LearnedPositional(Positional):
    """GPT-2's learned absolute position embedding `wpe` (n_ctx, C); cannot run past n_ctx.
    https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf"""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.max_len = cfg.n_ctx
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)

    def embed(self, x: Tensor, start: int) -> Tensor:
        end = start + x.shape[1]
        if end > self.max_len:
            raise ValueError(
                f"learned positions cover n_ctx={self.max_len}; got T={end}; use a non-learned encoding to extrapolate"
            )
        return x + self.wpe.weight[start:end]  # (B, T, C) + (T, C)


def sinusoidal_table(n_pos: int, d_model: int) -> Tensor:
    """(n_pos, d_model) float64: sin on even dims, cos on odd dims, angle p / 10000^(2i / d_model)."""
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(C/2),)
    angle = pos / (10000.0 ** (two_i / d_model))  # (P, ceil(C/2))
    table = torch.empty(n_pos, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table


class SinusoidalPositional(Positional):
    """Fixed sinusoids added to the embeddings (no parameters), computed for any length.
    https://arxiv.org/abs/1706.03762 (Vaswani et al. 2017, section 3.5)

    The table is the paper's closed form (amplitude 1, RMS 1/sqrt(2)); it is added times `pos.scale`, by default
    0.02 * sqrt(2), so its RMS equals GPT-2's N(0, 0.02) init of token and learned position embeddings.
    Vaswani et al. instead multiply the token embeddings by sqrt(d_model); at GPT-2's init that leaves the
    position signal many times larger than the token signal, and with tied embeddings it dominates the output
    (demo sweep, d_model 64: val/loss 5.95 unscaled, 5.70 at 1/sqrt(d), 5.18 at the default, 4.48 at 0.005).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.scale = cfg.pos.scale if cfg.pos.scale is not None else DEFAULT_SINUSOIDAL_SCALE
        self.register_buffer("table", sinusoidal_table(cfg.n_ctx, cfg.d_model).float(), persistent=False)

    def embed(self, x: Tensor, start: int) -> Tensor:
        end = start + x.shape[1]
        if end > self.table.shape[0]:
            n = max(end, 2 * self.table.shape[0])
            self.table = sinusoidal_table(n, self.d_model).to(self.table)
        return x + self.scale * self.table[start:end]  # (B, T, C) + (T, C)


def relative_bucket(relative_position: Tensor, num_buckets: int = 32, max_distance: int = 128,
                    bidirectional: bool = False) -> Tensor:
    """T5's bucket of `relative_position = key_pos - query_pos`: unidirectional (causal, <= 0 for visible keys) by
    default, or bidirectional (an encoder) as T5's `_relative_position_bucket(bidirectional=True)`.

    Distances n = max(query - key, 0) below num_buckets // 2 get their own bucket; larger ones are log-spaced
    over the remaining buckets up to max_distance; farther ones share the last bucket.
    Example (32, 128): n=0..15 -> 0..15, n=16 -> 16, n=20 -> 17, n=32 -> 21, n=64 -> 26, n=127 -> 31, n=1000 -> 31.
    Bidirectional: each direction gets num_buckets // 2 buckets laid out the same way over n = |key - query|,
    keys before (or at) the query in 0 .. nb/2 - 1, keys after it in nb/2 .. nb - 1.
    Example (32, 128): -3 -> 3, 0 -> 0, +3 -> 19, -8 -> 8, +8 -> 24, -1000 -> 15, +1000 -> 31.
    """
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = (relative_position > 0).long() * num_buckets  # keys after the query: the upper half
        n = relative_position.abs()
    else:
        n = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    # subtle: log(0) is avoided by clamping; those entries take the `is_small` branch anyway
    large = max_exact + (
        torch.log(n.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return offset + torch.where(is_small, n, large)


class RelativePositional(Positional):
    """T5 relative position bias: a learned scalar per (bucket, head), shared by all layers, added to scores.
    Causal buckets (a decoder); BidirectionalRelativePositional is the encoder's.
    https://arxiv.org/abs/1910.10683 (Raffel et al. 2020, section 2.1)"""

    bidirectional = False  # relative_bucket's mode

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = cfg.pos.num_buckets, cfg.pos.max_distance
        self.rel_bias = nn.Embedding(cfg.pos.num_buckets, cfg.n_heads)  # (num_buckets, H)
        self.register_buffer("buckets", self._bucket_table(cfg.n_ctx), persistent=False)

    def _bucket_table(self, n: int) -> Tensor:
        pos = torch.arange(n)
        rel = pos[None, :] - pos[:, None]  # (Tq, Tk) key - query
        return relative_bucket(rel, self.num_buckets, self.max_distance, self.bidirectional)  # (Tq, Tk)

    def attn_bias(self, start: int, t: int) -> Tensor:
        end = start + t
        if end > self.buckets.shape[0]:
            self.buckets = self._bucket_table(max(end, 2 * self.buckets.shape[0])).to(self.buckets.device)
        idx = self.buckets[start:end, :end]  # (t, Tk)
        return self.rel_bias.weight.t()[:, idx]  # (H, t, Tk)


class BidirectionalRelativePositional(RelativePositional):
    """T5's encoder bias: keys before and after the query get separate buckets (num_buckets // 2 per direction;
    T5's `_relative_position_bucket(bidirectional=True)`). Parameters as RelativePositional: `rel_bias`."""

    bidirectional = True


def alibi_slopes(n_heads: int) -> list[float]:
    """Head slopes of Press et al.: geometric 2^(-8/n), 2^(-16/n), ... for a power-of-two n; otherwise the
    slopes of the nearest lower power of two followed by every other slope of the next power of two."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    lower = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(lower) + alibi_slopes(2 * lower)[0::2][: n_heads - lower]


class AlibiPositional(Positional):
    """ALiBi: a fixed per-head linear penalty slope_h * (key - query) on the scores; no parameters.
    https://arxiv.org/abs/2108.12409 (Press et al. 2021)"""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg.n_heads))[:, None, None], persistent=False)
        self.register_buffer("distance", self._distance_table(cfg.n_ctx), persistent=False)

    @staticmethod
    def _distance_table(n: int) -> Tensor:
        pos = torch.arange(n, dtype=torch.float32)
        return pos[None, :] - pos[:, None]  # (Tq, Tk): key - query, <= 0 on and below the diagonal

    def attn_bias(self, start: int, t: int) -> Tensor:
        end = start + t
        if end > self.distance.shape[0]:
            self.distance = self._distance_table(max(end, 2 * self.distance.shape[0])).to(self.distance)
        return self.slopes * self.distance[start:end, :end]  # (H, 1, 1) * (t, Tk) -> (H, t, Tk)


class SymmetricAlibiPositional(AlibiPositional):
    """ALiBi for a bidirectional encoder: the penalty slope_h * |key - query| on both sides of the query (Press et
    al. define only the causal side; this symmetric form is the usual encoder extension). No parameters."""

    @staticmethod
    def _distance_table(n: int) -> Tensor:
        pos = torch.arange(n, dtype=torch.float32)
        return -(pos[None, :] - pos[:, None]).abs()  # (Tq, Tk): -|key - query|


def rope_inv_freq(d_head: int, base: float) -> Tensor:
    """(D/2,) float64 theta_i = base^(-2i / D), i = 0 .. D/2 - 1 (Su et al. 2021)."""
    return base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)


def linear_scaling(d_head: int, base: float, s: float, original_n_ctx: int) -> tuple[Tensor, float]:
    """Position interpolation: every theta_i / s, i.e. position p is rotated as p / s.
    https://arxiv.org/abs/2306.15595 (Chen et al. 2023); HF rope_type "linear"."""
    return rope_inv_freq(d_head, base) / s, 1.0


def ntk_scaling(d_head: int, base: float, s: float, original_n_ctx: int) -> tuple[Tensor, float]:
    """NTK-aware scaling: base -> base * s^(D / (D - 2)), so the lowest frequency is interpolated by s and the
    highest is left alone (bloc97 2023; YaRN paper section 3.1, https://arxiv.org/abs/2309.00071). Static: HF's
    "dynamic" rope at factor 1 and sequence length s * n_ctx gives the same frequencies."""
    return rope_inv_freq(d_head, base * s ** (d_head / (d_head - 2))), 1.0


YARN_BETA_FAST, YARN_BETA_SLOW = 32.0, 1.0  # the YaRN paper's beta = 32, alpha = 1 (HF's defaults); not config


def yarn_scaling(d_head: int, base: float, s: float, original_n_ctx: int) -> tuple[Tensor, float]:
    """YaRN ("NTK-by-parts" + attention temperature), https://arxiv.org/abs/2309.00071 (Peng et al. 2023).

    A dim whose wavelength fits many times into the original context L keeps theta_i (extrapolation); one that
    fits less than once is interpolated (theta_i / s); in between a linear ramp. The ramp runs between the dims
    making beta_fast = 32 and beta_slow = 1 rotations over L, floor / ceil-ed and clamped to [0, D - 1] exactly
    as HF's `_compute_yarn_parameters` (and the paper's code). The second value, 0.1 ln(s) + 1 = sqrt(1 / t),
    multiplies cos and sin, so q.k (after rotation) is scaled by 1 / t = (0.1 ln(s) + 1)^2."""
    theta = rope_inv_freq(d_head, base)  # (D/2,)

    def correction_dim(n_rotations: float) -> float:  # the dim i (fractional) making n rotations over L
        return d_head * math.log(original_n_ctx / (n_rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(YARN_BETA_FAST)), 0)
    high = min(math.ceil(correction_dim(YARN_BETA_SLOW)), d_head - 1)
    if low == high:
        high += 0.001  # as HF: avoid a division by zero
    ramp = ((torch.arange(d_head // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)  # 0 keep, 1 / s
    inv_freq = theta / s * ramp + theta * (1 - ramp)
    return inv_freq, (0.1 * math.log(s) + 1.0 if s > 1 else 1.0)


def rope_tables(n_pos: int, d_head: int, base: float, scaling: str | None = None, factor: float = 1.0,
                original_n_ctx: int | None = None) -> tuple[Tensor, Tensor]:
    """cos, sin (n_pos, d_head // 2) float64 of angle p * theta_i, theta_i = base^(-2i / d_head), or the
    ROPE_SCALING[scaling] frequencies at factor s (times its cos/sin multiplier, YaRN's temperature);
    original_n_ctx None -> n_pos."""
    if scaling is None:
        inv_freq, mult = rope_inv_freq(d_head, base), 1.0  # (D/2,)
    else:
        inv_freq, mult = ROPE_SCALING[scaling](d_head, base, factor, original_n_ctx or n_pos)
    angle = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv_freq  # (P, D/2)
    if mult == 1.0:
        return angle.cos(), angle.sin()
    return angle.cos() * mult, angle.sin() * mult


class RotaryPositional(Positional):
    """RoPE on q and k, "rotate-half" layout (GPT-NeoX / HF Llama): dim i pairs with dim i + D/2, rotated by
    angle p * base^(-2i/D). So q.k after rotation depends only on the offset between the two positions.
    https://arxiv.org/abs/2104.09864 (Su et al. 2021)

    pos.rope_scaling (linear | ntk | yarn, factor pos.rope_scaling_factor, yarn's original context
    pos.original_n_ctx or n_ctx) replaces the frequencies (ROPE_SCALING) at every length, training included."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.d_head, self.base = cfg.d_head, cfg.pos.rope_base
        self.scaling = dict(scaling=cfg.pos.rope_scaling, factor=cfg.pos.rope_scaling_factor,
                            original_n_ctx=cfg.pos.original_n_ctx or cfg.n_ctx)
        cos, sin = rope_tables(cfg.n_ctx, self.d_head, self.base, **self.scaling)
        self.register_buffer("cos", cos.float(), persistent=False)
        self.register_buffer("sin", sin.float(), persistent=False)

    def rotate(self, q: Tensor, k: Tensor, start: int) -> tuple[Tensor, Tensor]:
        end = start + q.shape[-2]
        if end > self.cos.shape[0]:
            cos, sin = rope_tables(max(end, 2 * self.cos.shape[0]), self.d_head, self.base, **self.scaling)
            self.cos, self.sin = cos.to(self.cos), sin.to(self.sin)
        cos, sin = self.cos[start:end], self.sin[start:end]  # (T, D/2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE: x (B, H, T, D), cos/sin (T, D/2) -> (B, H, T, D)."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, D/2) each
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


POSITIONAL: dict[str, type[Positional]] = {
    "learned": LearnedPositional,
    "sinusoidal": SinusoidalPositional,
    "relative": RelativePositional,
    "alibi": AlibiPositional,
    "rope": RotaryPositional,
    "none": NoPositional,
}


# an encoder's (bidirectional) variant of each kind: same keys; direction-free kinds are the same classes
BIDIRECTIONAL_POSITIONAL: dict[str, type[Positional]] = {
    **POSITIONAL,
    "relative": BidirectionalRelativePositional,
    "alibi": SymmetricAlibiPositional,
}


# pos.rope_scaling -> (d_head, base, s, original_n_ctx) -> (inv_freq (D/2,) float64, cos/sin multiplier)
ROPE_SCALING: dict[str, Callable[[int, float, float, int], tuple[Tensor, float]]] = {
    "linear": linear_scaling,
    "ntk": ntk_scaling,
    "yarn": yarn_scaling,
}


def build_positional(cfg: ModelConfig, bidirectional: bool = False) -> Positional:
    """POSITIONAL[cfg.pos.kind](cfg), or the encoder's BIDIRECTIONAL_POSITIONAL variant when bidirectional."""
    kind = cfg.pos.kind
    registry = BIDIRECTIONAL_POSITIONAL if bidirectional else POSITIONAL
    if kind not in registry:
        raise ValueError(f"unknown pos {kind!r}; choose from {sorted(registry)}")
    return registry[kind](cfg)
