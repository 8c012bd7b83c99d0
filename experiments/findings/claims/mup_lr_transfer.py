"""Finding `mup_lr_transfer`: under μP the optimal learning rate stays put as the model widens; under the standard
parametrization (SP) it shifts.

Yang et al. 2022, "Tensor Programs V", https://arxiv.org/abs/2203.03466 (Fig. 1, Fig. 3). Sweep:
conf/experiment/finding_mup_lr_transfer.yaml, a plain grid (no tuning phase: the basin is the measurement) over
conf/finding/mup_param/ (sp, mup) x conf/finding/mup_width/ (d_model, tokens, eval cadence) x 7 lrs x 2 seeds;
plan: docs/findings/PLAN_mup.md; the reading (refined optimum, shift): lr_transfer.py; the figure: mup_basin.py;
registered: experiments/findings/registered/mup_lr_transfer.json (this module, the YAML and EXTRA_FILES).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import protocol_v2 as v2
from experiments.findings.evidence import Evidence, Table, Verdict, fmt
from experiments.findings.lr_transfer import Optimum, basin, optimum, shift

NAME = "mup_lr_transfer"
TITLE = "Under μP the optimal learning rate stays put as width grows; under SP it shifts"
CLAIM = ("With the Maximal Update Parametrization (μP) the learning rate that minimises the loss is the same at every "
         "width, so an lr tuned on a narrow proxy transfers to a wide model; with the standard parametrization it "
         "moves as the model widens (for Adam, roughly as 1/width).")
CITATION = ("Yang et al., *Tensor Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter Transfer*, "
            "2022, [arXiv:2203.03466](https://arxiv.org/abs/2203.03466) (Fig. 1, Fig. 3)")
PAPER = "Yang et al. 2022 (μP)"
PAPER_NUMBER = ("Fig. 1 (Transformers trained with Adam, d_model 128 to 8192): under SP the minimum of the loss-vs-"
                "log2(lr) curve moves with width and wider models are not always better; under μP the minima line up "
                "at one lr and wider is better at every lr. Fig. 3: under μP the optimal lr stays put across widths. "
                "The paper states no single number for the shift; μP's Adam scaling of hidden matrices' lr by "
                "1/width (its Table 3) is the shift SP would need.")
PARAMS = ("sp", "mup")  # conf/finding/mup_param/<name>.yaml -> model.param
WIDTHS = (64, 128, 256, 512)  # conf/finding/mup_width/d<w>.yaml -> model.d_model
GRID = (5e-4, 1e-3, 2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2)  # optim.lr, x2 apart: one grid step = one log2 unit
SEEDS = (0, 1)
BASE_WIDTH = 64
N_CTX, BATCH = 64, 8
TOKENS_PER_WIDTH = 1000  # train.tokens = 1000 x d_model
EVAL_INTERVAL = {64: 13, 128: 25, 256: 50, 512: 100}  # ~10% of each width's steps
NON_EMBEDDING = {64: 200_064, 128: 793_344, 256: 3_159_552, 512: 12_610_560}  # at vocab 2048, n_ctx 64


def _steps(width: int) -> int:
    return math.ceil(TOKENS_PER_WIDTH * width / (BATCH * N_CTX))


def _per_width(cell) -> str:
    """'a / b / c / d': cell(width) for each width."""
    return " / ".join(cell(w) for w in WIDTHS)


N_RUNS = len(PARAMS) * len(WIDTHS) * len(GRID) * len(SEEDS)
GRID_TEXT = ", ".join(f"{v:g}" for v in GRID)

SETUP = f"""\
- Arms: `finding/mup_param` ∈ {{sp, mup}} (`conf/finding/mup_param/`): SP, or μP against the d_model {BASE_WIDTH} proxy
  (`model/param=mup model.base_width={BASE_WIDTH}`, arch/mup.py: hidden matrices' init std × (64/d_model)^½, their
  AdamW lr × 64/d_model and weight decay × d_model/64, the readout's input × 64/d_model, attention scores
  √(base d_head)/d_head; at d_model 64 μP is SP exactly) × `finding/mup_width` ∈ {{d64, d128, d256, d512}}
  (`conf/finding/mup_width/`) × `optim.lr` ∈ the grid
  [{GRID_TEXT}] (7 points, ×2 apart) × seeds {', '.join(map(str, SEEDS))}:
  {N_RUNS} runs. A plain grid (Hydra's basic sweeper, `hydra/launcher=joblib_2`: 2 runs at a time, one torch
  thread each), no tuning phase: every point is trained at its full budget on both seeds
  (`conf/experiment/finding_mup_lr_transfer.yaml`).
- Model: d_model {_per_width(str)}, 4 layers, 4 heads (d_head = d_model / 4), d_mlp = 4 · d_model,
  tied embeddings, pre-LN, LayerNorm, GELU (tanh), learned positions, GPT-2 init (`model=small` with the width's
  d_model); {_per_width(lambda w: f'{NON_EMBEDDING[w]:,}')} non-embedding parameters.
- Budget: tokens ∝ width, {TOKENS_PER_WIDTH} × d_model = {_per_width(lambda w: f'{TOKENS_PER_WIDTH * w:,}')}
  training tokens ({_per_width(lambda w: f'{_steps(w):,}')} steps), n_ctx {N_CTX}, batch {BATCH} ({N_CTX * BATCH} tokens per step).
- Data: the v2 findings' (`finding/data=eltec`: `../shared/data/bench/eltec_eng_novels.txt`, ELTeC-eng novels
  read as one text file, the last 1% held out; the limits of that path as stated in docs/findings/README.md#data);
  our byte-level BPE, vocab {v2.VOCAB} (`tokenizer.max_train_bytes={v2.MAX_TRAIN_BYTES}`, which caps whole documents:
  it trains on the whole train split); `train.sampler=epoch`, `train.max_epochs=1` (no window seen twice).
- Optimizer: AdamW, betas 0.9/0.95, weight decay 0.1 (not on embeddings, biases or norms; under μP × d_model/64 on
  the hidden matrices), gradient clipping at 1.0; linear warmup over {v2.WARMUP_RATIO * 100:g}% of the steps
  (`schedule.warmup_ratio={v2.WARMUP_RATIO:g}`), then cosine decay to 0.1 × lr.
- Evaluation: every {_per_width(lambda w: str(EVAL_INTERVAL[w]))} steps (about 10% of the run) and at the end,
  {v2.EVAL_BATCHES} batches of 16 windows spread over the validation split; the metric is the final `val/loss`.
- Reading (experiments/findings/lr_transfer.py): per (parametrization, width, seed), and per (parametrization,
  width) for the seed-mean curve, the optimal lr is the grid argmin of final val/loss (a diverged run counts as
  +inf; ties go to the smaller lr), refined by the vertex of the parabola through the argmin and its two neighbours
  in log2(lr); an argmin at the grid's first or last lr stays there and is flagged "edge", an interior one with a
  +inf or missing neighbour stays at its grid lr, flagged "unrefined". The **shift** of a parametrization is
  max − min of its optimum over the 4 widths, in grid steps (log2 units). SP's optimum at d512 minus at d64 is
  shown too (Adam's 1/width predicts −3 steps).
- Statistics: 2 seeds give no interval and there is no test: both seeds' values and the seed mean are shown."""
BY = ("model.param", "model.d_model", "optim.lr")
BASELINE = {"model.param": "sp", "model.d_model": BASE_WIDTH, "optim.lr": 1e-3}  # the report's table only
FIGURES = ("mup_basin.png",)
DATA = v2.DATA
EXTRA_FILES = (*v2.SHARED_FILES, "conf/finding/mup_param/*.yaml", "conf/finding/mup_width/*.yaml",
               "conf/model/param/*.yaml", "experiments/findings/lr_transfer.py", "experiments/findings/mup_basin.py")
SMOKE_SHAPE = False  # the widths are the sweep
RULE = ("Per parametrization and curve (seed 0, seed 1, the seed mean), the shift of the optimal lr over the 4 widths "
        "(Setup). **Reproduced** if μP's shift is < 1 grid step and SP's is > 1 step for each seed and for the "
        "seed-mean curves; **not reproduced** if μP's shift is ≥ 1 step for both seeds, or SP's is ≤ 1 step for both "
        "seeds; otherwise **undecided** (the seeds disagree, or the seed-mean curves disagree with them). A shift "
        "that cannot be computed (a width without an optimum) counts for neither side. An optimum flagged at a grid "
        "edge enters at the edge (a bound). 2 seeds give no interval and the rule reads no test: nothing to correct.")
CURVES = (*SEEDS, None)  # None: the seed-mean curve


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """mup_basin.png from the sweep's runs (judge() hands out_dir = <sweep dir>/init, after the sweep)."""
    from experiments.findings.mup_basin import draw_sweep  # matplotlib: only when a sweep is judged

    return draw_sweep(Path(out_dir).parent, Path(out_dir), BY, PARAMS, WIDTHS, GRID, SEEDS)


def optima(ev: Evidence, param: str, seed: int | None) -> list[Optimum | None]:
    """The optimum of each width's curve (seed None: the seed-mean curve)."""
    return [optimum(basin(ev.records, {"model.param": param, "model.d_model": w}, GRID, seed)) for w in WIDTHS]


def _as_claimed(param: str, s: float | None) -> bool | None:
    """Whether the shift is what the claim predicts (μP < 1 step, SP > 1 step); None when not computed."""
    return None if s is None else (s < 1 if param == "mup" else s > 1)


def rule(ev: Evidence) -> Verdict:
    opts = {(p, c): optima(ev, p, c) for p in PARAMS for c in CURVES}
    shifts = {key: shift(o) for key, o in opts.items()}
    holds = {key: _as_claimed(key[0], s) for key, s in shifts.items()}
    if all(holds[key] is True for key in holds):
        outcome = "reproduced"
    elif any(all(holds[p, s] is False for s in SEEDS) for p in PARAMS):
        outcome = "not reproduced"
    else:
        outcome = "undecided"

    def curve_name(c: int | None) -> str:
        return "seed mean" if c is None else f"seed {c}"

    def says(p: str) -> str:
        return "; ".join(f"{curve_name(c)} {_steps_text(shifts[p, c])}" for c in CURVES)

    sp_drift = {c: _drift(opts["sp", c]) for c in CURVES}
    edges = sum(bool(o and o.edge) for os in opts.values() for o in os)
    explanation = (f"Shift of the optimal lr over d_model {WIDTHS[0]}–{WIDTHS[-1]} (grid steps = log2 units): μP "
                   f"{says('mup')}; SP {says('sp')}. The claim predicts μP < 1 and SP > 1 on every curve. Reported, "
                   f"not judged: SP's optimum at d{WIDTHS[-1]} − at d{WIDTHS[0]} = "
                   f"{', '.join(f'{_steps_text(sp_drift[c], signed=True)} ({curve_name(c)})' for c in CURVES)} "
                   f"(Adam's 1/width predicts −{math.log2(WIDTHS[-1] / WIDTHS[0]):g}). {edges} of "
                   f"{len(opts) * len(WIDTHS)} optima sit at a grid edge (bounds). Two seeds, no interval. "
                   f"Verdict: {outcome}.")
    missing = [f"{p} {curve_name(c)}" for (p, c), s in shifts.items() if s is None]
    likely = {"reproduced": "",
              "undecided": (f"No shift for {', '.join(missing)} (a width without an optimum): the rule cannot read "
                            "those curves." if missing else
                            "The two seeds (or the seed-mean curves) disagree about a shift near the 1-step threshold: "
                            "with 2 seeds the shift's noise is not bounded; more seeds (or a finer grid) would settle "
                            "it."),
              "not reproduced": (
                  "At d_model 64–512 with 4 layers and 0.04–0.32 tokens per non-embedding parameter, the basins may "
                  "be too flat or too short-horizon to move by a grid step under SP, or μP's corrections may not yet "
                  "dominate at an 8× width range; edge optima, if any, bound the shift from below.")}[outcome]
    key = (f"optimum shift d{WIDTHS[0]}–d{WIDTHS[-1]} (grid steps; seed 0 / seed 1 / mean): μP "
           + " / ".join(_steps_text(shifts['mup', c]) for c in CURVES) + "; SP "
           + " / ".join(_steps_text(shifts['sp', c]) for c in CURVES))
    return Verdict(outcome, explanation, key, likely, [_optimum_table(ev, opts), _shift_table(shifts, holds),
                                                       _loss_table(ev)], family=None)


def _drift(opts: list[Optimum | None]) -> float | None:
    """Optimum at the widest width minus at the narrowest (log2 units)."""
    return None if opts[0] is None or opts[-1] is None else opts[-1].log2_lr - opts[0].log2_lr


def _steps_text(s: float | None, signed: bool = False) -> str:
    return "—" if s is None else f"{s:+.2f}" if signed else f"{s:.2f}"


def _opt_cell(o: Optimum | None) -> str:
    return "—" if o is None else f"{o.lr:.3g} ({o.log2_lr:+.2f})" + (f" {o.flag}" if o.flag else "")


def _optimum_table(ev: Evidence, opts: dict) -> Table:
    rows = []
    for p in PARAMS:
        for i, w in enumerate(WIDTHS):
            mean = opts[p, None][i]
            rows.append([p, str(w), f"{TOKENS_PER_WIDTH * w:,}", *(_opt_cell(opts[p, c][i]) for c in CURVES),
                         fmt(mean.loss if mean else None)])
    return Table("Optimal lr per width: the refined optimum, lr (log2 lr), flagged where it sits at a grid edge or was "
                 "not refined; the seed-mean curve's loss at its optimum (the parabola's value)",
                 ["param", "d_model", "tokens", "seed 0", "seed 1", "seed mean", "loss at optimum"], rows)


def _shift_table(shifts: dict, holds: dict) -> Table:
    rows = [[p, *(_steps_text(shifts[p, c]) for c in CURVES),
             ", ".join("—" if holds[p, c] is None else "as claimed" if holds[p, c] else "not as claimed"
                       for c in CURVES)] for p in PARAMS]
    return Table("Shift of the optimum over the widths (max − min, grid steps); the claim: μP < 1, SP > 1 "
                 "(per curve: seed 0, seed 1, seed mean)", ["param", "seed 0", "seed 1", "seed mean", "reading"], rows)


def _loss_cell(mean: float | None, seeds: list[float | None]) -> str:
    def one(v: float | None) -> str:
        return "—" if v is None else "inf" if v == math.inf else f"{v:.3f}"

    return f"{one(mean)} ({' / '.join(one(v) for v in seeds)})"


def _loss_table(ev: Evidence) -> Table:
    rows = []
    for p in PARAMS:
        for w in WIDTHS:
            keys = {"model.param": p, "model.d_model": w}
            mean, per_seed = basin(ev.records, keys, GRID), [basin(ev.records, keys, GRID, s) for s in SEEDS]
            rows.append([p, str(w), *(_loss_cell(mean[i][1], [c[i][1] for c in per_seed]) for i in range(len(GRID)))])
    return Table("Final val/loss per lr: seed mean (seed 0 / seed 1); inf: diverged", ["param", "d_model",
                                                                                        *(f"lr {v:g}" for v in GRID)],
                 rows)
