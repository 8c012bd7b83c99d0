"""ModelConfig and PosConfig: the plain, serialisable description of a model (no torch import here).

Every string choice is a registry key: the torch modules (arch.components) hold dicts keyed by exactly the names
below (`POSITIONAL`, `NORMS`, `BLOCKS`, `BLOCK_KINDS`, `MLPS`, `ATTENTION`, `INITS`, `ROPE_SCALING`), and a test checks
they agree. `qk_norm` and `pos.rope_scaling` also take None (off).
`d_head` / `d_mlp` left as None are derived in `__post_init__`, so a built config always holds concrete sizes.
EncDecConfig describes the encoder-decoder (arch.encdec); its two stacks are built from ModelConfig views of it
(`encoder_config()` / `decoder_config()`), so every ModelConfig rule and message applies to them too.
Not handled here: seeding, devices, dtypes (configs are pure data; seed in the training loop).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# Valid choices, one tuple per registry (kept here so the config validates without importing torch).
POS_KINDS = ("learned", "sinusoidal", "relative", "alibi", "rope", "none")
NORM_PLACEMENTS = ("pre", "post", "sandwich")
NORM_TYPES = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "gelu_exact", "relu", "swiglu")
ATTENTION_IMPLS = ("explicit", "sdpa", "manual")
INIT_SCHEMES = ("gpt2", "xavier")
BLOCK_KINDS = ("sequential", "parallel")
QK_NORMS = NORM_TYPES  # qk_norm: None (off) or one of the norm types, applied per head over d_head
ROPE_SCALINGS = ("linear", "ntk", "yarn")  # pos.rope_scaling: None (off) or one of these
PARAMETRIZATIONS = ("sp", "mup")  # param: standard, or μP with base_width (arch.mup)
# EncDecConfig.tie_embeddings: which of source embedding, target embedding and output projection share one matrix
TIE_EMBEDDINGS = ("all", "inputs", "decoder", "none")


def _check_choice(what: str, value: Any, choices: tuple[str, ...], nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if value not in choices:
        extra = " or None" if nullable else ""
        raise ValueError(f"unknown {what} {value!r}; choose from {sorted(choices)}{extra}")


def _check_param(cfg: ModelConfig) -> None:
    """param / base_width: μP needs the proxy's width, and a constant-std init to scale (arch.mup)."""
    _check_choice("param", cfg.param, PARAMETRIZATIONS)
    if cfg.param == "sp":
        if cfg.base_width is not None:
            raise ValueError(f"base_width={cfg.base_width} is μP's proxy width: set param='mup' (model/param=mup) "
                             f"or leave base_width None")
        return
    if not _is_pos_int(cfg.base_width):
        raise ValueError(f"param='mup' needs base_width, the d_model the learning rate was tuned at (e.g. "
                         f"model.base_width=64), got {cfg.base_width!r}")
    if cfg.init != "gpt2":
        raise ValueError(f"param='mup' scales the gpt2 init's constant std by width; init={cfg.init!r} already "
                         f"scales with width (it would be scaled twice): use init='gpt2'")


def _is_pos_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _from_dict(cls: type, d: dict[str, Any]) -> Any:
    """cls(**d), but an unknown key raises a ValueError naming it and listing the valid keys."""
    if not isinstance(d, dict):
        raise TypeError(f"{cls.__name__}.from_dict expects a dict, got {type(d).__name__}")
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in d if k not in valid]
    if unknown:
        raise ValueError(f"unknown {cls.__name__} key(s) {unknown}; valid keys are {valid}")
    return cls(**d)


@dataclass
class PosConfig:
    """Which position encoding, plus its parameters (each field says which kind reads it)."""

    kind: str = "learned"  # learned | sinusoidal | relative | alibi | rope | none
    num_buckets: int = 32  # relative only: number of T5 distance buckets (half exact, half log-spaced)
    max_distance: int = 128  # relative only: distances >= this share the last bucket
    rope_base: float = 10000.0  # rope only: theta_i = rope_base ** (-2i / d_head)
    # sinusoidal only: the table (amplitude 1) is multiplied by this before it is added to the token embeddings.
    # None -> 0.02 * sqrt(2): the table's RMS then equals GPT-2's N(0, 0.02) init of learned positions, so
    # learned vs sinusoidal compare at the same initial position-signal size.
    scale: float | None = None
    # rope only, length extrapolation (see RotaryPositional): None | linear | ntk | yarn, by the factor s below.
    # Static: the scaled frequencies are used at every length, in training too.
    rope_scaling: str | None = None
    rope_scaling_factor: float = 1.0  # rope_scaling only: s, the context extension factor (>= 1)
    original_n_ctx: int | None = None  # rope_scaling=yarn only: context the correction range is for; None -> n_ctx

    def __post_init__(self) -> None:
        _check_choice("pos kind", self.kind, POS_KINDS)
        _check_choice("pos.rope_scaling", self.rope_scaling, ROPE_SCALINGS, nullable=True)
        if self.rope_scaling is not None and self.kind != "rope":
            raise ValueError(f"pos.rope_scaling={self.rope_scaling!r} needs pos.kind='rope', got kind={self.kind!r}")
        if not isinstance(self.rope_scaling_factor, (int, float)) or isinstance(self.rope_scaling_factor, bool) \
                or self.rope_scaling_factor < 1.0:
            raise ValueError(f"pos.rope_scaling_factor must be a number >= 1, got {self.rope_scaling_factor!r}")
        if self.rope_scaling is None and self.rope_scaling_factor != 1.0:
            raise ValueError(f"pos.rope_scaling_factor={self.rope_scaling_factor} needs pos.rope_scaling; "
                             f"choose from {sorted(ROPE_SCALINGS)}")
        if self.original_n_ctx is not None and not _is_pos_int(self.original_n_ctx):
            raise ValueError(f"pos.original_n_ctx must be a positive int or None (-> n_ctx), "
                             f"got {self.original_n_ctx!r}")
        if self.original_n_ctx is not None and self.rope_scaling != "yarn":
            raise ValueError(f"pos.original_n_ctx is read by rope_scaling='yarn' only, "
                             f"got rope_scaling={self.rope_scaling!r}")
        if self.num_buckets < 2:
            raise ValueError(f"pos.num_buckets must be >= 2, got {self.num_buckets}")
        if self.max_distance < 1:
            raise ValueError(f"pos.max_distance must be >= 1, got {self.max_distance}")
        if self.kind == "relative" and self.max_distance <= self.num_buckets // 2:
            # the log-spaced buckets span num_buckets // 2 .. max_distance; an empty span gives nonsense buckets
            raise ValueError(f"pos.max_distance must be > num_buckets // 2 = {self.num_buckets // 2} for relative "
                             f"positions, got {self.max_distance}")
        if self.rope_base <= 1.0:
            raise ValueError(f"pos.rope_base must be > 1, got {self.rope_base}")
        if self.scale is not None and self.scale <= 0:
            raise ValueError(f"pos.scale must be > 0 (or null for the default), got {self.scale}")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PosConfig:
        """PosConfig.from_dict({"kind": "relative", "num_buckets": 16}); unknown keys raise."""
        return _from_dict(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class ModelConfig:
    """A GPT-style decoder. The defaults (with pos=learned) are exactly GPT-2's architecture.

    >>> cfg = ModelConfig(vocab_size=512, n_ctx=128, d_model=128, n_layers=2, n_heads=4)
    >>> cfg.d_head, cfg.d_mlp
    (32, 512)

    `d_head` / `d_mlp` hold the derived sizes after construction, so when copying a config with a new d_model
    or n_heads (dataclasses.replace, or editing to_dict()), pass d_head=None / d_mlp=None to re-derive them.
    """

    vocab_size: int  # number of token ids (the tokenizer's vocab_size)
    n_ctx: int  # training context length; learned positions cover exactly this many
    d_model: int  # residual stream width C
    n_layers: int  # number of blocks
    n_heads: int  # attention heads H
    d_head: int | None = None  # per-head width D; None -> d_model // n_heads
    # key/value heads (grouped-query attention, Ainslie et al. 2023): None -> n_heads (multi-head); must divide
    # n_heads; 1 = multi-query (Shazeer 2019). Query head h reads kv head h // (n_heads // n_kv_heads).
    n_kv_heads: int | None = None
    d_mlp: int | None = None  # MLP hidden width; None -> 4 * d_model (swiglu: gate and up are each d_mlp wide)
    activation: str = "gelu"  # gelu (tanh approximation, GPT-2's "gelu_new") | relu | swiglu
    pos: PosConfig = field(default_factory=PosConfig)  # position encoding; a dict is converted
    norm: str = "pre"  # pre | post | sandwich: where the norms sit around each sublayer
    block: str = "sequential"  # sequential | parallel: attn then mlp, or both on one input (GPT-J / PaLM)
    norm_type: str = "layernorm"  # layernorm | rmsnorm
    bias: bool = True  # biases in Linears and LayerNorms, like GPT-2; False: none anywhere
    dropout: float = 0.0  # on embeddings, attention probabilities and residual branches (GPT-2 places)
    tie_embeddings: bool = True  # output projection shares the token embedding matrix
    attention: str = "sdpa"  # explicit (einsum) | sdpa (torch fused) | manual (hand-written backward)
    window: int | None = None  # sliding-window attention: query i sees keys i - window < j <= i; None: all j <= i
    qk_norm: str | None = None  # None | layernorm | rmsnorm: per-head norm over d_head on q and k, before rope
    # weight init: gpt2 = N(0, 0.02), residual projections / sqrt(2 n_layers); xavier = xavier_uniform Linears,
    # embeddings N(0, 1/d_model) (Vaswani et al. 2017 as analysed by Xiong et al. 2020)
    init: str = "gpt2"
    layer_norm_eps: float = 1e-5  # epsilon of every LayerNorm / RMSNorm
    # parametrization (arch.mup): sp = standard; mup = μP (Yang et al. 2022) relative to a proxy of d_model
    # base_width (d_head, d_mlp scaled with it): the lr tuned on the proxy transfers to this width
    param: str = "sp"
    base_width: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.pos, dict):
            self.pos = PosConfig.from_dict(self.pos)
        if not isinstance(self.pos, PosConfig):
            raise TypeError(f"pos must be a PosConfig or a dict, got {type(self.pos).__name__}")
        for name in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_head is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(
                    f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                    f"change one of them or set d_head explicitly"
                )
            self.d_head = self.d_model // self.n_heads
        if self.d_mlp is None:
            self.d_mlp = 4 * self.d_model
        for name in ("d_head", "d_mlp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")
        if self.n_kv_heads is not None and (not _is_pos_int(self.n_kv_heads) or self.n_heads % self.n_kv_heads):
            raise ValueError(f"n_kv_heads must be a positive divisor of n_heads={self.n_heads} (1 = multi-query) "
                             f"or None (= n_heads), got {self.n_kv_heads!r}")
        if self.window is not None and not _is_pos_int(self.window):
            raise ValueError(f"window must be a positive int (keys per query) or None (full causal), "
                             f"got {self.window!r}")
        if self.pos.kind == "rope" and self.d_head % 2 != 0:
            raise ValueError(f"rope rotates pairs of dims, so d_head must be even; got d_head={self.d_head}")
        if self.pos.rope_scaling == "ntk" and self.d_head <= 2:
            raise ValueError(f"rope_scaling='ntk' raises the base to s^(d_head/(d_head-2)): d_head must be > 2, "
                             f"got {self.d_head}")
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("norm", self.norm, NORM_PLACEMENTS)
        _check_choice("block", self.block, BLOCK_KINDS)
        _check_choice("qk_norm", self.qk_norm, QK_NORMS, nullable=True)
        _check_choice("norm_type", self.norm_type, NORM_TYPES)
        _check_choice("attention", self.attention, ATTENTION_IMPLS)
        _check_choice("init", self.init, INIT_SCHEMES)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}")
        _check_param(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """ModelConfig.from_dict({"vocab_size": 256, ..., "pos": {"kind": "rope"}}); unknown keys raise."""
        return _from_dict(cls, dict(d))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (pos as a dict); from_dict(cfg.to_dict()) == cfg."""
        return dataclasses.asdict(self)


@dataclass
class EncDecConfig:
    """An encoder-decoder transformer (Vaswani et al. 2017): a bidirectional encoder over the source and a causal
    decoder that also cross-attends to the encoder output. Fields shared with ModelConfig mean the same there.

    >>> cfg = EncDecConfig(vocab_size=512, n_ctx=64, d_model=64, n_encoder_layers=2, n_decoder_layers=2, n_heads=4)
    >>> cfg.encoder_config().n_layers, cfg.tie_embeddings
    (2, 'all')

    `embed_norm`, `scale_decoder_output` and `logits_bias` are what BART and T5 need beyond the Vaswani model
    (arch.convert.from_hf maps both onto this config).
    Not here (refused or absent): `block` (always sequential), `window` (full attention), separate source and
    target widths / head counts / position encodings.
    """

    vocab_size: int  # target vocabulary: decoder input and output (the source's too unless src_vocab_size is set)
    n_ctx: int  # longest source and longest target the learned positions cover (each stack has its own table)
    d_model: int  # residual stream width C of both stacks
    n_encoder_layers: int  # encoder blocks (self-attention, MLP)
    n_decoder_layers: int  # decoder blocks (causal self-attention, cross-attention, MLP)
    n_heads: int  # attention heads H (self- and cross-attention)
    src_vocab_size: int | None = None  # source vocabulary; None -> vocab_size (a shared vocabulary)
    d_head: int | None = None  # None -> d_model // n_heads
    n_kv_heads: int | None = None  # key/value heads of every attention (GQA); None -> n_heads
    d_mlp: int | None = None  # None -> 4 * d_model
    activation: str = "gelu"  # gelu | relu | swiglu
    pos: PosConfig = field(default_factory=PosConfig)  # both stacks; the encoder's relative / alibi are bidirectional
    norm: str = "pre"  # pre | post | sandwich
    norm_type: str = "layernorm"  # layernorm | rmsnorm
    bias: bool = True  # biases in Linears and LayerNorms
    dropout: float = 0.0  # embeddings, attention probabilities, residual branches (self- and cross-attention)
    # all: source embedding = target embedding = output projection (Vaswani et al. section 3.4, T5 v1.0, BART);
    # inputs: source = target embedding, separate output (T5 v1.1); decoder: target embedding = output, separate
    # source embedding (Press & Wolf 2017); none: three matrices
    tie_embeddings: str = "all"
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model) (Vaswani et al. section 3.4)
    # a norm (norm_type) on token + position embeddings in both stacks, before dropout (BART's layernorm_embedding)
    embed_norm: bool = False
    # multiply the decoder output by d_model**-0.5 before lm_head (T5 v1.0; HF T5's scale_decoder_outputs)
    scale_decoder_output: bool = False
    # a learned (vocab_size,) bias on the logits, lm_head.bias (BART's final_logits_bias); loss() runs unfused
    logits_bias: bool = False
    src_pad_id: int | None = None  # source id masked as padding when no explicit src_mask is given; None: no mask
    attention: str = "sdpa"  # explicit | sdpa | manual
    qk_norm: str | None = None  # None | layernorm | rmsnorm (self- and cross-attention)
    init: str = "gpt2"  # gpt2 | xavier, applied per stack (gpt2's residual scaling uses that stack's depth)
    layer_norm_eps: float = 1e-5
    param: str = "sp"  # sp | mup (arch.mup), both stacks and the readout
    base_width: int | None = None  # mup: d_model of the proxy

    def __post_init__(self) -> None:
        if isinstance(self.pos, dict):
            self.pos = PosConfig.from_dict(self.pos)
        if not isinstance(self.pos, PosConfig):
            raise TypeError(f"pos must be a PosConfig or a dict, got {type(self.pos).__name__}")
        for name in ("n_encoder_layers", "n_decoder_layers"):
            if not _is_pos_int(getattr(self, name)):
                raise ValueError(f"{name} must be a positive int, got {getattr(self, name)!r}")
        for name in ("embed_norm", "scale_decoder_output", "logits_bias"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.src_vocab_size is not None and not _is_pos_int(self.src_vocab_size):
            raise ValueError(f"src_vocab_size must be a positive int or None (= vocab_size), "
                             f"got {self.src_vocab_size!r}")
        _check_choice("tie_embeddings", self.tie_embeddings, TIE_EMBEDDINGS)
        if self.tie_embeddings in ("all", "inputs") and self.src_vocab_size not in (None, self.vocab_size):
            raise ValueError(f"tie_embeddings={self.tie_embeddings!r} shares the source and target embeddings, so "
                             f"src_vocab_size must equal vocab_size={self.vocab_size}; got {self.src_vocab_size}")
        if self.pos.kind == "relative" and self.pos.num_buckets < 4:
            raise ValueError(f"pos.num_buckets must be >= 4 for relative positions in an encoder-decoder (the "
                             f"bidirectional encoder halves them per direction), got {self.pos.num_buckets}")
        decoder = self.decoder_config()  # every ModelConfig rule (sizes, choices, rope / GQA constraints)
        self.d_head, self.d_mlp = decoder.d_head, decoder.d_mlp
        if self.src_pad_id is not None and not (isinstance(self.src_pad_id, int) and not isinstance(
                self.src_pad_id, bool) and 0 <= self.src_pad_id < self.encoder_config().vocab_size):
            raise ValueError(f"src_pad_id must be a source token id in [0, {self.encoder_config().vocab_size}) or "
                             f"None, got {self.src_pad_id!r}")

    def _stack_config(self, vocab_size: int | None, n_layers: int) -> ModelConfig:
        return ModelConfig(
            vocab_size=vocab_size or self.vocab_size, n_ctx=self.n_ctx, d_model=self.d_model, n_layers=n_layers,
            n_heads=self.n_heads, d_head=self.d_head, n_kv_heads=self.n_kv_heads, d_mlp=self.d_mlp,
            activation=self.activation, pos=self.pos, norm=self.norm, norm_type=self.norm_type, bias=self.bias,
            dropout=self.dropout, attention=self.attention, qk_norm=self.qk_norm, init=self.init,
            layer_norm_eps=self.layer_norm_eps, param=self.param, base_width=self.base_width,
        )

    def encoder_config(self) -> ModelConfig:
        """The ModelConfig the encoder is built from: n_layers = n_encoder_layers, vocab_size = the source's."""
        return self._stack_config(self.src_vocab_size, self.n_encoder_layers)

    def decoder_config(self) -> ModelConfig:
        """The ModelConfig the decoder is built from: n_layers = n_decoder_layers, the target vocabulary."""
        return self._stack_config(self.vocab_size, self.n_decoder_layers)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncDecConfig:
        """EncDecConfig.from_dict({"vocab_size": 256, ..., "pos": {"kind": "relative"}}); unknown keys raise."""
        return _from_dict(cls, dict(d))

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (pos as a dict); from_dict(cfg.to_dict()) == cfg."""
        return dataclasses.asdict(self)


def config_diff(saved: dict[str, Any], cfg: ModelConfig | EncDecConfig) -> list[str]:
    """The fields in which `cfg` differs from `saved` (an earlier cfg.to_dict(), e.g. a checkpoint's), sorted. A field
    `saved` lacks (written before the field existed) counts as the field's default, so adding a field to the
    config does not make every earlier run a different model."""
    now = cfg.to_dict()
    defaults = {f.name: _default_of(f) for f in dataclasses.fields(cfg)}
    return sorted(k for k in {*now, *saved} if now.get(k) != saved.get(k, defaults.get(k)))


def _default_of(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return None if f.default is dataclasses.MISSING else f.default

