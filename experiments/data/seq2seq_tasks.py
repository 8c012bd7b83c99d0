"""Built-in synthetic sequence-to-sequence tasks (no download): copy, reverse, sort, multi-digit addition.

    pairs = make_pairs("reverse", n=1000, lengths=(4, 16), seed=0)     # [("3804", "4083"), ...]
    split = make_split({"task": "addition", "train_lengths": [1, 8], "test_lengths": [9, 16], ...})

Each task maps a source string over a small alphabet to a target string:

| task | source | target | length = |
|---|---|---|---|
| `copy` | `n` random digits | the same digits | n |
| `reverse` | `n` random digits | the digits reversed | n |
| `sort` | `n` random digits | the digits in ascending order | n |
| `addition` | `a+b`, a and b with exactly `n` digits each (no leading zero unless n = 1) | the decimal sum | n |

A split draws `n_train` training pairs with lengths uniform in `train_lengths` (inclusive) and, for every length
in `test_lengths`, `n_test_per_length` test pairs, so exact match can be read against length: train on short,
test on long, to compare how encodings generalise in length. Pairs are a pure function of (task, lengths, counts,
seed) via numpy's PCG64 generator: every run of a sweep sees the same data whatever its model seed. Test pairs
that also occur in the training set are dropped (the test measures generalisation, not memory).
Not handled: tasks over other alphabets, variable-length operands in addition.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from experiments.config.data_schema import Seq2SeqSyntheticData, data_config
from experiments.config.errors import ConfigError

DIGITS = "0123456789"


def _digits(rng: np.random.Generator, n: int) -> str:
    return "".join(DIGITS[i] for i in rng.integers(0, 10, size=n))


def _number(rng: np.random.Generator, n: int) -> int:
    """A uniformly random integer with exactly n decimal digits (0..9 for n = 1)."""
    first = DIGITS[int(rng.integers(0 if n == 1 else 1, 10))]
    return int(first + _digits(rng, n - 1))


def _copy(rng: np.random.Generator, n: int) -> tuple[str, str]:
    s = _digits(rng, n)
    return s, s


def _reverse(rng: np.random.Generator, n: int) -> tuple[str, str]:
    s = _digits(rng, n)
    return s, s[::-1]


def _sort(rng: np.random.Generator, n: int) -> tuple[str, str]:
    s = _digits(rng, n)
    return s, "".join(sorted(s))


def _addition(rng: np.random.Generator, n: int) -> tuple[str, str]:
    a, b = _number(rng, n), _number(rng, n)
    return f"{a}+{b}", str(a + b)


TASKS: dict[str, Callable[[np.random.Generator, int], tuple[str, str]]] = {
    "copy": _copy,
    "reverse": _reverse,
    "sort": _sort,
    "addition": _addition,
}


@dataclass
class PairSplit:
    """Training pairs, and test pairs with the length each was drawn at (for exact match vs length)."""

    train: list[tuple[str, str]]
    test: list[tuple[str, str]]
    test_lengths: list[int]  # test_lengths[i] is the length of test[i]
    name: str


def make_pairs(task: str, n: int, lengths: tuple[int, int], seed: int) -> list[tuple[str, str]]:
    """`n` pairs with lengths uniform in [lengths[0], lengths[1]]."""
    if task not in TASKS:
        raise ConfigError(f"data.task: unknown task {task!r}; choose from {', '.join(TASKS)}")
    rng = np.random.Generator(np.random.PCG64(seed))
    lo, hi = lengths
    return [TASKS[task](rng, int(k)) for k in rng.integers(lo, hi + 1, size=n)]


def _lengths(cfg: Seq2SeqSyntheticData, key: str) -> tuple[int, int]:
    v = getattr(cfg, key)
    if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, int) and x >= 1 for x in v) and v[0] <= v[1]):
        raise ConfigError(f"data.{key}: must be [min, max] lengths with 1 <= min <= max, got {v!r}")
    return int(v[0]), int(v[1])


def make_split(cfg: Seq2SeqSyntheticData | dict[str, Any]) -> PairSplit:
    """The train/test pairs a `data=seq2seq_synthetic` config describes (see the module docstring)."""
    cfg = data_config(cfg, Seq2SeqSyntheticData)
    task = cfg.task
    train_lengths, test_lengths = _lengths(cfg, "train_lengths"), _lengths(cfg, "test_lengths")
    seed = cfg.seed
    train = make_pairs(task, cfg.n_train, train_lengths, seed)
    seen = set(train)
    test, lengths = [], []
    for k in range(test_lengths[0], test_lengths[1] + 1):
        for pair in make_pairs(task, cfg.n_test_per_length, (k, k), seed * 1_000_003 + k):
            if pair not in seen:
                test.append(pair)
                lengths.append(k)
    return PairSplit(train=train, test=test, test_lengths=lengths,
                     name=f"{task} train {train_lengths[0]}-{train_lengths[1]} test {test_lengths[0]}-{test_lengths[1]}")
