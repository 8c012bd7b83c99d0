"""The aten ops one training step dispatches (forward, loss, backward, AdamW step), with their input shapes, for
three position encodings of a small decoder: two checkouts that print the same list do the same work per step,
whatever the machine's load (a timing A/B on a shared machine cannot tell a few percent apart).

    python bench/step_ops.py > ops_a.txt      # in each checkout (PYTHONPATH=<checkout>), then: diff ops_a.txt ops_b.txt
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import arch
from arch import ModelConfig, PosConfig


class Log(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
        self.ops.append(f"{func}{shapes}")
        return out


torch.manual_seed(0)
for pos in ("learned", "rope", "alibi"):
    cfg = ModelConfig(vocab_size=512, n_ctx=64, d_model=64, n_layers=2, n_heads=4, pos=PosConfig(kind=pos))
    model = arch.build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 512, (2, 64))
    with Log() as log:
        loss = model.loss(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()
    print(pos, len(log.ops), float(loss.detach()))
    for o in log.ops: print(" ", o)
