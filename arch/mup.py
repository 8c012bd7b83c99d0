"""μP, the Maximal Update Parametrization (Yang et al. 2022, "Tensor Programs V: Tuning Large Neural Networks via
Zero-Shot Hyperparameter Transfer", https://arxiv.org/abs/2203.03466): `ModelConfig(param="mup", base_width=B)`.

Under μP the best learning rate stays put as the model widens, so an lr tuned on a narrow proxy (d_model = B)
transfers to d_model = m·B. Width means d_model, d_head and d_mlp together (n_heads, n_kv_heads, depth, vocab and
context stay): `base_config(cfg)` is the proxy. Which dims of a parameter grow with width is read from the shapes,
as the mup package's `set_base_shapes` does: a dim is "infinite" where the model's size differs from the proxy's
(`infshapes`, the proxy built on the meta device). Two infinite dims: a hidden matrix ("matrix-like"); one: an
embedding, bias, norm gain or the readout ("vector-like"); none: finite (T5's relative-bias table).

The scalings, Table 3 of the paper for Adam in the mup package's form (MuReadout, the paper's Table 8). At the
proxy's width (m = 1) every factor is 1 and the model is SP, bit for bit:

| parameter                                   | kind          | init std                | AdamW lr       | weight decay |
|---------------------------------------------|---------------|-------------------------|----------------|--------------|
| embeddings, biases, norm and q/k-norm gains | vector-like   | the scheme's            | lr             | wd           |
| relative-position bias table                | finite        | the scheme's            | lr             | wd           |
| hidden matrices (q/k/v, attention out, MLP, | matrix-like   | the scheme's × r^-1/2   | lr / r         | wd × r       |
|   cross-attention)                          |               |                         |                |              |
| readout lm_head (tied or not)               | vector-like   | the scheme's            | lr             | wd           |

r = fan_in / the proxy's fan_in of that matrix (= m when d_model, d_head, d_mlp scale together). Weight decay
follows the mup package's MuAdamW (decoupled_wd=False): lr x wd, what torch's AdamW decays by, is kept.
Forward: the readout's input is multiplied by base_width / d_model (MuReadout's output multiplier; the readout
keeps its init rather than starting at zero, so a tied readout works: `Readout`), and attention scores use
sqrt(base_d_head) / d_head instead of 1 / sqrt(d_head) (the paper's 1/d attention, equal to SP at the proxy).

Handled: every position encoding, norm placement, activation, GQA/MQA, tied and untied embeddings, the
encoder-decoder (both stacks and the readout). Not handled: init=xavier (it already scales with width; refused
by ModelConfig), depth transfer (μP is about width), the paper's zero-initialised readout and query.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def width_mult(cfg: Any) -> float:
    """m = d_model / base_width (1.0 for SP)."""
    return cfg.d_model / cfg.base_width if cfg.param == "mup" else 1.0


def base_config(cfg: Any) -> Any:
    """The proxy's config (a ModelConfig or EncDecConfig): d_model = base_width, d_head and d_mlp scaled by 1/m
    (rounded, at least 1), SP. For SP, cfg itself."""
    if cfg.param != "mup":
        return cfg
    m = width_mult(cfg)
    return dataclasses.replace(cfg, d_model=cfg.base_width, d_head=max(1, round(cfg.d_head / m)),
                               d_mlp=max(1, round(cfg.d_mlp / m)), param="sp", base_width=None)


def attention_scale(cfg: Any) -> float:
    """The factor on q·k: 1 / sqrt(d_head) (SP); sqrt(base_d_head) / d_head (μP, ∝ 1/d_head)."""
    if cfg.param != "mup":
        return 1.0 / math.sqrt(cfg.d_head)
    return math.sqrt(base_config(cfg).d_head) / cfg.d_head


def readout_mult(cfg: Any) -> float:
    """The factor on the readout's input: 1 (SP), base_width / d_model (μP)."""
    return 1.0 / width_mult(cfg)


class Readout(nn.Linear):
    """lm_head: a Linear whose input is multiplied by `input_mult` (1.0: a plain Linear, no extra op). Its weight may
    be the token embedding (tied). The fused loss reads `input_mult` too (arch.fused_loss.lm_loss)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, input_mult: float = 1.0) -> None:
        super().__init__(in_features, out_features, bias=bias)
        self.input_mult = input_mult

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x * self.input_mult if self.input_mult != 1.0 else x, self.weight, self.bias)


@dataclass(frozen=True)
class InfShape:
    """One parameter's shape against the proxy's: how many dims grow with width, and fan_in / the proxy's fan_in."""

    ninf: int
    fan_in_mult: float

    @property
    def matrix_like(self) -> bool:
        return self.ninf == 2


def infshapes(model: nn.Module) -> dict[str, InfShape]:
    """{parameter name: InfShape} for a model built with param='mup' (the proxy, built on the meta device from
    base_config(model.cfg) with the model's own class, allocates nothing)."""
    with torch.device("meta"):
        base = type(model)(base_config(model.cfg))
    base_shapes = {name: p.shape for name, p in base.named_parameters()}
    out = {}
    for name, p in model.named_parameters():
        b = base_shapes[name]
        ninf = sum(1 for n, n0 in zip(p.shape, b) if n != n0)
        if ninf > 2:
            raise ValueError(f"{name}: {ninf} dims grow with width; μP here handles at most 2")
        out[name] = InfShape(ninf, p.shape[-1] / b[-1] if p.ndim >= 2 else 1.0)
    return out


@torch.no_grad()
def rescale_init(model: nn.Module) -> None:
    """After the init scheme: every matrix-like weight × fan_in_mult^-1/2 (the table's init column)."""
    if model.cfg.param != "mup":
        return
    shapes = infshapes(model)
    for name, p in model.named_parameters():
        if shapes[name].matrix_like and shapes[name].fan_in_mult != 1.0:
            p.mul_(shapes[name].fan_in_mult ** -0.5)


def lr_multipliers(model: nn.Module) -> dict[str, float]:
    """{parameter name: factor on the lr}: 1 / fan_in_mult for matrix-like weights, else 1 (all 1 for SP). The
    weight decay of a parameter is multiplied by the inverse (MuAdamW, decoupled_wd=False)."""
    if getattr(model, "cfg", None) is None or model.cfg.param != "mup":
        return {name: 1.0 for name, _ in model.named_parameters()}
    return {name: 1.0 / s.fan_in_mult if s.matrix_like else 1.0 for name, s in infshapes(model).items()}


def fold_problem(cfg: Any) -> ValueError | None:
    """Why fold_into_sp would refuse a model of `cfg`, as the one-line ValueError; None when it folds (or is SP)."""
    if cfg.param != "mup":
        return None
    if cfg.tie_embeddings:
        return ValueError("model.param=mup with tie_embeddings=true: the readout multiplier base_width/d_model cannot "
                          "be folded into a matrix that is also the input embedding; export an untied model")
    if cfg.qk_norm is not None:
        return ValueError(f"model.param=mup with qk_norm={cfg.qk_norm}: the attention factor cannot be folded into "
                          f"the query weights (the norm undoes it)")
    return None


@torch.no_grad()
def fold_into_sp(model: nn.Module) -> nn.Module:
    """A copy of a decoder-only μP model as an SP model computing the same function (for export to formats without
    μP's multipliers, e.g. Hugging Face): the readout multiplier folded into an untied lm_head, the extra attention
    factor sqrt(base_d_head / d_head) into the query rows of c_attn (weight and bias; RoPE rotates linearly, so it
    commutes). ValueError (one line) where no weight can hold a multiplier: a tied readout (it is the input
    embedding too) and qk_norm (the norm undoes a scaled query). SP models come back as they are."""
    cfg = model.cfg
    if cfg.param != "mup":
        return model
    if (problem := fold_problem(cfg)) is not None:
        raise problem
    sp_cfg = dataclasses.replace(cfg, param="sp", base_width=None)
    folded = copy.deepcopy(model)
    folded.cfg = sp_cfg
    folded.lm_head.weight.mul_(folded.lm_head.input_mult)
    folded.lm_head.input_mult = 1.0
    q_factor = attention_scale(cfg) / attention_scale(sp_cfg)
    for module in folded.modules():
        if hasattr(module, "qkv_sizes"):  # a self-attention: c_attn's first rows are q
            q_rows = module.qkv_sizes[0]
            module.c_attn.weight[:q_rows].mul_(q_factor)
            if module.c_attn.bias is not None:
                module.c_attn.bias[:q_rows].mul_(q_factor)
            module.scale = attention_scale(sp_cfg)
    return folded
