"""The report's "Analysis" section (`--analysis`): what happens inside the models, next to their losses.

* Attention entropy per layer over training (`analysis_attn_entropy.png`): the `attn_entropy/layer_{i}` values of
  every eval line (metrics.jsonl; experiments/run/eval_lm.py), one panel per group, one line per layer, mean ± std
  over the group's runs on the report's x axis, with the entropy of uniform causal attention as the ceiling.
* Logit lens (`analysis_logit_lens.png` + a table): each run's best checkpoint (experiments.load_run) on a fixed
  batch, the first `windows` eval windows of n_ctx tokens of its validation text (each document followed by
  <|endoftext|>, as the trainer's val stream; the embedded corpus's when that text cannot be reloaded). The
  residual stream entering block 0 and leaving each block is read out through ln_f and lm_head
  (arch.hooks: hook_resid_pre / hook_resid_post); per layer the mean log-probability of the correct next token
  (nats) and the top-1 accuracy. The last layer is the model's own prediction.
* Attention entropy per head (`analysis_head_entropy.png`) of the same checkpoints on the same batch: training logs
  only the per-layer mean, so the heads are measured here (a hook on each attn.hook_pattern).
Groups average their completed runs (stats.stat_runs); a run without a loadable decoder-only checkpoint is a note.
Not handled: encoder-decoder runs, a GPU (the models run on the CPU), tokens-only data (data=tokens: the embedded
corpus is used), text that the run read from a path relative to another working directory (same fallback).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from experiments.compare import plots
from experiments.compare.grouping import Group
from experiments.compare.runs import Run
from experiments.compare.stats import band, mean_std, series, stat_runs

ENTROPY_FIG, LENS_FIG, HEADS_FIG = "analysis_attn_entropy.png", "analysis_logit_lens.png", "analysis_head_entropy.png"
ANALYSIS_FIGURES = (ENTROPY_FIG, LENS_FIG, HEADS_FIG)
WINDOWS = 8  # eval windows in the fixed batch
ANALYSIS_NOTE = ("Inside the models (python -m experiments.compare --analysis): attention entropy logged at each eval, "
                 "and the logit lens and per-head attention entropy of each completed run's best checkpoint on a "
                 "fixed batch of validation text.")
LENS_TABLE_NOTE = ("Mean log p(next token) in nats / top-1 accuracy of the residual stream read out through the final "
                   "norm and the unembedding: emb = before block 0, Li = after block i; the last column a group "
                   "has is the model's own prediction. Mean over the group's runs (n).")
EOT = "<|endoftext|>"


# ---------------------------------------------------------------- attention entropy over training


def _entropy_layers(run: Run) -> list[int]:
    return sorted(int(k.rsplit("_", 1)[1]) for k in run.metric_keys() if k.startswith("attn_entropy/layer_"))


def uniform_entropy(n_ctx: int, window: int | None = None) -> float:
    """Mean over query positions t < n_ctx of ln(keys seen), the entropy of uniform causal attention (the most a
    row can have). Example: uniform_entropy(2) = (ln 1 + ln 2) / 2 = 0.3466"""
    return float(np.mean([math.log(min(t + 1, window or t + 1)) for t in range(n_ctx)]))


def entropy_data(groups: list[Group], x: str) -> list[dict[str, Any]]:
    """Per group with attn_entropy keys: {label, color, layers: [(i, grid, mean, std)], uniform}."""
    out = []
    for g in groups:
        runs = stat_runs(g)
        layers = sorted({i for r in runs for i in _entropy_layers(r)})
        if not layers:
            continue
        curves = []
        for i in layers:
            grid, mean, std, _ = band([series(r, f"attn_entropy/layer_{i}", x) for r in runs])
            if len(grid):
                curves.append((i, grid, mean, std))
        n_ctx, window = {r.flat.get("train.n_ctx") for r in runs}, {r.flat.get("model.window") for r in runs}
        uniform = None
        if len(n_ctx) == 1 and isinstance(next(iter(n_ctx)), int) and len(window) == 1:
            uniform = uniform_entropy(next(iter(n_ctx)), next(iter(window)))
        out.append({**g.appearance(), "layers": curves, "uniform": uniform})
    return out


# ---------------------------------------------------------------- logit lens and per-head entropy of a checkpoint


def _val_text(data_cfg: dict[str, Any], cache: dict[str, tuple[list[str], str]]) -> tuple[list[str], str]:
    """(validation documents, what they are) for a run's data config; the embedded corpus's when it cannot be
    reloaded. Memoised per data config in `cache` (runs of a sweep share one)."""
    from experiments.data.corpus import TOKEN_SOURCE, load_corpus  # torch: imported by --analysis only

    key = json.dumps(data_cfg, sort_keys=True, default=str)
    if key not in cache:
        source = data_cfg.get("source")
        try:
            if source == TOKEN_SOURCE:
                raise ValueError("data=tokens holds no text")
            corpus = load_corpus(data_cfg)
            cache[key] = (corpus.val_docs, f"the validation split of data={source} ({corpus.name})")
        except Exception as e:  # any source error (missing file, no hub, datasets missing): fall back, say why
            corpus = load_corpus({"source": "embedded", "val_fraction": 0.1, "split_by": "stream"})
            reason = " ".join(str(e).split())[:120]
            cache[key] = (corpus.val_docs, f"the embedded corpus's validation split ({corpus.name}; data={source} "
                                           f"could not be reloaded: {reason})")
    return cache[key]


def analysis_batch(docs: list[str], tok: Any, n_ctx: int, windows: int) -> np.ndarray | None:
    """(W, n_ctx + 1) token windows at 0, n_ctx, 2·n_ctx, ... of the val stream (docs encoded one by one, each
    followed by <|endoftext|> when the tokenizer has it), W <= windows; None when not even one window fits."""
    eot = getattr(tok, "special_tokens", {}).get(EOT)
    need = windows * n_ctx + 1
    ids: list[int] = []
    for doc in docs:
        ids += tok.encode(doc, allowed_special=set(), disallowed_special=())
        if eot is not None:
            ids.append(eot)
        if len(ids) >= need:
            break
    w = min(windows, (len(ids) - 1) // n_ctx)
    if w < 1:
        return None
    return np.stack([np.asarray(ids[s * n_ctx: s * n_ctx + n_ctx + 1], dtype=np.int64) for s in range(w)])


def inspect_model(model: Any, windows: np.ndarray) -> dict[str, Any]:
    """Logit lens and per-head attention entropy of `model` (an arch Transformer) on windows (W, n_ctx + 1):
    {logp: [L + 1] mean log p(next token), top1: [L + 1] accuracy, head_entropy: [L][H] nats}."""
    import torch  # imported by --analysis only: html.py / markdown.py import this module for every report

    from experiments.run.eval_lm import attention_entropy

    batch = torch.from_numpy(windows).to(next(model.parameters()).device)
    inputs, targets = batch[:, :-1], batch[:, 1:]
    L = model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{i}.hook_resid_post" for i in range(L))]
    stream: dict[str, Any] = {}
    heads: dict[int, list[float]] = {}

    def keep(x, hook):
        stream[hook.name] = x

    def head_entropy(a, hook):  # reduce (B, H, T, Tk) right away instead of keeping every pattern
        heads[hook.layer] = attention_entropy(a.float()).double().mean(dim=(0, 2)).tolist()

    with torch.no_grad():
        model.run_with_hooks(inputs, [(lambda n: n in names, keep),
                                      (lambda n: n.endswith("attn.hook_pattern"), head_entropy)])
        logp, top1 = [], []
        for name in names:
            lp_sum, hit = 0.0, 0.0
            for row in range(inputs.shape[0]):  # one window at a time: (T, V) logits, not (W, T, V)
                lp = torch.log_softmax(model.lm_head(model.ln_f(stream[name][row: row + 1])).float(), -1)[0]
                lp_sum += lp.gather(-1, targets[row, :, None]).double().sum().item()
                hit += (lp.argmax(-1) == targets[row]).double().sum().item()
            logp.append(lp_sum / targets.numel())
            top1.append(hit / targets.numel())
    return {"logp": logp, "top1": top1, "head_entropy": [heads[i] for i in range(L)]}


def inspect_run(run: Run, windows: int, texts: dict[str, tuple[list[str], str]]) -> dict[str, Any] | str:
    """inspect_model on the run's best checkpoint and batch, plus {source, n_windows}; a string says why not."""
    from arch import Transformer  # torch: imported by --analysis only
    from experiments.use.load import load_run

    if run.path is None:
        return "no run dir (a wandb run)"
    try:
        model, tok, cfg = load_run(run.path)
    except Exception as e:  # RunLoadError, or a config this arch cannot build: the reason, one line
        return f"cannot load its checkpoint: {' '.join(str(e).split())[:160]}"
    if not isinstance(model, Transformer):
        return f"{type(model).__name__} is not a decoder-only arch.Transformer (hooks cover only those)"
    n_ctx = int((cfg.get("train") or {}).get("n_ctx") or model.cfg.n_ctx)
    docs, source = _val_text(dict(cfg.get("data") or {"source": "embedded"}), texts)
    batch = analysis_batch(docs, tok, n_ctx, windows)
    if batch is None:
        return f"its validation text has fewer than n_ctx + 1 = {n_ctx + 1} tokens"
    return {**inspect_model(model, batch), "source": source, "n_windows": len(batch),
            "uniform": uniform_entropy(n_ctx, model.cfg.window)}


def lens_data(groups: list[Group], windows: int) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """(per group {label, color, n, layers, logp: (mean, std) arrays, top1, head_entropy (L, H), uniform}, text
    sources, notes on runs left out). Head indices mean nothing across seeds, so each run's heads are sorted by
    entropy within each layer before the group mean: column j is the (j+1)-th sharpest head."""
    texts: dict[str, tuple[list[str], str]] = {}
    out, sources, notes = [], [], []
    for g in groups:
        results = []
        for r in stat_runs(g):
            res = inspect_run(r, windows, texts)
            if isinstance(res, str):
                notes.append(f"{g.label}: {r.name} left out of the logit lens ({res})")
            elif results and len(res["logp"]) != len(results[0]["logp"]):
                notes.append(f"{g.label}: {r.name} left out of the logit lens (its depth differs from the group's)")
            else:
                results.append(res)
                sources.append(res["source"])
        if not results:
            continue
        stats = {k: [mean_std([res[k][i] for res in results]) for i in range(len(results[0][k]))]
                 for k in ("logp", "top1")}
        heads = [np.sort(np.asarray(res["head_entropy"], dtype=float), axis=1) for res in results
                 if np.shape(res["head_entropy"]) == np.shape(results[0]["head_entropy"])]
        out.append({**g.appearance(), "n": len(results), "layers": len(results[0]["logp"]) - 1,
                    "logp": tuple(np.array([s[j] for s in stats["logp"]]) for j in (0, 1)),
                    "top1": tuple(np.array([s[j] for s in stats["top1"]]) for j in (0, 1)),
                    "head_entropy": np.mean(heads, axis=0), "n_windows": results[0]["n_windows"],
                    "uniform": results[0]["uniform"]})
    return out, list(dict.fromkeys(sources)), notes


def lens_table(lens: list[dict[str, Any]]) -> tuple[list[str], list[list[tuple[str, Any]]]]:
    """Rows per group: mean log p(next token) and top-1 before block 0 ('emb') and after block i ('L{i}')."""
    depth = max(d["layers"] for d in lens)
    head = ["group", "n", "emb", *(f"L{i}" for i in range(depth))]
    rows = []
    for d in lens:
        cells: list[tuple[str, Any]] = [(d["label"], d["label"]), (str(d["n"]), d["n"])]
        for i in range(depth + 1):
            if i <= d["layers"]:
                lp, acc = float(d["logp"][0][i]), float(d["top1"][0][i])
                cells.append((f"{lp:.3f} / {100 * acc:.1f}%", lp))
            else:
                cells.append(("", None))
        rows.append(cells)
    return head, rows


# ---------------------------------------------------------------- the section


def build_analysis(out: Path, groups: list[Group], x: str, windows: int = WINDOWS) -> dict[str, Any]:
    """Draw the analysis figures into `out`: {figures: [{file, title, caption}], notes, table: (head, rows) or
    None, source: text the lens read}."""
    figures: list[dict[str, str]] = []
    notes: list[str] = []

    ent = entropy_data(groups, x)
    if ent:
        plots.plot_attn_entropy(out / ENTROPY_FIG, ent, x, "Attention entropy per layer over training")
        figures.append({"file": ENTROPY_FIG, "title": "Attention entropy per layer over training", "caption": (
            "attn_entropy/layer_{i} at each eval (mean Shannon entropy of the attention rows, nats, over the first "
            "eval batch), one panel per group, one line per layer (dark = near the embedding), mean ± std over its "
            "completed runs. Dashed: uniform causal attention over the eval window, the most a row can have; "
            "0 = every query attends to one key.")})
    else:
        notes.append("attention entropy over training: skipped (no run logged attn_entropy/layer_{i})")

    lens, sources, lens_notes = lens_data(groups, windows)
    notes += lens_notes
    table = None
    if lens:
        w = {d["n_windows"] for d in lens}
        batch = (f"{'/'.join(map(str, sorted(w)))} windows of n_ctx tokens of " + "; ".join(sources))
        plots.plot_logit_lens(out / LENS_FIG, lens, "Logit lens: the residual stream read out after each layer")
        figures.append({"file": LENS_FIG, "title": "Logit lens", "caption": (
            "The residual stream before block 0 (emb) and after each block i, passed through the final norm and "
            "the unembedding as the last block's is (arch.hooks.logit_lens): left, the mean log-probability of the "
            f"correct next token (nats); right, top-1 accuracy. Best checkpoint of each run, on {batch}; "
            "mean ± std over the group's runs. The last point is the model's own prediction.")})
        plots.plot_head_entropy(out / HEADS_FIG, lens, "Attention entropy per head (best checkpoint)")
        figures.append({"file": HEADS_FIG, "title": "Attention entropy per head", "caption": (
            "Mean entropy (nats) of each head's attention rows on the same batch; in each layer a run's heads are "
            "sorted from sharpest to most diffuse before the mean over the group's runs (head indices do not "
            "correspond across seeds). Colour scale from 0 (one key per query) to uniform causal attention. "
            "Training logs only the per-layer mean (attn_entropy/layer_{i}).")})
        table = lens_table(lens)
    else:
        notes.append("logit lens and per-head entropy: skipped (no completed run with a loadable decoder-only "
                     "checkpoint)")
    return {"figures": figures, "notes": notes, "table": table, "source": "; ".join(sources)}
