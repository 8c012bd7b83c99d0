"""Finding `rmsnorm_vs_layernorm_v2`: RMSNorm matches LayerNorm's loss (each at its own best learning rate) and
takes less time per step when both norms run kernels of equal quality (version 2 of rmsnorm_vs_layernorm).

Zhang & Sennrich 2019, "Root Mean Square Layer Normalization" (NeurIPS 2019), https://arxiv.org/abs/1910.07467.
Sweep: conf/experiment/finding_rmsnorm_vs_layernorm_v2.yaml (tuned: docs/findings/PLAN_v2.md); the speed half is
measured after the sweep by measure_norms.py (both norms through torch.compile); registered:
experiments/findings/registered/rmsnorm_vs_layernorm_v2.json (this module, the YAML and EXTRA_FILES).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import (Evidence, Table, Verdict, fmt, fmt_ci, fmt_mean_ci, fmt_signed, mean_ci,
                                          p_against)
from experiments.findings.multiple import Family
from experiments.findings.readings import equivalence_of

NAME = "rmsnorm_vs_layernorm_v2"
TITLE = "RMSNorm matches LayerNorm in less time (v2: tuned, equal-quality kernels)"
CLAIM = ("Replacing LayerNorm by RMSNorm keeps the loss (each at its own best learning rate) and reduces the running "
         "time per step.")
CITATION = ("Zhang & Sennrich, *Root Mean Square Layer Normalization*, NeurIPS 2019, "
            "[arXiv:1910.07467](https://arxiv.org/abs/1910.07467)")
PAPER = "Zhang & Sennrich 2019"
PAPER_NUMBER = "7%–64% less running time across their models, with quality comparable to LayerNorm."
TOKENS, EVAL_INTERVAL = 4_000_000, 195
SPEED = {"repeats": 5, "calls": 10}  # rounds x steps per round of the timing (smoke: 2 x 2)
SETUP = f"""\
- Arms: `model/norm_type` ∈ {{layernorm, rmsnorm}}, 2 arms × 5 grid points tuning runs, then 2 × 3 final runs
  (`conf/experiment/finding_rmsnorm_vs_layernorm_v2.yaml`).
{v2.shared_setup(TOKENS, EVAL_INTERVAL, model=v2.MODEL_SMALL.replace("LayerNorm", "the arm's norm"))}
- Loss metric: final `val/loss`, rmsnorm − layernorm, paired by seed, each arm at its own best lr.
- Speed (after the sweep, `experiments/findings/measure_norms.py`): the time of one training step (forward + loss +
  backward + AdamW) of this model (d_model 128, 4 layers, 4 heads, n_ctx 128, batch 16, vocab 2048, 1 thread) with
  each norm, **both compiled by `torch.compile`** (inductor: kernels generated the same way for both, through
  `bench/bench_norms.py`'s `step_call`), {SPEED['repeats']} interleaved rounds of {SPEED['calls']} steps after
  warm-up; per round the ratio rmsnorm / layernorm; the result exp(mean log ratio) with its 95% t-interval over the
  rounds. The sweep's own tokens/s are not read: eager CPU `rms_norm` is unfused while `layer_norm` is one fused
  kernel, which measures torch's kernels, not the method. Where both cannot be compiled (no C++ compiler, no
  bench/), the speed half is declared not measurable here, with the reason."""
BY = ("model.norm_type",)
BASELINE = {"model.norm_type": "layernorm"}
FIGURES = v2.FIGURES
DATA = v2.DATA
# bench/bench_norms.py (the timing functions measure_norms calls) is not hashed: it is the benchmark's own file and
# changes with it; a change that breaks the call makes the speed half "not measurable", with the error.
EXTRA_FILES = (*v2.SHARED_FILES, "conf/model/norm_type/layernorm.yaml", "conf/model/norm_type/rmsnorm.yaml",
               "experiments/findings/measure_norms.py")
SMOKE = ()
RULE = ("**Loss** (\"matches\"): rmsnorm − layernorm final val/loss is equivalent to 0 within the SESOI ±0.02 nats "
        "(TOST: its 95% CI lies inside ±0.02). **Speed** (\"faster\"): the compiled step-time ratio rmsnorm / "
        "layernorm is below 1 (its 95% CI over the rounds lies below 1). Holm's correction across the two tests the "
        "rule reads (k = 2; k = 1 when the speed is not measurable). **Reproduced** if both hold; **partly** if one "
        "holds (a speed half not measurable here counts as not holding, and the doc says why); else **not "
        "reproduced**.")
SESOI = v2.SESOI
SESOI_WHY = v2.SESOI_WHY


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """The speed half: measure_norms at the runs' shape (the smoke shape, 2 rounds of 2 steps, for --smoke), also
    written to <out_dir>/norm_speed.json."""
    from experiments.config.compose import compose_config
    from experiments.findings.measure_norms import measure_norms

    c = compose_config([f"experiment=finding_{NAME}", *overrides])
    shape = {"d_model": c.model.d_model, "layers": c.model.n_layers, "heads": c.model.n_heads,
             "n_ctx": c.train.n_ctx, "batch": c.train.batch_size, "vocab": c.tokenizer.vocab_size}
    timing = {"repeats": 2, "calls": 2} if smoke else SPEED
    result = measure_norms(shape, **timing, threads=int(c.train.num_threads or 1))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "norm_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def rule(ev: Evidence) -> Verdict:
    rms, ln = {"model.norm_type": "rmsnorm"}, {"model.norm_type": "layernorm"}
    loss = equivalence_of(ev.runs(rms), ev.runs(ln), SESOI)
    speed = ev.extra or {}
    measurable = bool(speed.get("measurable"))
    logs = [math.log(r) for r in speed.get("rounds") or []]
    labels, ps = ["loss: rmsnorm − layernorm within ±0.02 (TOST)"], [loss.p if loss else None]
    if measurable:
        labels.append("speed: log(rmsnorm / layernorm step time) < 0")
        ps.append(p_against(logs, 0.0))  # the test behind the ratio's interval
    family = Family("the loss equivalence (TOST p) and, where measured, the compiled step-time ratio against 1 "
                    "(one-sample t-test of the per-round log ratios)", tuple(labels), tuple(ps))
    same = bool(loss) and family.rejects(0) and loss.inside
    faster = measurable and family.rejects(1) and speed.get("ratio", 1.0) < 1.0
    family = Family(family.what, family.labels, family.p, tuple(
        ["equivalent" if same else "not shown equivalent"] + (["faster" if faster else "not resolvably faster"]
                                                             if measurable else [])))
    outcome = "reproduced" if same and faster else "partly" if same or faster else "not reproduced"
    loss_text = ("no values" if loss is None else
                 f"{fmt_signed(loss.diff)} {fmt_ci(loss.ci)} nats ({loss.test or 'no test'}, n={loss.n}, TOST p "
                 f"{'—' if loss.p is None else f'{loss.p:.3g}'})")
    if measurable:
        ci = speed.get("ratio_ci")
        speed_text = (f"compiled step-time ratio rmsnorm / layernorm {speed['ratio']:.3f} "
                      f"[{fmt(ci[0]) if ci else '—'}, {fmt(ci[1]) if ci else '—'}] over {len(logs)} rounds")
    else:
        speed_text = f"not measurable here: {speed.get('reason') or 'no measurement'}"
    explanation = (f"Loss: rmsnorm − layernorm = {loss_text}: {'equivalent within ±0.02' if same else 'not shown equivalent'}"
                   f". Speed: {speed_text}{': faster' if faster else ''}. Holm over k = {family.k}. Verdict: {outcome}.")
    rows = []
    for name, keys in (("layernorm", ln), ("rmsnorm", rms)):
        mean, ci, n = mean_ci(r.get("final val/loss") for r in ev.runs(keys))
        secs = (speed.get("seconds") or {}).get(name) or []
        rows.append([name, str(n), fmt_mean_ci(mean, ci), f"{1000 * sum(secs) / len(secs):.1f}" if secs else "—"])
    table = Table("Final val/loss per norm (mean [95% CI]) and the compiled step time (ms, mean over the rounds)",
                  ["norm", "n", "final val/loss", "compiled step (ms)"], rows)
    reasons = []
    if not same:
        reasons.append("the loss difference is not shown within ±0.02 nats at this n (its interval is wider than "
                       "the band, or shifted)")
    if not measurable:
        reasons.append(f"the speed half could not be measured with equal-quality kernels here ({speed_text})")
    elif not faster:
        reasons.append("with both norms compiled, the step time is not resolvably lower with RMSNorm: at d_model 128 "
                       "the norms are a small share of a step, which matmuls and attention dominate")
    key = f"Δloss {loss_text.split(' (')[0]}; compiled step ratio " + (
        f"{speed['ratio']:.3f}" if measurable else "not measurable")
    return Verdict(outcome, explanation, key, ("; ".join(reasons) + ".") if outcome != "reproduced" else "",
                   [table], family=family)
