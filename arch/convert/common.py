"""Helpers the per-family converters share: naming a knob in a refusal, loading a state dict exactly, and for
the encoder-decoders reading the embedding ties off the tensors and building the loaded EncoderDecoder.

A refusal is one ValueError line that names the setting with no counterpart, in the spelling a user passes on
the command line: `model.pos.kind=alibi has no HF equivalent (...)` for our configs, `LlamaConfig
hidden_act='gelu' has no archlab equivalent (...)` for Hugging Face ones.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from arch.config import EncDecConfig
from arch.encdec import TIES, EncoderDecoder, build_encdec


def setting(name: str, value: Any) -> str:
    """The Hydra spelling of one of our config values: setting("model.bias", False) -> "model.bias=false"."""
    if isinstance(value, bool):
        value = str(value).lower()
    elif value is None:
        value = "null"
    return f"{name}={value}"


def no_hf_equivalent(name: str, value: Any, why: str) -> ValueError:
    """ValueError("model.norm=post has no HF equivalent (GPT-2 is pre-LN)")."""
    return ValueError(f"{setting(name, value)} has no HF equivalent ({why})")


def no_archlab_equivalent(hf_config: Any, name: str, value: Any, why: str) -> ValueError:
    """ValueError("LlamaConfig hidden_act='gelu' has no archlab equivalent (...)")."""
    return ValueError(f"{type(hf_config).__name__} {name}={value!r} has no archlab equivalent ({why})")


def load_exact(model: nn.Module, state: dict[str, Tensor], what: str, optional: tuple[str, ...] = ()) -> None:
    """model.load_state_dict(state) that names every missing / unexpected key (a tied `lm_head.weight` and the
    `optional` keys may be missing). Copies the values, so `state` may hold views of another model's tensors."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k not in optional]
    if missing or unexpected:
        raise ValueError(f"{what} conversion mismatch: missing {missing}, unexpected {unexpected}")


def check_all_used(state: dict[str, Tensor], used: set[str], what: str) -> None:
    """Refuse a state dict with entries the converter did not map (a module this converter does not know, which
    would otherwise be dropped silently)."""
    left = sorted(set(state) - used)
    if left:
        raise ValueError(f"{what} conversion: {left[:4]}{' ...' if len(left) > 4 else ''} have no counterpart")


def class_names(obj: Any) -> list[str]:
    """Names of obj's class and its bases, most derived first (the registry is keyed by class name, so arch
    never imports transformers)."""
    return [c.__name__ for c in type(obj).__mro__]


def param_dtype(model: nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def param_device(model: nn.Module) -> torch.device:
    """Where the model's parameters are: to_hf builds the HF model there (a CUDA model exports to a CUDA model)."""
    return next(model.parameters()).device


def same_tensor(a: Tensor, b: Tensor) -> bool:
    """True when a and b are one tied matrix (state_dict lists a tied Parameter under every alias, one storage)."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def encdec_tie(hf_config: Any, enc_in: Tensor, dec_in: Tensor, out: Tensor) -> str:
    """Our EncDecConfig.tie_embeddings for an HF encoder-decoder's source embedding, target embedding and output
    matrix, from which of them are one tensor: all three -> "all", the inputs -> "inputs", ... A pairing we
    have no key for (source = output, target apart) is refused."""
    inputs, head = same_tensor(enc_in, dec_in), same_tensor(dec_in, out)
    if inputs and head:
        return "all"
    if inputs:
        return "inputs"
    if head:
        return "decoder"
    if same_tensor(enc_in, out):
        raise no_archlab_equivalent(hf_config, "tied embeddings", "source = output",
                                    "ours ties the output to the target embedding or to both inputs")
    return "none"


def build_loaded_encdec(cfg: EncDecConfig, state: dict[str, Tensor], what: str) -> EncoderDecoder:
    """build_model(cfg) (an EncoderDecoder) in the state's dtype with `state` loaded exactly; the aliases of tied
    matrices (arch.encdec.TIES: `decoder.wte.weight`, `lm_head.weight`) may be missing from `state`."""
    model = build_encdec(cfg).to(state["encoder.wte.weight"].dtype)
    load_exact(model, state, what, optional=tuple(f"{dst}.weight" for dst, _ in TIES[cfg.tie_embeddings]))
    return model
