"""Gradient norm per layer at initialisation of the transformer-base encoder-decoder, post-LN and pre-LN: the
measurement behind Xiong et al. 2020's Fig. 3, on the model the paper analyses (no training).

    result = measure_encdec(["finding/data=embedded"], Path("multirun/.../init"), "finding_xiong_postln_warmup_v2")
    result["rows"][0] -> {"norm": "post", "seed": 0, "encoder": [...], "decoder": [...], "ratio": 1.9}

The model is arch/presets.py's `transformer-base` (Vaswani et al. 2017: d_model 512, 6 + 6 layers, 8 heads, ReLU
d_mlp 2048, sinusoidal positions, embeddings scaled by √d_model, Xavier init, post-LN, all three embedding matrices
tied), at the finding's tokenizer vocabulary and with dropout 0 (the gradient of the model itself, as the paper's
analysis; the preset's 0.1 would add a random mask), as the preset's post-LN and with norm="pre" (pre-LN, a final
LayerNorm on each stack). Per norm and seed: build it (torch.manual_seed(seed)), one fixed batch of real tokens
from the validation split of the finding's data: `batch` windows of 2·length + 1 consecutive tokens, the first
`length` the source, the next `length` the decoder input and the same shifted by one the target; the mean
cross-entropy, backward, and the Frobenius norm of the gradient of each layer's MLP output projection
(`encoder.blocks.{i}.mlp.c_proj.weight` and `decoder.blocks.{i}.mlp.c_proj.weight`, W^{2} in Xiong's notation).
`ratio` = the decoder's last layer / its first. Writes encdec_grad_norms.json and .png into out_dir.
Not handled: translation data (a window of one text is split into source and target: the gradients at init depend
on the architecture, not on the pairs being translations), anything after step 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.grad_plot import finish, layer_band

PRESET = "transformer-base"
NORMS = ("post", "pre")
SEEDS = (0, 1, 2)
BATCH, LENGTH = 8, 64  # 8 x (64 source + 64 target) tokens; --smoke: SMOKE_BATCH
SMOKE_BATCH = (2, 16)
FIGURE = "encdec_grad_norms.png"


def encdec_batch(ids, batch: int, length: int):
    """(src, tgt_in, tgt_out), each (B, length): consecutive windows of 2·length + 1 tokens from the start of ids."""
    import numpy as np
    import torch

    span = 2 * length + 1
    n = min(batch, len(ids) // span)
    if n < 1:
        raise ValueError(f"the validation split has {len(ids)} tokens, fewer than one window of {span}")
    rows = torch.from_numpy(np.stack([np.asarray(ids[i * span:(i + 1) * span], dtype=np.int64) for i in range(n)]))
    return rows[:, :length], rows[:, length:2 * length], rows[:, length + 1:]  # (B, L) each


def grad_norms(cfg, batch, seed: int) -> dict[str, list[float]]:
    """‖∂loss/∂W2_i‖ of each encoder and decoder layer of a freshly initialised encoder-decoder (seeded)."""
    import torch

    from arch import build_model

    torch.manual_seed(seed)
    model = build_model(cfg)
    model.train()
    model.zero_grad(set_to_none=True)
    model.loss(*batch).backward()
    return {stack: [float(b.mlp.c_proj.weight.grad.norm()) for b in getattr(model, stack).blocks]
            for stack in ("encoder", "decoder")}


def measure_encdec(overrides: Sequence[str], out_dir: Path, experiment: str, seeds: Sequence[int] = SEEDS,
                   smoke: bool = False) -> dict[str, Any]:
    """Measure post-LN and pre-LN transformer-base at init (module docstring) on the data of `experiment` with
    `overrides` (single-valued: the data, the smoke settings); write encdec_grad_norms.{json,png}; return it."""
    from arch.presets import encdec_preset_config
    from experiments.config.check import to_plain
    from experiments.config.compose import compose_config
    from experiments.data.cache import prepare_data

    c = to_plain(compose_config([f"experiment={experiment}", *overrides]))
    prepared = prepare_data(c["data"], c["tokenizer"], c["data"]["cache_dir"])
    vocab = prepared.tokenizer.vocab_size
    b, length = SMOKE_BATCH if smoke else (BATCH, LENGTH)
    batch = encdec_batch(prepared.data.val, b, length)
    rows = []
    for norm in NORMS:
        cfg = encdec_preset_config(PRESET, vocab_size=vocab, n_ctx=length, norm=norm, dropout=0.0)
        for seed in seeds:
            g = grad_norms(cfg, batch, seed)
            rows.append({"norm": norm, "seed": seed, **g,
                         "ratio": g["decoder"][-1] / g["decoder"][0] if g["decoder"][0] > 0 else None})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"preset": PRESET, "param": "{encoder,decoder}.blocks.{i}.mlp.c_proj.weight", "data": prepared.name,
              "vocab_size": vocab, "batch": [int(batch[0].shape[0]), length], "init": cfg.init, "dropout": 0.0,
              "seeds": list(seeds), "rows": rows, "figure": FIGURE}
    (out_dir / "encdec_grad_norms.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out_dir / FIGURE)
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    """Grad norm of W2 against the layer (log y), mean over seeds with min–max bars; encoder and decoder panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), squeeze=False)
    colors = {"pre": "#1f77b4", "post": "#d62728"}
    for ax, stack in zip(axes[0], ("encoder", "decoder")):
        for norm in NORMS:
            sel = [r[stack] for r in result["rows"] if r["norm"] == norm]
            if sel:
                layer_band(ax, sel, color=colors[norm], label=f"{norm}-LN")
    finish(fig, axes, path, "Gradient norm of each layer's MLP output projection at Xavier init (mean, min–max over "
           "seeds)", [f"{result['preset']} {stack}" for stack in ("encoder", "decoder")])
