"""Finding `swiglu_vs_gelu_v2`: a SwiGLU MLP with hidden 8/3 · d_model (equal parameters) beats a GELU MLP with
hidden 4 · d_model at the same number of steps, each at its own best learning rate (version 2 of swiglu_vs_gelu).

Shazeer 2020, "GLU Variants Improve Transformer", https://arxiv.org/abs/2002.05202 (Table 1). Sweep:
conf/experiment/finding_swiglu_vs_gelu_v2.yaml (tuned: docs/findings/PLAN_v2.md), the (activation, d_mlp) pairs in
conf/finding/ffn/ (hashed: EXTRA_FILES); registered: experiments/findings/registered/swiglu_vs_gelu_v2.json.
"""

from __future__ import annotations

from experiments.findings import protocol_v2 as v2
from experiments.findings import swiglu_vs_gelu as v1
from experiments.findings.evidence import Evidence, Verdict

NAME = "swiglu_vs_gelu_v2"
TITLE = "SwiGLU beats GELU at equal parameters (v2: tuned, data seen once)"
CLAIM = ("A SwiGLU feed-forward layer with hidden size 8/3 · d_model (the same parameter count as a 4 · d_model GELU "
         "layer) reaches a lower loss than the GELU layer after the same number of steps, each at its own best "
         "learning rate.")
CITATION = ("Shazeer, *GLU Variants Improve Transformer*, 2020, [arXiv:2002.05202](https://arxiv.org/abs/2002.05202) "
            "(Table 1)")
PAPER = "Shazeer 2020"
PAPER_NUMBER = ("Table 1: log-perplexity on C4 after 65,536 steps, FFN_GELU 1.983 vs FFN_SwiGLU 1.944 "
                "(−0.039).")
TOKENS, EVAL_INTERVAL = 4_000_000, 195
SETUP = f"""\
- Arms: `finding/ffn` ∈ {{gelu: `model.activation=gelu model.d_mlp=512`, swiglu: `model.activation=swiglu
  model.d_mlp=341`}} (`conf/finding/ffn/`). MLP weights per layer: gelu 2 · 128 · 512 = 131,072; swiglu
  3 · 128 · 341 = 130,944 (whole model 1,071,872 vs 1,072,040 parameters: within 0.02%); 2 arms × 5 grid points
  tuning runs, then 2 × 3 final runs (`conf/experiment/finding_swiglu_vs_gelu_v2.yaml`).
{v2.shared_setup(TOKENS, EVAL_INTERVAL, model=v2.MODEL_SMALL.replace("GELU (tanh)", "the arm's MLP"))}
- Metric: final `val/loss`, swiglu − gelu, paired by seed, each arm at its own best lr."""
BY = ("model.activation", "model.d_mlp")
BASELINE = {"model.activation": "gelu"}
FIGURES = v2.FIGURES
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/finding/ffn/*.yaml", "experiments/findings/swiglu_vs_gelu.py")  # v1's rule
RULE = ("**Reproduced** if the 95% CI of swiglu − gelu final val/loss (best vs best, paired by seed) lies below 0 "
        "(upper bound < 0); **not reproduced** otherwise: \"not distinguishable at this n\" when the CI covers 0, "
        "\"GELU better\" when it lies above 0. One comparison: k = 1.")
SESOI = v2.SESOI
SESOI_WHY = ("about half the paper's own difference (Table 1: −0.039 in log-perplexity, the same unit as our nats), "
             "and the 2% perplexity margin every v2 finding uses: a smaller gap would not count as the paper's effect "
             "at this scale.")




def rule(ev: Evidence) -> Verdict:
    """v1's rule, unchanged (its module is hashed with this one): swiglu − gelu below 0, with the parameters."""
    return v1.rule(ev)
