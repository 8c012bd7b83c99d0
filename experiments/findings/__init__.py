"""Findings: the lab answers questions. Each finding is a published claim, a sweep that tests it
(conf/experiment/finding_<name>.yaml), and a verdict rule in code, both registered (their text and sha256 recorded)
before the full run; a changed setup is a new version of the finding (`<name>_v2`).

    python -m experiments.findings --list
    python -m experiments.findings alibi_extrapolation --smoke
    python -m experiments.findings alibi_extrapolation        # the full run -> docs/findings/alibi_extrapolation.md
    python -m experiments.findings alibi_extrapolation --data-file tinystories.txt   # on a download of its data file
    python -m experiments.findings alibi_extrapolation data=text 'data.paths=[corpus.txt]'   # on other text
    python -m experiments.findings alibi_extrapolation_v2 --register   # fix a new version's setup before its run

Modules: registry.py (Finding, FINDINGS, versions), one module per claim (alibi_extrapolation, xiong_postln_warmup,
kaplan_aspect_ratio, swiglu_vs_gelu, rmsnorm_vs_layernorm, rope_vs_learned: claim, citation, the paper's number,
setup, group keys, baseline and rule; optional SESOI and POST_HOC), registration.py (the registration record in
registered/<name>.json and the check of the files against it), data.py (the pre-registered data file: what it is,
where to get it, the hub alternative; the data a sweep actually used), evidence.py (what a rule reads and returns),
multiple.py (Holm's correction), measure_init.py (gradient norms at init, for xiong_postln_warmup), judge.py (a
finished sweep -> report, verdict, doc), doc.py (the markdown), index.py (the README's table, pointers to newer
versions), cli.py (the command).
User docs: docs/findings/README.md. Importing this package does not import torch or matplotlib.
"""

from experiments.findings.evidence import OUTCOMES, Evidence, RunRecord, Table, Verdict
from experiments.findings.registry import FINDINGS, Finding, get_finding

__all__ = ["FINDINGS", "OUTCOMES", "Evidence", "Finding", "RunRecord", "Table", "Verdict", "get_finding"]
