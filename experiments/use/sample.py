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
there are several. Errors (bad run dir, bad values) are one line, `sample: error: ...`, exit 2.
Seq2seq (encoder-decoder) runs take `--src TEXT`: the decoder starts from `<|bos|>` and stops at `<|eos|>`.
Not handled: batching several prompts or sources.
"""

from __future__ import annotations

import argparse
import codecs
import sys

import torch

from arch.generate import generate
from experiments.use.load import RunLoadError, load_run

EOT = "<|endoftext|>"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.sample", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", default="", help="text to continue (default: empty = start of a document)")
    src.add_argument("--prompt-file", help="read the prompt from this file")
    p.add_argument("--src", help="seq2seq runs: the source to transform (the decoder starts from <|bos|>)")
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--num-beams", type=int, default=1)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--which", default="best", help="best | last | a step number (default: best)")
    p.add_argument("--device", default="cpu")
    return p.parse_args(argv)


class Printer:
    """Writes token bytes to a text stream as complete UTF-8 characters (an incremental decoder)."""

    def __init__(self, tok, out) -> None:
        self.tok, self.out = tok, out
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def __call__(self, ids: list[int]) -> None:
        self.out.write(self.decoder.decode(self.tok.decode_bytes(ids)))
        self.out.flush()

    def close(self) -> None:
        self.out.write(self.decoder.decode(b"", final=True) + "\n")
        self.out.flush()


def check_args(a: argparse.Namespace) -> str | None:
    """The first bad value as a message, else None (before the run is loaded)."""
    if a.max_new_tokens < 1:
        return f"--max-new-tokens must be >= 1, got {a.max_new_tokens}"
    if a.temperature < 0:
        return f"--temperature must be >= 0, got {a.temperature}"
    if a.top_k is not None and a.top_k < 1:
        return f"--top-k must be >= 1, got {a.top_k}"
    if a.top_p is not None and not 0 < a.top_p <= 1:
        return f"--top-p must be in (0, 1], got {a.top_p}"
    if a.num_beams < 1 or a.num_samples < 1:
        return "--num-beams and --num-samples must be >= 1"
    if a.num_beams > 1 and (a.top_k or a.top_p):
        return "--num-beams searches; it takes no --top-k / --top-p"
    return None


def sample(a: argparse.Namespace, out=None) -> list[str]:
    """Generate `a.num_samples` continuations, streaming them to `out` (stdout); returns their texts (no prompt)."""
    out = out or sys.stdout
    model, tok, _ = load_run(a.run_dir, which=a.which, device=a.device)
    prompt = a.prompt if a.prompt_file is None else open(a.prompt_file, encoding="utf-8").read()
    seq2seq = hasattr(model, "encoder")
    if seq2seq != (a.src is not None):
        raise RunLoadError("this run is an encoder-decoder: pass --src TEXT" if seq2seq else
                           "--src is for encoder-decoder (task=seq2seq) runs; this one continues a --prompt")
    kwargs: dict = {}
    if seq2seq:  # the decoder starts from <|bos|> (+ the prompt, if any) and ends at <|eos|>
        from experiments.data.pairs import special_ids

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
        if a.num_samples > 1:
            out.write(f"--- sample {i} ---\n")
        out.write(prompt)
        printer = Printer(tok, out)
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
    a = parse_args(argv)
    bad = check_args(a)
    try:
        if bad:
            raise RunLoadError(bad)
        sample(a)
    except (RunLoadError, OSError) as e:
        print(f"sample: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
