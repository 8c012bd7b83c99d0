"""Findings: the lab answers questions. Each finding is a published claim, a sweep that tests it
(conf/experiment/finding_<name>.yaml), and a verdict rule in code, both registered (their text and sha256 recorded)
before the full run; a changed setup is a new version of the finding (`<name>_v2`).

    python -m experiments.findings --list
    python -m experiments.findings alibi_extrapolation --smoke
    python -m experiments.findings alibi_extrapolation        # the full run -> docs/findings/alibi_extrapolation.md
    python -m experiments.findings alibi_extrapolation --data-file tinystories.txt   # on a download of its data file
    python -m experiments.findings alibi_extrapolation data=text 'data.paths=[corpus.txt]'   # on other text
    python -m experiments.findings rope_vs_learned_v2 --smoke          # a tuned finding: the same command
    python -m experiments.findings alibi_extrapolation_v2 --register   # fix a new version's setup before its run

Modules: claims/ (one module per claim and version: v1: alibi_extrapolation, xiong_postln_warmup,
kaplan_aspect_ratio, swiglu_vs_gelu, rmsnorm_vs_layernorm, rope_vs_learned; v2, tuned: <name>_v2,
qk_norm_lr_sensitivity, gqa_vs_mha, tied_vs_untied; μP: mup_lr_transfer, a plain lr grid, and
kaplan_aspect_ratio_mup, v2's Kaplan tuned once on a proxy: claim, citation, the paper's number, setup, group keys,
baseline and rule; optional SESOI, POST_HOC, DATA, EXTRA_FILES; and claims/protocol_v2.py, the setup the v2 findings
share). The engine, here: registry.py (Finding, FINDINGS discovered from claims/, versions), lr_transfer.py /
mup_basin.py (mup_lr_transfer's optimum-and-shift reading and its basin figure), registration.py (the registration
record in registered/<name>.json and the check of the files against it),
data.py (the pre-registered data files: what they are, where to get them; the data a sweep actually used),
tuned.py (a tuned sweep's final and tuning runs), evidence.py (what a rule reads and returns), readings.py
(equivalence against a SESOI, shape spread and trend, lr sensitivity), multiple.py (Holm's correction), arms.py (each
arm's model without training), measure_init.py / measure_encdec.py (gradient norms at init, for the xiong findings),
measure_norms.py (compiled step time, for rmsnorm_vs_layernorm_v2), judge.py (a finished sweep -> report, its runs
as data, then verdict and doc built from that data: rundata.py / curve_data.py the data's format and its curves,
from_data.py the build, rebuild.py --from-sweep and --from-data, figdata.py each figure's plotted data,
provenance.py / doc_provenance.py the code and machine that trained the runs), budget.py (CPU-hours, data seen), doc.py / doc_budget.py / md.py / grad_plot.py (the markdown and figures),
doc_meta.py (the metadata comment opening each doc: its writer and reader),
index.py (the README's table, pointers to newer versions), cli.py (the command).
User docs: docs/findings/README.md. Importing this package does not import torch or matplotlib.

Old claim paths: the modules registered before claims/ existed import each other as `from experiments.findings
import protocol_v2` (also swiglu_vs_gelu, kaplan_aspect_ratio_v2), and their registered text can never change; this
package's `__getattr__` (PEP 562) resolves such a name to `experiments.findings.claims.<name>`, the same module
object, no copy. It is defined before the imports below, because the registry imports the claims while this package
is still initializing. Only the `from experiments.findings import <name>` form is resolved; `import
experiments.findings.<name>` is not.
"""

import importlib
import importlib.util
from types import ModuleType


def __getattr__(name: str) -> ModuleType:
    """A claim module by its old name, experiments.findings.<name> -> experiments.findings.claims.<name> (see above)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.claims.{name}") is not None:
        return importlib.import_module(f"{__name__}.claims.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# after __getattr__ on purpose (the docstring says why)
from experiments.findings.evidence import OUTCOMES, Evidence, RunRecord, Table, Verdict  # noqa: E402
from experiments.findings.registry import FINDINGS, Finding, get_finding  # noqa: E402

__all__ = ["FINDINGS", "OUTCOMES", "Evidence", "Finding", "RunRecord", "Table", "Verdict", "get_finding"]
