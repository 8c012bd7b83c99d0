"""`python -m arch.info`: parameter and FLOP accounting for well-known model shapes (GPT-2, GPT-3).

PRESETS is a plain dict registry of `ModelConfig`s, usable elsewhere (`from arch.info import PRESETS`).
The table is closed-form arithmetic from `arch.accounting`; nothing is built, so GPT-3 175B prints instantly.
The presets reproduce the published shapes (vocab 50257, learned positions, biases, tied embeddings, pre-LN,
GELU); GPT-3's alternating sparse attention layers have the same parameter count as dense ones.

    python -m arch.info                      # the table
    python -m arch.info --preset gpt2-small  # one row
    python -m arch.info --json               # machine-readable rows
    python -m arch.info --seq-len 512        # FLOPs/token at another sequence length
"""

from __future__ import annotations

import argparse
import json
import sys

from arch.accounting import count_params, flops_per_token, kaplan_params
from arch.config import ModelConfig, PosConfig


def _gpt(n_layers: int, d_model: int, n_heads: int, n_ctx: int) -> ModelConfig:
    """GPT-2 / GPT-3 architecture at the given shape (the ModelConfig defaults, spelled out)."""
    return ModelConfig(
        vocab_size=50257, n_ctx=n_ctx, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        activation="gelu", pos=PosConfig(kind="learned"), norm="pre", norm_type="layernorm",
        bias=True, tie_embeddings=True,
    )  # fmt: skip


# name -> config. GPT-2: Radford et al. 2019 table 2 (d_head 64); GPT-3: Brown et al. 2020 table 2.1.
PRESETS: dict[str, ModelConfig] = {
    "gpt2-small": _gpt(12, 768, 12, 1024),  # 124,439,808 params (the HF checkpoint's count)
    "gpt2-medium": _gpt(24, 1024, 16, 1024),
    "gpt2-large": _gpt(36, 1280, 20, 1024),
    "gpt2-xl": _gpt(48, 1600, 25, 1024),
    "gpt3-175b": _gpt(96, 12288, 96, 2048),  # d_head 128
}


def info_row(name: str, cfg: ModelConfig, seq_len: int | None = None) -> dict:
    """One table row as a plain dict: shape, counts, FLOPs/token (training, at seq_len or n_ctx)."""
    return {
        "name": name,
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "n_heads": cfg.n_heads,
        "d_head": cfg.d_head,
        "n_ctx": cfg.n_ctx,
        "params": count_params(cfg),
        "non_embedding_params": count_params(cfg, non_embedding=True),
        "kaplan_12Ld2": kaplan_params(cfg),
        "flops_per_token": flops_per_token(cfg, seq_len=seq_len),
        "seq_len": cfg.n_ctx if seq_len is None else seq_len,
    }


def format_table(rows: list[dict]) -> str:
    """Fixed-width text table: exact params with thousands separators, FLOPs in scientific notation."""
    header = ["model", "layers", "d_model", "heads", "n_ctx", "params", "non-emb params", "12·L·d²", "FLOPs/token"]
    body = [
        [
            r["name"], str(r["n_layers"]), str(r["d_model"]), str(r["n_heads"]), str(r["n_ctx"]),
            f"{r['params']:,}", f"{r['non_embedding_params']:,}", f"{r['kaplan_12Ld2']:,}",
            f"{r['flops_per_token']:.3e}",
        ]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    lines = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(b) for b in body]
    t = "n_ctx" if all(r["seq_len"] == r["n_ctx"] for r in rows) else str(rows[0]["seq_len"])
    note = (
        "params: total (tied embeddings counted once). non-emb params: without token/position embeddings\n"
        "(Kaplan's N). 12·L·d²: Kaplan's approximation of it. FLOPs/token: training, 6·N + 12·L·H·D·T with\n"
        f"N = non-emb + vocab·d_model and T = {t} (PaLM appendix B)."
    )
    return "\n".join(lines) + "\n\n" + note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m arch.info", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), action="append", help="only these presets (repeatable)")
    parser.add_argument("--seq-len", type=int, default=None, help="sequence length for FLOPs/token (default n_ctx)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    names = args.preset or list(PRESETS)
    rows = [info_row(n, PRESETS[n], seq_len=args.seq_len) for n in names]
    print(json.dumps(rows, indent=2) if args.json else format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
