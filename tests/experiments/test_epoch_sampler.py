"""data.sampler=epoch: every window of the train split once per epoch, across ranks, and resume by step alone."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config.errors import ConfigError
from experiments.data.epochs import EpochSampler


def _tokens(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.uint32)  # token value == its position: a window shows where it came from


@settings(max_examples=60, deadline=None)
@given(n=st.integers(10, 400), T=st.integers(1, 9), B=st.integers(1, 4), world=st.integers(1, 3), seed=st.integers(0, 5))
def test_one_epoch_predicts_each_token_at_most_once_and_all_but_the_dropped_tail(n, T, B, world, seed):
    M = (n - 1) // T
    if M < world * B:
        with pytest.raises(ConfigError):
            EpochSampler(_tokens(n), T, B, seed, 0, world)
        return
    ranks = [EpochSampler(_tokens(n), T, B, seed, r, world) for r in range(world)]
    steps = M // (world * B)
    targets = []
    for _ in range(steps):
        for s in ranks:
            x, y = s.next()
            assert x.shape == y.shape == (B, T)
            assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
            assert torch.equal(y - x, torch.ones_like(x))  # contiguous, from the split
            targets += y.flatten().tolist()
    assert len(targets) == len(set(targets)) == steps * world * B * T  # nothing twice within the epoch
    assert max(targets) <= M * T and min(targets) >= 1
    # the windows start on the grid kT
    assert all((t - 1) % T == 0 for t in targets[::T])


def test_the_next_epoch_reshuffles_and_covers_again():
    s = EpochSampler(_tokens(101), 10, 2, seed=0)  # M = 10 windows, 5 steps per epoch
    first = [tuple(s.next()[0][:, 0].tolist()) for _ in range(5)]
    second = [tuple(s.next()[0][:, 0].tolist()) for _ in range(5)]
    flat1, flat2 = sorted(sum(first, ())), sorted(sum(second, ()))
    assert flat1 == flat2 == list(range(0, 100, 10))
    assert first != second  # a fresh order


def test_seek_gives_the_batches_of_an_uninterrupted_run():
    a = EpochSampler(_tokens(500), 7, 3, seed=4, rank=1, world=2)
    straight = [a.next() for _ in range(40)]
    b = EpochSampler(_tokens(500), 7, 3, seed=4, rank=1, world=2)
    b.seek(23)
    for want in straight[23:]:
        got = b.next()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_the_order_depends_on_the_seed():
    starts = lambda seed: EpochSampler(_tokens(1000), 4, 8, seed).starts(0)  # noqa: E731
    assert starts(0) != starts(1)
    assert starts(0) == starts(0)
