"""Finding `kaplan_aspect_ratio_v2`: at a fixed non-embedding parameter count the loss depends only weakly on the
shape (depth vs width), at two sizes, each shape at its own best learning rate (version 2 of kaplan_aspect_ratio).

Kaplan et al. 2020, "Scaling Laws for Neural Language Models", https://arxiv.org/abs/2001.08361 (Fig. 5). Sweep:
conf/experiment/finding_kaplan_aspect_ratio_v2.yaml (tuned: docs/findings/PLAN_v2.md), the sizes (parameter budget,
tokens, eval cadence) in conf/finding/kaplan_size/, the shapes solved by model.shape (arch.shape_for); registered:
experiments/findings/registered/kaplan_aspect_ratio_v2.json (this module, the YAML and EXTRA_FILES).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import Evidence, Table, Verdict, fmt_ci, fmt_mean_ci, fmt_signed, mean_ci
from experiments.findings.multiple import Family
from experiments.findings.readings import p_below, shape_spread, spread_trend

NAME = "kaplan_aspect_ratio_v2"
TITLE = "Loss depends weakly on depth vs width at a fixed parameter count (v2: tuned, two sizes, 20 tokens/param)"
CLAIM = ("At a fixed non-embedding parameter count the loss depends only weakly on the model's shape: over a wide "
         "range of depths (and so of aspect ratios d_model / n_layers) it stays within a few percent.")
CITATION = ("Kaplan et al., *Scaling Laws for Neural Language Models*, 2020, "
            "[arXiv:2001.08361](https://arxiv.org/abs/2001.08361) (Fig. 5)")
PAPER = "Kaplan et al. 2020"
PAPER_NUMBER = ("Fig. 5: the loss varies by only a few percent over aspect ratios of about 20–200 (e.g. at 25M "
                "non-embedding parameters, within about 3%).")
SIZES = {"p100k": (100_000, 2_000_000, 98), "p400k": (400_000, 8_000_000, 391)}  # n_params, tokens, eval_interval
DEPTHS = (2, 4, 8)
MODEL = ("as `model=small` (pre-LN, LayerNorm, GELU, learned positions, GPT-2 init) but the shape above and untied "
         "embeddings")
BUDGET = ("per size, 20 tokens per non-embedding parameter: 2,000,000 (977 steps) and 8,000,000 (3,907 steps) per "
          "final run, a quarter of that per tuning run")
SETUP = f"""\
- Arms: `finding/kaplan_size` ∈ {{p100k: 100,000 non-embedding parameters, 2,000,000 tokens; p400k: 400,000
  parameters, 8,000,000 tokens}} (20 tokens per non-embedding parameter, Kaplan's N; `conf/finding/kaplan_size/`)
  × `model.shape.n_layers` ∈ {{2, 4, 8}}: `model.shape` (arch.shape_for) solves d_model for the budget at each depth
  with 2 heads (d_head = d_model / 2), embeddings **untied** (`model.tie_embeddings=false`: the non-embedding
  count is the whole model but its token and position embeddings and the output matrix). The solved shapes (at
  vocab 2048): p100k 2 × 64 (100,096 parameters, aspect ratio 32), 4 × 46 (104,052, 11.5), 8 × 32 (101,696, 4);
  p400k 2 × 128 (396,800, 64), 4 × 90 (393,660, 22.5), 8 × 64 (400,000, 8): within 4.1% of the budget (the doc
  lists them as measured). 6 arms × 5 grid points tuning runs, then 6 × 3 final runs
  (`conf/experiment/finding_kaplan_aspect_ratio_v2.yaml`).
{v2.shared_setup("2,000,000 or 8,000,000", "98 (p100k) or 391 (p400k)", model=MODEL, budget=BUDGET)}
- Metric: final `val/loss`. Per size, the shapes' best and worst by mean; per seed s, the relative gap
  g_s = (loss_worst,s − loss_best,s) / loss_best,s, its mean and 95% t-interval over the seeds (the spread); the
  trend = spread(0.4M) − spread(0.1M), Welch's interval (different models: seeds not paired)."""
BY = ("model.shape.n_params", "model.shape.n_layers")
BASELINE = {"model.shape.n_params": 100_000, "model.shape.n_layers": 4}
FIGURES = v2.FIGURES
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/finding/kaplan_size/*.yaml", "experiments/findings/arms.py",
               "arch/accounting.py")
SMOKE_SHAPE = False  # the shapes are the sweep
GAP = 0.03
RULE = ("Per size, the spread (Setup) is **within 3%** when the upper bound of its 95% CI is < 0.03 (a one-sided "
        "t-test of g < 0.03, p doubled so that uncorrected it rejects exactly then). The trend spread(0.4M) − "
        "spread(0.1M) is read as **shrinks** / **grows** when its Welch test rejects 0 (CI below / above 0), else "
        "**no resolved trend**. Holm's correction across the three tests (k = 3). **Reproduced** if both sizes are "
        "within 3%; **partly** if one is; **not reproduced** if neither. The verdict states the trend with it.")
SESOI = v2.SESOI
SESOI_WHY = ("for the seeds-needed line of the results table: " + v2.SESOI_WHY[0].lower() + v2.SESOI_WHY[1:])


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """The shape model.shape solves for each arm: d_model, n_heads, parameters, aspect ratio."""
    from arch import count_params
    from experiments.findings.arms import arm_models

    arms = {(size, depth): [f"finding/kaplan_size={size}", f"model.shape.n_layers={depth}"]
            for size in SIZES for depth in DEPTHS}
    cfgs = arm_models(f"finding_{NAME}", {f"{s} L{d}": arm for (s, d), arm in arms.items()}, overrides)
    rows = []
    for (size, depth), c in zip(arms, cfgs.values()):
        rows.append({"size": size, "n_params": SIZES[size][0], "n_layers": c.n_layers, "d_model": c.d_model,
                     "n_heads": c.n_heads, "non_embedding_params": count_params(c, non_embedding=True),
                     "params": count_params(c), "aspect_ratio": c.d_model / c.n_layers})
    return {"rows": rows}


def rule(ev: Evidence) -> Verdict:
    spreads = {size: shape_spread(ev.runs({"model.shape.n_params": n}), "model.shape.n_layers")
               for size, (n, _, _) in SIZES.items()}
    trend = spread_trend(spreads["p100k"], spreads["p400k"])
    family = Family("each size's spread below 3% (one-sided t-test, p doubled), and the trend of the spread "
                    "between the sizes against 0 (Welch)", ("spread at 0.1M < 3%", "spread at 0.4M < 3%",
                                                          "spread(0.4M) − spread(0.1M)"),
                    (*(p_below(s.per_seed, GAP) if s else None for s in spreads.values()), trend.p if trend else None))
    within = {size: family.rejects(i) and bool(s and s.mean is not None and s.mean < GAP)
              for i, (size, s) in enumerate(spreads.items())}
    direction = ("no resolved trend" if not (trend and family.rejects(2)) else
                 "shrinks" if trend.diff < 0 else "grows")
    family = Family(family.what, family.labels, family.p,
                    (*("within 3%" if within[s] else "not shown within 3%" for s in spreads), direction))
    n_within = sum(within.values())
    outcome = "reproduced" if n_within == 2 else "partly" if n_within == 1 else "not reproduced"
    shapes = {(r["n_params"], r["n_layers"]): r for r in (ev.extra or {}).get("rows", [])}
    rows = []
    for size, (n, tokens, _) in SIZES.items():
        for depth in DEPTHS:
            runs = ev.runs({"model.shape.n_params": n, "model.shape.n_layers": depth})
            shape = shapes.get((n, depth), {})
            s = spreads[size]
            tag = " (best)" if s and s.best == depth else " (worst)" if s and s.worst == depth else ""
            rows.append([f"{n:,}", str(depth), str(shape.get("d_model", "—")),
                         f"{shape['aspect_ratio']:g}" if shape else "—",
                         f"{shape['non_embedding_params']:,}" if shape else "—", f"{tokens:,}",
                         fmt_mean_ci(*mean_ci(r.get("final val/loss") for r in runs)[:2]) + tag, str(len(runs))])
    table = Table("Final val/loss per shape (mean [95% CI] over the final runs; best and worst per size marked), "
                  "with the shape model.shape solved (d_model, aspect ratio d_model / n_layers, non-embedding "
                  "parameters)", ["N (budget)", "n_layers", "d_model", "aspect", "non-emb params", "tokens",
                                  "final val/loss", "n"], rows)

    def say(size: str) -> str:
        s = spreads[size]
        if s is None:
            return f"{size}: fewer than 2 shapes with results"
        return (f"{size}: best L{s.best}, worst L{s.worst}, spread {_pct(s.mean)} {_pct_ci(s.ci)} "
                f"({'within 3%' if within[size] else 'not shown within 3%'})")

    trend_text = ("no values" if trend is None else
                  f"{fmt_signed(100 * trend.diff, 2)} {_pct_ci(trend.ci)} points ({direction})")
    explanation = (f"{say('p100k')}; {say('p400k')}. Trend spread(0.4M) − spread(0.1M) = {trend_text}. Holm over "
                   f"k = 3. Verdict: {outcome}: the loss is within 3% across shapes at {n_within} of 2 sizes, and "
                   f"the spread {direction if direction != 'no resolved trend' else 'shows no resolved trend'} "
                   "from 0.1M to 0.4M.")
    likely = "" if outcome == "reproduced" else (
        "At 0.1M–0.4M parameters the shapes differ by more than at Kaplan's sizes, or 3 seeds do not bound the spread "
        "below 3%; the trend says whether it narrows toward their regime.")
    key = (f"spread 0.1M {_pct(spreads['p100k'].mean if spreads['p100k'] else None)}, 0.4M "
           f"{_pct(spreads['p400k'].mean if spreads['p400k'] else None)}; trend {trend_text}")
    return Verdict(outcome, explanation, key, likely, [table], family=family)


def _pct(v: float | None) -> str:
    return "—" if v is None else f"{100 * v:.2f}%"


def _pct_ci(ci) -> str:
    return fmt_ci(None if not ci else (100 * ci[0], 100 * ci[1]), 2)
