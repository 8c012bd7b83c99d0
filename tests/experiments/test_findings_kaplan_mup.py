"""Finding kaplan_aspect_ratio_mup (docs/findings/PLAN_mup.md): its sweep is kaplan_aspect_ratio_v2's plus exactly
μP and the proxy (composed configs compared key by key), the proxy is the narrowest and smallest shape and μP is SP
there, the rule is v2's verdict on the same evidence plus the agreement with v2's doc, read from a doc's metadata
written here by hand.

No training here: the smoke run end to end is test_findings.py's (slow) smoke test.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from omegaconf import OmegaConf

from arch import build_model, count_params, mup
from experiments.config.compose import compose_config
from experiments.findings import FINDINGS
from experiments.findings.arms import arm_models
from experiments.findings.claims import kaplan_aspect_ratio_mup as kmup
from experiments.rundir.tracking import flatten_config

from .test_findings_v2 import _kaplan_ev

NAME = "kaplan_aspect_ratio_mup"
TIGHT = {2: [3.00, 3.10, 3.05], 4: [3.01, 3.11, 3.05], 8: [3.02, 3.12, 3.07]}
TIGHTER = {2: [2.80, 2.90, 2.85], 4: [2.80, 2.90, 2.85], 8: [2.801, 2.902, 2.851]}
WIDE = {2: [3.00, 3.10, 3.05], 4: [3.10, 3.21, 3.16], 8: [3.30, 3.40, 3.36]}


def _flat(cfg) -> dict:
    return flatten_config(OmegaConf.to_container(cfg, resolve=False))


def test_the_sweep_is_v2s_plus_mup_and_the_proxy_only():
    mine = _flat(compose_config([f"experiment=finding_{NAME}"], return_hydra_config=True))
    v2 = _flat(compose_config(["experiment=finding_kaplan_aspect_ratio_v2"], return_hydra_config=True))
    changed = {k for k in {*mine, *v2} if mine.get(k) != v2.get(k)}
    expected = {"model.param", "model.base_width", "experiment_name", "hydra.sweep.dir",
                "hydra.sweeper.proxy.finding/kaplan_size", "hydra.sweeper.proxy.model.shape.n_layers"}
    # hydra.runtime / hydra.job bookkeeping holds the command line (the experiment's name): not the sweep
    assert {k for k in changed if not k.startswith(("hydra.runtime.", "hydra.job.", "hydra.overrides."))} == expected
    assert (mine["model.param"], v2["model.param"], mine["model.base_width"]) == ("mup", "sp", kmup.BASE_WIDTH)
    assert mine["hydra.sweeper.proxy.finding/kaplan_size"] == kmup.PROXY[0]
    assert mine["hydra.sweeper.proxy.model.shape.n_layers"] == kmup.PROXY[1]


def test_the_proxy_is_the_narrowest_and_smallest_shape_and_mup_is_sp_there():
    arms = {(s, d): [f"finding/kaplan_size={s}", f"model.shape.n_layers={d}"]
            for s in ("p100k", "p400k") for d in (2, 4, 8)}
    cfgs = dict(zip(arms, arm_models(f"finding_{NAME}", {f"{s} L{d}": a for (s, d), a in arms.items()}, []).values()))
    proxy = cfgs[kmup.PROXY]
    assert proxy.d_model == kmup.BASE_WIDTH == min(c.d_model for c in cfgs.values())
    assert count_params(proxy) == min(count_params(c) for c in cfgs.values())
    assert all(c.param == "mup" and c.base_width == kmup.BASE_WIDTH for c in cfgs.values())
    # the same shapes as v2 (model.shape solves them the same way under μP)
    v2 = arm_models("finding_kaplan_aspect_ratio_v2", {f"{s} L{d}": a for (s, d), a in arms.items()}, [])
    assert [(c.d_model, c.n_layers, c.n_heads) for c in v2.values()] == \
        [(c.d_model, c.n_layers, c.n_heads) for c in cfgs.values()]
    torch.manual_seed(0)
    a = build_model(proxy)
    torch.manual_seed(0)
    b = build_model(mup.base_config(proxy))
    x = torch.randint(0, proxy.vocab_size, (2, 16))
    assert torch.equal(a(x), b(x))  # at the base width μP computes what SP does, bit for bit


@pytest.mark.parametrize("small, large", [(TIGHT, TIGHTER), (WIDE, TIGHTER), (WIDE, WIDE)])
def test_the_rule_is_v2s_verdict_plus_the_agreement(small, large):
    ev = _kaplan_ev(small, large)
    theirs = FINDINGS["kaplan_aspect_ratio_v2"].rule(ev)
    none = FINDINGS[NAME].rule(ev)
    assert (none.outcome, none.key_number) == (theirs.outcome, theirs.key_number)
    assert none.explanation == f"{theirs.explanation} `kaplan_aspect_ratio_v2` has no full-run doc yet: no comparison."
    for other, word in ((theirs.outcome, "agrees"), ("reproduced" if theirs.outcome != "reproduced" else "partly",
                                                     "disagrees")):
        extra = {**(ev.extra or {}), "compared_with": {"outcome": other, "key_number": "spread 1%"}}
        v = FINDINGS[NAME].rule(dataclasses.replace(ev, extra=extra))
        assert v.outcome == theirs.outcome
        assert v.explanation.endswith(f"Against `kaplan_aspect_ratio_v2` (SP, every shape at its own best lr): "
                                      f"{other} (spread 1%); this verdict {word}.")


def test_the_agreement_reads_v2s_full_run_doc_only(tmp_path):
    assert kmup.agreement_source(tmp_path) is None  # no doc
    doc = tmp_path / "kaplan_aspect_ratio_v2.md"
    head = {"name": "kaplan_aspect_ratio_v2", "verdict": None, "key_number": None, "smoke": True}
    doc.write_text(f"<!-- archlab-finding: {json.dumps(head)} -->\n# title\n")
    assert kmup.agreement_source(tmp_path) is None  # a smoke doc is not a result
    head.update(verdict="partly", key_number="spread 0.1M 2.00%, 0.4M 4.00%", smoke=False)
    doc.write_text(f"<!-- archlab-finding: {json.dumps(head)} -->\n# title\n")
    assert kmup.agreement_source(tmp_path) == {"outcome": "partly", "key_number": "spread 0.1M 2.00%, 0.4M 4.00%"}
