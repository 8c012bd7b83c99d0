"""Attention masks as additive float biases: the causal (and sliding-window) mask of a causal stack, and the
padding mask of an encoder-decoder's source.

    CausalMasking._attn_bias(start, t) -> (H or 1, t, start + t): 0 where query start + i may see key j (j <= start + i,
                                          and start + i - window < j with cfg.window), -inf elsewhere, plus the
                                          position bias (pos.attn_bias) when there is one; None for plain causal
    padding_bias(src_mask, dtype)      -> (B, 1, 1, S): 0 at real source tokens, -inf at padding

The causal mask is folded into the float bias rather than left to the kernel because sdpa cannot combine is_causal
with attn_mask; when nothing but a square causal mask is needed, None lets the kernel mask (is_causal). The table is
a non-persistent buffer regrown (at least doubling) past n_ctx. Not handled: padding in a decoder-only batch (left
or right), left-padded sources, per-row windows.
"""

from __future__ import annotations

import torch
from torch import Tensor

from arch.components.positional import Positional
from arch.config import ModelConfig


class CausalMasking:
    """The causal (and sliding-window) mask table and the per-call attention bias of a causal stack: Transformer
    and the encoder-decoder's Decoder. The host has `cfg`, `pos` and a `causal_mask` buffer from `_causal_table`."""

    cfg: ModelConfig
    pos: Positional
    causal_mask: Tensor

    def _causal_table(self, n: int) -> Tensor:
        mask = torch.full((n, n), float("-inf")).triu(1)  # (Tq, Tk)
        if self.cfg.window is not None:  # sliding window: also hide keys j <= i - window
            mask = mask + torch.full((n, n), float("-inf")).tril(-self.cfg.window)
        return mask

    def _attn_bias(self, start: int, t: int) -> Tensor | None:
        """(H or 1, t, start + t) float bias with the causal mask folded in, or None for plain causal."""
        bias = self.pos.attn_bias(start, t)  # (H, t, Tk) or None
        end = start + t
        banded = self.cfg.window is not None and end > self.cfg.window  # a key left some query's window
        if bias is None and not banded and (start == 0 or t == 1):
            return None  # square causal (kernel masks), or one query that may see every key
        if end > self.causal_mask.shape[0]:
            self.causal_mask = self._causal_table(max(end, 2 * self.causal_mask.shape[0])).to(self.causal_mask)
        mask = self.causal_mask[start:end, :end]  # (t, Tk)
        return mask[None] if bias is None else bias + mask


def padding_bias(mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """mask (B, S) bool, True at real tokens -> (B, 1, 1, S) additive bias: 0 there, -inf at padding; None -> None.

    >>> padding_bias(torch.tensor([[True, False]]), torch.float32).flatten().tolist()
    [0.0, -inf]
    """
    if mask is None:
        return None
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
    return bias[:, None, None, :]  # (B, 1, 1, S)
