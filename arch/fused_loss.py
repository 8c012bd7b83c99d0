"""Chunked, fused linear + cross-entropy: mean CE of (h @ W.T) without materialising the (N, V) logits.

    loss = fused_linear_cross_entropy(h, W, targets)   # == F.cross_entropy(h @ W.T, targets, ignore_index=-100)

h (N, C) are the final hidden states, W (V, C) the (bias-free) unembedding, targets (N,) long with -100 ignored.
Rows are processed in chunks of `chunk_size` (default: as many rows as fit `CHUNK_BYTES` of logits, split into
equal chunks). For each chunk, in the forward pass:

    L = h_c @ W.T                   (chunk, V), into one reused buffer
    L = log_softmax(L)  (in place)  -> loss += -L[target] over the valid rows
    L = exp(L) - onehot (in place)  = softmax - onehot = d CE_row / d logits_row
    grad_h[c] = (L @ W) * s         s = 1 / n_valid on valid rows, 0 on ignored rows
    grad_W   += L.T @ (h_c * s)

and backward only multiplies grad_h, grad_W by the incoming scalar gradient. So the forward costs the forward
plus the backward of the unfused path, the backward is ~free, and at most chunk x V logits exist at once (the
unfused path keeps the (N, V) logits, their log_softmax and its gradient, each N x V, fresh allocations).
Exact: the gradient is the one log_softmax's backward computes (exp(log_softmax) - onehot), only the row order
of the grad_W sum changes. All targets ignored: the loss is nan and the gradients are zero (as F.cross_entropy).

Without grad (torch.no_grad, or neither h nor W requiring grad) only the loss is computed, chunked. Second-order
gradients are not supported (once_differentiable). `lm_loss(x, lm_head, targets, fused)`, the loss of
arch.model.Transformer and arch.encdec.EncoderDecoder, uses this on CPU for float32 / float64 without autocast and
falls back to the unfused path elsewhere (see `use_fused`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

IGNORE_INDEX = -100
CHUNK_BYTES = 256 * 2**20  # logits buffer budget per chunk: 2 chunks of 1024 rows at vocab 50257, fp32


def chunk_rows(n: int, vocab: int, itemsize: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Rows per chunk: the fewest equal chunks whose (rows, vocab) logits fit chunk_bytes (at least 1 row)."""
    if n == 0:
        return 1
    n_chunks = max(1, math.ceil(n * vocab * itemsize / chunk_bytes))
    return max(1, math.ceil(n / n_chunks))


def use_fused(h: Tensor, weight: Tensor) -> bool:
    """Where the fused path is the default: CPU, float32/float64, no autocast, not under torch.compile.
    Elsewhere (CUDA, bf16/fp16, autocast, compile) the unfused F.cross_entropy path is used: not measured on
    a GPU, and autocast / Inductor choose their own precision and fusion there."""
    return (h.device.type == "cpu" and weight.device.type == "cpu" and h.dtype == weight.dtype
            and h.dtype in (torch.float32, torch.float64) and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling())  # fmt: skip


def _check_targets(targets: Tensor, vocab: int) -> Tensor:
    """(N,) valid mask; raises IndexError like F.cross_entropy for targets outside [0, V) other than -100."""
    valid = targets != IGNORE_INDEX
    bad = valid & ((targets < 0) | (targets >= vocab))
    if bool(bad.any()):
        raise IndexError(f"Target {int(targets[bad][0])} is out of bounds.")
    return valid


def _loss_only(h: Tensor, weight: Tensor, targets: Tensor, chunk_size: int | None) -> Tensor:
    n, vocab = h.shape[0], weight.shape[0]
    valid = _check_targets(targets, vocab)
    safe = targets.masked_fill(~valid, 0)
    rows = chunk_size or chunk_rows(n, vocab, h.element_size())
    total = h.new_zeros(())
    for s in range(0, n, rows):
        logp = torch.log_softmax(h[s : s + rows] @ weight.t(), dim=-1)
        nll = -logp.gather(1, safe[s : s + rows, None]).squeeze(1)
        total += torch.where(valid[s : s + rows], nll, 0.0).sum()
    return total / valid.sum()


class FusedLinearCrossEntropy(torch.autograd.Function):
    """forward(h (N, C), weight (V, C), targets (N,), chunk_size) -> mean CE; see the module docstring."""

    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, targets: Tensor, chunk_size: int | None) -> Tensor:
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        h, weight = h.contiguous(), weight.contiguous()
        n, vocab = h.shape[0], weight.shape[0]
        valid = _check_targets(targets, vocab)
        safe = targets.masked_fill(~valid, 0)
        n_valid = valid.sum()
        # per-row factor of the mean: 1 / n_valid on valid rows, 0 on ignored ones (all ignored: 0, like F.ce)
        scale = valid.to(h.dtype) / n_valid.clamp(min=1).to(h.dtype)
        rows = chunk_size or chunk_rows(n, vocab, h.element_size())
        buf = h.new_empty(min(rows, n), vocab)
        grad_h = torch.empty_like(h) if need_h else None
        grad_w = torch.zeros_like(weight) if need_w else None
        total = h.new_zeros(())
        for s in range(0, n, rows):
            e = min(n, s + rows)
            hc, tc, vc = h[s:e], safe[s:e, None], valid[s:e]
            logits = buf[: e - s]
            torch.mm(hc, weight.t(), out=logits)
            torch.log_softmax(logits, dim=-1, out=logits)  # row-wise kernel: safe in place
            total += torch.where(vc, -logits.gather(1, tc).squeeze(1), 0.0).sum()
            if need_h or need_w:
                logits.exp_()  # softmax
                logits.scatter_add_(1, tc, torch.full_like(tc, -1, dtype=logits.dtype))  # - onehot
                sc = scale[s:e, None]
                if need_h:
                    torch.mm(logits, weight, out=grad_h[s:e])
                    grad_h[s:e].mul_(sc)
                if need_w:
                    grad_w.addmm_(logits.t(), hc * sc)
        del buf
        ctx.save_for_backward(grad_h, grad_w)
        return total / n_valid

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):
        grad_h, grad_w = ctx.saved_tensors
        one = grad_out.device.type == "cpu" and float(grad_out) == 1.0  # the usual loss.backward(): no copy
        if grad_h is not None and not one:
            grad_h = grad_h * grad_out
        if grad_w is not None and not one:
            grad_w = grad_w * grad_out
        return grad_h, grad_w, None, None


def fused_linear_cross_entropy(h: Tensor, weight: Tensor, targets: Tensor, chunk_size: int | None = None) -> Tensor:
    """Mean cross-entropy of h (N, C) @ weight (V, C).T against targets (N,), ignore_index -100, computed in
    row chunks without storing the logits. Equal to F.cross_entropy(h @ weight.T, targets, ignore_index=-100)."""
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1] or targets.shape != h.shape[:1]:
        raise ValueError(f"expected h (N, C), weight (V, C), targets (N,); got {tuple(h.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(targets.shape)}")  # fmt: skip
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1; got {chunk_size}")
    if not (torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad)):
        return _loss_only(h, weight, targets, chunk_size)
    return FusedLinearCrossEntropy.apply(h, weight, targets, chunk_size)


def lm_loss(x: Tensor, lm_head: nn.Linear, targets: Tensor, fused: bool) -> Tensor:
    """Mean cross-entropy of lm_head(x) against targets != -100: x (B, T, C), targets (B, T); the loss of the
    Transformer and of the encoder-decoder. fused: fused_linear_cross_entropy where use_fused allows it, else
    lm_head + F.cross_entropy (same value and gradients)."""
    if fused and use_fused(x, lm_head.weight):
        mult = getattr(lm_head, "input_mult", 1.0)  # arch.mup.Readout's μP multiplier (1.0: none)
        x = x * mult if mult != 1.0 else x
        return fused_linear_cross_entropy(x.reshape(-1, x.shape[-1]), lm_head.weight, targets.reshape(-1))
    logits = lm_head(x)
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
