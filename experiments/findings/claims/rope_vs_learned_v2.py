"""Finding `rope_vs_learned_v2`: rotary position embeddings (RoPE) reach a lower loss than learned absolute
positions at the same token budget, each at its own best learning rate (version 2 of rope_vs_learned).

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", https://arxiv.org/abs/2104.09864.
Sweep: conf/experiment/finding_rope_vs_learned_v2.yaml (tuned: docs/findings/PLAN_v2.md); registered:
experiments/findings/registered/rope_vs_learned_v2.json (this module, the YAML and EXTRA_FILES).
"""

from __future__ import annotations

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import Evidence, Verdict, lower_than_baseline

NAME = "rope_vs_learned_v2"
TITLE = "RoPE beats learned absolute positions (v2: tuned, data seen once)"
CLAIM = ("Rotary position embeddings (RoPE) reach a lower language-modelling loss than learned absolute positions at "
         "the same token budget, each at its own best learning rate.")
CITATION = ("Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, 2021, "
            "[arXiv:2104.09864](https://arxiv.org/abs/2104.09864) (Fig. 3)")
PAPER = "Su et al. 2021 (RoFormer)"
PAPER_NUMBER = ("No single number: RoFormer's pre-training loss curve falls faster than the BERT baseline's with "
                "learned positions (their Fig. 3); the paper reports the curves, not a final difference.")
TOKENS, EVAL_INTERVAL = 4_000_000, 195
SETUP = f"""\
- Arms: `model/pos` ∈ {{learned, rope}} (learned adds 128 · 128 position parameters; rope none), 2 arms × 5 grid
  points tuning runs, then 2 × 3 final runs (`conf/experiment/finding_rope_vs_learned_v2.yaml`).
{v2.shared_setup(TOKENS, EVAL_INTERVAL)}
- Metric: final `val/loss`, rope − learned, paired by seed, each arm at its own best lr."""
BY = ("model.pos.kind",)
BASELINE = {"model.pos.kind": "learned"}
FIGURES = v2.FIGURES
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/model/pos/learned.yaml", "conf/model/pos/rope.yaml")
RULE = ("**Reproduced** if the 95% CI of rope − learned final val/loss (best vs best, paired by seed) lies below 0 "
        "(upper bound < 0); **not reproduced** otherwise, read as \"not distinguishable at this n\" (CI covers 0) or "
        "\"learned better\" (CI above 0). One comparison: k = 1.")
SESOI = v2.SESOI
SESOI_WHY = v2.SESOI_WHY


def rule(ev: Evidence) -> Verdict:
    return lower_than_baseline(ev, {"model.pos.kind": "rope"}, ("rope", "learned"), sesoi=SESOI)
