"""`python -m experiments.sample RUN_DIR --prompt "..."`: text from a trained run, streamed as it is generated.

    python -m experiments.sample outputs/default/2026-11-25_10-00-00 --prompt "Once upon a time"
    python -m experiments.sample RUN --prompt "The" --temperature 0.8 --top-k 50 --num-samples 3 --seed 1
    python -m experiments.sample RUN --prompt "The" --num-beams 4 --max-new-tokens 30      # beam search
    python -m experiments.sample RUN --prompt-file prompt.txt --temperature 0                # greedy

The model and tokenizer come from experiments.load_run (best weights unless --which). Decoding is
arch.generate (temperature 0 = greedy; temperature, then top-k, then top-p, as Hugging Face orders them; beam
search ranks by the summed log-probability). Tokens are printed as they are chosen; a multi-byte character split
across tokens is printed once its last byte arrives. Generation stops at `<|endoftext|>` when the tokenizer has
it. An empty prompt starts from `<|endoftext|>` (as GPT-2 does). `--seed` makes sampling reproducible: the same
seed gives the same text. Samples are generated one after another, each under a `--- sample i ---` line when
there are several. Errors are one line, `sample: error: ...`, exit 2, before the run is loaded where the value
alone is wrong: a number out of its range (`--max-new-tokens 0`, a negative or non-finite `--temperature`,
`--top-p` outside (0, 1]), a run dir that does not exist or holds no checkpoint, an unknown `--which` or
`--device`, a `--prompt-file` that cannot be read or is not UTF-8; stdout that cannot be written (a full disk, a
closed file) names it; a closed pipe (`| head`) ends quietly with status 0.
Seq2seq (encoder-decoder) runs take `--src TEXT`: the decoder starts from `<|bos|>` and stops at `<|eos|>`.
Not handled: batching several prompts or sources.
"""

from __future__ import annotations

import argparse
import codecs
import sys

import torch

from arch.generate import generate
from experiments.data.pairs import special_ids
from experiments.use.load import RunLoadError, check_device, load_run
from tokenizer.cli_args import (OneLineParser, UsageError, fail, float_in, int_in, non_empty, non_negative_float,
                                positive_int, quiet_stdout, read_text_file, write_stream)
from tokenizer.outputs import OutputError

EOT = "<|endoftext|>"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = OneLineParser(prog="python -m experiments.sample", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=non_empty)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", default="", help="text to continue (default: empty = start of a document)")
    src.add_argument("--prompt-file", type=non_empty, help="read the prompt from this UTF-8 file")
    p.add_argument("--src", help="seq2seq runs: the source to transform (the decoder starts from <|bos|>)")
    p.add_argument("--max-new-tokens", type=positive_int, default=100)
    p.add_argument("--temperature", type=non_negative_float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=positive_int, default=None)
    p.add_argument("--top-p", type=float_in(0, 1, low_open=True), default=None, help="in (0, 1]")
    p.add_argument("--num-beams", type=positive_int, default=1)
    p.add_argument("--num-samples", type=positive_int, default=1)
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0)
    p.add_argument("--which", type=non_empty, default="best", help="best | last | a step number (default: best)")
    p.add_argument("--device", type=non_empty, default="cpu", help="cpu | cuda | cuda:N | mps (default: cpu)")
    return p.parse_args(argv)


class Printer:
    """Writes text and token bytes to a text stream, tokens as complete UTF-8 characters (an incremental decoder).
    A failed write (a full disk) is an OutputError naming the stream; a closed pipe stays a BrokenPipeError."""

    def __init__(self, tok, out) -> None:
        self.tok, self.out = tok, out
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def write(self, text: str) -> None:
        write_stream(self.out, text)

    def __call__(self, ids: list[int]) -> None:
        self.write(self.decoder.decode(self.tok.decode_bytes(ids)))

    def close(self) -> None:
        self.write(self.decoder.decode(b"", final=True) + "\n")


def check_args(a: argparse.Namespace) -> None:
    """Refuse a combination of values (each value's own range is its argparse type's), before the run is loaded."""
    if a.num_beams > 1 and (a.top_k or a.top_p):
        raise UsageError("--num-beams searches; it takes no --top-k / --top-p")
    check_device(a.device)


def sample(a: argparse.Namespace, out=None) -> list[str]:
    """Generate `a.num_samples` continuations, streaming them to `out` (stdout); returns their texts (no prompt)."""
    check_args(a)
    out = out or sys.stdout
    prompt = a.prompt if a.prompt_file is None else read_text_file(a.prompt_file, "--prompt-file")
    model, tok, _ = load_run(a.run_dir, which=a.which, device=a.device)
    seq2seq = hasattr(model, "encoder")
    if seq2seq != (a.src is not None):
        raise RunLoadError("this run is an encoder-decoder: pass --src TEXT" if seq2seq else
                           "--src is for encoder-decoder (task=seq2seq) runs; this one continues a --prompt")
    kwargs: dict = {}
    if seq2seq:  # the decoder starts from <|bos|> (+ the prompt, if any) and ends at <|eos|>

        _, bos, eot = special_ids(tok)
        src = tok.encode(a.src, allowed_special=set(), disallowed_special=()) + [eot]
        kwargs["src"] = torch.tensor([src], device=a.device)
        ids = [bos] + (tok.encode(prompt, allowed_special=set(), disallowed_special=()) if prompt else [])
    else:
        eot = tok.special_tokens.get(EOT)
        ids = tok.encode(prompt, allowed_special=set(), disallowed_special=()) if prompt else []
        if not ids:
            if eot is None:
                raise RunLoadError("an empty prompt needs <|endoftext|> in the tokenizer; pass --prompt")
            ids = [eot]
    prompt_ids = torch.tensor([ids], device=a.device)
    texts = []
    for i in range(a.num_samples):
        printer = Printer(tok, out)
        if a.num_samples > 1:
            printer.write(f"--- sample {i} ---\n")
        printer.write(prompt)
        generator = torch.Generator(device=a.device).manual_seed(a.seed + i)
        stream = None if a.num_beams > 1 else (lambda nxt: None if int(nxt[0]) == eot else printer([int(nxt[0])]))
        result = generate(model, prompt_ids, max_new_tokens=a.max_new_tokens, temperature=a.temperature,
                          top_k=a.top_k, top_p=a.top_p, eos_id=eot, num_beams=a.num_beams, generator=generator,
                          on_token=stream, **kwargs)
        new = [t for t in result[0, len(ids):].tolist() if t != eot]
        if a.num_beams > 1:
            printer(new)
        printer.close()
        texts.append(tok.decode(new))
    return texts


def main(argv: list[str] | None = None) -> int:
    try:
        sample(parse_args(argv))
    except BrokenPipeError:  # `... | head`: the reader went away, which is fine
        quiet_stdout()
        return 0
    except (UsageError, RunLoadError, OutputError, OSError) as e:  # OutputError: stdout (write_stream said which)
        return fail("sample", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
