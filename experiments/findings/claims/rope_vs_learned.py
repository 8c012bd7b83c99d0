"""Finding `rope_vs_learned`: rotary position embeddings (RoPE) reach a lower loss than learned absolute positions
at the same token budget.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", https://arxiv.org/abs/2104.09864.
Sweep: conf/experiment/finding_rope_vs_learned.yaml; registered:
experiments/findings/registered/rope_vs_learned.json (the text and sha256 of this module and of the sweep YAML).
"""

from __future__ import annotations

from experiments.findings.evidence import Evidence, Verdict, lower_than_baseline

NAME = "rope_vs_learned"
TITLE = "RoPE beats learned absolute positions"
CLAIM = "Rotary position embeddings (RoPE) reach a lower language-modelling loss than learned absolute positions at the same token budget."
CITATION = ("Su et al., *RoFormer: Enhanced Transformer with Rotary Position Embedding*, 2021, "
            "[arXiv:2104.09864](https://arxiv.org/abs/2104.09864) (Fig. 3)")
PAPER = "Su et al. 2021 (RoFormer)"
PAPER_NUMBER = ("No single number: RoFormer's pre-training loss curve falls faster than the BERT baseline's with "
                "learned positions (their Fig. 3); the paper reports the curves, not a final difference.")
SETUP = """\
- Sweep: `model/pos` ∈ {learned, rope} × seeds 0–4 = 10 runs (`conf/experiment/finding_rope_vs_learned.yaml`).
- Model: d_model 128, 4 layers, 4 heads, pre-LN, LayerNorm, GELU, GPT-2 init; n_ctx 128, batch 16 (learned adds
  128 · 128 position parameters; rope none).
- Budget held equal: 2M training tokens per run. AdamW lr 2e-3 (betas 0.9/0.95, weight decay 0.1), cosine schedule,
  100 warmup steps, down to 0.1 · lr.
- Tokenizer: our byte-level BPE, vocab 2048.
- Metric: final `val/loss`, rope − learned, paired by seed."""
BY = ("model.pos.kind",)
BASELINE = {"model.pos.kind": "learned"}
FIGURES = ("curve_val_loss.png", "final_val_loss.png")
RULE = ("**Reproduced** if the 95% CI of rope − learned final val/loss lies below 0 (upper bound < 0); **not "
        "reproduced** otherwise, read as \"not distinguishable at this n\" (CI covers 0) or \"learned better\" (CI above "
        "0).")

SESOI = 0.02  # nats: the smallest rope − learned difference of interest, for the seeds-needed line
SESOI_WHY = ("0.02 nats is a 2% change in perplexity (e^0.02 ≈ 1.02), the margin this lab uses for \"no practical "
             "difference\" (rmsnorm_vs_layernorm's loss tolerance); RoFormer gives no number of its own to scale it by.")


def rule(ev: Evidence) -> Verdict:
    return lower_than_baseline(ev, {"model.pos.kind": "rope"}, ("rope", "learned"), sesoi=SESOI)
