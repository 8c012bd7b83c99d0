"""`python -m experiments.evaluate RUN_DIR`: a finished run's loss, perplexity, bits per byte and length
extrapolation on any text, as a table (or JSON).

    python -m experiments.evaluate outputs/default/2026-11-25_10-00-00                  # the run's own val split
    python -m experiments.evaluate RUN --text notes.txt 'more/*.txt'                     # any local text files
    python -m experiments.evaluate RUN data=text 'data.paths=[story.txt]'               # a data config (conf/data/)
    python -m experiments.evaluate RUN --which last --factors 1 2 4 --json              # JSON on stdout

The model and tokenizer come from experiments.load_run (best weights unless --which). The text is encoded with
the run's tokenizer (special-token strings count as plain text) and scored with the same fixed windows as the
trainer's eval (experiments/run/eval_lm.py): every full window of n_ctx tokens, then the extrapolation lengths
k·n_ctx, `nonoverlap` and `sliding`. Byte-level BPE encodes every string losslessly, so no text is refused for
its characters; the round trip decode(encode(text)) == text is still checked and a failure is one line (it would
mean a broken tokenizer file). bits per byte = nats / ln 2 / (UTF-8 bytes of the text / tokens).
Without --text or data overrides: the run's own validation split, rebuilt from its config.yaml (the corpus must
still be where the run read it). Errors are one line, `evaluate: error: ...`, exit 2, before the run is loaded
where the value alone is wrong: a number out of its range (`--factors 0`, `--max-tokens 0`, `--batch-size 0`), a
run dir that does not exist or holds no checkpoint, an unknown `--which` or `--device`, a `--text` file that
cannot be read or is not UTF-8.
Not handled: document boundaries inside --text files (files are joined with a newline).
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from experiments.config.check import to_plain
from experiments.config.compose import compose_config
from experiments.config.errors import ConfigError
from experiments.data.cache import prepare_data
from experiments.data.corpus import expand_paths
from experiments.data.pairs import prepare_pairs
from experiments.run.eval_lm import evaluate_model, length_extrapolation
from experiments.run.eval_seq2seq import evaluate_seq2seq
from experiments.use.load import RunLoadError, check_device, load_run, run_tokenizer_file
from tokenizer.cli_args import OneLineParser, UsageError, fail, non_empty, positive_int, read_text_file


class EvalError(ValueError):
    """Bad input; printed as one line, exit 2."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m experiments.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=non_empty, help="a run dir (holds config.yaml and checkpoints/)")
    p.add_argument("overrides", nargs="*", help="data config overrides, e.g. data=text 'data.paths=[a.txt]'")
    p.add_argument("--text", nargs="+", type=non_empty, metavar="FILE",
                   help="score these UTF-8 text files (globs allowed) instead")
    p.add_argument("--which", type=non_empty, default="best", help="best | last | a step number (default: best)")
    p.add_argument("--factors", type=positive_int, nargs="+", default=[1, 2, 4, 8],
                   help="extrapolation lengths, x n_ctx")
    p.add_argument("--max-tokens", type=positive_int, default=65536, help="tokens scored at most (default: 65536)")
    p.add_argument("--batch-size", type=positive_int, default=8)
    p.add_argument("--device", type=non_empty, default="cpu", help="cpu | cuda | cuda:N | mps (default: cpu)")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    return p.parse_args(argv)


def _read_texts(patterns: list[str]) -> str:
    try:
        paths = expand_paths(patterns)
    except ConfigError as e:
        raise EvalError(str(e)) from None
    return "\n".join(read_text_file(p, "--text") for p in paths)


def _encode(tok, text: str) -> tuple[np.ndarray, float]:
    """(ids, bytes per token) of `text`; refuses text that would not round-trip (one line)."""
    ids = tok.encode(text, allowed_special=set(), disallowed_special=())
    if not ids:
        raise EvalError("the text is empty")
    if tok.decode(ids) != text:
        raise EvalError("the run's tokenizer does not encode this text losslessly (decode(encode(text)) != text)")
    return np.asarray(ids, dtype=np.int64), len(text.encode("utf-8", errors="surrogatepass")) / len(ids)


def _check_overrides(overrides: list[str]) -> None:
    bad = [o for o in overrides if not o.split("=", 1)[0].lstrip("+~").startswith("data")]
    if bad:
        raise EvalError(f"only data overrides are accepted here, got {bad[0]!r}")


def _data_config(overrides: list[str], cfg: dict[str, Any], task: tuple[str, ...] | list[str] = ()) -> dict[str, Any]:
    """The run's data config, or the one `overrides` compose (after `task`) with the run's cache_dir; a composition
    Hydra refuses (an unknown data option or key) is one EvalError line, Hydra's first."""
    if not overrides:
        return dict(cfg["data"])
    try:
        data_cfg = to_plain(compose_config([*task, *overrides]))["data"]
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors: each becomes one line
        raise EvalError(f"cannot use the data overrides: {(str(e).splitlines() or [type(e).__name__])[0]}") from None
    return {**data_cfg, "cache_dir": cfg["data"].get("cache_dir", data_cfg.get("cache_dir"))}


def _tokens(args: argparse.Namespace, cfg: dict[str, Any], tok, text: str | None) -> tuple[np.ndarray, float, str]:
    """(ids, bytes per token, what was scored): of `text` (the --text files), else of the data config."""
    if text is not None:
        ids, bpt = _encode(tok, text)
        return ids, bpt, " ".join(args.text)

    data_cfg = _data_config(args.overrides, cfg)
    try:  # the run's own tokenizer file, as `tokenizer=load` (data=tokens files must have been encoded with it)
        prepared = prepare_data(data_cfg, {"mode": "load", "path": str(run_tokenizer_file(args.run_dir, cfg))},
                                data_cfg["cache_dir"])
    except ConfigError as e:
        raise EvalError(str(e)) from None
    split = prepared.data
    return np.asarray(split.val), split.bytes_per_token, f"the validation split of data={data_cfg.get('source')}"


def evaluate_run(args: argparse.Namespace) -> dict[str, Any]:
    check_device(args.device)
    _check_overrides(args.overrides)
    text = _read_texts(args.text) if args.text else None  # before the weights: a bad file is a bad argument
    model, tok, cfg = load_run(args.run_dir, which=args.which, device=args.device)
    if hasattr(model, "encoder"):
        return evaluate_seq2seq_run(args, model, cfg)
    ids, bpt, what = _tokens(args, cfg, tok, text)
    n_ctx = int(cfg["train"]["n_ctx"])
    ids = ids[: max(args.max_tokens, n_ctx + 1)]
    if len(ids) < n_ctx + 1:
        raise EvalError(f"the text has {len(ids)} tokens; scoring needs at least n_ctx + 1 = {n_ctx + 1}")
    metrics = evaluate_model(model, ids, n_ctx=n_ctx, batch_size=args.batch_size, max_batches=None,
                             bytes_per_token=bpt, device=args.device, attn_entropy=False)
    extrap = length_extrapolation(model, ids, n_ctx=n_ctx, factors=tuple(args.factors), max_tokens=len(ids),
                                  device=args.device, batch_size=args.batch_size)
    return {"run_dir": str(args.run_dir), "which": args.which, "scored": what, "tokens": int(len(ids)),
            "bytes_per_token": bpt, "n_ctx": n_ctx, **metrics, **extrap}


def evaluate_seq2seq_run(args: argparse.Namespace, model, cfg: dict[str, Any]) -> dict[str, Any]:
    """An encoder-decoder run: loss, token accuracy and exact match (overall and per length) on the test split of
    its data config (or of `data...` overrides), with the run's own tokenizer."""
    if args.text:
        raise EvalError("--text scores a language model; an encoder-decoder run is scored on pairs (data=... overrides)")
    data_cfg = _data_config(args.overrides, cfg, task=["task=seq2seq"])
    try:
        p = prepare_pairs(data_cfg, {"mode": "load", "path": str(run_tokenizer_file(args.run_dir, cfg))}, data_cfg["cache_dir"])
    except ConfigError as e:
        raise EvalError(str(e)) from None
    r = evaluate_seq2seq(model, p.test, pad_id=p.pad_id, bos_id=p.bos_id, eos_id=p.eos_id, batch_size=args.batch_size,
                         device=args.device, prefix="test")
    return {"run_dir": str(args.run_dir), "which": args.which, "scored": f"{p.name}: {len(p.test.src)} test pairs", **r}


def format_table(r: dict[str, Any]) -> str:
    if "test/exact_match" in r:  # an encoder-decoder run
        lines = [f"run          {r['run_dir']} ({r['which']} weights)", f"scored       {r['scored']}", "",
                 f"loss         {r['test/loss']:.4f} nats/token", f"token acc    {r['test/token_acc']:.4f}",
                 f"exact match  {r['test/exact_match']:.4f}", "", "length   exact match   token acc"]
        lengths = sorted(int(k.rsplit("@len", 1)[1]) for k in r if k.startswith("test/token_acc@len"))
        lines += [f"{k:>6}   {r.get(f'test/exact_match@len{k}', float('nan')):>11.4f}   {r[f'test/token_acc@len{k}']:>9.4f}"
                  for k in lengths]
        return "\n".join(lines)
    def num(v: Any) -> str:
        return "N/A" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.4f}"

    lines = [f"run        {r['run_dir']} ({r['which']} weights)", f"scored     {r['scored']}: {r['tokens']} tokens, "
             f"{r['bytes_per_token']:.3f} bytes/token", "",
             f"val/loss   {num(r['val/loss'])} nats/token", f"val/ppl    {num(r['val/ppl'])}",
             f"val/bpb    {num(r['val/bpb'])} bits/byte", "", "length     tokens   nonoverlap   sliding"]
    factors = sorted({int(k.split("@")[1].rstrip("x")) for k in r if k.startswith("extrap/")})
    for k in factors:
        lines.append(f"{k:>5}x   {k * r['n_ctx']:>7}   {num(r[f'extrap/nonoverlap/loss@{k}x']):>10}   "
                     f"{num(r[f'extrap/sliding/loss@{k}x']):>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        result = evaluate_run(args)
    except (UsageError, EvalError, RunLoadError) as e:
        return fail("evaluate", e)
    print(json.dumps(result, indent=1) if args.json else format_table(result))
    return 0
