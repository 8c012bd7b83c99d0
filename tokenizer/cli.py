"""The `bpe` command (also `python -m tokenizer`): a thin argparse layer over the library.

    bpe train INPUT... --vocab-size N --out DIR [--special-token T]... [--pattern gpt2|gpt4|REGEX]
              [--workers K] [--min-frequency F] [--force]
    bpe train --dataset NAME_OR_PATH [--text-column text] [--split train] --vocab-size N --out DIR ...
    bpe encode --tokenizer DIR [FILE|-] [--out FILE.bin] [--ordinary] [--force]
    bpe decode --tokenizer DIR [FILE|-]
    bpe info DIR [--sample FILE]
    bpe convert DIR --to hf|tiktoken [--out PATH] [--force]

Bad input (missing or unreadable paths, a directory, an empty corpus, a too-small vocab, a number out of its range
such as `--workers 0` or `--top -1`, an empty argument such as `--pattern ''`, a corrupt tokenizer file, an unknown
pattern, an existing output, stdout that cannot be written: `cannot write stdout (/dev/full): No space left on
device`) prints ONE line `bpe: error: ...` on stderr and exits 2, never a traceback (tokenizer/cli_args.py); a
closed pipe (`bpe encode ... | head`) ends quietly with 0; Ctrl-C exits 130 and SIGTERM 143, with no output written
and no worker process left (tokenizer/workers.py); a worker killed by something else exits 1. Each command writes
only its own named files (train: DIR/tokenizer.json; encode: FILE.bin + FILE.bin.json; convert: one file), each to
a temporary name renamed on success, so a failed or refused command never destroys what was there; --force replaces
exactly those files and nothing else; an output that is one of the inputs is refused even with --force
(tokenizer/outputs.py).
Not handled: training from several datasets at once, and `datasets` configs beyond name/path + split; `--help`
into a full stdout (argparse ignores that write error).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

from tokenizer.cli_args import (OneLineParser, fail, non_empty, non_negative_int, positive_int, quiet_stdout,
                                write_stream)
from tokenizer.corpus import EMBEDDED_NAME, embedded_text
from tokenizer.datasets_source import check_dataset, load_texts
from tokenizer.outputs import atomic_output, check_inside_not_input, check_new, check_not_input, writing
from tokenizer.pretoken_counts import replaced_count
from tokenizer.pretokenize import resolve_pattern
from tokenizer.serialize import FILE_NAME as TRAIN_OUTPUT
from tokenizer.serialize import resolve_path
from tokenizer.stop import Terminated, stop_signals
from tokenizer.stream import encode_chunks, encode_to_token_file, iter_binary_text, iter_file_text
from tokenizer.tokenfile import read_tokens, sidecar_path
from tokenizer.tokenizer import Tokenizer
from tokenizer.train import train_bpe, train_bpe_from_iterator
from tokenizer.workers import WorkerDied

PROG = "bpe"


class CliError(ValueError):
    """A user error with a message meant for the one stderr line."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Byte-level BPE tokenizer: train, encode, decode, inspect, convert.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser)

    p = sub.add_parser("train", help="train a tokenizer on text files/globs or a `datasets` dataset")
    p.add_argument("inputs", nargs="*", type=non_empty, metavar="INPUT",
                   help="text files or globs (quote globs: 'data/*.txt')")
    p.add_argument("--dataset", type=non_empty, metavar="NAME_OR_PATH",
                   help="a datasets hub name, a saved dataset dir or a data file")
    p.add_argument("--text-column", type=non_empty, default="text", help="column holding the text (default: text)")
    p.add_argument("--split", type=non_empty, default="train", help="dataset split (default: train)")
    p.add_argument("--vocab-size", type=positive_int, required=True, metavar="N")
    p.add_argument("--out", type=non_empty, required=True, metavar="DIR", help="output directory (gets tokenizer.json)")
    p.add_argument("--special-token", type=non_empty, action="append", default=[], metavar="T",
                   help="repeatable, e.g. '<|endoftext|>'")
    p.add_argument("--pattern", type=non_empty, default="gpt2", help="split pattern: gpt2, gpt4 or a regex (default: gpt2)")
    p.add_argument("--workers", type=positive_int, default=None, metavar="K", help="processes counting pre-tokens")
    p.add_argument("--min-frequency", type=non_negative_int, default=1, metavar="F",
                   help="never merge pairs seen fewer times")
    p.add_argument("--force", action="store_true", help="replace an existing DIR/tokenizer.json (nothing else in DIR)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("encode", help="text -> ids (space-separated on stdout, or a .bin with --out)")
    p.add_argument("--tokenizer", type=non_empty, required=True, metavar="DIR", help="a tokenizer dir or its tokenizer.json")
    p.add_argument("file", nargs="?", type=non_empty, default="-", metavar="FILE",
                   help="UTF-8 text file, or - for stdin (default)")
    p.add_argument("--out", type=non_empty, metavar="FILE.bin", help="write raw little-endian ids + FILE.bin.json sidecar")
    p.add_argument("--ordinary", action="store_true", help="encode special-token text as ordinary text")
    p.add_argument("--force", action="store_true", help="replace an existing FILE.bin and its sidecar")
    p.set_defaults(func=cmd_encode)

    p = sub.add_parser("decode", help="ids -> text (ids as whitespace-separated text, or a .bin with its sidecar)")
    p.add_argument("--tokenizer", type=non_empty, required=True, metavar="DIR")
    p.add_argument("file", nargs="?", type=non_empty, default="-", metavar="FILE", help="ids file, .bin from encode --out, or - (default)")
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("info", help="vocab size, special tokens, pattern, compression, longest tokens")
    p.add_argument("tokenizer", type=non_empty, metavar="DIR")
    p.add_argument("--sample", type=non_empty, metavar="FILE", help="text to measure bytes/token on (default: the embedded corpus)")
    p.add_argument("--top", type=non_negative_int, default=10, help="how many longest tokens to list")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("convert", help="export to Hugging Face tokenizer.json or a tiktoken ranks file")
    p.add_argument("tokenizer", type=non_empty, metavar="DIR")
    p.add_argument("--to", required=True, choices=["hf", "tiktoken"])
    p.add_argument("--out", type=non_empty, metavar="PATH", help="default: DIR/hf/tokenizer.json or DIR/tokenizer.tiktoken")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.set_defaults(func=cmd_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input, 1 a worker died, 130 Ctrl-C, 143 SIGTERM)."""
    try:
        with warnings.catch_warnings(), stop_signals():
            warnings.showwarning = _show_warning
            args = build_parser().parse_args(argv)
            return args.func(args) or 0
    except SystemExit as e:  # --help / --version
        return e.code if isinstance(e.code, int) else 0
    except (KeyboardInterrupt, Terminated) as e:  # what was being written is removed; workers are stopped
        print(f"{PROG}: {'interrupted' if isinstance(e, KeyboardInterrupt) else 'terminated'}", file=sys.stderr)
        return 130 if isinstance(e, KeyboardInterrupt) else 143
    except WorkerDied as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `bpe encode ... | head`: the reader went away, which is fine
        quiet_stdout()
        return 0
    except (OSError, ValueError, UnicodeError) as e:  # json.JSONDecodeError is a ValueError
        return fail(PROG, e)


def say(line: str) -> None:
    """One line of a command's report on stdout (write_stream: a failed write is one error line naming stdout)."""
    write_stream(sys.stdout, line + "\n")


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


# ---------------------------------------------------------------------- helpers
def expand_inputs(inputs: Sequence[str]) -> list[Path]:
    """Files and globs -> existing readable files, in order (glob matches sorted); errors name the input."""
    files: list[Path] = []
    for item in inputs:
        if glob.has_magic(item):
            matches = sorted(Path(m) for m in glob.glob(item, recursive=True) if Path(m).is_file())
            if not matches:
                raise CliError(f"no files match {item!r}")
            files.extend(matches)
            continue
        path = Path(item)
        if not path.exists():
            raise CliError(f"no such file: {item}")
        if path.is_dir():
            raise CliError(f"{item} is a directory; pass files or a glob such as '{item.rstrip('/')}/*.txt'")
        if not os.access(path, os.R_OK):
            raise CliError(f"cannot read {item}: permission denied")
        files.append(path)
    return files


def load_tokenizer(path: str):
    p = Path(path)
    if not p.exists():
        raise CliError(f"no such tokenizer: {path}")
    if p.is_dir() and not (p / "tokenizer.json").exists():
        raise CliError(f"{path} holds no tokenizer.json (train one with 'bpe train ... --out {path}')")
    return Tokenizer.load(p)


def tokenizer_file(path: str) -> Path:
    """The tokenizer.json a --tokenizer argument names (a dir means the file inside it)."""
    return resolve_path(path)


def _input_file(name: str) -> Path | None:
    """'-' -> None (stdin); otherwise a readable file."""
    if name == "-":
        return None
    return _one_file(name)


def _one_file(name: str) -> Path:
    files = expand_inputs([name])
    if len(files) != 1:
        raise CliError(f"{name!r} matches {len(files)} files; pass one")
    return files[0]


def _bytes_per_token(tok, text: str) -> float:
    ids = tok.encode(text, disallowed_special=())
    return len(text.encode("utf-8")) / max(1, len(ids))


# ---------------------------------------------------------------------- train
def cmd_train(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {out} exists and is not a directory")
    target = out / TRAIN_OUTPUT  # the only file `bpe train` writes; --force replaces it and nothing else
    check_new(target, force=args.force)
    resolve_pattern(args.pattern)  # unknown name / bad regex: fail before reading anything
    minimum = 256 + len(set(args.special_token))
    if args.vocab_size < minimum:
        raise CliError(
            f"--vocab-size {args.vocab_size} is too small: it must be at least 256 (bytes) + "
            f"{len(set(args.special_token))} (special tokens) = {minimum}"
        )
    if args.dataset and args.inputs:
        raise CliError("pass either INPUT files or --dataset, not both")
    if not args.dataset and not args.inputs:
        raise CliError("nothing to train on: pass INPUT files/globs or --dataset NAME_OR_PATH")
    if args.dataset:
        check_dataset(args.dataset, args.split)  # reads no rows: fail fast offline / on a non-dataset path
        dataset_path = Path(os.path.expanduser(args.dataset))
        check_inside_not_input(out, [dataset_path] if dataset_path.exists() else [])
    else:
        files = expand_inputs(args.inputs)
        check_inside_not_input(out, files)

    kwargs = dict(special_tokens=args.special_token, pattern=args.pattern, workers=args.workers, min_frequency=args.min_frequency)
    start = time.perf_counter()
    if args.dataset:
        counter = _CharCounter(load_texts(args.dataset, column=args.text_column, split=args.split))
        tok = train_bpe_from_iterator(counter, args.vocab_size, **kwargs)
        n_bytes, source, sample = counter.n_bytes, f"dataset {args.dataset}", counter.sample
    else:
        n_bytes = sum(f.stat().st_size for f in files)
        if n_bytes == 0:
            raise CliError(f"empty corpus: {', '.join(map(str, files))} hold{'s' if len(files) == 1 else ''} no text")
        tok = train_bpe(files, args.vocab_size, **kwargs)
        source = f"{len(files)} file{'s' * (len(files) != 1)}"
        with open(files[0], "rb") as f:
            sample = f.read(1 << 20).decode("utf-8", errors="replace")
    seconds = time.perf_counter() - start
    path = _save_tokenizer(out, tok)
    n_merges = len(tok.merges)
    say(f"trained on {source} ({n_bytes / 1e6:.2f} MB) in {seconds:.1f} s")
    say(f"vocab_size {tok.vocab_size} = 256 bytes + {n_merges} merges + {len(tok.special_tokens)} special tokens")
    say(f"pattern {tok.pattern_name or tok.pattern}")
    if sample:
        say(f"bytes/token on the first {min(len(sample), 1 << 20)} characters: {_bytes_per_token(tok, sample):.3f}")
    say(f"fingerprint {tok.fingerprint()[:16]}")
    say(f"wrote {path}")
    return 0


class _CharCounter:
    """Wraps a text iterator, counting UTF-8 bytes and keeping the first ~1 MB as a compression sample."""

    def __init__(self, texts: Iterator[str]):
        self.texts, self.n_bytes, self._sample = texts, 0, []

    def __iter__(self) -> Iterator[str]:
        kept = 0
        for t in self.texts:
            self.n_bytes += len(t.encode("utf-8", errors="replace"))
            if kept < 1 << 20:
                self._sample.append(t)
                kept += len(t)
            yield t

    @property
    def sample(self) -> str:
        return "\n".join(self._sample)[: 1 << 20]


def _save_tokenizer(out: Path, tok) -> Path:
    """Write `out/tokenizer.json` atomically (temp file beside it + rename); nothing else in `out` is touched.

    A directory this call created is removed again if the write fails."""
    target = out / TRAIN_OUTPUT
    created = [p for p in (out, *out.parents) if not p.exists()]
    with writing(target):
        try:
            out.mkdir(parents=True, exist_ok=True)
            tok.save(target)
        except BaseException:
            for d in created:  # innermost first
                try:
                    d.rmdir()
                except OSError:
                    break
            raise
    return target


# ---------------------------------------------------------------------- encode / decode
def cmd_encode(args: argparse.Namespace) -> int:
    tok = load_tokenizer(args.tokenizer)
    src = _input_file(args.file)
    specials = {"allowed_special": (), "disallowed_special": ()} if args.ordinary else {"allowed_special": "all", "disallowed_special": ()}
    out = Path(args.out) if args.out else None
    if out is not None:
        if out.is_dir():
            raise CliError(f"--out {out} is a directory; give a file name such as {out / 'tokens.bin'}")
        side = sidecar_path(out)
        check_not_input(out, [src, tokenizer_file(args.tokenizer)], sidecar=side)  # even with --force
        check_new(out, force=args.force, also=[side])
    texts = iter_binary_text(sys.stdin.buffer) if src is None else iter_file_text(src)
    before = replaced_count()
    if out is not None:
        with writing(out):
            meta = encode_to_token_file(tok, texts, out, source=str(src or "<stdin>"), **specials)
        print(f"wrote {meta['count']} ids ({meta['dtype']}) to {out} (+ {side})", file=sys.stderr)
    else:
        first = True
        for ids in encode_chunks(tok, texts, specials["allowed_special"], specials["disallowed_special"]):
            if ids:
                write_stream(sys.stdout, ("" if first else " ") + " ".join(map(str, ids)), flush=False)
                first = False
        write_stream(sys.stdout, "\n")
    if replaced_count() > before:
        _show_warning(f"{replaced_count() - before} invalid UTF-8 sequence(s) in the input were replaced by U+FFFD", None, "", 0)
    return 0


def cmd_decode(args: argparse.Namespace) -> int:
    tok = load_tokenizer(args.tokenizer)
    src = _input_file(args.file)
    out = sys.stdout.buffer  # exact bytes, written as is (no lossy re-encoding)
    write_stream(sys.stdout, "")  # flushes what the text layer holds
    if src is not None and sidecar_path(src).exists():
        # a token file: its sidecar must be valid and name THIS tokenizer (else the text would be garbage)
        arr, _ = read_tokens(src, expect_fingerprint=tok.fingerprint(), tokenizer_name=f"--tokenizer {args.tokenizer}")
        for start in range(0, len(arr), 1 << 20):  # stream: concatenating token bytes needs no lookahead
            write_stream(out, tok.decode_bytes(arr[start : start + (1 << 20)].tolist()), flush=False)
    else:
        raw = sys.stdin.read() if src is None else src.read_text(encoding="utf-8")
        ids = []
        for word in raw.split():
            if not (word.isascii() and word.isdigit()):
                raise CliError(f"not a token id: {word[:40]!r} (decode reads whitespace-separated integers)")
            ids.append(int(word))
        write_stream(out, tok.decode_bytes(ids), flush=False)
    write_stream(out, b"")  # flush
    return 0


# ---------------------------------------------------------------------- info / convert
def cmd_info(args: argparse.Namespace) -> int:
    tok = load_tokenizer(args.tokenizer)
    if args.sample:
        sample_path = _one_file(args.sample)
        sample = sample_path.read_bytes()[: 4 << 20].decode("utf-8", errors="replace")
        sample_name = str(sample_path)
    else:
        sample, sample_name = embedded_text()[: 1 << 20], f"embedded corpus ({EMBEDDED_NAME})"
    specials = ", ".join(f"{s!r}={i}" for s, i in sorted(tok.special_tokens.items(), key=lambda kv: kv[1])) or "none"
    say(f"tokenizer   {args.tokenizer}")
    say(f"vocab_size  {tok.vocab_size} (256 bytes + {len(tok.merges)} merges + {len(tok.special_tokens)} special)")
    say(f"special     {specials}")
    say(f"pattern     {tok.pattern_name or 'custom'}: {tok.pattern}")
    say(f"fingerprint {tok.fingerprint()}")
    if sample:
        say(f"bytes/token {_bytes_per_token(tok, sample):.3f} on {sample_name}")
    specials_ids = set(tok.special_tokens.values())
    longest = sorted(((b, i) for i, b in tok.vocab.items() if i not in specials_ids), key=lambda bi: (-len(bi[0]), bi[1]))
    say(f"longest {args.top} tokens:")
    for b, i in longest[: args.top]:
        say(f"  {i:>7}  {len(b):>3} bytes  {b.decode('utf-8', errors='backslashreplace')!r}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    tok = load_tokenizer(args.tokenizer)
    base = Path(args.tokenizer)
    base = base if base.is_dir() else base.parent
    if args.out:
        out = Path(args.out)
    else:
        out = base / "hf" / "tokenizer.json" if args.to == "hf" else base / "tokenizer.tiktoken"
    if out.is_dir():
        out = out / ("tokenizer.json" if args.to == "hf" else "tokenizer.tiktoken")
    check_not_input(out, [tokenizer_file(args.tokenizer)])  # even with --force
    check_new(out, force=args.force)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(out) as tmp:
            (tok.export_hf if args.to == "hf" else tok.export_tiktoken)(tmp)
    if args.to == "hf":
        say(f"wrote {out}  (tokenizers.Tokenizer.from_file({str(out)!r}))")
    else:
        specials = json.dumps(tok.special_tokens)
        say(f"wrote {out}  (tiktoken.Encoding(name=..., pat_str=<pattern>, mergeable_ranks=load_tiktoken_bpe({str(out)!r}), special_tokens={specials}))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
