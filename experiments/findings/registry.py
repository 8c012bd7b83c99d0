"""The findings: a `Finding` per published claim, in the FINDINGS registry keyed by its short name (= the suffix of
its sweep, conf/experiment/finding_<name>.yaml).

    from experiments.findings.registry import FINDINGS, get_finding
    f = get_finding("rope_vs_learned"); f.claim, f.by, f.rule(evidence)

Each claim lives in its own module (alibi_extrapolation.py, ...) as plain module constants and a `rule(ev)`
function, written before any full run (pre-registered); `Finding.from_module` gathers them. The smoke overrides
shared by every finding are here too.
Not handled: running anything (cli.py), rendering (doc.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from experiments.findings.evidence import Evidence, Verdict

# --smoke: seconds per run (the tests' TINY shape), same sweep otherwise. Only the finding's own smoke list and the
# shape (unless a finding keeps its shapes, as kaplan_aspect_ratio's presets) are added to these.
SMOKE = ["tokenizer.vocab_size=1024", "train.n_ctx=32", "train.batch_size=4", "train.tokens=384",
         "train.eval_interval=3", "train.eval_batches=2", "train.ckpt_interval=3", "seed=0,1"]
SMOKE_SHAPE = ["model.d_model=32", "model.n_heads=2", "model.n_layers=2"]


@dataclass(frozen=True)
class Finding:
    name: str  # short name: conf/experiment/finding_<name>.yaml, docs/findings/<name>.md
    title: str
    claim: str  # the claim in one sentence
    citation: str  # authors, title, venue, arXiv id
    paper: str  # short citation for the index table ("Press et al. 2022")
    paper_number: str  # the paper's own number the claim rests on
    setup: str  # the pre-registered setup, markdown
    by: tuple[str, ...]  # experiments.compare --by keys
    baseline: dict[str, Any]  # the baseline group's --by values
    rule_text: str  # the pre-registered verdict rule in words
    rule: Callable[[Evidence], Verdict]
    figures: tuple[str, ...]  # report figures the doc shows, in order (skipped ones are noted)
    smoke: tuple[str, ...] = ()  # extra --smoke overrides
    smoke_shape: bool = True  # apply SMOKE_SHAPE (False: the sweep itself varies the shape)
    measure: Callable[..., dict[str, Any]] | None = None  # measure(overrides, smoke, out_dir) after the sweep
    requires: Callable[[], str | None] | None = None  # why this finding cannot run in this checkout, or None

    @property
    def experiment(self) -> str:
        return f"finding_{self.name}"

    @classmethod
    def from_module(cls, m: ModuleType) -> Finding:
        """A Finding from a claim module's constants (NAME, TITLE, CLAIM, ...) and its rule()."""
        return cls(name=m.NAME, title=m.TITLE, claim=m.CLAIM, citation=m.CITATION, paper=m.PAPER,
                   paper_number=m.PAPER_NUMBER, setup=m.SETUP, by=tuple(m.BY), baseline=dict(m.BASELINE),
                   rule_text=m.RULE, rule=m.rule, figures=tuple(m.FIGURES), smoke=tuple(getattr(m, "SMOKE", ())),
                   smoke_shape=getattr(m, "SMOKE_SHAPE", True), measure=getattr(m, "measure", None),
                   requires=getattr(m, "requires", None))

    def smoke_overrides(self) -> list[str]:
        return [*SMOKE, *(SMOKE_SHAPE if self.smoke_shape else []), *self.smoke]


def get_finding(name: str) -> Finding:
    """FINDINGS[name]; KeyError with the valid names otherwise."""
    if name not in FINDINGS:
        raise KeyError(f"unknown finding {name!r}; choose from {', '.join(FINDINGS)}")
    return FINDINGS[name]


from experiments.findings import (  # noqa: E402  (the claim modules import evidence.py, never this module)
    alibi_extrapolation,
    kaplan_aspect_ratio,
    rmsnorm_vs_layernorm,
    rope_vs_learned,
    swiglu_vs_gelu,
    xiong_postln_warmup,
)

FINDINGS: dict[str, Finding] = {m.NAME: Finding.from_module(m) for m in (
    alibi_extrapolation, xiong_postln_warmup, kaplan_aspect_ratio, swiglu_vs_gelu, rmsnorm_vs_layernorm,
    rope_vs_learned)}
