"""Finding `mup_lr_transfer_v2`: under μP the optimal learning rate stays put as the model widens; under the
standard parametrization (SP) it moves down (version 2 of mup_lr_transfer: issue 32 §3.3, docs/findings/PLAN_v3.md).

What changes from v1 (docs/findings/mup_lr_transfer.md and its audit note): every width trains the same number of
tokens (v1 gave d64 125 steps and d512 1,000, so width was confounded with the horizon), the grid reaches two steps
lower (SP's d512 sat at v1's low edge), six seeds instead of two, widths 64–1024, whole held-out test novels with
a second corpus, and an interval on every optimum and on the slope from a seed bootstrap (lr_bootstrap.py), judged
by protocol v3's outcome table (outcome.py).

Yang et al. 2022, "Tensor Programs V", https://arxiv.org/abs/2203.03466 (Fig. 1, Fig. 3). Sweep:
conf/experiment/finding_mup_lr_transfer_v2.yaml, a plain grid (Hydra's basic sweeper: the basin is the
measurement). All hashed: EXTRA_FILES.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import lr_bootstrap as lb
from experiments.findings.claims import protocol_v3 as v3
from experiments.findings.evidence import Evidence, Table, Verdict
from experiments.findings.outcome import LEVELS, outcome

NAME = "mup_lr_transfer_v2"
TITLE = ("Under μP the optimal learning rate stays put as width grows; under SP it moves down (v2: equal training "
         "length, six seeds, intervals)")
CLAIM = ("With the Maximal Update Parametrization (μP) the learning rate that minimises the loss is the same at every "
         "width, so an lr tuned on a narrow proxy transfers to a wide model; with the standard parametrization it "
         "moves down as the model widens (for Adam, roughly as 1/width).")
CITATION = ("Yang et al., *Tensor Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter Transfer*, "
            "2022, [arXiv:2203.03466](https://arxiv.org/abs/2203.03466) (Fig. 1, Fig. 3)")
PAPER = "Yang et al. 2022 (μP)"
PAPER_NUMBER = ("Fig. 1 (Transformers trained with Adam, d_model 128 to 8192): under SP the minimum of the loss-vs-"
                "log2(lr) curve moves with width; under μP the minima line up at one lr. Fig. 3: under μP the optimal "
                "lr stays put across widths. No single number for the shift; μP's Adam scaling of hidden matrices' lr "
                "by 1/width (its Table 3) is what SP would need: −1 in log2 lr per doubling of the width.")
PARAMS = ("sp", "mup")  # conf/finding/mup_param/<name>.yaml -> model.param (v1's options, unchanged)
WIDTHS = (64, 128, 256, 512, 1024)  # model.d_model, 4 layers, 4 heads
NON_EMBEDDING = {64: 200_064, 128: 793_344, 256: 3_159_552, 512: 12_610_560, 1024: 50_386_944}  # vocab 2048
GRID = (1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)  # optim.lr, x2 apart: a step = 1 in log2
SEEDS = (0, 1, 2, 3, 4, 5)
BASE_WIDTH = 64
N_CTX, BATCH = 64, 8
TOKENS = 512_000  # every width: 1,000 steps of 512 tokens (v1's d512 budget)
EVAL_INTERVAL = 100
N_BOOT, RNG_SEED = 2000, 0
DELTA = 0.25  # μP's margin: log2 lr per doubling, one grid step over the 16x span (4 doublings)
METRIC = "test/loss"
KEY, SECOND = "final test/loss", "final test/wikitext2/loss"
N_RUNS = len(PARAMS) * len(WIDTHS) * len(GRID) * len(SEEDS)
CLAIMS = {"sp": "lower", "mup": "equal"}  # outcome.py's claim about the slope (SP: below 0; μP: within ±DELTA)


def _per_width(cell) -> str:
    return " / ".join(cell(w) for w in WIDTHS)


SETUP = f"""\
- Arms: `finding/mup_param` ∈ {{sp, mup}} (conf/finding/mup_param/, v1's): SP, or μP against the d_model
  {BASE_WIDTH} proxy (`model/param=mup model.base_width={BASE_WIDTH}`, arch/mup.py: hidden matrices' init std ×
  (64/d_model)^½, their AdamW lr × 64/d_model and weight decay × d_model/64, the readout's input × 64/d_model,
  attention scores √(base d_head)/d_head; at d_model 64 μP is SP exactly)
  × `model.d_model` ∈ {{{_per_width(str).replace(' / ', ', ')}}}
  × `optim.lr` ∈ [{', '.join(f'{v:g}' for v in GRID)}]
  ({len(GRID)} points, ×2 apart: v1's grid and two steps below it) × seeds {SEEDS[0]}–{SEEDS[-1]}: {N_RUNS} runs. A plain grid (Hydra's basic sweeper), no tuning
  phase: every point trains its full budget on every seed (`conf/experiment/finding_{NAME}.yaml`).
- Model: 4 layers, 4 heads (d_head = d_model / 4), d_mlp = 4 · d_model, tied embeddings, pre-LN, LayerNorm, GELU
  (tanh), learned positions, GPT-2 init (`model=small` with the width's d_model);
  {_per_width(lambda w: f'{NON_EMBEDDING[w]:,}')} non-embedding parameters.
- Budget: **the same at every width**, {TOKENS:,} training tokens ({TOKENS // (N_CTX * BATCH):,} steps of
  {N_CTX} × {BATCH} = {N_CTX * BATCH} tokens), the d_model {BASE_WIDTH} proxy as long as the rest; evaluated every
  {EVAL_INTERVAL} steps on validation (not read by the rule).
- Data: `finding/data=eltec_v3` (conf/finding/data/eltec_v3.yaml, protocol v3's): ELTeC-eng read as one
  document per novel, 4 novels held out for validation and 4 for test; the tokenizer (our BPE, vocab {v3.VOCAB},
  `tokenizer.max_train_bytes={v3.MAX_TRAIN_BYTES}`) and the model see only the other 91; WikiText-2's raw test
  split scored at the end of every run as the second corpus. `train.sampler=epoch`, `train.max_epochs=1`.
- Optimizer: AdamW, betas 0.9/0.95, weight decay 0.1 (not on embeddings, biases or norms; under μP × d_model/64 on
  the hidden matrices), gradient clipping at 1.0; linear warmup over {v3.WARMUP_RATIO * 100:g}% of the steps, then
  cosine decay to 0.1 × lr. 1 thread per run on a CPU.
- Metric: final `{METRIC}` (the test novels). Per (parametrization, width) the seed-mean curve over the grid (a
  diverged run counts as +inf) and its optimum: the grid argmin refined by the parabola through it and its two
  neighbours in log2 lr (experiments/findings/lr_transfer.py, v1's reading; an argmin at a grid end stays there,
  flagged "edge", a bound). The **slope**: the OLS slope of the 5 optima's log2 lr against log2 d_model, in grid
  steps per doubling of the width (Adam under SP: −1; μP: 0).
- Intervals: a bootstrap over seeds (experiments/findings/lr_bootstrap.py): {N_BOOT} resamples of the 6 seeds with
  replacement (one draw for all widths), numpy PCG64 seeded {RNG_SEED}; percentile intervals of each optimum (95%)
  and of the slope at the level its claim reads (SP 95%, μP 90%). Resamples in which a width has no optimum are
  left out and counted, as are those with an optimum at a grid edge.
- Seeds: 6 per point ({SEEDS[0]}–{SEEDS[-1]}), above the issue's floor of 4 so the bootstrap has 462 distinct
  resamples (35 at 4). No power plan: the slope's noise has no estimate before a run (v1's two seeds at unequal
  horizons are not one) and no closed form; the interval's width is reported, and an interval that covers a bound
  reads inconclusive.
- Where: a GPU, packed (`--packed`: `hydra/launcher=packed`, issue 29); the doc says where each run ran. On this
  project's CPU the {N_RUNS} runs would take about 90 CPU-hours (a d1024 run about 0.57: 2.06 s per 512-token step
  on one thread), beyond the v3 budget (docs/findings/PLAN_v3.md, "Registration of §3.3")."""
BY = ("model.param", "model.d_model", "optim.lr")
BASELINE = {"model.param": "sp", "model.d_model": BASE_WIDTH, "optim.lr": 1e-3}  # the report's table only
FIGURES = ("mup_transfer.png",)
DATA = "eltec_v3"
EXTRA_FILES = ("experiments/findings/claims/protocol_v3.py", "conf/finding/data/eltec_v3.yaml",
               "conf/finding/mup_param/*.yaml", "conf/model/param/*.yaml", "experiments/findings/lr_transfer.py",
               "experiments/findings/lr_bootstrap.py", "experiments/findings/outcome.py",
               "experiments/findings/transfer_plot.py")
SMOKE = (*v3.SMOKE, "optim.lr=5e-4,2e-3,8e-3")  # the embedded corpus; 3 lrs; every width (the rule reads them all)
SMOKE_SHAPE = False  # the widths are the sweep
RULE = (f"Per parametrization, the slope of the optimum (Setup) on the test novels, judged by outcome.py's table at "
        f"its claim's level: SP's claim is a slope below 0 (\"lower\", 95% bootstrap interval), μP's a slope within "
        f"±{DELTA:g} (\"equal\": the 90% interval inside ±{DELTA:g}, one grid step over the 16× span). Second corpus: "
        f"a half read reproduced whose WikiText-2 slope (seed-mean optima) is not on the claimed side (SP: below 0; "
        f"μP: inside ±{DELTA:g}) reads inconclusive. **Reproduced** if both halves are reproduced; **not "
        f"reproduced** if μP's is not reproduced or SP's is opposite, equivalent or not reproduced; otherwise "
        f"**inconclusive**. Each half is an interval at its own level; the verdict needs both (an intersection–union "
        f"test: no correction). The optima's own intervals are reported, not judged. Why ±{DELTA:g}: one ×2 grid step "
        f"over the 16× width span, an error a practitioner tuning on the proxy's grid could not see.")


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """mup_transfer.png from the sweep's runs (judge() hands out_dir = <sweep dir>/init, after the sweep)."""
    from experiments.findings.transfer_plot import draw_sweep  # matplotlib: only when a sweep is judged

    return draw_sweep(Path(out_dir).parent, Path(out_dir), BY, PARAMS, WIDTHS, GRID, SEEDS, KEY,
                      n_boot=N_BOOT, rng_seed=RNG_SEED)


def readings(records, param: str, key: str = KEY, level: float = 0.95) -> lb.Transfer:
    """The optima and the slope of one parametrization on `key`, with bootstrap intervals at `level`."""
    curves = {w: lb.seed_curves(records, {"model.param": param, "model.d_model": w}, GRID, SEEDS, key)
              for w in WIDTHS}
    return lb.transfer(curves, n_boot=N_BOOT, level=level, rng_seed=RNG_SEED)


def _on_claimed_side(param: str, slope: float | None) -> bool:
    return slope is not None and (slope < 0 if param == "sp" else abs(slope) < DELTA)


def _half(ev: Evidence, param: str) -> tuple[str, str, lb.Transfer, lb.Transfer]:
    """(label, reading, test-split readings at the claim's level, second-corpus readings) of one parametrization."""
    claim = CLAIMS[param]
    t = readings(ev.records, param, level=LEVELS[claim])
    second = readings(ev.records, param, SECOND, level=LEVELS[claim])
    s = t.slope
    ci = None if s.low is None else (s.low, s.high)
    o = outcome(s.point if s.point is not None else math.nan, ci, claim, DELTA, len(SEEDS))
    label, reading = o.label, o.reading
    if s.point is None:
        label, reading = "inconclusive", "no slope: a width has no optimum"
    elif label == "reproduced" and not _on_claimed_side(param, second.slope.point):
        label, reading = "inconclusive", (f"{reading}, but the second corpus's slope "
                                          f"({second.slope.text()}) is not on the claimed side")
    return label, reading, t, second


def rule(ev: Evidence) -> Verdict:
    halves = {p: _half(ev, p) for p in PARAMS}
    labels = {p: h[0] for p, h in halves.items()}
    if all(v == "reproduced" for v in labels.values()):
        overall = "reproduced"
    elif labels["mup"] == "not reproduced" or labels["sp"] in ("opposite", "equivalent", "not reproduced"):
        overall = "not reproduced"
    else:
        overall = "inconclusive"
    parts = [(p, labels[p], f"slope {halves[p][2].slope.text()} per doubling ({LEVELS[CLAIMS[p]]:.0%} bootstrap "
                            f"interval; claim: {'below 0' if p == 'sp' else f'within ±{DELTA:g}'}): {halves[p][1]}")
             for p in PARAMS]
    key = "; ".join(f"{'μP' if p == 'mup' else 'SP'} slope {halves[p][2].slope.text()}/doubling {labels[p]}"
                    for p in PARAMS)
    drops = ", ".join(f"{p}: {h[2].dropped} without a slope, {h[2].edges} with an edge optimum of {h[2].n_boot}"
                      for p, h in halves.items())
    explanation = (" ".join(f"{'μP' if p == 'mup' else 'SP'}: {labels[p]} ({text})." for p, _, text in parts)
                   + f" Bootstrap resamples: {drops}. Verdict: {overall}.")
    likely = "" if overall == "reproduced" else (
        "A half reads inconclusive when its interval covers a bound: six seeds may not pin a slope read from five "
        "argmins of flat basins; edge optima, if any, are bounds that the interval does not widen for.")
    return Verdict(overall, explanation, key, likely, [_optimum_table(ev), _slope_table(halves)], parts=parts)


def _optimum_table(ev: Evidence) -> Table:
    rows = []
    for p in PARAMS:
        t = readings(ev.records, p)
        for w in WIDTHS:
            o = t.optima[w]
            rows.append([p, str(w), f"{NON_EMBEDDING[w]:,}", o.text(),
                         "—" if o.point is None else f"{2 ** o.point:.3g}"])
    return Table("Optimal lr per width on the test novels: log2 lr of the seed-mean curve's refined optimum [95% "
                 "bootstrap interval over seeds] (edge: at a grid end, a bound), and the lr",
                 ["param", "d_model", "non-embedding", "log2 lr [95%]", "lr"], rows)


def _slope_table(halves: dict) -> Table:
    rows = [[p, f"{LEVELS[CLAIMS[p]]:.0%}", h[2].slope.text(), h[3].slope.text(), h[0]] for p, h in halves.items()]
    return Table("Slope of the optimum's log2 lr per doubling of d_model (OLS over the widths; Adam under SP −1, μP "
                 "0), with its bootstrap interval", ["param", "level", "test novels", "WikiText-2", "outcome"], rows)
