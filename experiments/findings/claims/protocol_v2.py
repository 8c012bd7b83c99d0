"""The setup the nine v2 findings share (docs/findings/PLAN_v2.md: every arm at its own best learning rate, on data
each run sees at most once), as the constants their modules, YAMLs and tests agree on and the text each SETUP
holds.

    shared_setup(tokens=4_000_000, eval_interval=195)   # the shared bullets of a SETUP, with this finding's budget
    SHARED_FILES                                        # hashed by every v2 registration (in each EXTRA_FILES)

Every v2 module lists SHARED_FILES in its EXTRA_FILES, so a change here, in the data option or in the model preset
is a changed setup for each of them. The YAMLs (conf/experiment/finding_<name>.yaml) repeat these values: a test
composes each one and checks it against them and against its SETUP.
Not handled: a finding's own arms, budget and rule (its module).
"""

from __future__ import annotations

import math

GRID = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3)  # optim.lr, x2 apart
TUNE_SEEDS = (1000,)
SEEDS = (0, 1, 2)
FRACTION = 0.25
WIDEN = 2
VOCAB = 2048
MAX_TRAIN_BYTES = 16_000_000
N_CTX = 128
BATCH = 16
EVAL_BATCHES = 40
WARMUP_RATIO = 0.05
DATA = "eltec"  # experiments/findings/data.py DATA_FILES; conf/finding/data/eltec.yaml
SHARED_FILES = ("experiments/findings/protocol_v2.py", "conf/finding/data/eltec.yaml", "conf/model/small.yaml")
FIGURES = ("basin.png", "curve_val_loss.png", "final_val_loss.png")
SESOI = 0.02  # nats
SESOI_WHY = ("0.02 nats is a 2% change in perplexity (e^0.02 ≈ 1.02), the margin this lab uses for \"no practical "
             "difference\" (v1's RMSNorm tolerance and RoPE/SwiGLU SESOI), fixed before any v2 run.")
SMALL_COUNTS = "; 793,344 non-embedding parameters (1,071,872 in all at vocab 2048)"
MODEL_SMALL = ("`model=small`: d_model 128, 4 layers, 4 heads (d_head 32), pre-LN, LayerNorm, GELU (tanh), learned "
               "positions, GPT-2 init, tied embeddings" + SMALL_COUNTS)


def steps(tokens: int, batch: int = BATCH) -> int:
    """Optimizer steps of a run of `tokens` (the runner rounds up: experiments/run/budget.py)."""
    return math.ceil(tokens / (batch * N_CTX))


def _g(v: float) -> str:
    return f"{v:g}"


def shared_setup(tokens: int | str, eval_interval: int | str, grid: tuple[float, ...] = GRID, batch: int = BATCH,
                 model: str = MODEL_SMALL, budget: str = "") -> str:
    """The shared bullets of a v2 SETUP (markdown). `tokens` and `eval_interval`: numbers, or text for a finding
    whose arms differ (kaplan); `budget`: a sentence on the budget replacing the default one."""
    ratios = [b / a for a, b in zip(grid, grid[1:])]
    spread = (grid[-1] / grid[0]) ** (1 / (len(grid) - 1))  # the geometric mean step
    spacing = "×2 apart" if all(math.isclose(r, 2.0) for r in ratios) else f"about ×{spread:.2g} apart"
    if not budget:
        budget = (f"{tokens:,} training tokens per final run ({steps(tokens, batch):,} steps), "
                  f"{math.ceil(tokens * FRACTION):,} per tuning run ({_g(FRACTION)} of it)")
    return f"""\
- Protocol: tuned (`hydra/sweeper=tuned`, docs/tuning.md). Each arm is trained over the `optim.lr` grid
  [{', '.join(_g(v) for v in grid)}] ({spacing}) on tuning seed {', '.join(map(str, TUNE_SEEDS))} at {_g(FRACTION)}
  of its budget; its best lr is the one with the lowest final val/loss (a best point at a grid edge is widened by
  one log step, up to {WIDEN} per side, and flagged "edge" if still there); then each arm runs at its own best lr on
  the fresh seeds {', '.join(map(str, SEEDS))} at the full budget. Reported differences are best-vs-best, from
  those final runs alone. The best lr of a 25% run is usually higher than the full run's: one tuning seed per point
  at that horizon is the cost this plan accepts (the doc shows the basin).
- Data: `finding/data=eltec` (conf/finding/data/eltec.yaml): `../shared/data/bench/eltec_eng_novels.txt`, 99
  English novels 1840–1920 (ELTeC-eng), one text file whose novels are separated by lines holding
  `<|endoftext|>`; the last 1% of the text held out for validation (`data.val_fraction=0.01`, `split_by=stream`).
  Our data path reads a file as one document and encodes special-token text in it as ordinary text, so each
  boundary is marked by that separator spelled out in ordinary tokens, not by the tokenizer's `<|endoftext|>` id;
  windows cross boundaries.
- Tokenizer: our byte-level BPE, vocab {VOCAB}, trained on the train split; `tokenizer.max_train_bytes={MAX_TRAIN_BYTES}`
  is set, but it caps whole documents and the file is one, so the tokenizer trains on the whole train split.
- Batches: `train.sampler=epoch`, `train.max_epochs=1` (the split cut into windows, shuffled, none seen twice; a
  budget needing a second pass is refused), n_ctx {N_CTX}, batch {batch} ({batch * N_CTX:,} tokens per step).
- Budget: {budget}.
- Model: {model}.
- Optimizer: AdamW, betas 0.9/0.95, weight decay 0.1 (not on embeddings, biases or norms), gradient clipping at
  1.0; linear warmup over {_g(WARMUP_RATIO * 100)}% of the run's steps (`schedule.warmup_ratio={_g(WARMUP_RATIO)}`:
  a tuning run warms up over the same share of its own steps), then cosine decay to 0.1 × lr.
- Evaluation: every {eval_interval} steps (about 10% of a final run) and at the end, {EVAL_BATCHES} batches of 16
  windows spread over the validation split; the metric is the final `val/loss`.
- Statistics: per group the mean and 95% t-interval over the final seeds; differences paired by seed; Holm's
  correction across the comparisons a rule reads; an equivalence reading (TOST, experiments/findings/readings.py)
  holds when the 95% interval lies inside ±SESOI."""
