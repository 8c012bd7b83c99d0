"""Hugging Face interop: `from_hf(hf_model)` -> our model, `to_hf(model)` -> a `transformers` model, same logits.

    from arch.convert import from_hf, to_hf
    ours = from_hf(transformers.LlamaForCausalLM(cfg)).eval()      # GPT2LMHeadModel / GPT2Model / LlamaForCausalLM
    ours = from_hf(transformers.BartForConditionalGeneration(c))   # or T5ForConditionalGeneration -> EncoderDecoder
    hf = to_hf(ours)                                                # GPT2LMHeadModel or LlamaForCausalLM, eval mode
    hf.save_pretrained("out")                                       # AutoModelForCausalLM.from_pretrained("out")

One module per family (gpt2.py, llama.py, t5.py, bart.py). `FROM_HF` maps an HF class name to its converter
(arch never imports transformers: the model's class name, or a base class's, picks the entry). `TO_HF` maps a
family name to its module; each module has `claims(model)` (a decoder family: our Transformer with its
`POS_KIND`), `problem(cfg)` (the first knob it has no counterpart for, or None) and
`to_hf(model, **hf_config_overrides)`. A config no family
takes is refused with one ValueError line naming the knob: `model.pos.kind=alibi has no HF equivalent (...)`.
A μP model (model.param=mup) is exported as the SP model computing the same function (arch.mup.fold_into_sp: the
multipliers folded into lm_head and the query weights), or refused in one line where they cannot be folded.
Exact in fp32 (max |Δlogits| in tests/arch/test_hf_convert.py and test_hf_convert_encdec.py). The encoder-decoder
families (T5, BART) are FROM_HF entries only: `to_hf` refuses an EncoderDecoder in one line.
`from arch.convert import from_hf_gpt2, gpt2_config` keeps working.
Not handled: other HF architectures (Mistral's window, Qwen 3's QK-norm, NeoX's parallel blocks would map onto
our knobs but have no converter yet), quantised / sharded loading, converting tokenizers (experiments.export).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from arch.convert import bart, gpt2, llama, t5
from arch.convert.common import class_names, setting
from arch.convert.gpt2 import from_hf_gpt2, gpt2_config
from arch.model import Transformer
from arch.mup import fold_into_sp, fold_problem


def hf_problem(model: Any) -> ValueError | None:
    """Why `to_hf(model)` would refuse, as the ValueError it would raise (one line), or None."""
    family = _family(model)
    if isinstance(family, ValueError):
        return family
    return fold_problem(model.cfg) or family.problem(model.cfg)


def to_hf(model: Any, **hf_config_overrides: Any):
    """Our model -> the matching transformers model (eval mode, same dtype and device, equal logits).

    hf_config_overrides go into the HF config (e.g. bos_token_id=, eos_token_id=; both default to None, since
    HF's defaults name ids of other vocabularies). Raises a one-line ValueError naming the knob with no HF
    counterpart, e.g. "model.pos.kind=alibi has no HF equivalent (...)"."""
    family = _family(model)
    if isinstance(family, ValueError):
        raise family
    return family.to_hf(fold_into_sp(model), **hf_config_overrides)  # μP: its multipliers folded into weights


def from_hf(hf_model: Any):
    """A transformers model (a class in FROM_HF, or a subclass) -> our model with identical logits."""
    for name in class_names(hf_model):
        if name in FROM_HF:
            return FROM_HF[name](hf_model)
    raise ValueError(f"{type(hf_model).__name__} has no archlab converter; supported: {sorted(FROM_HF)}")


def _family(model: Any) -> ModuleType | ValueError:
    for family in TO_HF.values():
        if family.claims(model):
            return family
    if not isinstance(model, Transformer):
        return ValueError(f"{type(model).__name__} has no HF converter; families: {sorted(TO_HF)}")
    takes = ", ".join(f"{f.POS_KIND} ({name})" for name, f in TO_HF.items() if hasattr(f, "POS_KIND"))
    return ValueError(f"{setting('model.pos.kind', model.cfg.pos.kind)} has no HF equivalent "
                      f"(HF families take pos.kind {takes})")


FROM_HF: dict[str, Callable[[Any], Any]] = {  # HF class name -> converter
    "GPT2LMHeadModel": from_hf_gpt2,
    "GPT2Model": from_hf_gpt2,
    "LlamaForCausalLM": llama.from_hf,
    "T5ForConditionalGeneration": t5.from_hf,  # -> arch.encdec.EncoderDecoder
    "BartForConditionalGeneration": bart.from_hf,  # -> arch.encdec.EncoderDecoder
}

TO_HF: dict[str, ModuleType] = {  # family -> module with claims(model), problem(cfg), to_hf(model, **overrides)
    "gpt2": gpt2,
    "llama": llama,
}

__all__ = ["FROM_HF", "TO_HF", "from_hf", "from_hf_gpt2", "gpt2_config", "hf_problem", "to_hf"]
