"""`python -m experiments.export RUN_DIR --to hf --out DIR`: a finished run as a Hugging Face model + tokenizer.

    python -m experiments.export outputs/default/2026-11-25_10-00-00 --to hf --out exported/   # model + tokenizer
    python -m experiments.export RUN --to hf-tokenizer --out tok/      # tokenizer.json + tokenizer_config.json only
    python -m experiments.export RUN --to tiktoken --out tok/          # tokenizer.tiktoken (ranks) only
    python -m experiments.export RUN --to hf --out exported/ --which last --force

`--to hf` loads the run with experiments.load_run (`--which`: best | last | a step), converts it with
arch.convert.to_hf (GPT-2 family: learned positions; Llama family: rope; anything else is refused with one line
naming the knob), and writes `save_pretrained` (config.json, generation_config.json, model.safetensors) plus the
tokenizer: tokenizer.json (tokenizer.formats.export_hf) and a tokenizer_config.json naming PreTrainedTokenizerFast
with `<|endoftext|>` as bos / eos when the tokenizer has it (also the model's bos / eos ids). Then, offline,
`AutoModelForCausalLM.from_pretrained(DIR)` gives the logits of `load_run` and `AutoTokenizer.from_pretrained(DIR)`
the ids of `tok.encode(text, allowed_special="all")` (HF always parses special-token text). `--to tiktoken`
writes tokenizer.formats.export_tiktoken's ranks file (refused when tiktoken's rank rule would give other ids);
the pattern and special tokens go to tiktoken.Encoding as the printed line shows.
Outputs (experiments/use/export_dir.py): an existing non-empty --out is refused unless --force; --force replaces
only files an earlier export wrote there (export_manifest.json lists them), never the user's own files or a run's
(--out may not be the run dir or inside its checkpoints/), and deletes nothing. Files are written into a temp dir
inside --out, then moved into place with the umask's modes; a failed write (a full disk, a read-only dir) is one
line naming --out and leaves every file as it was. A killed export can leave its hidden `.DIR.*.tmp` temp dir in
--out (DIR: --out's name). Errors are one
line, `export: error: ...`, exit 2, before the run is loaded where the value alone is wrong (a run dir that does
not exist, an unknown --which, an --out export may not write). Needs transformers for --to hf only.
Not handled: encoder-decoder runs, dtype conversion (weights stay fp32), sharded output, pushing to the Hub.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

from arch.convert import hf_problem, to_hf
from experiments.use.export_dir import ExportDir, ExportError
from experiments.use.load import RunLoadError, load_run, load_run_tokenizer, open_run_dir, read_config
from tokenizer.cli_args import OneLineParser, UsageError, fail, non_empty

EOT = "<|endoftext|>"
NAMES = {"hf": ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                "tokenizer_config.json"),
         "hf-tokenizer": ("tokenizer.json", "tokenizer_config.json"),
         "tiktoken": ("tokenizer.tiktoken",)}  # the files each target writes
TARGETS = tuple(NAMES)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m experiments.export", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=non_empty, help="a run dir (holds config.yaml, tokenizer.json and checkpoints/)")
    p.add_argument("--to", required=True, choices=TARGETS, help="hf: model + tokenizer; hf-tokenizer / tiktoken: "
                   "the tokenizer alone")
    p.add_argument("--out", type=non_empty, required=True, metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--which", type=non_empty, default="best",
                   help="best | last | a step number (default: best; --to hf only)")
    p.add_argument("--force", action="store_true", help="replace the files an earlier export wrote in --out")
    return p.parse_args(argv)


def tokenizer_config(tok, n_ctx: int | None = None) -> dict[str, Any]:
    """tokenizer_config.json for AutoTokenizer: the fast tokenizer over our tokenizer.json, no added bos."""
    cfg: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
                           "add_bos_token": False, "add_eos_token": False}
    if EOT in tok.special_tokens:
        cfg.update(bos_token=EOT, eos_token=EOT)
    if n_ctx is not None:
        cfg["model_max_length"] = n_ctx
    return cfg


def _write_hf_tokenizer(tok, tmp: Path, n_ctx: int | None = None) -> None:
    try:
        tok.export_hf(tmp / "tokenizer.json")
    except ValueError as e:
        raise ExportError(str(e)) from None
    (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tok, n_ctx), indent=2) + "\n",
                                               encoding="utf-8")


def _write_hf_model(model, tok, tmp: Path) -> None:
    try:
        import transformers
    except ImportError as e:
        raise ExportError(f"--to hf needs transformers ({e}); pip install transformers") from None
    transformers.utils.logging.disable_progress_bar()
    eot = tok.special_tokens.get(EOT)
    try:
        hf = to_hf(model, bos_token_id=eot, eos_token_id=eot)
    except ValueError as e:  # a refusal hf_problem did not foresee (e.g. a module no converter knows)
        raise ExportError(str(e)) from None
    hf.save_pretrained(tmp)
    _write_hf_tokenizer(tok, tmp, n_ctx=model.max_len)  # learned positions: n_ctx is a hard limit


def _write_tiktoken(tok, tmp: Path) -> None:
    try:
        tok.export_tiktoken(tmp / "tokenizer.tiktoken")
    except ValueError as e:
        raise ExportError(str(e)) from None


def export(a: argparse.Namespace):
    """Write the export `a.to` into `a.out`; returns (the paths written, the run's tokenizer)."""
    rd = open_run_dir(a.run_dir)
    out = ExportDir(Path(a.out), rd.path, force=a.force)
    out.check(NAMES[a.to])
    if a.to == "hf":
        model, tok, _ = load_run(rd.path, which=a.which)
        if (why := hf_problem(model)) is not None:  # refused before anything is written
            raise ExportError(str(why))
        write = partial(_write_hf_model, model, tok)
    else:
        tok = load_run_tokenizer(rd.path, read_config(rd))
        write = partial(_write_hf_tokenizer if a.to == "hf-tokenizer" else _write_tiktoken, tok)
    return out.write(write), tok


def usage_hint(a: argparse.Namespace, tok, written: list[Path]) -> str:
    """The line that loads what was written."""
    if a.to == "hf":
        return f"transformers.AutoModelForCausalLM.from_pretrained({a.out!r}), AutoTokenizer.from_pretrained({a.out!r})"
    if a.to == "hf-tokenizer":
        return f"transformers.AutoTokenizer.from_pretrained({a.out!r}), or tokenizers.Tokenizer.from_file(...)"
    return (f"tiktoken.Encoding(name='archlab', pat_str={tok.pattern!r}, "
            f"mergeable_ranks=load_tiktoken_bpe({str(written[0])!r}), special_tokens={tok.special_tokens!r})")


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
        written, tok = export(a)
    except (UsageError, ExportError, RunLoadError, OSError) as e:
        return fail("export", e)
    print(f"wrote {', '.join(p.name for p in written)} to {a.out}")
    print(f"  {usage_hint(a, tok, written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
