"""Finding `xiong_postln_warmup`: post-LN needs lr warmup at a large lr and pre-LN does not; at initialisation
post-LN's gradients grow toward the output layers while pre-LN's are flat.

Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture" (ICML 2020),
https://arxiv.org/abs/2002.04745. Two parts: a training sweep (conf/experiment/finding_xiong_postln_warmup.yaml) and
a measurement at init (measure_init.py, not hashed by the registration). Registered:
experiments/findings/registered/xiong_postln_warmup.json (the text and sha256 of this module and of the sweep YAML).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.evidence import Evidence, Table, Verdict, difference, fmt_ci, fmt_signed
from experiments.findings.multiple import Family
from experiments.rundir.layout import RunStatus

NAME = "xiong_postln_warmup"
TITLE = "Post-LN needs warmup, pre-LN does not; post-LN's gradients at init grow toward the output"
CLAIM = ("Post-LN Transformers trained at a large learning rate without warmup train worse or diverge while warmup "
         "fixes them, pre-LN is insensitive to warmup, and at initialisation post-LN's gradient norm grows toward the "
         "output layers while pre-LN's is about the same in every layer.")
CITATION = ("Xiong et al., *On Layer Normalization in the Transformer Architecture*, ICML 2020, "
            "[arXiv:2002.04745](https://arxiv.org/abs/2002.04745) (Fig. 2, Fig. 3, Theorem 1)")
PAPER = "Xiong et al. 2020"
PAPER_NUMBER = ("Post-LN on IWSLT14 De-En at lr 5e-4 without warmup reaches BLEU ≈ 8.5, against ≈ 34 with a 4000-step "
                "warmup (their Fig. 2 and text); at init, pre-LN's last-layer gradient scales like 1/√L (Theorem 1) "
                "and post-LN's gradient norm of W^{2} increases with the layer index (Fig. 3).")
SETUP = """\
**Training part.**
- Sweep: `model/norm` ∈ {post, pre} × `schedule.warmup_steps` ∈ {0, 500} × seeds 0, 1, 2 = 12 runs
  (`conf/experiment/finding_xiong_postln_warmup.yaml`).
- Model: d_model 128, **6 layers**, 4 heads, LayerNorm, GELU, **Xavier init** (`model/init=xavier`, as the paper's
  analysis), learned positions; n_ctx 128, batch 16.
- Budget held equal: 1.5M training tokens per run. AdamW at a large **lr 1e-2** (betas 0.9/0.95, weight decay 0.1),
  cosine decay to 0.1 · lr after the warmup; gradient clipping at 1.0 (the runner's default).
- Tokenizer: our byte-level BPE, vocab 2048.
- Metric: final `val/loss`; a diverged run (non-finite loss or grad norm) counts as worse than any trained run: its
  value is max(ln V, the worst final loss of the sweep), V the vocab size (the loss of a uniform predictor).

**Init part** (`experiments/findings/measure_init.py`, no training): init ∈ {gpt2, xavier} × norm ∈ {pre, post} ×
n_layers ∈ {6, 12} × seeds 0, 1, 2, the same shape and one fixed batch of the same data (batch 16 × 128 tokens of the
validation split); backward of the LM loss at init; per-layer gradient norm of the MLP output projection weight
(W^{2}); ratio = last layer / first layer."""
BY = ("model.norm", "schedule.warmup_steps")
BASELINE = {"model.norm": "post", "schedule.warmup_steps": 500}
FIGURES = ("init_grad_norms.png", "curve_train_loss.png", "grad_norm_per_layer.png", "final_val_loss.png")
RULE = ("**Training part.** A = post-LN mean final val/loss (warmup 0) − (warmup 500), B = the same for pre-LN, "
        "each paired by seed, a diverged run counted as worse (see Setup). Reproduced if A's 95% CI lower bound > 0 "
        "(or ≥ 2 of 3 post-LN no-warmup seeds diverged while no post-LN warmup seed did) AND B's CI covers 0 or "
        "|mean B| < |mean A| / 3; partly if exactly one of the two holds; else not reproduced. "
        "**Init part.** Post-LN grows toward the output = last/first layer ratio > 1.5 in every seed and depth; "
        "pre-LN flat = that ratio in [0.67, 1.5] in every seed and depth; reproduced if both hold at Xavier init, "
        "partly if one does, else not reproduced (the GPT-2-init result is reported beside it, not judged). "
        "**Overall:** reproduced only if both parts are; not reproduced if neither part is reproduced or partly; "
        "else partly.")

GROWS = 1.5  # post-LN: last/first > GROWS
FLAT = (0.67, 1.5)  # pre-LN: last/first within
A_OVER_B = 3.0  # B must be under |A| / A_OVER_B when its CI excludes 0
JUDGED_INIT = "xavier"


def requires() -> str | None:
    """This finding needs the xavier init scheme (arch.config.INIT_SCHEMES, conf/model/init/xavier.yaml)."""
    from experiments.config.compose import CONF_DIR

    try:
        from arch.config import INIT_SCHEMES
    except ImportError:
        INIT_SCHEMES = ()
    if "xavier" not in INIT_SCHEMES or not (CONF_DIR / "model" / "init" / "xavier.yaml").is_file():
        return "needs model/init=xavier (arch.config.INIT_SCHEMES and conf/model/init/xavier.yaml), which this checkout lacks"
    return None


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """The init part: measure_init over the finding's shape and data (2 seeds for --smoke)."""
    from experiments.findings.measure_init import SEEDS, measure_init

    return measure_init(overrides, Path(out_dir), seeds=SEEDS[:2] if smoke else SEEDS)


def diverged_value(ev: Evidence) -> float:
    """What a diverged run counts as: max(ln V, the worst final val/loss of any completed run)."""
    vocab = next((r.get("vocab_size") for r in ev.records if r.get("vocab_size")), None)
    finals = [r.get("final val/loss") for r in ev.records if r.status == RunStatus.COMPLETED]
    return max(([math.log(vocab)] if vocab else []) + [v for v in finals if v is not None], default=0.0)


def warmup_effect(ev: Evidence, norm: str, bad: float):
    """final val/loss(warmup 0) - (warmup 500) for one norm, paired by seed; (Difference | None, n diverged at 0,
    n diverged at 500, n runs at 0)."""
    keep = tuple(s for s in RunStatus if s.has_result)  # completed, diverged
    w0 = ev.runs({"model.norm": norm, "schedule.warmup_steps": 0}, keep)
    w500 = ev.runs({"model.norm": norm, "schedule.warmup_steps": 500}, keep)
    d = difference(w0, w500, "final val/loss", higher_better=False, substitute={RunStatus.DIVERGED: bad})
    return d, sum(r.status == RunStatus.DIVERGED for r in w0), sum(r.status == RunStatus.DIVERGED for r in w500), len(w0)


def training_part(ev: Evidence) -> tuple[str, str, Table, Family]:
    bad = diverged_value(ev)
    a, a_div0, a_div500, a_n = warmup_effect(ev, "post", bad)
    b, b_div0, b_div500, _ = warmup_effect(ev, "pre", bad)
    a_ci_ok = bool(a and a.ci and a.ci[0] > 0)
    a_div_ok = a_div0 >= 2 and a_div500 == 0
    cond_a = a_ci_ok or a_div_ok
    b_covers = bool(b and b.ci and b.ci[0] <= 0 <= b.ci[1])
    b_small = bool(a and b and abs(b.diff) < abs(a.diff) / A_OVER_B)
    cond_b = b_covers or b_small
    outcome = "reproduced" if cond_a and cond_b else ("partly" if cond_a or cond_b else "not reproduced")

    def show(d) -> str:
        return "no values" if d is None else f"{fmt_signed(d.diff)} {fmt_ci(d.ci)} ({d.test or 'no test'}, n={d.n})"

    text = (f"A (post-LN, warmup 0 − warmup 500, final val/loss) = {show(a)}; post-LN diverged without warmup in "
            f"{a_div0} of {a_n} seeds, with warmup in {a_div500}. B (pre-LN, same) = {show(b)}"
            f"{f'; pre-LN diverged in {b_div0} (warmup 0) and {b_div500} (warmup 500) seeds' if b_div0 or b_div500 else ''}. "
            f"A holds: {'yes' if cond_a else 'no'} ({'CI above 0' if a_ci_ok else 'CI not above 0'}"
            f"{', ≥2 no-warmup divergences without warmup divergences' if a_div_ok else ''}); "
            f"B holds: {'yes' if cond_b else 'no'} ({'CI covers 0' if b_covers else 'CI excludes 0'}"
            f"{f', |B| < |A|/{A_OVER_B:g}' if b_small else f', |B| not < |A|/{A_OVER_B:g}'})."
            f"{f' Diverged runs count as {bad:.3f} nats.' if a_div0 or a_div500 or b_div0 or b_div500 else ''}")
    table = Table("Training part: effect of warmup on the final val/loss (warmup 0 − warmup 500, nats)",
                  ["norm", "difference [95% CI]", "test", "diverged (warmup 0 / 500)", "condition"],
                  [["post (A)", f"{fmt_signed(a.diff if a else None)} {fmt_ci(a.ci if a else None)}",
                    a.test if a and a.test else "—", f"{a_div0} / {a_div500}", "holds" if cond_a else "fails"],
                   ["pre (B)", f"{fmt_signed(b.diff if b else None)} {fmt_ci(b.ci if b else None)}",
                    b.test if b and b.test else "—", f"{b_div0} / {b_div500}", "holds" if cond_b else "fails"]])
    family = Family("A, post-LN warmup 0 − warmup 500 final val/loss, against 0 (paired by seed or Welch); B's "
                    "condition is the absence of a resolved effect, not a test that rejects, and the init part reads "
                    "ratios per seed, no test", ("A (post-LN)",), (a.p if a else None,),
                    ("holds" if cond_a else "fails",))
    return outcome, text, table, family


def ratios(rows: list[dict[str, Any]], init: str, norm: str) -> list[float | None]:
    return [r.get("ratio") for r in rows if r["init"] == init and r["norm"] == norm]


def init_verdict(rows: list[dict[str, Any]], init: str) -> tuple[str, bool, bool]:
    """(outcome, post grows, pre flat) of the init measurement at one init scheme."""
    post, pre = ratios(rows, init, "post"), ratios(rows, init, "pre")
    grows = bool(post) and all(v is not None and v > GROWS for v in post)
    flat = bool(pre) and all(v is not None and FLAT[0] <= v <= FLAT[1] for v in pre)
    return ("reproduced" if grows and flat else "partly" if grows or flat else "not reproduced"), grows, flat


def init_part(extra: dict[str, Any] | None) -> tuple[str, str, Table | None]:
    rows = (extra or {}).get("rows") or []
    if not rows:
        why = (extra or {}).get("error") or "no rows"
        return "not reproduced", f"The init measurement did not run ({why}), so this part is not reproduced.", None
    table_rows, said = [], []
    for init in sorted({r["init"] for r in rows}, key=lambda i: (i != JUDGED_INIT, i)):
        outcome, grows, flat = init_verdict(rows, init)
        for norm in ("post", "pre"):
            for depth in sorted({r["n_layers"] for r in rows}):
                rs = [r.get("ratio") for r in rows if r["init"] == init and r["norm"] == norm and r["n_layers"] == depth]
                rs = [v for v in rs if v is not None]
                if not rs:
                    continue
                table_rows.append([init, norm, str(depth), ", ".join(f"{v:.2f}" for v in rs),
                                   ("grows" if min(rs) > GROWS else "not all > 1.5") if norm == "post" else
                                   ("flat" if all(FLAT[0] <= v <= FLAT[1] for v in rs) else "not flat")])
        span = {n: [v for v in ratios(rows, init, n) if v is not None] for n in ("post", "pre")}
        said.append(f"at {init} init, post-LN last/first ratio {_span(span['post'])} ({'grows' if grows else 'does not grow'} "
                    f"in every seed and depth), pre-LN {_span(span['pre'])} ({'flat' if flat else 'not flat'}): "
                    f"{outcome}{' (judged)' if init == JUDGED_INIT else ' (reported, not judged)'}")
    judged = init_verdict(rows, JUDGED_INIT)[0] if any(r["init"] == JUDGED_INIT for r in rows) else "not reproduced"
    text = ("Gradient norm of W^{2} at init, last layer / first layer: " + "; ".join(said) + ".")
    table = Table("Init part: ‖∂loss/∂W2‖ last layer / first layer, per seed", ["init", "norm", "n_layers",
                  "ratio per seed", "reads"], table_rows)
    return judged, text, table


def _span(vs: list[float]) -> str:
    return "—" if not vs else f"{min(vs):.2f}–{max(vs):.2f}"


def rule(ev: Evidence) -> Verdict:
    t_outcome, t_text, t_table, family = training_part(ev)
    i_outcome, i_text, i_table = init_part(ev.extra)
    if t_outcome == i_outcome == "reproduced":
        outcome = "reproduced"
    elif t_outcome == i_outcome == "not reproduced":
        outcome = "not reproduced"
    else:
        outcome = "partly"
    explanation = (f"Training part: {t_outcome}; init part: {i_outcome}. Overall: {outcome} (reproduced only if both "
                   "parts are). The parts' numbers:")
    reasons = []
    if t_outcome != "reproduced":
        reasons.append("training part: at 1.5M tokens, 6 layers and with gradient clipping at 1.0, lr 1e-2 may not be "
                       "large enough to break post-LN without warmup (the paper trains a 6-layer encoder-decoder far "
                       "longer, without our clipping); or pre-LN also benefits from warmup at this lr")
    if i_outcome != "reproduced":
        reasons.append("init part: the paper's analysis assumes residual inputs of norm ~√d (the original "
                       "Transformer scales its embeddings by √d_model) and sublayer outputs comparable to their "
                       "inputs; our Xavier embeddings are N(0, 1/d_model) without that scale and our MLP uses GELU, so "
                       "the residual stream starts small (pre-LN's first layers then get larger gradients) and each "
                       "post-LN sublayer changes the norm less; tied embeddings and no final LayerNorm in post-LN "
                       "differ from the paper's model too. Compare the gpt2 rows, whose residual projections are "
                       "scaled by 1/√(2L)")
    t_key = next((row[1] for row in t_table.rows if row[0].startswith("post")), "—")
    key = f"A (post-LN, warmup 0 − 500) = {t_key} nats; init {i_outcome} at xavier"
    tables = [t_table] + ([i_table] if i_table else [])
    return Verdict(outcome, explanation, key, ("; ".join(reasons) + ".") if reasons and outcome != "reproduced" else "",
                   tables, parts=[("training", t_outcome, t_text), ("init", i_outcome, i_text)], family=family)
