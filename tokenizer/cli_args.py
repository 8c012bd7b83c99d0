"""What every archlab command line shares: a parser whose usage errors are one line, argument types that refuse a
value out of its range in that same line, and the one-line error report. `bpe` uses it, and so do experiments'
sample, evaluate, export, findings and compare (tokenizer/ never imports experiments/, so the one copy lives here).

    p = OneLineParser(prog="python -m experiments.sample", description="...")
    p.add_argument("--max-new-tokens", type=positive_int, default=100)     # 0 or "abc" -> UsageError, one line
    p.add_argument("--top-p", type=float_in(0, 1, low_open=True))           # (0, 1]; nan and inf refused
    p.add_argument("--pattern", type=non_empty, default="gpt2")             # "" refused
    try:
        args = p.parse_args(argv)
        ...
    except (UsageError, OSError) as e:
        return fail("sample", e)                  # stderr: "sample: error: <one line>"; returns 2

A usage error (an unknown option, a missing or unparsable argument, a value out of range) raises UsageError whose
message is one line, e.g. `argument --top-p: must be in (0, 1], got 1.5 (see 'python -m experiments.sample
--help')`, instead of argparse's usage block and exit; subparsers made with `parser_class=OneLineParser` do the
same. The number types accept only finite values. `one_line(e)` is any exception's message on one line (an
OSError as "reason: path", without "[Errno N]"); `read_text_file(path, flag)` reads a UTF-8 file an argument names
(one line naming the flag when it cannot); `check_writable(dir, what)` tries to write in an output dir
(one line with the OS's reason when it cannot); `write_stream(sys.stdout, text)` writes a command's output, a
failed write (a full disk, `> /dev/full`) becoming one line naming the stream (`cannot write stdout (/dev/full): No
space left on device`); `quiet_stdout()` points stdout at /dev/null after the reader of a pipe went away
(`... | head`) or a write failed, so the exit flush cannot fail again.
Not handled: --help still prints and exits (SystemExit 0), as argparse does.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tokenizer.outputs import OutputError


class UsageError(ValueError):
    """A bad command line; the message is the one stderr line (without the `name: error:` prefix)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error raises UsageError (one line) instead of printing usage and exiting 2."""

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(f"{message} (see '{self.prog} --help')")


def one_line(e: BaseException) -> str:
    """The message of `e` on one line. Example: FileNotFoundError(2, "No such file or directory", "x.txt") ->
    "No such file or directory: x.txt"."""
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        msg = f"{e.strerror}: {os.fsdecode(e.filename)}"
    else:
        msg = str(e) or type(e).__name__
    return " ".join(msg.split())


def fail(name: str, e: BaseException) -> int:
    """Print `e` as the one line `name: error: ...` on stderr; returns the exit status for it, 2."""
    print(f"{name}: error: {one_line(e)}", file=sys.stderr)
    return 2


def quiet_stdout() -> None:
    """Point stdout at /dev/null (after a BrokenPipeError or a failed write: the exit flush would raise again)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _is_stdout(out: IO[Any]) -> bool:
    return out is sys.stdout or out is getattr(sys.stdout, "buffer", None)


def stream_name(out: IO[Any]) -> str:
    """What a stream writes to, for an error line. Example: stdout redirected to /dev/full -> "stdout (/dev/full)"."""
    name = "stdout" if _is_stdout(out) else str(getattr(out, "name", "the output"))
    try:
        return f"{name} ({os.readlink(f'/proc/self/fd/{out.fileno()}')})"
    except (OSError, ValueError, AttributeError):  # not Linux, or not a real file (a test's StringIO)
        return name


def write_stream(out: IO[Any], data: str | bytes, *, flush: bool = True) -> None:
    """Write `data` to `out` (a text stream, or a binary one such as sys.stdout.buffer) and flush it. A failed write
    is an OutputError naming the stream, e.g. "cannot write stdout (/dev/full): No space left on device", and
    stdout is quieted first (its unwritten rest would fail again at exit); a BrokenPipeError (the reader of a pipe
    went away) passes through unchanged for the caller to end quietly."""
    try:
        out.write(data)
        if flush:
            out.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        name = stream_name(out)
        if _is_stdout(out):
            quiet_stdout()
        raise OutputError(f"cannot write {name}: {e.strerror or e}") from None


def read_text_file(path: str | os.PathLike, flag: str) -> str:
    """The UTF-8 text of the file an argument names; a UsageError naming `flag` and the path when it cannot be read
    or is not UTF-8. Example: read_text_file("x.bin", "--prompt-file") raises UsageError("--prompt-file x.bin is
    not UTF-8 text (byte 0xff at offset 0)")."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {flag} {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{flag} {path} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def check_writable(directory: str | os.PathLike, what: str) -> None:
    """Create a scratch dir in `directory`, write a byte into it, delete it; UsageError "`what`: <the OS's reason>"
    when any of that fails (read-only, no permission, no space left, /proc). It tries rather than asking
    os.access, which says yes to root. Example: check_writable("/proc", "--out /proc/x cannot be created")
    raises UsageError("--out /proc/x cannot be created: No such file or directory")."""
    scratch = None
    try:
        scratch = tempfile.mkdtemp(prefix=".write-check-", dir=directory)
        with open(os.path.join(scratch, "probe"), "wb") as f:
            f.write(b"\0")  # a full disk still takes the dir; the write is what fails
    except OSError as e:
        raise UsageError(f"{what}: {e.strerror or e}") from None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


# ---------------------------------------------------------------------- argument types
def _bounds(low: float | None, high: float | None, low_open: bool = False, high_open: bool = False) -> str:
    """The range in words. Example: _bounds(0, 1, low_open=True) -> "in (0, 1]"; _bounds(1, None) -> ">= 1"."""
    if high is None:
        return f"{'>' if low_open else '>='} {low:g}"
    if low is None:
        return f"{'<' if high_open else '<='} {high:g}"
    return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def int_in(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (None: unbounded). Example: int_in(1)("0") raises
    ArgumentTypeError("must be >= 1, got 0")."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {_bounds(low, high)}, got {value}")
        return value

    return parse


def float_in(low: float | None = None, high: float | None = None, *, low_open: bool = False,
             high_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in the range (`low_open`: low itself excluded). Example:
    float_in(0, 1, low_open=True)("0") raises ArgumentTypeError("must be in (0, 1], got 0")."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        bad_low = low is not None and (value < low or (low_open and value == low))
        bad_high = high is not None and (value > high or (high_open and value == high))
        if not math.isfinite(value) or bad_low or bad_high:
            where = "" if low is None and high is None else f" {_bounds(low, high, low_open, high_open)}"
            raise argparse.ArgumentTypeError(f"must be a finite number{where}, got {text}")
        return value

    return parse


positive_int = int_in(1)
non_negative_int = int_in(0)
positive_float = float_in(0, low_open=True)
non_negative_float = float_in(0)


def non_empty(text: str) -> str:
    """An argparse type: any string but ""."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def non_empty_path(text: str) -> Path:
    """An argparse type: a path that is not "" (which would mean the current directory)."""
    return Path(non_empty(text))
