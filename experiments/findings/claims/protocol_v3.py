"""The setup the v3 findings share (docs/findings/PLAN_v3.md: every arm at its own best lr confirmed at the full
budget, three sizes at equal tokens per parameter, whole held-out novels for validation and test, a second corpus,
seeds from a power plan), as the constants their modules, YAMLs and tests agree on and the text each SETUP holds.

    shared_setup(arms="...")    # the shared bullets of a SETUP
    SHARED_FILES                # hashed by every v3 registration (in each EXTRA_FILES): this module, the data and
                                # size options, and the rule's engine (sized.py, outcome.py, scale.py)

The YAMLs (conf/experiment/finding_<name>_v3.yaml) repeat these values: a test composes each one and checks it
against them. Not handled: a finding's own arms and claim (its module), the pilot's numbers (its POWER text).
"""

from __future__ import annotations

GRID = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)  # optim.lr, x2 apart (v2's)
TUNE_SEEDS = (1000,)
FRACTION = 0.25
WIDEN = 2
CONFIRM_WIDEN = 1
VOCAB = 2048
MAX_TRAIN_BYTES = 16_000_000
N_CTX = 128
BATCH = 16
EVAL_BATCHES = 40
WARMUP_RATIO = 0.05
TOKENS_PER_PARAM = 5
PILOT_SEEDS = (2000, 2001, 2002, 2003)
PILOT_LR = 2e-3
SEED_CAP = 10  # seeds per arm at most: the budget (docs/findings/PLAN_v3.md, "Power plan")
SIZES = {  # conf/finding/size/<name>.yaml: d_model, heads, non-embedding params (GELU, learned positions), steps
    "s": (32, 1, 50_880, 125),
    "m": (64, 2, 200_064, 489),
    "l": (128, 4, 793_344, 1937),
}
SESOI = 0.02  # nats
SESOI_WHY = ("0.02 nats is a 2% change in perplexity (e^0.02 ≈ 1.02), the margin v2 registered for \"no practical "
             "difference\", kept for v3 so the versions read on one scale.")
SHARED_FILES = ("experiments/findings/claims/protocol_v3.py", "conf/finding/data/eltec_v3.yaml",
                "conf/finding/size/*.yaml", "experiments/findings/sized.py", "experiments/findings/outcome.py",
                "experiments/findings/scale.py")
# --smoke (registry.SMOKE and the embedded corpus): a test split of the embedded corpus's documents and the README as
# a stand-in second corpus, so the smoke runs every step of the rule
SMOKE = ("data.split_by=documents", "data.test_fraction=0.1", "data.test_max_tokens=4096",
         "+data.extra_eval.wikitext2=README.md")
FIGURES = ("basin.png", "curve_train_loss.png", "final_test_loss.png")  # the report at METRIC test/loss


def _g(v: float) -> str:
    return f"{v:g}"


def sizes_text() -> str:
    return "; ".join(f"{name.upper()} d_model {d} ({h} head{'s' if h > 1 else ''}), {p:,} non-embedding params, "
                     f"{steps:,} steps = {steps * BATCH * N_CTX:,} tokens" for name, (d, h, p, steps) in SIZES.items())


def shared_setup(arms: str) -> str:
    """The shared bullets of a v3 SETUP (markdown); `arms`: the finding's own arms bullet."""
    return f"""\
- Arms: {arms}; each arm at each size is tuned, confirmed and run on its own.
- Sizes: 4 layers, d_head 32, pre-LN, tied embeddings: {sizes_text()} (`finding/size=s,m,l`,
  conf/finding/size/): {TOKENS_PER_PARAM} training tokens per non-embedding parameter at every size (rounded up to
  whole steps), a 15.6× span.
- Protocol: tuned (`hydra/sweeper=tuned`, docs/tuning.md). Grid `optim.lr` [{', '.join(_g(v) for v in GRID)}] (×2
  apart) on tuning seed {', '.join(map(str, TUNE_SEEDS))} at {_g(FRACTION)} of the budget, widened by up to {WIDEN}
  points per side at an edge; then **confirmed at the full budget** (`confirm: true`): the best lr, ×2 and ÷2 of it
  on the tuning seed, one more ×2 step beyond a confirm edge ({CONFIRM_WIDEN}); each arm's reported lr is the best
  at the full horizon, flagged "edge" if still at the end of what was confirmed. Then each arm at its confirmed lr
  on the planned fresh seeds at the full budget; the reported differences come from those final runs alone.
- Data: `finding/data=eltec_v3` (conf/finding/data/eltec_v3.yaml): `../shared/data/bench/eltec_eng_novels.txt`
  (sha256 8a481cb1…d9ffa) read as one document per novel (`data.doc_separator`), 99 novels: 4 held out for
  validation (every selection: grid, widening, confirm) and 4 for test (every reported number), evenly spread
  (`val_fraction` = `test_fraction` = 0.042, `split_by=documents`); the tokenizer (our BPE, vocab {VOCAB},
  `tokenizer.max_train_bytes={MAX_TRAIN_BYTES}`) and the model see only the other 91. A second corpus,
  WikiText-2's raw test split (`datasets`: `wikitext`, `wikitext-2-raw-v1`, split test; sha256 4f3e427e…4103c),
  is scored at the end of every run. Each test set: 2,048 windows of {N_CTX} spread evenly, the same in every run.
- Batches: `train.sampler=epoch`, `train.max_epochs=1` (no window twice), n_ctx {N_CTX}, batch {BATCH}
  ({BATCH * N_CTX:,} tokens per step); 1 thread per run, 2 runs at a time.
- Optimizer: AdamW, betas 0.9/0.95, weight decay 0.1 (not on embeddings, biases or norms), gradient clipping at
  1.0; linear warmup over {_g(WARMUP_RATIO * 100)}% of the run's steps, then cosine decay to 0.1 × lr.
- Evaluation: every ~10% of a run, {EVAL_BATCHES} batches of 16 windows spread over validation (selection only);
  at the end, validation, the test novels (`test/loss`) and WikiText-2 (`test/wikitext2/loss`).
- Statistics: per size, the test-split difference paired by seed, judged by experiments/findings/outcome.py's table
  (reproduced / opposite / equivalent / not reproduced / inconclusive) on its interval at the family level
  (Bonferroni over the 3 sizes: 98.3% for a direction); the second corpus's difference must have the same sign
  (else that size reads inconclusive); the trend is the OLS slope of the per-seed differences against log2 size
  with its 95% CI (experiments/findings/scale.py); the rule's code: experiments/findings/sized.py."""
