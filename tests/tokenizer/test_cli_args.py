"""tokenizer/cli_args.py, the command-line helpers every archlab command shares: the range types accept exactly
the values in their range (checked against the range written out by hand, for random values), usage errors are
one line; and `bpe` gives every numeric argument its range and refuses every empty argument that names a path, a
pattern, a token or a column, in one line, before anything is read or written."""

from __future__ import annotations

import argparse
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenizer.cli import main
from tokenizer.cli_args import OneLineParser, UsageError, float_in, int_in, non_empty, one_line


@given(value=st.integers(-10**20, 10**20), low=st.none() | st.integers(-50, 50), span=st.none() | st.integers(0, 50))
def test_int_in_accepts_exactly_its_range(value, low, span):
    high = None if span is None else (low or 0) + span
    inside = (low is None or value >= low) and (high is None or value <= high)
    parse = int_in(low, high)
    if inside:
        assert parse(str(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"got {value}$"):
            parse(str(value))


@given(value=st.floats(allow_nan=True, allow_infinity=True), low_open=st.booleans(), high_open=st.booleans())
def test_float_in_accepts_exactly_finite_values_in_its_range(value, low_open, high_open):
    parse = float_in(0, 1, low_open=low_open, high_open=high_open)
    inside = (math.isfinite(value) and (0 < value if low_open else 0 <= value)
              and (value < 1 if high_open else value <= 1))
    if inside:
        assert parse(repr(value)) == value
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number in"):
            parse(repr(value))


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999"])
def test_float_in_refuses_non_finite_even_when_unbounded(text):
    with pytest.raises(argparse.ArgumentTypeError):
        float_in()(text)


def test_unparsable_numbers_and_empty_strings_are_refused():
    for parse, text in ((int_in(0), "1.5"), (int_in(0), "abc"), (float_in(0), "x"), (non_empty, "")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
    assert non_empty(" ") == " "  # only "" is empty: a space is a valid regex


@pytest.mark.parametrize("argv,words", [
    (["--n", "0"], "argument --n: must be >= 1, got 0"),
    (["--n", "x"], "argument --n: expected an integer, got 'x'"),
    (["--p", "nan"], "argument --p: must be a finite number in (0, 1], got nan"),
    (["--name", ""], "argument --name: must not be empty"),
    (["--bogus"], "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: --name"),
])
def test_parser_error_is_one_line_usage_error(argv, words):
    p = OneLineParser(prog="prog")
    p.add_argument("--n", type=int_in(1), default=1)
    p.add_argument("--p", type=float_in(0, 1, low_open=True), default=0.5)
    p.add_argument("--name", type=non_empty, required=True)
    with pytest.raises(UsageError) as e:
        p.parse_args(argv if "--name" in argv else [*argv, *(["--name", "a"] if argv else [])])
    assert str(e.value) == f"{words} (see 'prog --help')"


def test_one_line_of_an_os_error_names_the_path():
    missing = FileNotFoundError(2, "No such file or directory", "a b.txt")
    assert one_line(missing) == "No such file or directory: a b.txt"
    assert one_line(ValueError("two\nlines")) == "two lines"


# ---------------------------------------------------------------- bpe: every numeric and empty argument
TRAIN = ["train", "{src}", "--vocab-size", "260", "--out", "{out}", "--workers", "1"]


@pytest.mark.parametrize("argv,flag", [
    ([*TRAIN, "--pattern", ""], "--pattern"),
    ([*TRAIN, "--special-token", ""], "--special-token"),
    ([*TRAIN, "--workers", "0"], "--workers"),
    ([*TRAIN, "--workers", "-2"], "--workers"),
    ([*TRAIN, "--min-frequency", "-1"], "--min-frequency"),
    ([*TRAIN, "--vocab-size", "0"], "--vocab-size"),
    ([*TRAIN, "--vocab-size", "2.5"], "--vocab-size"),
    (["train", "--dataset", "", "--vocab-size", "260", "--out", "{out}"], "--dataset"),
    (["train", "--dataset", "{src}", "--text-column", "", "--vocab-size", "260", "--out", "{out}"], "--text-column"),
    (["train", "--dataset", "{src}", "--split", "", "--vocab-size", "260", "--out", "{out}"], "--split"),
    (["train", "{src}", "--vocab-size", "260", "--out", ""], "--out"),
    (["train", "", "--vocab-size", "260", "--out", "{out}"], "INPUT"),
    (["encode", "--tokenizer", "", "{src}"], "--tokenizer"),
    (["encode", "--tokenizer", "{out}", "{src}", "--out", ""], "--out"),
    (["decode", "--tokenizer", "{out}", ""], "FILE"),
    (["info", ""], "DIR"),
    (["info", "{out}", "--top", "-1"], "--top"),
    (["info", "{out}", "--sample", ""], "--sample"),
    (["convert", "{out}", "--to", "hf", "--out", ""], "--out"),
])
def test_bpe_bad_number_or_empty_argument_is_one_line(tmp_path, capsys, monkeypatch, argv, flag):
    monkeypatch.chdir(tmp_path)  # an empty path would mean the cwd: nothing may appear there either
    src = tmp_path / "in.txt"
    src.write_text("hello hello world\n")
    out = tmp_path / "out"
    argv = [a.format(src=src, out=out) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"bpe: error: argument {flag}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]  # nothing written
