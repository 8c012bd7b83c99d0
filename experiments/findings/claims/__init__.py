"""The claim modules: one file per claim and version (`<name>.py`, `<name>_v2.py`, ...), each a finding's claim,
citation, paper's number, setup, group keys, baseline and verdict rule as module constants and `rule(ev)`; its sweep
is `conf/experiment/finding_<name>.yaml`. The findings engine beside this folder (experiments/findings/: registry,
registration, judge, doc, cli, readings, ...) holds no claim.

    from experiments.findings.registry import FINDINGS   # every module here with a NAME, discovered (registry.py)

A module with `NAME` (= its file name) is a finding: the registry finds it here, so adding a claim is this one file
and its YAML, then `python -m experiments.findings <name> --register` (docs/findings/README.md, "Adding a finding").
A module without NAME is shared claim-side setup, not a finding: protocol_v2.py (the v2 findings' protocol, hashed
by their registrations as an extra file).

The modules registered before this folder existed (2026-11-26) were moved here byte for byte: their registered
texts name experiments/findings/<name>.py and import each other by those paths (`from experiments.findings import
protocol_v2 as v2`), which experiments/findings/__init__.py resolves to this folder; registration.py reads a file
registered at an old path here. A new claim imports its siblings from here (`from experiments.findings.claims
import protocol_v2`) and names its extra files by their paths here.
Not handled: discovery and order (registry.py), the registration record (registration.py), running (cli.py).
"""
