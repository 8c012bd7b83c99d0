"""Findings: the lab answers questions. Each finding is a published claim, a pre-registered sweep that tests it
(conf/experiment/finding_<name>.yaml), and a verdict rule fixed in code before the full run.

    python -m experiments.findings --list
    python -m experiments.findings alibi_extrapolation --smoke
    python -m experiments.findings alibi_extrapolation        # the full run -> docs/findings/alibi_extrapolation.md
    python -m experiments.findings alibi_extrapolation --data-file tinystories.txt   # on a download of its data file
    python -m experiments.findings alibi_extrapolation data=text 'data.paths=[corpus.txt]'   # on other text

Modules: registry.py (Finding, FINDINGS), one module per claim (alibi_extrapolation, xiong_postln_warmup,
kaplan_aspect_ratio, swiglu_vs_gelu, rmsnorm_vs_layernorm, rope_vs_learned: claim, citation, the paper's number,
setup, group keys, baseline and rule), data.py (the pre-registered data file: what it is, where to get it, the
hub alternative), evidence.py (what a rule reads and returns), measure_init.py (gradient norms
at init, for xiong_postln_warmup), doc.py (the markdown and the index), cli.py (the command).
User docs: docs/findings/README.md. Importing this package does not import torch or matplotlib.
"""

from experiments.findings.evidence import OUTCOMES, Evidence, RunRecord, Table, Verdict
from experiments.findings.registry import FINDINGS, Finding, get_finding

__all__ = ["FINDINGS", "OUTCOMES", "Evidence", "Finding", "RunRecord", "Table", "Verdict", "get_finding"]
