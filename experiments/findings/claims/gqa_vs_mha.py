"""Finding `gqa_vs_mha`: grouped-query attention (GQA, few key/value heads shared by groups of query heads) reaches
multi-head attention's loss at equal parameters with a fraction of the KV cache.

Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints"
(EMNLP 2023), https://arxiv.org/abs/2305.13245. Sweep: conf/experiment/finding_gqa_vs_mha.yaml (tuned:
docs/findings/PLAN_v2.md), the (n_kv_heads, d_mlp) pairs in conf/finding/kv/; the KV-cache bytes per token are
arch.kv_cache_bytes_per_token of each arm's model (measure(), no training); registered:
experiments/findings/registered/gqa_vs_mha.json (this module, the YAML and EXTRA_FILES).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import Evidence, Table, Verdict, fmt_ci, fmt_mean_ci, fmt_signed, mean_ci
from experiments.findings.multiple import Family
from experiments.findings.readings import equivalence_of

NAME = "gqa_vs_mha"
TITLE = "GQA matches MHA at equal parameters with a fraction of the KV cache"
CLAIM = ("Grouped-query attention with a few key/value heads reaches the loss of multi-head attention at the same "
         "parameter count while its KV cache per token shrinks by n_heads / n_kv_heads; multi-query attention (one "
         "key/value head) saves the most and may lose a little.")
CITATION = ("Ainslie et al., *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*, "
            "EMNLP 2023, [arXiv:2305.13245](https://arxiv.org/abs/2305.13245) (Table 1)")
PAPER = "Ainslie et al. 2023 (GQA)"
PAPER_NUMBER = ("Abstract and Table 1 (T5-XXL uptrained from a multi-head checkpoint with 5% of the pre-training "
                "compute): GQA with 8 key/value groups reaches quality close to multi-head attention at almost "
                "multi-query attention's decoding speed, and MQA loses some quality (their per-task scores are in "
                "Table 1; this lab trains from scratch at 0.8M parameters, where only the loss is compared).")
TOKENS, EVAL_INTERVAL = 3_000_000, 146
KV = {"mha": 8, "gqa": 2, "mqa": 1}  # conf/finding/kv/<arm>.yaml: n_kv_heads
MODEL = v2.MODEL_SMALL.replace("4 heads (d_head 32)", "8 heads (`model.n_heads=8`, d_head 16)").replace(v2.SMALL_COUNTS, "")
SETUP = f"""\
- Arms: `finding/kv` ∈ {{mha: `model.n_kv_heads=8 model.d_mlp=512` (793,344 non-embedding parameters), gqa:
  `n_kv_heads=2 d_mlp=608` (792,960, −0.05%), mqa: `n_kv_heads=1 d_mlp=624` (792,896, −0.06%)}}
  (`conf/finding/kv/`): fewer key/value heads shrink K and V, and the MLP is widened to give the parameters back
  (within 0.5% of MHA's, whole model and non-embedding); all at `model.n_heads=8` (d_head 16). 3 arms × 5 grid
  points tuning runs, then 3 × 3 final runs (`conf/experiment/finding_gqa_vs_mha.yaml`).
{v2.shared_setup(TOKENS, EVAL_INTERVAL, model=MODEL)}
- Metric: final `val/loss`, gqa − mha and mqa − mha, paired by seed, each arm at its own best lr; and the KV cache
  per token, `arch.kv_cache_bytes_per_token` (2 · layers · n_kv_heads · d_head · bytes per element; fp32 and
  bf16), of each arm's model (closed form, computed after the sweep)."""
BY = ("model.n_kv_heads", "model.d_mlp")
BASELINE = {"model.n_kv_heads": 8}
FIGURES = v2.FIGURES
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/finding/kv/*.yaml", "experiments/findings/arms.py", "arch/kv_bytes.py")
SMOKE = ("model.n_layers=1",)  # 8 heads of the runs' d_model, one layer (the smoke shape has 2 heads)
SMOKE_SHAPE = False
RULE = ("For gqa and mqa, the difference to mha in final val/loss (best vs best, paired by seed) is read against "
        "the SESOI ±0.02 nats: **equivalent** when its 95% CI lies inside ±0.02 (TOST), Holm-corrected across the "
        "two (k = 2). **Reproduced** if gqa is equivalent to mha; **partly** if gqa is not shown equivalent but its "
        "difference is not resolved above 0 either (CI lower bound ≤ 0: undecided at this n); **not reproduced** if "
        "gqa is not equivalent and resolvably worse (CI above 0). mqa's reading and the KV-cache bytes are reported "
        "beside it.")
SESOI = v2.SESOI
SESOI_WHY = v2.SESOI_WHY


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """Per arm: n_kv_heads, d_mlp, parameters and KV-cache bytes per token (fp32, bf16) of its model."""
    import torch

    from arch import count_params, kv_cache_bytes_per_token
    from experiments.findings.arms import arm_models

    cfgs = arm_models(f"finding_{NAME}", {arm: [f"finding/kv={arm}"] for arm in KV}, overrides)
    return {"rows": [{"arm": arm, "n_kv_heads": c.n_kv_heads, "d_mlp": c.d_mlp, "params": count_params(c),
                      "non_embedding_params": count_params(c, non_embedding=True),
                      "kv_bytes_fp32": kv_cache_bytes_per_token(c, torch.float32),
                      "kv_bytes_bf16": kv_cache_bytes_per_token(c, torch.bfloat16)} for arm, c in cfgs.items()]}


def rule(ev: Evidence) -> Verdict:
    mha = ev.runs({"model.n_kv_heads": KV["mha"]})
    eqs = {arm: equivalence_of(ev.runs({"model.n_kv_heads": KV[arm]}), mha, SESOI) for arm in ("gqa", "mqa")}
    family = Family("gqa − mha and mqa − mha final val/loss within ±0.02 nats (TOST p, equivalence)",
                    ("gqa − mha", "mqa − mha"), tuple(e.p if e else None for e in eqs.values()))
    equivalent = {arm: family.rejects(i) for i, arm in enumerate(eqs)}
    worse = {arm: bool(e and e.ci and e.ci[0] > 0) for arm, e in eqs.items()}
    readings = tuple("equivalent" if equivalent[a] else "worse (CI above 0)" if worse[a] else "undecided"
                     for a in eqs)
    family = replace(family, readings=readings)
    outcome = ("reproduced" if equivalent["gqa"] else "not reproduced" if worse["gqa"] else "partly")
    kv = {r["arm"]: r for r in (ev.extra or {}).get("rows", [])}
    rows = []
    for arm, n_kv in KV.items():
        runs = ev.runs({"model.n_kv_heads": n_kv})
        e = eqs.get(arm)
        r = kv.get(arm, {})
        rows.append([arm, str(n_kv), fmt_mean_ci(*mean_ci(x.get("final val/loss") for x in runs)[:2]),
                     "baseline" if e is None else f"{fmt_signed(e.diff)} {fmt_ci(e.ci)}",
                     "" if e is None else readings[list(eqs).index(arm)],
                     f"{r['kv_bytes_fp32']:,} / {r['kv_bytes_bf16']:,}" if r else "—",
                     f"{r['kv_bytes_fp32'] / kv['mha']['kv_bytes_fp32']:.3f}" if r and "mha" in kv else "—",
                     f"{r['params']:,}" if r else "—"])
    table = Table("Final val/loss per arm (mean [95% CI]), difference vs mha [95% CI] with its reading after Holm, "
                  "and the KV cache per token (bytes, fp32 / bf16) relative to mha",
                  ["arm", "n_kv_heads", "final val/loss", "Δ vs mha", "reading", "KV bytes/token", "× mha",
                   "params"], rows)

    def say(arm: str) -> str:
        e = eqs[arm]
        diff = "no values" if e is None else f"{fmt_signed(e.diff)} {fmt_ci(e.ci)}"
        return f"{arm} − mha {diff} nats ({readings[list(eqs).index(arm)]})"

    explanation = (f"{say('gqa')}; {say('mqa')}; SESOI ±{SESOI:g} nats, Holm over k = 2. KV cache per token: "
                   + (", ".join(f"{a} {kv[a]['kv_bytes_fp32']:,} B" for a in KV if a in kv) or "not measured")
                   + f" (fp32). Verdict: {outcome}.")
    likely = "" if outcome == "reproduced" else (
        "gqa's difference to mha is not inside ±0.02 nats at this n (its interval is wider than the band, or "
        "shifted): more seeds, or at this scale fewer key/value heads cost more than the widened MLP gives back.")
    ratio = (f"; KV cache ×{kv['gqa']['kv_bytes_fp32'] / kv['mha']['kv_bytes_fp32']:.3g} of mha's"
             if "gqa" in kv and "mha" in kv else "")
    key = f"{say('gqa')}{ratio}"
    return Verdict(outcome, explanation, key, likely, [table], family=family)
