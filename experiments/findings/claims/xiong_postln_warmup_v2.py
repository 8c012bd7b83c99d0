"""Finding `xiong_postln_warmup_v2`: post-LN needs learning-rate warmup and pre-LN does not, each arm at its own best
lr over a grid that includes the paper's 5e-4; at initialisation the transformer-base encoder-decoder's post-LN
gradients grow toward the output layers while pre-LN's do not (version 2 of xiong_postln_warmup).

Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture" (ICML 2020),
https://arxiv.org/abs/2002.04745. Two parts: a tuned training sweep (conf/experiment/finding_xiong_postln_warmup_v2
.yaml, docs/findings/PLAN_v2.md) and a measurement at init (measure_encdec.py, hashed: EXTRA_FILES); registered:
experiments/findings/registered/xiong_postln_warmup_v2.json.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import Evidence, Table, Verdict, difference, fmt_ci, fmt_signed
from experiments.findings.multiple import Family
from experiments.findings.readings import equivalence
from experiments.rundir.layout import RunStatus

NAME = "xiong_postln_warmup_v2"
TITLE = "Post-LN needs warmup, pre-LN does not; post-LN's gradients at init grow toward the output (v2: tuned)"
CLAIM = ("Post-LN Transformers train worse without learning-rate warmup while pre-LN ones do not need it, and at "
         "initialisation post-LN's gradient norm grows toward the output layers while pre-LN's stays about the same "
         "in every layer.")
CITATION = ("Xiong et al., *On Layer Normalization in the Transformer Architecture*, ICML 2020, "
            "[arXiv:2002.04745](https://arxiv.org/abs/2002.04745) (Fig. 2, Fig. 3, Theorem 1)")
PAPER = "Xiong et al. 2020"
PAPER_NUMBER = ("Post-LN on IWSLT14 De-En at lr 5e-4 without warmup reaches BLEU ≈ 8.5, against ≈ 34 with a 4000-step "
                "warmup (their Fig. 2 and text); at init, post-LN's gradient norm of W^{2} increases with the layer "
                "index while pre-LN's stays flat (Fig. 3; Theorem 1: pre-LN's last-layer gradient scales like 1/√L).")
GRID = (1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3)
BATCH, TOKENS, EVAL_INTERVAL = 8, 3_145_728, 307
MODEL = v2.MODEL_SMALL.replace("pre-LN", "the arm's norm placement (post-LN: no final LayerNorm)")
SETUP = f"""\
**Training part.**
- Arms: `model/norm` ∈ {{post, pre}} × `schedule.warmup_ratio` ∈ {{0, 0.05}} (no warmup, or a linear warmup over 5%
  of the run's steps: 154 of a final run's 3,072), 4 arms × 5 grid points tuning runs, then 4 × 3 final runs
  (`conf/experiment/finding_xiong_postln_warmup_v2.yaml`). The grid holds the paper's lr 5e-4.
{v2.shared_setup(TOKENS, EVAL_INTERVAL, grid=GRID, batch=BATCH, model=MODEL)}
- Metric: final `val/loss`; A = post-LN (warmup 0) − (warmup 5%), B = the same for pre-LN, each paired by seed, each
  arm at its own best lr. A diverged final run counts as max(ln V, the worst final loss of the sweep).

**Init part** (`experiments/findings/measure_encdec.py`, after the sweep, no training): arch/presets.py's
`transformer-base` encoder-decoder (d_model 512, 6 + 6 layers, 8 heads, ReLU d_mlp 2048, sinusoidal positions,
embeddings × √512, **Xavier init**), at the runs' vocabulary with dropout 0, post-LN (the preset) and pre-LN, seeds
0, 1, 2; one fixed batch of the validation split (8 windows: 64 source tokens, 64 target tokens); backward of the
cross-entropy; per layer the gradient norm of the MLP output projection W^{{2}}; ratio = decoder's last layer / its
first."""
BY = ("model.norm", "schedule.warmup_ratio")
BASELINE = {"model.norm": "post", "schedule.warmup_ratio": 0.05}
FIGURES = ("encdec_grad_norms.png", *v2.FIGURES, "grad_norm_per_layer.png")
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/model/norm/post.yaml", "conf/model/norm/pre.yaml",
               "experiments/findings/measure_encdec.py", "arch/presets.py")
GROWS = 1.0  # post-LN: decoder last / first > GROWS in every seed
FLAT = (0.67, 1.5)  # pre-LN "≈ 1": within this band in every seed (v1's band)
RULE = ("**Training part.** A = post-LN final val/loss (warmup 0) − (warmup 5%), tested against 0 (paired by seed); "
        "B = the same for pre-LN, read for equivalence within the SESOI ±0.02 nats (TOST: its 95% CI inside "
        "±0.02). Holm's correction across A and B (k = 2). A holds if its adjusted p ≤ 0.05 and A > 0; B holds if "
        "its adjusted TOST p ≤ 0.05. Training: reproduced if both hold, partly if one, else not reproduced. "
        "**Init part.** Post-LN grows toward the output: decoder last/first ratio > 1 in every seed; pre-LN ≈ 1: "
        "that ratio within [0.67, 1.5] in every seed; reproduced if both, partly if one, else not reproduced. "
        "**Overall:** reproduced only if both parts are; not reproduced if neither is reproduced or partly; else "
        "partly.")
SESOI = v2.SESOI
SESOI_WHY = ("B's equivalence band: " + v2.SESOI_WHY[0].lower() + v2.SESOI_WHY[1:])


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """The init part: measure_encdec on the finding's data (2 seeds and a small batch for --smoke)."""
    from experiments.findings.measure_encdec import SEEDS, measure_encdec

    return measure_encdec(overrides, Path(out_dir), f"finding_{NAME}", seeds=SEEDS[:2] if smoke else SEEDS,
                          smoke=smoke)


def warmup_effect(ev: Evidence, norm: str):
    """final val/loss(warmup 0) − (warmup 5%) for one norm, paired by seed (a diverged run counted as bad)."""
    keep = tuple(s for s in RunStatus if s.has_result)
    vocab = next((r.get("vocab_size") for r in ev.records if r.get("vocab_size")), None)
    finals = [r.get("final val/loss") for r in ev.records if r.status == RunStatus.COMPLETED]
    bad = max(([math.log(vocab)] if vocab else []) + [v for v in finals if v is not None], default=0.0)
    w0 = ev.runs({"model.norm": norm, "schedule.warmup_ratio": 0.0}, keep)
    w5 = ev.runs({"model.norm": norm, "schedule.warmup_ratio": 0.05}, keep)
    return difference(w0, w5, "final val/loss", higher_better=False, substitute={RunStatus.DIVERGED: bad})


def training_part(ev: Evidence) -> tuple[str, str, Table, Family]:
    a, b = warmup_effect(ev, "post"), warmup_effect(ev, "pre")
    b_eq = equivalence(b, SESOI)
    family = Family("A (post-LN, warmup 0 − 5%) against 0 (paired t-test); B (pre-LN, the same) within ±0.02 nats "
                    "(TOST p)", ("A: post-LN warmup 0 − 5%", "B: pre-LN |warmup 0 − 5%| < 0.02"),
                    (a.p if a else None, b_eq.p if b_eq else None))
    cond_a = family.rejects(0) and a.diff > 0
    cond_b = family.rejects(1)
    family = replace(family, readings=("holds: post-LN worse without warmup" if cond_a else "fails",
                                       "holds: equivalent" if cond_b else "fails"))
    outcome = "reproduced" if cond_a and cond_b else "partly" if cond_a or cond_b else "not reproduced"

    def show(d) -> str:
        return "no values" if d is None else f"{fmt_signed(d.diff)} {fmt_ci(d.ci)} ({d.test or 'no test'}, n={d.n})"

    text = (f"A (post-LN, warmup 0 − warmup 5%, final val/loss) = {show(a)}: {family.readings[0]}. B (pre-LN) = "
            f"{show(b)}: {family.readings[1]} (±{SESOI:g} nats). Holm over k = 2.")
    table = Table("Training part: effect of warmup on the final val/loss (warmup 0 − warmup 5%, nats, best vs best)",
                  ["norm", "difference [95% CI]", "test", "p (raw)", "reading after Holm"],
                  [["post (A)", show(a), "against 0", "—" if a is None or a.p is None else f"{a.p:.3g}",
                    family.readings[0]],
                   ["pre (B)", show(b), "TOST ±0.02", "—" if not b_eq or b_eq.p is None else f"{b_eq.p:.3g}",
                    family.readings[1]]])
    return outcome, text, table, family


def init_part(extra: dict[str, Any] | None) -> tuple[str, str, Table | None]:
    rows = (extra or {}).get("rows") or []
    if not rows:
        why = (extra or {}).get("error") or "no rows"
        return "not reproduced", f"The init measurement did not run ({why}), so this part is not reproduced.", None
    ratios = {n: [r.get("ratio") for r in rows if r["norm"] == n] for n in ("post", "pre")}
    grows = bool(ratios["post"]) and all(v is not None and v > GROWS for v in ratios["post"])
    flat = bool(ratios["pre"]) and all(v is not None and FLAT[0] <= v <= FLAT[1] for v in ratios["pre"])
    outcome = "reproduced" if grows and flat else "partly" if grows or flat else "not reproduced"
    table = Table("Init part: transformer-base at Xavier init, ‖∂loss/∂W2‖ of the decoder's last layer / its first, "
                  "per seed", ["norm", "ratio per seed", "reads"],
                  [["post", ", ".join(f"{v:.2f}" for v in ratios["post"] if v is not None),
                    "grows (> 1 in every seed)" if grows else "does not grow in every seed"],
                   ["pre", ", ".join(f"{v:.2f}" for v in ratios["pre"] if v is not None),
                    "≈ 1 (within [0.67, 1.5])" if flat else "not within [0.67, 1.5] in every seed"]])
    text = (f"Decoder last/first gradient-norm ratio at init: post-LN {_span(ratios['post'])} "
            f"({'grows' if grows else 'does not grow'}), pre-LN {_span(ratios['pre'])} "
            f"({'≈ 1' if flat else 'not ≈ 1'}): {outcome}.")
    return outcome, text, table


def _span(vs: list) -> str:
    v = [x for x in vs if x is not None]
    return "—" if not v else f"{min(v):.2f}–{max(v):.2f}"


def rule(ev: Evidence) -> Verdict:
    t_outcome, t_text, t_table, family = training_part(ev)
    i_outcome, i_text, i_table = init_part(ev.extra)
    outcome = ("reproduced" if t_outcome == i_outcome == "reproduced" else
               "not reproduced" if t_outcome == i_outcome == "not reproduced" else "partly")
    explanation = (f"Training part: {t_outcome}; init part: {i_outcome}. Overall: {outcome} (reproduced only if both "
                   "parts are). The parts' numbers:")
    reasons = []
    if t_outcome != "reproduced":
        reasons.append("training part: with each arm at its own best lr, post-LN without warmup can pick a lower lr "
                       "at which it trains without warmup, so the best-vs-best gap is smaller than at one shared "
                       "large lr; at 4 layers, 3M tokens and gradient clipping at 1.0 post-LN is also easier to train "
                       "than the paper's 6 + 6-layer translation model")
    if i_outcome != "reproduced":
        reasons.append("init part: the ratios are those of one batch of this data at this vocabulary; see the "
                       "table for which norm missed its band")
    key = f"A {t_table.rows[0][1].split(' (')[0]} nats; init {i_outcome}"
    tables = [t_table] + ([i_table] if i_table else [])
    return Verdict(outcome, explanation, key, ("; ".join(reasons) + ".") if reasons and outcome != "reproduced" else "",
                   tables, parts=[("training", t_outcome, t_text), ("init", i_outcome, i_text)], family=family)
