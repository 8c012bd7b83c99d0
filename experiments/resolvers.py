"""OmegaConf resolvers used by conf/ (registered on import of experiments.train).

`${archlab_dirname:...}` turns Hydra's override string into a directory name: `model/pos=rope,seed=0` ->
`model.pos=rope,seed=0` (no `/`, no spaces or quotes, at most 120 characters). Empty -> `run`.
"""

from __future__ import annotations

import re

from omegaconf import OmegaConf

_UNSAFE = re.compile(r"[^A-Za-z0-9._=,+@-]+")


def dirname(overrides: str) -> str:
    """A filesystem-safe directory name for an override string.

    >>> dirname("model/pos=rope,seed=0")
    'model.pos=rope,seed=0'
    >>> dirname("data.paths=[a b.txt]")
    'data.paths=_a_b.txt_'
    """
    name = _UNSAFE.sub("_", str(overrides).replace("/", "."))
    return name[:120] or "run"


def register() -> None:
    OmegaConf.register_new_resolver("archlab_dirname", dirname, replace=True)


register()
