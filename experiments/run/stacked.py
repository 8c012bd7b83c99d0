"""The forward and backward of M models of one shape in one call: what packed training (run/pack.py) steps.

    stacked = StackedLoss([run.loss_module for run in runs])       # M LossModules, same parameter names and shapes
    losses = stacked.losses(batches)                                 # (M,) mean loss of each member on its own batch
    (losses * weights).sum().backward()                              # each member's .grad gets its own gradient only

Each member keeps its own parameters (the leaves of its own nn.Module, which its optimizer, its checkpoints and its
evaluations use unchanged). Every call stacks them along a new leading member dim and runs one copy of the module
under `torch.func.vmap` over (stacked parameters, stacked batches) with `torch.func.functional_call`: the matmuls
become batched matmuls over the M members, and the gradient of a sum of member losses reaches each member's leaves
as that member's own gradient (the members share no tensor, so nothing mixes). Buffers (causal masks, rope tables)
are equal across members of one shape and are passed once, unbatched.

What vmap cannot run is refused by run/pack.py before a step (`unpackable`): dropout (a random op: masks would not be
each solo run's), the `manual` attention kernel (an autograd.Function without a vmap rule), the fused lm_head +
cross-entropy (same; the vmapped module computes the plain F.cross_entropy loss instead, which equals it to float
rounding). SDPA runs under vmap through torch's batching fallback where it has no batching rule (CPU: one kernel call
per member, warned once by torch); the explicit kernel is batched matmuls everywhere.
Not handled: torch.compile of the stacked step, seq2seq pairs (members' batches differ in length).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap


class StackedLoss:
    """The members' loss modules (each `LossModule(model)`: forward(*batch) -> scalar mean loss), stepped as one."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        if not modules:
            raise ValueError("StackedLoss needs at least one member")
        self.modules = list(modules)
        shapes = [[(n, tuple(p.shape)) for n, p in m.named_parameters()] for m in self.modules]
        if any(s != shapes[0] for s in shapes[1:]):
            raise ValueError("packed members must have the same parameter names and shapes")
        self.names = [n for n, _ in shapes[0]]
        # one copy of the module runs every member's parameters; its own parameters are never read
        self.base = copy.deepcopy(self.modules[0])
        inner = getattr(self.base, "model", self.base)
        if hasattr(inner, "fused_loss"):
            inner.fused_loss = False  # the fused loss is an autograd.Function without a vmap rule
        self.buffers = dict(self.base.named_buffers())

    def _one(self, params: dict[str, Tensor], *batch: Tensor) -> Tensor:
        return functional_call(self.base, (params, self.buffers), batch)

    def stacked_params(self, members: Sequence[int]) -> dict[str, Tensor]:
        """{name: (m, *shape)} for the members at `members` (indices into the modules), differentiable to the leaves."""
        named = [dict(self.modules[i].named_parameters()) for i in members]
        return {n: torch.stack([d[n] for d in named]) for n in self.names}

    def losses(self, batches: Sequence[Sequence[Tensor]], members: Sequence[int] | None = None) -> Tensor:
        """(m,) loss of member members[j] on batches[j] (each batch a tuple like (x, y), every tensor the same shape
        across members). `members` defaults to all, in order."""
        members = list(range(len(self.modules))) if members is None else list(members)
        if len(batches) != len(members):
            raise ValueError(f"{len(batches)} batches for {len(members)} members")
        stacked = tuple(torch.stack(parts) for parts in zip(*batches))  # each (m, B, T)
        with warnings.catch_warnings():  # SDPA's batching fallback on CPU warns on every call: said once, in the doc
            warnings.filterwarnings("ignore", message=".*not yet implemented the batching rule.*")
            return vmap(self._one, in_dims=(0, *([0] * len(stacked))), randomness="error")(
                self.stacked_params(members), *stacked)
