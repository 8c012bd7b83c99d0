"""The model each arm of a finding's sweep builds, without training: for the closed-form numbers a rule reports
beside the losses (KV-cache bytes, the shape a parameter budget solves to).

    cfgs = arm_models("finding_gqa_vs_mha", {"mha": ["finding/kv=mha"], "gqa": ["finding/kv=gqa"]}, overrides)
    cfgs["gqa"].n_kv_heads, arch.count_params(cfgs["gqa"])

Each arm is the finding's experiment composed with the arm's overrides and the run's single-valued overrides (the
smoke shape, the data), checked (experiments.config.check.validate) and turned into arch.ModelConfig with the
tokenizer's vocab_size as configured (the vocab a run trains may be smaller when the corpus is: the arm's counts
here are then an upper bound, and the doc's as-run parameters are the runs' own).
Not handled: encoder-decoder tasks.
"""

from __future__ import annotations

from typing import Sequence


def arm_models(experiment: str, arms: dict[str, Sequence[str]], overrides: Sequence[str] = ()) -> dict:
    """{label: arch.ModelConfig} of each arm (module docstring)."""
    from experiments.config.check import model_config, validate
    from experiments.config.compose import compose_config

    out = {}
    for label, arm in arms.items():
        c = validate(compose_config([f"experiment={experiment}", *arm, *overrides]))
        out[label] = model_config(c.model, int(c.tokenizer.vocab_size))
    return out
