"""Finding `tied_vs_untied_v3`: tying the output projection to the input embedding lowers a small language model's
held-out loss, judged at equal hidden size (Press & Wolf's own comparison) and at equal total parameters, each arm at
its own best learning rate confirmed at the full budget, at size L (version 3 of tied_vs_untied:
docs/findings/PLAN_v3.md, issue 32 §3.2).

Press & Wolf 2017, "Using the Output Embedding to Improve Language Models" (EACL 2017),
https://arxiv.org/abs/1608.05859. Sweep: conf/experiment/finding_tied_vs_untied_v3.yaml, the arms in
conf/finding/embed/; shared setup: protocol_v3.py and protocol_v3_l.py; rule: experiments/findings/comparisons.py
(all hashed: EXTRA_FILES).
"""

from __future__ import annotations

from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.claims import protocol_v3_l as l3
from experiments.findings.comparisons import Comparison, at_one_size
from experiments.findings.evidence import Evidence, Verdict

NAME = "tied_vs_untied_v3"
TITLE = ("Tied embeddings beat untied ones, at equal hidden size and at equal total parameters (v3: confirmed lr, "
         "test novels, powered)")
CLAIM = ("Tying the output projection to the input embedding gives a small language model a lower loss than untied "
         "embeddings, each arm at its own best learning rate, in two comparisons, each with its direction: (1) at "
         "equal hidden size (both d_model 128; the untied model has a whole extra vocab × d_model output matrix, "
         "so the tied model has fewer parameters), Press & Wolf's own comparison: tied lower than untied; (2) at "
         "equal total parameters (the untied model narrowed to d_model 112 to pay for its output matrix), a "
         "comparison Press & Wolf do not make (this finding's v1 claim): tied lower than untied.")
CITATION = ("Press & Wolf, *Using the Output Embedding to Improve Language Models*, EACL 2017, "
            "[arXiv:1608.05859](https://arxiv.org/abs/1608.05859) (Table 2)")
PAPER = "Press & Wolf 2017"
PAPER_NUMBER = ("Abstract and their language-model tables: adding weight tying to existing LSTM language models, "
                "their hidden sizes unchanged (so the tied model has fewer parameters), gives \"a significant "
                "reduction in perplexity\" on a variety of them (per-model perplexities in their tables; not "
                "restated here). They compare at equal hidden size only; the equal-total comparison is this lab's.")
ARMS = {"tied": (True, 128), "untied": (False, 128), "untied_equal_total": (False, 112)}  # tie_embeddings, d_model
# the power plan's noise: v1's final runs (docs/findings/tied_vs_untied.md, Results, 95% paired t-intervals, n = 3),
# sd = half-width · √3 / t(0.975; 2)
NOISE = {"untied − tied": (0.0068, 2, "v1's 3 final seeds (docs/findings/tied_vs_untied.md: untied − tied -0.009 "
                                      "[-0.026, 0.008], 95%, paired; sd = half-width · √3 / t(0.975; 2))"),
         "untied_equal_total − tied": (0.0169, 2, "v1's 3 final seeds (docs/findings/tied_vs_untied.md: "
                                                  "untied_equal_total − tied -0.001 [-0.043, 0.041], 95%, paired; "
                                                  "sd = half-width · √3 / t(0.975; 2))")}
SETUP = l3.setup_at_l(
    arms=("`finding/embed` ∈ {tied: `model.tie_embeddings=true model.d_model=128` (1,071,872 parameters, 793,344 "
          "non-embedding; the baseline), untied: `tie_embeddings=false d_model=128` (equal hidden size: the same "
          "793,344 non-embedding parameters plus a 2048 × 128 output matrix, 1,334,016 in all), untied_equal_total: "
          "`tie_embeddings=false d_model=112` (4 heads of 28, d_mlp 448: 1,081,248 in all, +0.87% of tied's; "
          "608,160 non-embedding; the multiple of 4 heads whose total is closest to tied's, 108 giving 1,021,896, "
          "−4.66%)} (conf/finding/embed/), every arm at 4 heads and 3,966,976 training tokens"),
    seeds=("- Seeds: 10 fresh seeds per arm (0–9), from the power plan fixed before registration "
           "(experiments/findings/power.py; docs/findings/PLAN_v3.md, \"Registration of §3.2\"): 80% power for "
           "each comparison's 97.5% CI (Bonferroni over the 2) on the claimed side of 0 at a true difference of the "
           "SESOI 0.02 nats (paired t), at the noise of v1's 3 final seeds (sd of the per-seed paired differences, "
           "df 2, from docs/findings/tied_vs_untied.md's intervals: half-width · √3 / t(0.975; 2)): equal hidden "
           "size 4 seeds (sd 0.0068 nats; over 99.9% at 10; 8 at the sd's 80% upper bound 0.0144), equal total 10 (sd "
           "0.0169; 83.1% at 10; more than the cap at the upper bound 0.0358); the larger, 10, the cap. No pilot: "
           "v1's noise at this size stands in for one (PLAN_v3.md, \"Power plan\")."),
    metric=("- Metric: final `test/loss` (the 4 test novels), untied − tied (equal hidden size) and "
            "untied_equal_total − tied (equal total parameters), paired by seed; each claims the difference above "
            "0 (untied's loss higher)."))
BY = ("model.tie_embeddings", "model.d_model")
BASELINE = {"model.tie_embeddings": True, "model.d_model": 128}
FIGURES = v3.FIGURES
METRIC = "test/loss"  # the metric of the report the doc shows (its groups, curves and final_test_loss.png)
DATA = "eltec_v3"
EXTRA_FILES = (*l3.SHARED_FILES, "conf/finding/embed/*.yaml")
RULE = l3.rule_text("Two comparisons, each claiming untied's loss above tied's: untied − tied (equal hidden size, "
                    "Press & Wolf's) and untied_equal_total − tied (equal total parameters), each", "higher", k=2)
SESOI = v3.SESOI
SEED_CAP = v3.SEED_CAP
CLAIM_KIND = "higher"  # outcome.py's claim for untied − tied: untied's loss above tied's (tied lower)
SMOKE = v3.SMOKE
SMOKE_SHAPE = False  # the arms set d_model at size L: the smoke keeps them (3 steps each)
SESOI_WHY = v3.SESOI_WHY


def _keys(arm: str) -> dict:
    tie, d = ARMS[arm]
    return {"model.tie_embeddings": tie, "model.d_model": d}


COMPARISONS = (Comparison("equal hidden size", _keys("untied"), _keys("tied"), ("untied", "tied"), "higher"),
               Comparison("equal total parameters", _keys("untied_equal_total"), _keys("tied"),
                          ("untied_equal_total", "tied"), "higher"))


def rule(ev: Evidence) -> Verdict:
    return at_one_size(ev, COMPARISONS, sesoi=SESOI)
