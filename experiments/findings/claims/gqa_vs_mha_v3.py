"""Finding `gqa_vs_mha_v3`: grouped-query attention (2 key/value heads for 8 query heads) reaches multi-head
attention's held-out loss at equal non-embedding parameters, with a quarter of its KV cache, each at its own best
learning rate confirmed at the full budget, at size L (version 3 of gqa_vs_mha: docs/findings/PLAN_v3.md, issue 32
§3.2; an equivalence claim).

Ainslie et al. 2023, "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints"
(EMNLP 2023), https://arxiv.org/abs/2305.13245. Sweep: conf/experiment/finding_gqa_vs_mha_v3.yaml, the arms in
conf/finding/kv/ (mha, gqa); shared setup: protocol_v3.py and protocol_v3_l.py; rule: experiments/findings/
comparisons.py; the KV-cache bytes per token are arch.kv_cache_bytes_per_token of each arm's model (measure(), no
training). All hashed: EXTRA_FILES.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.claims import protocol_v3_l as l3
from experiments.findings.comparisons import Comparison, at_one_size
from experiments.findings.evidence import Evidence, Table, Verdict

NAME = "gqa_vs_mha_v3"
TITLE = "GQA matches MHA at equal parameters with a quarter of the KV cache (v3: confirmed lr, test novels, powered)"
CLAIM = ("Grouped-query attention with 2 key/value heads for 8 query heads reaches the language-modelling loss of "
         "multi-head attention (8 key/value heads) at the same non-embedding parameter count, within ±0.02 nats, "
         "while its KV cache per token is a quarter of multi-head attention's; each arm at its own best learning "
         "rate.")
CITATION = ("Ainslie et al., *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*, "
            "EMNLP 2023, [arXiv:2305.13245](https://arxiv.org/abs/2305.13245) (Table 1)")
PAPER = "Ainslie et al. 2023 (GQA)"
PAPER_NUMBER = ("Abstract and Table 1 (T5-XXL uptrained from a multi-head checkpoint with 5% of the pre-training "
                "compute): GQA with 8 key/value groups reaches quality close to multi-head attention at almost "
                "multi-query attention's decoding speed (their per-task scores are in Table 1; this lab trains from "
                "scratch at 0.8M non-embedding parameters, where only the loss is compared).")
KV = {"mha": 8, "gqa": 2}  # conf/finding/kv/<arm>.yaml: n_kv_heads (d_mlp 512 and 608)
# the power plan's noise: v1's final runs (docs/findings/gqa_vs_mha.md, Results: gqa − mha +0.022 [-0.034, 0.078]
# nats, 95% paired t-interval, n = 3), sd = half-width · √3 / t(0.975; 2) = 0.056 · 1.7321 / 4.3027
NOISE = {"gqa − mha": (0.0225, 2, "v1's 3 final seeds (docs/findings/gqa_vs_mha.md: gqa − mha +0.022 [-0.034, 0.078], "
                                  "95%, paired; sd = half-width · √3 / t(0.975; 2))")}
SETUP = l3.setup_at_l(
    arms=("`finding/kv` ∈ {mha: `model.n_kv_heads=8 model.d_mlp=512` (793,344 non-embedding parameters; the "
          "baseline), gqa: `n_kv_heads=2 d_mlp=608` (792,960, −384 or −0.05%)} (conf/finding/kv/), both at "
          "`model.n_heads=8` (d_head 16): 2 key/value heads shrink K and V by 2 · 128 · 96 weights and 2 · 96 "
          "biases per layer (24,768), and the MLP, 257 parameters per unit of d_mlp, is widened by 96 units to give "
          "them back: 608 is the d_mlp closest to equal (609 gives +644). The KV cache per token (fp32): 4,096 "
          "bytes for mha, 1,024 for gqa (×0.25)"),
    seeds=("- Seeds: 10 fresh seeds per arm (0–9), from the power plan fixed before registration "
           "(experiments/findings/power.py; docs/findings/PLAN_v3.md, \"Registration of §3.2\"): TOST at 5% (the "
           "90% CI inside ±0.02 nats) at a true difference of 0, at the noise of v1's 3 final seeds (sd 0.0225 nats "
           "of the per-seed paired differences gqa − mha, df 2, from docs/findings/gqa_vs_mha.md's interval "
           "[-0.034, 0.078]: half-width · √3 / t(0.975; 2)); 80% power needs 13 seeds, more than the cap of 10: "
           "the cap gives 65.7% power; at the sd's 80% upper confidence bound (0.0476 nats) 80% would need 50. No "
           "pilot: v1's noise at this size stands in for one (PLAN_v3.md, \"Power plan\")."),
    metric=("- Metric: final `test/loss` (the 4 test novels), gqa − mha, paired by seed; the KV-cache bytes per "
            "token of each arm's model (`arch.kv_cache_bytes_per_token`, 2 · layers · n_kv_heads · d_head · bytes "
            "per element; fp32 and bf16), computed after the sweep."))
BY = ("model.n_kv_heads", "model.d_mlp")
BASELINE = {"model.n_kv_heads": KV["mha"]}
FIGURES = v3.FIGURES
METRIC = "test/loss"  # the metric of the report the doc shows (its groups, curves and final_test_loss.png)
DATA = "eltec_v3"
EXTRA_FILES = (*l3.SHARED_FILES, "conf/finding/kv/mha.yaml", "conf/finding/kv/gqa.yaml",
               "experiments/findings/arms.py", "arch/kv_bytes.py")
RULE = (l3.rule_text("gqa − mha, one comparison", "equal", k=1)
        + " The KV-cache bytes are reported, not judged.")
SESOI = v3.SESOI
SEED_CAP = v3.SEED_CAP
CLAIM_KIND = "equal"  # outcome.py's claim: the two arms within ±SESOI (TOST on the 90% CI)
SMOKE = v3.SMOKE
SMOKE_SHAPE = False  # 8 heads of d_model 128 at size L: the smoke keeps the shape (3 steps each)
SESOI_WHY = v3.SESOI_WHY
COMPARISONS = (Comparison("equal non-embedding parameters", {"model.n_kv_heads": KV["gqa"]},
                          {"model.n_kv_heads": KV["mha"]}, ("gqa", "mha"), "equal"),)


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
    v = at_one_size(ev, COMPARISONS, sesoi=SESOI)
    kv = {r["arm"]: r for r in (ev.extra or {}).get("rows", [])}
    rows = [[arm, str(r["n_kv_heads"]), str(r["d_mlp"]), f"{r['params']:,} / {r['non_embedding_params']:,}",
             f"{r['kv_bytes_fp32']:,} / {r['kv_bytes_bf16']:,}",
             f"{r['kv_bytes_fp32'] / kv['mha']['kv_bytes_fp32']:.3f}" if "mha" in kv else "—"]
            for arm, r in kv.items()]
    table = Table("Each arm's model (as configured, measure()): KV cache per token in bytes (fp32 / bf16), reported "
                  "not judged", ["arm", "n_kv_heads", "d_mlp", "params / non-embedding", "KV bytes/token", "× mha"],
                  rows)
    ratio = (f"; KV cache ×{kv['gqa']['kv_bytes_fp32'] / kv['mha']['kv_bytes_fp32']:.3g} of mha's"
             if "gqa" in kv and "mha" in kv else "")
    return replace(v, key_number=v.key_number + ratio, tables=[*v.tables, table] if rows else v.tables)
