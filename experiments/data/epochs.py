"""Training windows that cover the train split once per epoch (`train.sampler=epoch`).

The default sampler (corpus.WindowSampler, `train.sampler=random`, nanoGPT's) draws window starts uniformly with
replacement: after N tokens of training some tokens were seen twice and others never. EpochSampler instead cuts
the split into M = (N - 1) // T non-overlapping windows (x = t[kT : kT+T], y = t[kT+1 : kT+T+1]: every token
t[1..MT] is a target exactly once per epoch), shuffles their order once per epoch, and deals them out B at a time:

    batch i (the i-th micro-batch of every rank) is in epoch e = i // (M // (world * B)); its order is
    torch.randperm(M) under seed (seed, e), the same on every rank, and rank r takes its B windows after the
    ((i mod steps per epoch) * world + r) * B already dealt in that epoch

A batch that would straddle the end of an epoch starts the next one (the epoch's last M mod (world*B) windows are
skipped, as DataLoader's drop_last): so the state is the batch index alone, and a resumed run (seek(i)) draws
exactly the batches of an uninterrupted one, with no generator state to save. Ranks share one order and take disjoint
slices of it, so a DDP run sees each window once per epoch too.

Not handled: documents are not aligned to windows (a window may span a document boundary, as with the random
sampler); the offset of the window grid is always 0.
"""

from __future__ import annotations

import numpy as np
import torch

from experiments.config.errors import ConfigError


def epoch_seed(seed: int, epoch: int) -> int:
    """The permutation seed of an epoch: distinct per (seed, epoch), stable across runs and ranks."""
    return int(np.random.SeedSequence([int(seed), int(epoch), 0xE0C]).generate_state(1)[0])


class EpochSampler:
    """Shuffled non-overlapping (x, y) windows of `n_ctx` tokens, each once per epoch (module docstring)."""

    def __init__(self, tokens: np.ndarray, n_ctx: int, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        self.tokens, self.n_ctx, self.batch_size = tokens, n_ctx, batch_size
        self.seed, self.rank, self.world = seed, rank, world
        self.windows = (len(tokens) - 1) // n_ctx  # M
        self.per_epoch = self.windows // (world * batch_size)  # micro-batches in one epoch
        if self.per_epoch < 1:
            raise ConfigError(f"train.sampler=epoch: the training split has {self.windows} windows of train.n_ctx="
                              f"{n_ctx}, fewer than one global batch ({world} x {batch_size}); lower train.batch_size or train.n_ctx")
        self.batch = 0  # index of the next micro-batch
        self._order: tuple[int, torch.Tensor] | None = None  # (epoch, its permutation), the current epoch's

    @property
    def tokens_per_epoch(self) -> int:
        """Tokens one pass deals: whole global batches of windows (the tail shorter than one is skipped)."""
        return self.per_epoch * self.world * self.batch_size * self.n_ctx

    def seek(self, batch: int) -> None:
        """The next batch is micro-batch number `batch` (resume: optimizer step x train.grad_accum)."""
        self.batch = batch

    def order(self, epoch: int) -> torch.Tensor:
        if self._order is None or self._order[0] != epoch:
            g = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            self._order = (epoch, torch.randperm(self.windows, generator=g))
        return self._order[1]

    def starts(self, batch: int) -> list[int]:
        """The token offsets of this rank's B windows in micro-batch number `batch`."""
        epoch, within = divmod(batch, self.per_epoch)
        first = (within * self.world + self.rank) * self.batch_size
        return (self.order(epoch)[first : first + self.batch_size] * self.n_ctx).tolist()

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """x, y: (B, T) int64 on the CPU."""
        T = self.n_ctx
        chunk = np.stack([np.asarray(self.tokens[s : s + T + 1], dtype=np.int64) for s in self.starts(self.batch)])
        self.batch += 1
        chunk = torch.from_numpy(chunk)  # (B, T+1)
        return chunk[:, :-1], chunk[:, 1:]
