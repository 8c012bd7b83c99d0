"""Gradient norm per layer at initialisation, the measurement behind Xiong et al. 2020's Fig. 3 (no training).

    result = measure_init(["data=text", "data.paths=[corpus.txt]"], out_dir=Path("multirun/.../init"))
    result["rows"][0] -> {"init": "gpt2", "norm": "pre", "n_layers": 6, "seed": 0, "grad_norms": [...], "ratio": 1.02}

For every init ∈ {gpt2, xavier}, norm ∈ {pre, post}, n_layers ∈ {6, 12} and seed: build the finding's model
(conf/experiment/finding_xiong_postln_warmup.yaml plus the given overrides) at init, run the LM loss on one fixed
batch of real data (the first batch_size windows of n_ctx + 1 tokens of the validation split, the same batch for
every model), backward, and record the Frobenius norm of the gradient of each layer's MLP output projection
(`blocks.{i}.mlp.c_proj.weight`, W^{2} in Xiong's notation). `ratio` = last layer's norm / first layer's.
Writes init_grad_norms.json and init_grad_norms.png (grad norm vs layer, one line per norm/init, one panel per
depth) into out_dir.
Not handled: anything after step 0 (the training sweep measures that: grad_norm/layer_{i} in metrics.jsonl).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.grad_plot import finish, layer_band

INITS = ("gpt2", "xavier")
NORMS = ("pre", "post")
DEPTHS = (6, 12)
SEEDS = (0, 1, 2)
EXPERIMENT = "experiment=finding_xiong_postln_warmup"
PARAM = "blocks.{i}.mlp.c_proj.weight"


def one_batch(ids, batch_size: int, n_ctx: int):
    """(x, y) of shape (B, T): consecutive non-overlapping windows from the start of `ids` (as many as fit, <= B)."""
    import numpy as np
    import torch

    n = min(batch_size, (len(ids) - 1) // n_ctx)
    if n < 1:
        raise ValueError(f"the validation split has {len(ids)} tokens, fewer than one window of {n_ctx + 1}")
    rows = np.stack([np.asarray(ids[i * n_ctx: i * n_ctx + n_ctx + 1], dtype=np.int64) for i in range(n)])  # (B, T+1)
    t = torch.from_numpy(rows)
    return t[:, :-1], t[:, 1:]


def layer_grad_norms(model_cfg, x, y, seed: int) -> list[float]:
    """‖∂loss/∂W2_i‖ for each layer i of a freshly initialised model (seeded), on batch (x, y)."""
    import torch

    from arch import build_model

    torch.manual_seed(seed)
    model = build_model(model_cfg)
    model.train()
    model.zero_grad(set_to_none=True)
    model.loss(x, y).backward()
    return [float(block.mlp.c_proj.weight.grad.norm()) for block in model.blocks]


def measure_init(overrides: Sequence[str], out_dir: Path, seeds: Sequence[int] = SEEDS,
                 inits: Sequence[str] = INITS, norms: Sequence[str] = NORMS,
                 depths: Sequence[int] = DEPTHS) -> dict[str, Any]:
    """Measure every (init, norm, depth, seed); write init_grad_norms.{json,png} into out_dir; return the result.
    `overrides`: single-valued Hydra overrides (data, smoke shape, ...) applied to the finding's experiment."""
    from experiments.config.compose import compose_config
    from experiments.config.check import model_config, to_plain
    from experiments.data.cache import prepare_data

    c = to_plain(compose_config([EXPERIMENT, *overrides]))
    prepared = prepare_data(c["data"], c["tokenizer"], c["data"]["cache_dir"])
    vocab = prepared.tokenizer.vocab_size
    x, y = one_batch(prepared.data.val, c["train"]["batch_size"], c["train"]["n_ctx"])
    rows = []
    for init in inits:
        for norm in norms:
            for depth in depths:
                node = {**c["model"], "init": init, "norm": norm, "n_layers": depth}
                cfg = model_config(node, vocab)
                for seed in seeds:
                    g = layer_grad_norms(cfg, x, y, seed)
                    rows.append({"init": init, "norm": norm, "n_layers": depth, "seed": seed, "grad_norms": g,
                                 "ratio": g[-1] / g[0] if g[0] > 0 else None})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"param": PARAM, "data": prepared.name, "vocab_size": vocab, "batch": list(x.shape),
              "d_model": c["model"]["d_model"], "n_heads": c["model"]["n_heads"], "seeds": list(seeds), "rows": rows,
              "figure": "init_grad_norms.png"}
    (out_dir / "init_grad_norms.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out_dir / "init_grad_norms.png")
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    """Grad norm of W2 vs layer index (log y), mean over seeds with min–max bars; one panel per depth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    depths = sorted({r["n_layers"] for r in rows})
    fig, axes = plt.subplots(1, len(depths), figsize=(5 * len(depths), 3.8), squeeze=False)
    colors = {"pre": "#1f77b4", "post": "#d62728"}
    styles = {"xavier": "-", "gpt2": "--"}
    for ax, depth in zip(axes[0], depths):
        for norm in NORMS:
            for init in INITS:
                sel = [r["grad_norms"] for r in rows if r["n_layers"] == depth and r["norm"] == norm and r["init"] == init]
                if sel:
                    layer_band(ax, sel, color=colors.get(norm), linestyle=styles.get(init, ":"),
                               label=f"{norm}-LN, {init} init")
    finish(fig, axes, path, "Gradient norm of each layer's MLP output projection at initialisation (mean, min–max "
           "over seeds)", [f"{depth} layers" for depth in depths])
