"""The `model` node of a run config: arch.ModelConfig's fields as a schema, and the one conversion to arch's configs.

`ModelNode` is made from arch.ModelConfig's own fields (same names, types and defaults; `pos` is arch.PosConfig
itself), so a new ModelConfig field is a new config key without editing this file. It differs where a run
differs from a built model:

* `vocab_size` is optional (null: set from the tokenizer at run time);
* `n_ctx`, `d_model`, `n_layers`, `n_heads` have no default (`???`): conf/train.yaml and a model preset set them;
* `tie_embeddings` also takes the encoder-decoder's names (all | inputs | decoder | none);
* `shape` (null, or arch.shape_for's arguments) asks shape_for to solve d_model / n_layers / n_heads for a
  parameter budget; a mapping while composing (OmegaConf 2.3 cannot merge a mapping into a typed node that is
  null), a ShapeNode in a RunConfig (RunConfig.from_dict builds it).

`EncDecModelNode` adds the encoder-decoder's depths and embedding scale; task=seq2seq switches the node to it
(conf/task/seq2seq.yaml lists `/schema/model/seq2seq@model`, a node of that class whose inherited fields are all
`???`: merged onto the composed model it changes the type and adds the fields, but no value).
Range and choice checks of the model are arch's (ModelConfig / PosConfig / EncDecConfig `__post_init__`):
`model_config` / `encdec_config` build them and report arch's ValueError as `model: <arch's message>`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf

from arch import EncDecConfig, ModelConfig, shape_for
from experiments.config.errors import ConfigError
from experiments.config.rules import Checked, choice, ruled

REQUIRED = ("n_ctx", "d_model", "n_layers", "n_heads")  # no default: train.yaml / a preset sets them
TIE_CHOICES = (True, False, "all", "inputs", "decoder", "none")  # bool (decoder-only) or EncDecConfig's names
ENCDEC_TIES = {True: "all", False: "none"}  # model.tie_embeddings as a bool (the decoder-only default) -> EncDecConfig's


@dataclass
class ShapeNode:
    """model.shape: arch.shape_for's arguments. n_params is the non-embedding budget; n_layers or aspect_ratio,
    and n_heads or d_head, pick the solution (null: shape_for's default)."""

    n_params: int = MISSING
    n_layers: int | None = None
    aspect_ratio: float | None = None
    n_heads: int | None = None
    d_head: int | None = None


def _node_field(f: dataclasses.Field, hint: Any) -> tuple[str, Any, dataclasses.Field]:
    """One ModelConfig field as a ModelNode field (name, type, default), with the run-time differences above."""
    if f.name == "vocab_size":
        return f.name, int | None, dataclasses.field(default=None)
    if f.name in REQUIRED:
        return f.name, hint, dataclasses.field(default=MISSING)
    if f.name == "tie_embeddings":
        return f.name, bool | str, ruled(f.default, choice(TIE_CHOICES))
    if f.default_factory is not dataclasses.MISSING:
        return f.name, hint, dataclasses.field(default_factory=f.default_factory)
    return f.name, hint, dataclasses.field(default=f.default)


def _model_node() -> type:
    hints = typing.get_type_hints(ModelConfig)
    fields = [_node_field(f, hints[f.name]) for f in dataclasses.fields(ModelConfig)]
    # Any while composing: OmegaConf cannot merge `model.shape={...}` into a typed node that is null (2.3)
    fields.append(("shape", Any, dataclasses.field(default=None)))
    node = dataclasses.make_dataclass("ModelNode", fields, bases=(Checked,))
    node.__module__ = __name__  # pickled by name (sweep jobs in other processes), like a class written out
    node.__doc__ = "The `model` node: arch.ModelConfig's fields (see the module docstring for the differences)."
    return node


ModelNode = _model_node()


@dataclass
class EncDecModelNode(ModelNode):  # type: ignore[valid-type, misc]
    """The `model` node of task=seq2seq: ModelNode plus the encoder-decoder's own keys."""

    n_encoder_layers: int | None = None  # null: model.n_layers
    n_decoder_layers: int | None = None  # null: model.n_layers
    scale_embeddings: bool = False  # multiply token embeddings by sqrt(d_model) (Vaswani 3.4)


def switch_to(cls: type) -> DictConfig:
    """A node of `cls` whose every inherited field is `???`: merged onto a filled node of the base class it
    changes the node's type to `cls` and adds cls's own fields (with their defaults), leaving every value."""
    node = OmegaConf.structured(cls)
    own = {f.name for f in dataclasses.fields(cls)} - {f.name for f in dataclasses.fields(cls.__mro__[1])}
    for name in node:
        if name not in own:
            node[name] = MISSING
    return node


def model_dict(model: Any) -> dict[str, Any]:
    """A model node (ModelNode or a plain dict from config.yaml) as a plain dict."""
    return dataclasses.asdict(model) if dataclasses.is_dataclass(model) else dict(model)


def encdec_config(model: Any, vocab_size: int, pad_id: int | None = None) -> EncDecConfig:
    """arch.EncDecConfig from the `model` node of a task=seq2seq run: n_layers is the default depth of both stacks
    (n_encoder_layers / n_decoder_layers override it), tie_embeddings true/false mean all/none; block must be
    sequential and window null (the encoder-decoder has neither); src_pad_id is the tokenizer's <|pad|>."""
    d = model_dict(model)
    d["vocab_size"] = int(vocab_size)
    n_layers = d.pop("n_layers", None)
    if d.pop("shape", None):
        raise ConfigError("model.shape: the shape solver is decoder-only; set d_model / n_layers for task=seq2seq")
    if d.pop("block", "sequential") != "sequential":
        raise ConfigError("model.block: the encoder-decoder has sequential blocks only (no model/block=parallel)")
    if d.pop("window", None) is not None:
        raise ConfigError("model.window: the encoder-decoder has full attention only (no sliding window)")
    for key in ("n_encoder_layers", "n_decoder_layers"):
        if d.get(key) is None:
            d[key] = n_layers
    d["tie_embeddings"] = ENCDEC_TIES.get(d.get("tie_embeddings"), d.get("tie_embeddings"))
    d["src_pad_id"] = pad_id
    try:
        return EncDecConfig.from_dict(d)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: {e}") from None


def model_config(model: Any, vocab_size: int) -> ModelConfig:
    """arch.ModelConfig from the `model` node; `shape: {n_params, n_layers | aspect_ratio[, n_heads | d_head]}`
    replaces d_model / n_layers / n_heads / d_head by arch.shape_for's solution for that non-embedding budget."""
    d = model_dict(model)
    d["vocab_size"] = int(vocab_size)
    shape = d.pop("shape", None)
    try:
        if not shape:
            return ModelConfig.from_dict(d)
        if shape.get("n_params") is None:
            raise ValueError("model.shape needs n_params (the non-embedding parameter budget)")
        for key in ("d_model", "n_layers", "n_heads", "d_head"):
            d.pop(key, None)
        if d.get("pos") is None:
            d.pop("pos", None)  # absent -> ModelConfig's default, as in the no-shape branch
        solver_args = {k: shape.get(k) for k in ("n_layers", "aspect_ratio", "n_heads", "d_head")}
        return shape_for(shape["n_params"], **solver_args, **d)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"model: {e}") from None
