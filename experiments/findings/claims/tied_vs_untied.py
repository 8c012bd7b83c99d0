"""Finding `tied_vs_untied`: sharing the input embedding with the output projection (weight tying) gives a small
language model a lower loss than untied embeddings, at equal total parameters.

Press & Wolf 2017, "Using the Output Embedding to Improve Language Models" (EACL 2017),
https://arxiv.org/abs/1608.05859. Sweep: conf/experiment/finding_tied_vs_untied.yaml (tuned:
docs/findings/PLAN_v2.md), the (tie_embeddings, d_model) pairs in conf/finding/embed/; registered:
experiments/findings/registered/tied_vs_untied.json (this module, the YAML and EXTRA_FILES).
"""

from __future__ import annotations

from dataclasses import replace

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import (Evidence, Table, Verdict, difference, fmt_ci, fmt_mean_ci, fmt_signed,
                                          mean_ci)
from experiments.findings.multiple import Family

NAME = "tied_vs_untied"
TITLE = "Tied embeddings beat untied ones at equal total parameters"
CLAIM = ("Tying the output projection to the input embedding gives a small language model a lower loss than untied "
         "embeddings with the same total number of parameters; at equal non-embedding parameters (the untied model "
         "then has a whole extra vocab × d_model matrix) the difference is reported too.")
CITATION = ("Press & Wolf, *Using the Output Embedding to Improve Language Models*, EACL 2017, "
            "[arXiv:1608.05859](https://arxiv.org/abs/1608.05859) (Table 2)")
PAPER = "Press & Wolf 2017"
PAPER_NUMBER = ("Abstract and their language-model tables: tying the input and output embeddings gives \"a significant "
                "reduction in perplexity\" on a variety of LSTM language models while removing the output matrix's "
                "parameters (per-model perplexities in their tables; not restated here).")
TOKENS, EVAL_INTERVAL = 3_000_000, 146
ARMS = {"tied": (True, 128), "untied": (False, 128), "untied_equal_total": (False, 112)}  # tie_embeddings, d_model
MODEL = v2.MODEL_SMALL.replace("tied embeddings" + v2.SMALL_COUNTS, "embeddings and d_model as the arm sets them")
SETUP = f"""\
- Arms: `finding/embed` ∈ {{tied: `model.tie_embeddings=true model.d_model=128` (1,071,872 parameters, 793,344
  non-embedding; the baseline), untied: `tie_embeddings=false d_model=128` (the same non-embedding parameters plus
  a 2048 × 128 output matrix: 1,334,016 in all), untied_equal_total: `tie_embeddings=false d_model=112` (4 heads
  of 28, d_mlp 448: 1,081,248 in all, +0.87% of tied's, 608,160 non-embedding; d_model is solved over multiples of
  n_heads for the total closest to tied's, and 108 would give 1,021,896, −4.66%)}} (`conf/finding/embed/`). 3 arms
  × 5 grid points tuning runs, then 3 × 3 final runs (`conf/experiment/finding_tied_vs_untied.yaml`).
{v2.shared_setup(TOKENS, EVAL_INTERVAL, model=MODEL)}
- Metric: final `val/loss`, untied − tied at equal non-embedding parameters and untied_equal_total − tied at equal
  total parameters, paired by seed, each arm at its own best lr."""
BY = ("model.tie_embeddings", "model.d_model")
BASELINE = {"model.tie_embeddings": True}
FIGURES = v2.FIGURES
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/finding/embed/*.yaml")
SMOKE = ("model.n_layers=1",)  # the arms set d_model: the smoke keeps them, with one layer
SMOKE_SHAPE = False
RULE = ("Two differences in final val/loss (best vs best, paired by seed), each tested against 0 and "
        "Holm-corrected across the two (k = 2): untied_equal_total − tied (equal total parameters) and untied − tied "
        "(equal non-embedding parameters). **Reproduced** if untied_equal_total is worse (its difference > 0 after "
        "Holm); **not reproduced** otherwise, read as \"not distinguishable at this n\" or \"untied better\" (the "
        "difference < 0 after Holm). The equal-non-embedding difference is reported, not judged.")
SESOI = v2.SESOI
SESOI_WHY = v2.SESOI_WHY


def rule(ev: Evidence) -> Verdict:
    def runs(arm: str):
        tie, d = ARMS[arm]
        return ev.runs({"model.tie_embeddings": tie, "model.d_model": d})

    tied = runs("tied")
    diffs = {arm: difference(runs(arm), tied, "final val/loss", higher_better=False)
             for arm in ("untied_equal_total", "untied")}
    family = Family("untied_equal_total − tied and untied − tied final val/loss against 0 (paired by seed or Welch)",
                    ("untied_equal_total − tied (equal total)", "untied − tied (equal non-embedding)"),
                    tuple(d.p if d else None for d in diffs.values()))

    def reading(i: int, d) -> str:
        if d is None or not family.rejects(i):
            return "not distinguishable at this n"
        return "untied worse" if d.diff > 0 else "untied better"

    readings = tuple(reading(i, d) for i, d in enumerate(diffs.values()))
    family = replace(family, readings=readings)
    outcome = "reproduced" if readings[0] == "untied worse" else "not reproduced"
    params = {}
    for r in ev.records:
        if r.get("params"):
            params.setdefault(r.group, (r.get("params"), r.get("non_embedding_params")))
    rows = []
    for arm, (tie, d) in ARMS.items():
        rs = runs(arm)
        p = params.get(rs[0].group) if rs else None
        dd = diffs.get(arm)
        rows.append([arm, f"{'tied' if tie else 'untied'}, d_model {d}",
                     f"{int(p[0]):,} / {int(p[1] or 0):,}" if p else "—",
                     fmt_mean_ci(*mean_ci(r.get("final val/loss") for r in rs)[:2]),
                     "baseline" if dd is None else f"{fmt_signed(dd.diff)} {fmt_ci(dd.ci)}",
                     "" if dd is None else readings[list(diffs).index(arm)]])
    table = Table("Final val/loss per arm (mean [95% CI]) and the difference vs tied [95% CI], read after Holm",
                  ["arm", "embeddings", "params / non-embedding (as run)", "final val/loss", "Δ vs tied", "reading"],
                  rows)

    def say(arm: str) -> str:
        d = diffs[arm]
        return (f"{arm} − tied = " + ("no values" if d is None else f"{fmt_signed(d.diff)} {fmt_ci(d.ci)} nats "
                f"({d.test or 'no test'}, n={d.n})") + f": {readings[list(diffs).index(arm)]}")

    explanation = (f"Equal total parameters: {say('untied_equal_total')}. Equal non-embedding parameters: "
                   f"{say('untied')} (reported). Holm over k = 2. Verdict: {outcome}.")
    likely = "" if outcome == "reproduced" else (
        "At this size and budget the untied model's separate output matrix (or, at equal total, the narrower "
        "residual stream it pays for it) does not cost resolvably more than seed noise; Press & Wolf's gain was "
        "measured on PTB word-level LSTMs with a vocabulary of 10k, where the embedding is most of the model.")
    key = say("untied_equal_total")
    return Verdict(outcome, explanation, key, likely, [table], family=family)
