"""Finding `swiglu_vs_gelu_v3`: a SwiGLU MLP with hidden 8/3 · d_model (equal parameters) beats a GELU MLP with hidden
4 · d_model, each at its own best learning rate confirmed at the full budget, at three sizes (version 3 of
swiglu_vs_gelu: docs/findings/PLAN_v3.md).

Shazeer 2020, "GLU Variants Improve Transformer", https://arxiv.org/abs/2002.05202 (Table 1). Sweep:
conf/experiment/finding_swiglu_vs_gelu_v3.yaml, the arms in conf/finding/ffn_v3/; shared setup: protocol_v3.py; rule:
experiments/findings/sized.py (hashed: EXTRA_FILES).
"""

from __future__ import annotations

from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.evidence import Evidence, Verdict
from experiments.findings.sized import across_sizes

NAME = "swiglu_vs_gelu_v3"
TITLE = "SwiGLU beats GELU at equal parameters (v3: confirmed lr, test novels, three sizes)"
CLAIM = ("A SwiGLU feed-forward layer with hidden size 8/3 · d_model (the same parameter count as a 4 · d_model GELU "
         "layer) reaches a lower loss than the GELU layer after the same number of steps, each at its own best "
         "learning rate.")
CITATION = ("Shazeer, *GLU Variants Improve Transformer*, 2020, [arXiv:2002.05202](https://arxiv.org/abs/2002.05202) "
            "(Table 1)")
PAPER = "Shazeer 2020"
PAPER_NUMBER = ("Table 1: log-perplexity on C4 after 65,536 steps, FFN_GELU 1.983 vs FFN_SwiGLU 1.944 "
                "(−0.039).")
SETUP = f"""\
{v3.shared_setup("`finding/ffn_v3` ∈ {gelu: d_mlp 4 · d_model, swiglu: d_mlp round(8/3 · d_model) = 85 / 171 / "
                 "341} (conf/finding/ffn_v3/; MLP weights per layer within 0.4% of GELU's at every size) × "
                 "`finding/size` ∈ {s, m, l}: 6 tuned arms")}
- Seeds: 9 fresh seeds per arm (0–8), from the power plan fixed before registration
  (docs/findings/swiglu_vs_gelu_v3/pilot.json, experiments/findings/pilot.py): 80% power for the 95% CI below 0 at a
  true difference of the SESOI 0.02 nats (paired t), at the noise of a pilot of 4 seeds per arm (2000–2003, lr 2e-3,
  untuned, at S and M; never reported) and of v2 at L: S 6 (sd 0.012 nats), M 9 (sd 0.018), L 5 (sd 0.0104, v2's 3 final
  seeds); the largest, 9.
- Metric: final `test/loss` (the 4 test novels), swiglu − gelu, paired by seed, per size."""
BY = ("model.activation", "model.d_model")
BASELINE = {"model.activation": "gelu", "model.d_model": 128}
FIGURES = v3.FIGURES
METRIC = "test/loss"  # the metric of the report the doc shows (its groups, curves and final_test_loss.png)
DATA = "eltec_v3"
EXTRA_FILES = (*v3.SHARED_FILES, "conf/finding/ffn_v3/*.yaml", "experiments/config/resolvers.py")
RULE = ("Per size, swiglu − gelu final test/loss (best vs best, paired by seed), read on its interval at the family "
        "level (98.3%: Bonferroni over the 3 sizes) by experiments/findings/outcome.py's table for the claim \"lower\" "
        "with SESOI 0.02 nats: **reproduced** (entirely below 0), **opposite** (entirely above 0), **equivalent** "
        "(inside ±0.02), **not reproduced** (excludes an effect of 0.02 below 0), else **inconclusive**; a size "
        "reproduced or opposite whose WikiText-2 difference has the other sign reads inconclusive. Overall: the "
        "label all sizes share, else **partly** if any size is reproduced, else inconclusive if any is, else not "
        "reproduced. The trend (slope per doubling of size, 95% CI) is reported, not judged.")
SESOI = v3.SESOI
SEED_CAP = v3.SEED_CAP
CLAIM_KIND = "lower"  # outcome.py's claim: the arm's loss below the baseline's
# the power plan's noise at L (d_model 128) besides the pilot's at S and M: v2's final runs (docs/findings/swiglu_vs_gelu_v2.md,
# "Seeds needed": sd of the per-seed differences, n = 3)
PRIOR_NOISE = {128: (0.0104, 2, "v2's 3 final seeds at this size (swiglu_vs_gelu_v2)")}
SMOKE = v3.SMOKE
SMOKE_SHAPE = False  # the sizes are the sweep: the smoke keeps them (3 steps each)
SESOI_WHY = ("about half the paper's own difference (Table 1: −0.039 in log-perplexity), and v2's 2% perplexity "
             "margin: a smaller gap would not count as the paper's effect at these sizes.")


def rule(ev: Evidence) -> Verdict:
    return across_sizes(ev, {"model.activation": "swiglu"}, {"model.activation": "gelu"}, ("swiglu", "gelu"),
                        claim="lower", sesoi=SESOI)
