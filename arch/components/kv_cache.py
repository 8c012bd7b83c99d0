"""KVCache: per-layer keys and values of the tokens seen so far, for incremental decoding.

`model(ids, kv_cache=cache)` treats ids (B, T_new) as positions cache.length .. cache.length + T_new - 1,
appends each layer's k/v (after rope, so cached keys are already at their absolute positions) and advances
`length`. `reorder(index)` selects / reorders batch rows (beam search); `crop(n)` forgets positions >= n.
Storage is a torch.cat per step (simple and autograd-safe; O(T) copying per token). With grouped-query attention
it holds only the n_kv_heads key/value heads, (B, Hkv, T, D). With a sliding window it still keeps every
position (the mask hides the old ones). Meant for inference under torch.no_grad().
EncDecKVCache (the decoder of arch.encdec) adds the cross-attention keys/values, computed once per source.
Not handled: a rolling buffer for sliding windows, preallocated storage, checking that you feed the same model
the cache was created for.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


class KVCache:
    """Keys/values per layer: k[i], v[i] are (B, Hkv, length, D) tensors (None before the first step)."""

    def __init__(self, n_layers: int, batch_size: int) -> None:
        self.batch_size = batch_size
        self.length = 0  # number of positions already cached
        self.k: list[Tensor | None] = [None] * n_layers
        self.v: list[Tensor | None] = [None] * n_layers

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append new k, v (B, Hkv, T_new, D) for `layer`; return all of them (B, Hkv, length + T_new, D)."""
        if self.k[layer] is not None:
            k = torch.cat((self.k[layer], k), dim=2)
            v = torch.cat((self.v[layer], v), dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def advance(self, t: int) -> None:
        """Called by the model once every layer has appended its t new positions."""
        self.length += t

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows `index` (LongTensor, any length, repeats allowed), in that order."""
        index = index.to(dtype=torch.long)
        for i, (k, v) in enumerate(zip(self.k, self.v)):
            if k is not None:
                self.k[i], self.v[i] = k.index_select(0, index.to(k.device)), v.index_select(0, index.to(v.device))
        self.batch_size = int(index.numel())

    def crop(self, n: int) -> None:
        """Forget every position >= n (e.g. to rewind after speculative steps)."""
        if not 0 <= n <= self.length:
            raise ValueError(f"crop length must be in [0, {self.length}], got {n}")
        for i, (k, v) in enumerate(zip(self.k, self.v)):
            if k is not None:
                self.k[i], self.v[i] = (k[:, :, :n], v[:, :, :n]) if n > 0 else (None, None)
        self.length = n

    def __repr__(self) -> str:
        return f"KVCache(n_layers={len(self.k)}, batch_size={self.batch_size}, length={self.length})"


class EncDecKVCache(KVCache):
    """The decoder cache of an encoder-decoder: self-attention keys/values grow per step exactly as in KVCache
    (`length` counts target positions); cross-attention keys/values cross_k[i], cross_v[i] (B, Hkv, S, D) depend
    only on the source, so they are computed on the layer's first call (`cross`) and reused unchanged after.
    `reorder` gathers both (beam search); `crop` forgets target positions only."""

    def __init__(self, n_layers: int, batch_size: int) -> None:
        super().__init__(n_layers, batch_size)
        self.cross_k: list[Tensor | None] = [None] * n_layers
        self.cross_v: list[Tensor | None] = [None] * n_layers

    def cross(self, layer: int, compute: Callable[[], tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """The cross-attention k, v of `layer`: `compute()` on the first call, the stored tensors afterwards."""
        if self.cross_k[layer] is None:
            self.cross_k[layer], self.cross_v[layer] = compute()
        return self.cross_k[layer], self.cross_v[layer]

    def reorder(self, index: Tensor) -> None:
        super().reorder(index)
        index = index.to(dtype=torch.long)
        for i, (k, v) in enumerate(zip(self.cross_k, self.cross_v)):
            if k is not None:
                self.cross_k[i] = k.index_select(0, index.to(k.device))
                self.cross_v[i] = v.index_select(0, index.to(v.device))

    def __repr__(self) -> str:
        filled = sum(k is not None for k in self.cross_k)
        return (f"EncDecKVCache(n_layers={len(self.k)}, batch_size={self.batch_size}, length={self.length}, "
                f"cross_layers_filled={filled})")
