"""Finding `kaplan_aspect_ratio_mup`: kaplan_aspect_ratio_v2 re-run under μP with the learning rate tuned once, on
the smallest shape, and transferred to every shape (issue 19 §3); does its verdict agree with v2's, where every
shape was tuned on its own?

Kaplan et al. 2020 (Fig. 5) for the claim, Yang et al. 2022 (μTransfer) for the protocol. Sweep:
conf/experiment/finding_kaplan_aspect_ratio_mup.yaml (plan: docs/findings/PLAN_mup.md), the tuned sweeper with
`hydra.sweeper.proxy` (docs/tuning.md); the shapes, reading and rule are kaplan_aspect_ratio_v2's (its `measure` and
`rule`, imported: one reading for both); registered: experiments/findings/registered/kaplan_aspect_ratio_mup.json.
Not handled: a per-shape comparison of the two sweeps' losses (the other sweep's runs are not this one's evidence;
only its doc's verdict is read, `agreement_source`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from experiments.findings import kaplan_aspect_ratio_v2 as v2k
from experiments.findings.evidence import Evidence, Verdict
from experiments.findings.doc_meta import read_meta

NAME = "kaplan_aspect_ratio_mup"
TITLE = ("Loss depends weakly on depth vs width at a fixed parameter count, under μP with one lr tuned on the "
         "smallest shape")
CLAIM = v2k.CLAIM
CITATION = (v2k.CITATION + "; the protocol: Yang et al., *Tensor Programs V: Tuning Large Neural Networks via "
            "Zero-Shot Hyperparameter Transfer*, 2022, [arXiv:2203.03466](https://arxiv.org/abs/2203.03466)")
PAPER = "Kaplan et al. 2020 (μTransfer)"
PAPER_NUMBER = v2k.PAPER_NUMBER
COMPARED_WITH = "kaplan_aspect_ratio_v2"  # the per-shape-tuned SP version whose verdict this one is compared with
BASE_WIDTH = 32  # d_model of the proxy: p100k at 8 layers, the narrowest and smallest shape
PROXY = ("p100k", 8)
QUOTED = "\n".join(f"> {line}" for line in v2k.SETUP.splitlines())
SETUP = f"""\
- `{COMPARED_WITH}`'s setup (quoted below) with two changes, which replace what it says about them:
  1. **μP**: every shape is `model/param=mup model.base_width={BASE_WIDTH}` (arch/mup.py). The shapes are 1× to 4×
     the proxy's width (d_model {BASE_WIDTH} … 128).
  2. **One tuning, transferred**: only the proxy, p100k × 8 layers (d_model {BASE_WIDTH}: the narrowest and smallest
     shape, where μP is SP), is trained over the lr grid (the same grid, tuning seed, 25% horizon and widening as
     `{COMPARED_WITH}`: 5 tuning runs, more if widened); every shape's final runs (6 shapes × seeds 0, 1, 2, full
     budget) use the proxy's best lr (`hydra.sweeper.proxy`, docs/tuning.md). μP transfers across width; the
     proxy's depth (8) differs from the shallower shapes' (2, 4), and that is part of what is tested.
- Sweep: `conf/experiment/finding_{NAME}.yaml` ({COMPARED_WITH}'s YAML plus the two changes).
- {COMPARED_WITH}'s registered setup, quoted:

{QUOTED}"""
BY = v2k.BY
BASELINE = v2k.BASELINE
FIGURES = v2k.FIGURES
DATA = v2k.DATA
EXTRA_FILES = (*v2k.EXTRA_FILES, "experiments/findings/kaplan_aspect_ratio_v2.py", "conf/model/param/*.yaml")
SMOKE_SHAPE = False  # the shapes are the sweep
RULE = (v2k.RULE + f" Then the agreement: this verdict against `{COMPARED_WITH}`'s (read from its full-run doc's "
        "metadata): **agrees** when the outcomes are equal, else **disagrees**; no comparison when that doc does not "
        "exist yet.")
SESOI = v2k.SESOI
SESOI_WHY = v2k.SESOI_WHY
DOCS = Path(__file__).resolve().parents[2] / "docs" / "findings"


def measure(overrides: Sequence[str], smoke: bool, out_dir: Path) -> dict[str, Any]:
    """The shapes model.shape solves for each arm (v2's measure: this YAML is v2's plus μP and the proxy, so its
    shapes are v2's; tests/experiments/test_findings_mup.py checks), and COMPARED_WITH's verdict as its doc records
    it (None without a full-run doc)."""
    return {**v2k.measure(overrides, smoke, out_dir), "compared_with": agreement_source()}


def agreement_source(docs: Path = DOCS) -> dict[str, Any] | None:
    """{outcome, key_number} of COMPARED_WITH's full-run doc (its metadata comment: verdict, key_number), None when
    there is none (or only a smoke doc)."""
    meta = read_meta(docs / f"{COMPARED_WITH}.md")
    if not meta or meta.get("smoke"):
        return None
    return {"outcome": meta.get("verdict"), "key_number": meta.get("key_number")}


def rule(ev: Evidence) -> Verdict:
    verdict = v2k.rule(ev)
    other = (ev.extra or {}).get("compared_with")
    if other is None:
        said = f"`{COMPARED_WITH}` has no full-run doc yet: no comparison."
    else:
        agree = "agrees" if other.get("outcome") == verdict.outcome else "disagrees"
        said = (f"Against `{COMPARED_WITH}` (SP, every shape at its own best lr): {other.get('outcome')} "
                f"({other.get('key_number')}); this verdict {agree}.")
    return dataclasses.replace(verdict, explanation=f"{verdict.explanation} {said}")
