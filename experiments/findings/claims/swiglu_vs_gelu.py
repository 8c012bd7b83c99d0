"""Finding `swiglu_vs_gelu`: a SwiGLU MLP with hidden 8/3 · d_model (equal parameters) beats a GELU MLP with hidden
4 · d_model at the same number of steps.

Shazeer 2020, "GLU Variants Improve Transformer", https://arxiv.org/abs/2002.05202 (Table 1). Sweep:
conf/experiment/finding_swiglu_vs_gelu.yaml; the (activation, d_mlp) pairs are conf/finding/ffn/ (not hashed by the
registration); registered: experiments/findings/registered/swiglu_vs_gelu.json (the text and sha256 of this module
and of the sweep YAML).
"""

from __future__ import annotations

from dataclasses import replace

from experiments.findings.evidence import Evidence, Verdict, lower_than_baseline

NAME = "swiglu_vs_gelu"
TITLE = "SwiGLU beats GELU at equal parameters"
CLAIM = ("A SwiGLU feed-forward layer with hidden size 8/3 · d_model (the same parameter count as a 4 · d_model GELU "
         "layer) reaches a lower loss than the GELU layer after the same number of steps.")
CITATION = ("Shazeer, *GLU Variants Improve Transformer*, 2020, [arXiv:2002.05202](https://arxiv.org/abs/2002.05202) "
            "(Table 1)")
PAPER = "Shazeer 2020"
PAPER_NUMBER = ("Table 1: log-perplexity on C4 after 65,536 steps, FFN_GELU 1.983 vs FFN_SwiGLU 1.944 "
                "(−0.039).")
SETUP = """\
- Sweep: `finding/ffn` ∈ {gelu: `model.activation=gelu model.d_mlp=512`, swiglu: `model.activation=swiglu
  model.d_mlp=341`} × seeds 0–4 = 10 runs (`conf/experiment/finding_swiglu_vs_gelu.yaml`, `conf/finding/ffn/`).
  MLP weights per layer: gelu 2 · 128 · 512 = 131,072; swiglu 3 · 128 · 341 = 130,944 (whole model 1,071,872 vs
  1,072,040 parameters: within 0.02%).
- Model: d_model 128, 4 layers, 4 heads, pre-LN, LayerNorm, learned positions, GPT-2 init; n_ctx 128, batch 16.
- Budget held equal: 2M training tokens per run (= equal steps). AdamW lr 2e-3 (betas 0.9/0.95, weight decay 0.1),
  cosine schedule, 100 warmup steps, down to 0.1 · lr.
- Tokenizer: our byte-level BPE, vocab 2048.
- Metric: final `val/loss`, swiglu − gelu, paired by seed."""
BY = ("model.activation", "model.d_mlp")
BASELINE = {"model.activation": "gelu"}
FIGURES = ("curve_val_loss.png", "final_val_loss.png")
RULE = ("**Reproduced** if the 95% CI of swiglu − gelu final val/loss lies below 0 (upper bound < 0); **not "
        "reproduced** otherwise: \"not distinguishable at this n\" when the CI covers 0, \"GELU better\" when it lies "
        "above 0.")

SESOI = 0.02  # nats: the smallest swiglu − gelu difference of interest, for the seeds-needed line
SESOI_WHY = ("half the paper's own difference (Table 1: −0.039 in log-perplexity, the same unit as our nats): a gap "
             "smaller than half of it would not count as the paper's effect at this scale.")


def rule(ev: Evidence) -> Verdict:
    v = lower_than_baseline(ev, {"model.activation": "swiglu"}, ("swiglu", "gelu"), sesoi=SESOI)
    params = {}
    for r in ev.records:
        if r.get("params"):
            params.setdefault(r.keys.get("model.activation"), r.get("params"))
    if not (params.get("gelu") and params.get("swiglu")):
        return v
    said = (f" Parameters: gelu {int(params['gelu']):,}, swiglu {int(params['swiglu']):,} "
            f"({100 * (params['swiglu'] / params['gelu'] - 1):+.2f}%).")
    return replace(v, explanation=v.explanation + said)
