"""Finding `kaplan_aspect_ratio`: at a fixed non-embedding parameter count the loss barely depends on the aspect
ratio d_model / n_layers over a wide range, and worsens at the extremes.

Kaplan et al. 2020, "Scaling Laws for Neural Language Models", https://arxiv.org/abs/2001.08361 (Fig. 5). Sweep:
conf/experiment/finding_kaplan_aspect_ratio.yaml (the iso800k presets of arch/presets.py, which the registration
does not hash); registered: experiments/findings/registered/kaplan_aspect_ratio.json (the text and sha256 of this
module and of the sweep YAML).
"""

from __future__ import annotations

from dataclasses import replace

from experiments.findings.evidence import Evidence, Table, Verdict, difference, fmt, fmt_ci, fmt_mean_ci, fmt_signed, mean_ci
from experiments.findings.multiple import Family

NAME = "kaplan_aspect_ratio"
TITLE = "Loss depends weakly on depth vs width at a fixed parameter count"
CLAIM = ("At a fixed non-embedding parameter count, the loss stays within a few percent over a wide range of aspect "
         "ratios d_model / n_layers and worsens only at the extremes.")
CITATION = ("Kaplan et al., *Scaling Laws for Neural Language Models*, 2020, "
            "[arXiv:2001.08361](https://arxiv.org/abs/2001.08361) (Fig. 5)")
PAPER = "Kaplan et al. 2020"
PAPER_NUMBER = ("Fig. 5: the loss varies by only a few percent over aspect ratios of about 20–200 (e.g. at 25M "
                "non-embedding parameters, within about 3%).")
SETUP = """\
- Sweep: `model` ∈ {iso800k_l1, iso800k_l2, iso800k_l4, iso800k_l8, iso800k_l16} × seeds 0, 1, 2 = 15 runs
  (`conf/experiment/finding_kaplan_aspect_ratio.yaml`). The presets hold ~0.8M non-embedding parameters each:
  1 × 256 (8 heads, 790,272), 2 × 180 (3 heads, 782,640), 4 × 128 (4 heads, 793,344), 8 × 90 (3 heads, 787,140),
  16 × 64 (2 heads, 799,872): aspect ratios 256, 90, 32, 11.25, 4.
- Model otherwise: pre-LN, LayerNorm, GELU, learned positions, GPT-2 init; n_ctx 128, batch 16.
- Budget held equal: 1.5M training tokens per run (FLOPs differ slightly between shapes: reported per shape).
  AdamW lr 2e-3 (betas 0.9/0.95, weight decay 0.1), cosine schedule, 100 warmup steps, down to 0.1 · lr.
- Tokenizer: our byte-level BPE, vocab 2048.
- Metric: final `val/loss`; relative gap g = (shape's mean − best shape's mean) / best shape's mean."""
BY = ("model.n_layers", "model.d_model")
BASELINE = {"model.n_layers": 4}  # iso800k_l4
FIGURES = ("aspect_ratio.png", "final_val_loss.png", "curve_val_loss.png")
SMOKE_SHAPE = False  # the presets are the sweep
RULE = ("g = (mean final val/loss of a shape − the best shape's mean) / the best shape's mean. **Reproduced** if the "
        "three middle shapes (l2, l4, l8) all have g < 3% AND at least one extreme (l1 or l16) has g > 3% with its "
        "difference vs the best shape resolved: the t-test of that difference (paired by seed, else Welch) rejects "
        "0 at α = 0.05 after Holm's correction across the extremes compared (k = 2, or 1 when an extreme is the "
        "best; uncorrected, it rejects exactly when the 95% CI excludes 0); **partly** if only the middle condition "
        "holds; else **not reproduced**.")

GAP = 0.03
MIDDLE = (2, 4, 8)
EXTREMES = (1, 16)


def rule(ev: Evidence) -> Verdict:
    shapes = sorted({int(r.keys["model.n_layers"]) for r in ev.records if "model.n_layers" in r.keys})
    stats = {}
    for n in shapes:
        runs = ev.runs({"model.n_layers": n})
        mean, ci, k = mean_ci(r.get("final val/loss") for r in runs)
        if mean is not None:
            stats[n] = (mean, ci, k, runs)
    if not stats:
        return Verdict("not reproduced", "No shape has a completed run with a final val/loss.", "no runs",
                       "No run completed.")
    best = min(stats, key=lambda n: stats[n][0])
    best_mean = stats[best][0]
    gaps = {n: (s[0] - best_mean) / best_mean for n, s in stats.items()}
    diffs = {n: difference(stats[n][3], stats[best][3], "final val/loss") if n != best else None for n in stats}
    middle_ok = all(n in gaps and gaps[n] < GAP for n in MIDDLE)
    compared = [n for n in EXTREMES if n in gaps and n != best]  # the extremes read against the best shape
    family = Family("each extreme shape's final val/loss against the best shape's (t-test, paired by seed or Welch)",
                    tuple(f"l{n} − l{best}" for n in compared),
                    tuple(diffs[n].p if diffs[n] is not None else None for n in compared))
    extreme_ok = [n for i, n in enumerate(compared) if gaps[n] > GAP and family.rejects(i)]
    family = replace(family, readings=tuple(
        ("resolved" if family.rejects(i) else "not resolved") + f", g {100 * gaps[n]:.2f}%"
        + (" > 3%" if gaps[n] > GAP else " ≤ 3%") for i, n in enumerate(compared)))
    outcome = "reproduced" if middle_ok and extreme_ok else "partly" if middle_ok else "not reproduced"

    rows = []
    for n in shapes:
        if n not in stats:
            rows.append([f"l{n}", "—", "—", "—", "—", "—", "—", "0"])
            continue
        mean, ci, k, runs = stats[n]
        d_model = runs[0].keys.get("model.d_model", "?")
        flops = [r.get("flops") for r in runs if r.get("flops")]
        params = [r.get("non_embedding_params") for r in runs if r.get("non_embedding_params")]
        d = diffs[n]
        rows.append([f"l{n} ({n} × {d_model})", f"{int(d_model) / n:g}" if str(d_model).isdigit() else "—",
                     f"{int(params[0]):,}" if params else "—", f"{sum(flops) / len(flops):.3g}" if flops else "—",
                     fmt_mean_ci(mean, ci), f"{100 * gaps[n]:.2f}%" + (" (best)" if n == best else ""),
                     "—" if d is None else f"{fmt_signed(d.diff)} {fmt_ci(d.ci)}", str(k)])
    gap_text = ", ".join(f"l{n} {100 * gaps[n]:.2f}%" for n in shapes if n in gaps)
    explanation = (f"Best shape: l{best} (mean final val/loss {fmt(best_mean)}). Relative gaps g: {gap_text}. Middle "
                   f"shapes l2/l4/l8 all under {100 * GAP:.0f}%: {'yes' if middle_ok else 'no'}. Extremes over "
                   f"{100 * GAP:.0f}% with a difference vs best resolved after Holm's correction (k = {family.k}): "
                   f"{', '.join(f'l{n}' for n in extreme_ok) if extreme_ok else 'none'}. Verdict: {outcome}.")
    if outcome == "reproduced":
        likely = ""
    elif not middle_ok:
        worst = max((n for n in MIDDLE if n in gaps), key=lambda n: gaps[n], default=None)
        likely = (f"A middle shape is more than {100 * GAP:.0f}% from the best (l{worst}: {100 * gaps[worst]:.2f}%)"
                  if worst is not None else "A middle shape has no completed run") + \
                 (". At 0.8M parameters and 1.5M tokens the models are far from converged, so shapes that train faster "
                  "per token (wider, shallower) win by more than at Kaplan's scale; the lr (2e-3 for all shapes) is "
                  "also not tuned per shape.")
    else:
        likely = ("The middle shapes are within 3%, but neither extreme is resolvably worse than the best by more than "
                  "3% at this n; at this small scale the extremes (aspect ratio 4 and 256) may simply not be extreme "
                  "enough, or 3 seeds do not resolve the gap.")
    key = f"max middle gap {max((100 * gaps[n] for n in MIDDLE if n in gaps), default=float('nan')):.2f}% (best l{best})"
    table = Table("Final val/loss per shape (mean [95% CI]), gap to the best shape, difference vs best [95% CI]",
                  ["shape (n_layers × d_model)", "d_model / n_layers", "non-emb params", "FLOPs per run",
                   "final val/loss", "g", "Δ vs best", "n"], rows)
    return Verdict(outcome, explanation, key, likely, [table], family=family)
