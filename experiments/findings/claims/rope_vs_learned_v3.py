"""Finding `rope_vs_learned_v3`: rotary position embeddings (RoPE) reach a lower held-out loss than learned absolute
positions at the same token budget, each at its own best learning rate confirmed at the full budget, at three sizes
(version 3 of rope_vs_learned: docs/findings/PLAN_v3.md).

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", https://arxiv.org/abs/2104.09864.
Sweep: conf/experiment/finding_rope_vs_learned_v3.yaml; shared setup: protocol_v3.py; rule: experiments/findings/
sized.py (hashed: EXTRA_FILES).
"""

from __future__ import annotations

from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.evidence import Evidence, Verdict
from experiments.findings.sized import across_sizes

NAME = "rope_vs_learned_v3"
TITLE = "RoPE beats learned absolute positions (v3: confirmed lr, test novels, three sizes)"
CLAIM = ("Rotary position embeddings (RoPE) reach a lower language-modelling loss than learned absolute positions at "
         "the same token budget, each at its own best learning rate.")
CITATION = ("Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, 2021, "
            "[arXiv:2104.09864](https://arxiv.org/abs/2104.09864) (Fig. 3)")
PAPER = "Su et al. 2021 (RoFormer)"
PAPER_NUMBER = ("No single number: RoFormer's pre-training loss curve falls faster than the BERT baseline's with "
                "learned positions (their Fig. 3); the paper reports the curves, not a final difference.")
SETUP = f"""\
{v3.shared_setup("`model/pos` ∈ {learned, rope} (learned adds 128 · d_model position parameters, counted as "
                 "embedding; rope none) × `finding/size` ∈ {s, m, l}: 6 tuned arms")}
- Seeds: 10 fresh seeds per arm (0–9), from the power plan fixed before registration
  (docs/findings/rope_vs_learned_v3/pilot.json, experiments/findings/pilot.py): 80% power for the 95% CI below 0 at a
  true difference of the SESOI 0.02 nats (paired t), at the noise of a pilot of 4 seeds per arm (2000–2003, lr 2e-3,
  untuned, at S and M; never reported) and of v2 at L: S more than the cap (sd 0.045 nats: 24% power at 10), M 11 (sd
  0.020: 79.7% at 10), L 5 (sd 0.0096, v2's 3 final seeds: 100% at 10); the largest, capped at 10.
- Metric: final `test/loss` (the 4 test novels), rope − learned, paired by seed, per size."""
BY = ("model.pos.kind", "model.d_model")
BASELINE = {"model.pos.kind": "learned", "model.d_model": 128}
FIGURES = v3.FIGURES
METRIC = "test/loss"  # the metric of the report the doc shows (its groups, curves and final_test_loss.png)
DATA = "eltec_v3"
EXTRA_FILES = (*v3.SHARED_FILES, "conf/model/pos/learned.yaml", "conf/model/pos/rope.yaml")
RULE = ("Per size, rope − learned final test/loss (best vs best, paired by seed), read on its interval at the family "
        "level (98.3%: Bonferroni over the 3 sizes) by experiments/findings/outcome.py's table for the claim \"lower\" "
        "with SESOI 0.02 nats: **reproduced** (entirely below 0), **opposite** (entirely above 0), **equivalent** "
        "(inside ±0.02), **not reproduced** (excludes an effect of 0.02 below 0), else **inconclusive**; a size "
        "reproduced or opposite whose WikiText-2 difference has the other sign reads inconclusive. Overall: the "
        "label all sizes share, else **partly** if any size is reproduced, else inconclusive if any is, else not "
        "reproduced. The trend (slope per doubling of size, 95% CI) is reported, not judged.")
SESOI = v3.SESOI
SEED_CAP = v3.SEED_CAP
CLAIM_KIND = "lower"  # outcome.py's claim: the arm's loss below the baseline's
# the power plan's noise at L (d_model 128) besides the pilot's at S and M: v2's final runs (docs/findings/rope_vs_learned_v2.md,
# "Seeds needed": sd of the per-seed differences, n = 3)
PRIOR_NOISE = {128: (0.0096, 2, "v2's 3 final seeds at this size (rope_vs_learned_v2)")}
SMOKE = v3.SMOKE
SMOKE_SHAPE = False  # the sizes are the sweep: the smoke keeps them (3 steps each)
SESOI_WHY = v3.SESOI_WHY


def rule(ev: Evidence) -> Verdict:
    return across_sizes(ev, {"model.pos.kind": "rope"}, {"model.pos.kind": "learned"}, ("rope", "learned"),
                        claim="lower", sesoi=SESOI)
