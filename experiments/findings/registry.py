"""The findings: a `Finding` per published claim, in the FINDINGS registry keyed by its short name (= the suffix of
its sweep, conf/experiment/finding_<name>.yaml).

    from experiments.findings.registry import FINDINGS, get_finding
    f = get_finding("rope_vs_learned"); f.claim, f.by, f.rule(evidence)

Each claim lives in its own module in experiments/findings/claims/ (alibi_extrapolation.py, ...) as plain module
constants and a `rule(ev)` function; `Finding.from_module` gathers them. FINDINGS holds every module there with a
NAME (`claim_modules`, found by pkgutil: adding a claim is its module and its YAML, no edit here), ordered by
registration date (the 17 of 2026-11-26 in their order then: v1's six, v2's nine, μP's two), then by name,
unregistered ones last (`order_key`); `--list` and the index (grouped by base name) follow this order. The module,
its sweep YAML and the files it lists in EXTRA_FILES are fixed by a registration (registration.py) before a full
run. A finding whose YAML selects `hydra/sweeper=tuned` (the v2 findings, PLAN_v2.md) runs every arm at its own best
lr (cli.py, tuned.py). A changed setup is a new version of the finding, a new name `<name>_v2` (`_v3`, ...) with its
own module, YAML and registration; `versions(name)` lists a finding's versions, oldest first.
The smoke overrides shared by every finding are here too.
Not handled: running anything (cli.py), rendering (doc.py), the registration record (registration.py).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

from experiments.findings import claims, registration
from experiments.findings.evidence import Evidence, Verdict

# --smoke: seconds per run (the tests' TINY shape), same sweep otherwise. Only the finding's own smoke list and the
# shape (unless a finding keeps its shapes, as kaplan_aspect_ratio's presets) are added to these. A tuned finding
# (its sweeper sets the seeds) gets SMOKE_TUNED_SEEDS instead of `seed=0,1`: the same 2 fresh seeds and one tuning
# seed, its own grid; a finding whose YAML selects its data (DATA_IN_YAML) gets SMOKE_DATA unless data is given.
SMOKE = ["tokenizer.vocab_size=1024", "train.n_ctx=32", "train.batch_size=4", "train.tokens=384",
         "train.eval_interval=3", "train.eval_batches=2", "train.ckpt_interval=3", "seed=0,1"]
SMOKE_SEEDS = "seed=0,1"
SMOKE_TUNED_SEEDS = ["hydra.sweeper.seeds=[0,1]", "hydra.sweeper.tune_seeds=[1000]"]
SMOKE_DATA = ["finding/data=embedded"]  # conf/finding/data/embedded.yaml: the default embedded corpus
SMOKE_SHAPE = ["model.d_model=32", "model.n_heads=2", "model.n_layers=2"]
VERSION = re.compile(r"^(?P<base>.+)_v(?P<n>[0-9]+)$")  # rope_vs_learned_v2: version 2 of rope_vs_learned


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
    sesoi: float | None = None  # pre-registered smallest effect of interest (nats): the seeds-needed line's target
    sesoi_why: str = ""  # one sentence: why that size
    post_hoc: str = ""  # text written after seeing results, markdown; its own labelled section in the doc
    extra_files: tuple[str, ...] = ()  # repo-relative paths / globs hashed with the module and YAML (registration)
    data: str = "tinystories"  # the pre-registered data (data.DATA_FILES key); its `in_yaml` says who selects it
    metric: str = "val/loss"  # the report's metric the doc shows (v3: "test/loss", the held-out test split)

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
                   requires=getattr(m, "requires", None), sesoi=getattr(m, "SESOI", None),
                   sesoi_why=getattr(m, "SESOI_WHY", ""), post_hoc=getattr(m, "POST_HOC", ""),
                   extra_files=tuple(getattr(m, "EXTRA_FILES", ())), data=getattr(m, "DATA", "tinystories"),
                   metric=getattr(m, "METRIC", "val/loss"))

    def smoke_overrides(self, tuned: bool = False, data_in_yaml: bool = False) -> list[str]:
        """The --smoke overrides: SMOKE (its seeds in the tuned sweeper's keys when `tuned`), the smoke shape, the
        embedded corpus when the YAML selects the data (`data_in_yaml`, and no data override was given), its own."""
        seeds = SMOKE_TUNED_SEEDS if tuned else [SMOKE_SEEDS]
        return [*(o for o in SMOKE if o != SMOKE_SEEDS), *seeds, *(SMOKE_SHAPE if self.smoke_shape else []),
                *(SMOKE_DATA if data_in_yaml else []), *self.smoke]


def split_version(name: str) -> tuple[str, int]:
    """(base name, version): 'rope_vs_learned' -> ('rope_vs_learned', 1), 'rope_vs_learned_v2' -> (..., 2)."""
    m = VERSION.match(name)
    return (m["base"], int(m["n"])) if m and int(m["n"]) >= 2 else (name, 1)


def versions(name: str, names: Sequence[str] | None = None) -> list[str]:
    """The names among `names` (default: FINDINGS) that are versions of `name`'s finding, oldest first."""
    base = split_version(name)[0]
    same = [n for n in (FINDINGS if names is None else names) if split_version(n)[0] == base]
    return sorted(same, key=lambda n: split_version(n)[1])


def next_version(name: str, names: Sequence[str] | None = None) -> str:
    """The name a changed setup of `name` gets: <base>_v<latest + 1>."""
    base = split_version(name)[0]
    latest = max([split_version(n)[1] for n in versions(name, names)] + [split_version(name)[1]])
    return f"{base}_v{latest + 1}"


def get_finding(name: str) -> Finding:
    """FINDINGS[name]; KeyError with the valid names otherwise."""
    if name not in FINDINGS:
        raise KeyError(f"unknown finding {name!r}; choose from {', '.join(FINDINGS)}")
    return FINDINGS[name]


# The findings registered on 2026-11-26, before claims/ existed, in their order then: v1 (the six untuned findings,
# kept as the records of their docs), the v2 findings of PLAN_v2.md, then μP's (PLAN_mup.md). A record holds only a
# date, so this fixes the order among them; it is history, not a list to extend.
REGISTERED_2026_11_26 = (
    "alibi_extrapolation", "xiong_postln_warmup", "kaplan_aspect_ratio", "swiglu_vs_gelu", "rmsnorm_vs_layernorm",
    "rope_vs_learned", "alibi_extrapolation_v2", "xiong_postln_warmup_v2", "kaplan_aspect_ratio_v2",
    "swiglu_vs_gelu_v2", "rmsnorm_vs_layernorm_v2", "rope_vs_learned_v2", "qk_norm_lr_sensitivity", "gqa_vs_mha",
    "tied_vs_untied", "mup_lr_transfer", "kaplan_aspect_ratio_mup")


def claim_modules() -> list[ModuleType]:
    """Every module of experiments/findings/claims/ with a NAME (a finding), by module name; the others (protocol_v2,
    shared setup) are not findings."""
    found = (importlib.import_module(f"{claims.__name__}.{m.name}") for m in pkgutil.iter_modules(claims.__path__))
    return [_docs_as_registered(m) for m in found if hasattr(m, "NAME")]


REPO_DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings"


def _docs_as_registered(m: ModuleType) -> ModuleType:
    """A moved module that finds docs/findings by its own place: kaplan_aspect_ratio_mup's registered text sets
    `DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings"`, the repo's docs/findings when it was
    experiments/findings/<name>.py and experiments/docs/findings from claims/. Its DOCS, and every function default
    bound to it, are set back to the repo's, so it reads the doc it read when registered; others are left as they
    are."""
    moved = Path(m.__file__).resolve().parents[2] / "docs" / "findings"
    if getattr(m, "DOCS", None) == moved != REPO_DOCS:
        m.DOCS = REPO_DOCS
        for f in vars(m).values():
            if inspect.isfunction(f) and f.__module__ == m.__name__ and f.__defaults__:
                f.__defaults__ = tuple(REPO_DOCS if d == moved else d for d in f.__defaults__)
    return m


def order_key(name: str) -> tuple[str, int, str]:
    """Where `name` sits in FINDINGS: by registration date, those of 2026-11-26 in REGISTERED_2026_11_26's order, then
    by name; an unregistered finding (or one whose record is unreadable) last."""
    try:
        record = registration.load(name)
    except registration.RegistrationError:
        record = None
    date = record["registered"] if record else "9999-99-99"  # after every date
    rank = REGISTERED_2026_11_26.index(name) if name in REGISTERED_2026_11_26 else len(REGISTERED_2026_11_26)
    return date, rank, name


def discover() -> dict[str, Finding]:
    """Every claim module's Finding, keyed by name, in FINDINGS' order (order_key)."""
    found = (Finding.from_module(m) for m in claim_modules())
    return {f.name: f for f in sorted(found, key=lambda f: order_key(f.name))}


FINDINGS: dict[str, Finding] = discover()
