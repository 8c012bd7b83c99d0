"""`python -m arch.info`: parameter and FLOP accounting for well-known model shapes (GPT-2, GPT-3).

PRESETS here is name -> `ModelConfig` of the published presets (`from arch.info import PRESETS`), built from
arch.presets.PRESETS (name -> the fields that differ from ModelConfig's defaults, shared with conf/model/).
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
from arch.config import ModelConfig
from arch.presets import GPT2_VOCAB, PUBLISHED_N_CTX, preset_config


# name -> ModelConfig of the published shapes, built from arch.presets (the one source of the shapes).
PRESETS: dict[str, ModelConfig] = {
    name: preset_config(name, vocab_size=GPT2_VOCAB, n_ctx=n_ctx) for name, n_ctx in PUBLISHED_N_CTX.items()
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
