"""The data files a command names exist, checked once before any run starts, sweeps included.

    check_data_files(cfg, experiment="finding_rope_vs_learned_v2")   # cfg: the command's (first) composed config

Called by the command-line precheck (experiments.config.precheck) for a single run and for a sweep's first point:
`data=text` paths (globs expanded), `data=tokens` files with their sidecars and, whatever the source, the
`data.extra_eval` corpora (experiments.data.corpus.check_held_out), through the loader's own checks
(experiments.data.corpus.check_source), so a sweep whose every job would fail on the same missing file is refused
once, as one line, instead of each job recording `failed` with a resume hint that fails again. When the missing
file is one of the findings' pre-registered data files (experiments.findings.data: the v2 findings' ELTeC novels,
the v1 findings' TinyStories head), the line says what it is and how to get it, and the options that train the
same sweep on other data.
Not handled: the hub (`data=hf`: a job probes it, as it may take seconds), seq2seq pair files (checked per job),
the other points of a sweep that sweeps its data paths (each job checks its own).
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.config.errors import ConfigError
from experiments.data.corpus import check_held_out, check_source

LOCAL_SOURCES = ("text", "tokens")  # the data sources that name files on this machine


def registered_file_hint(paths: Any, experiment: str | None) -> str:
    """`; it is <what>, <where to get it>; ...` when `paths` (data.paths) names a findings' pre-registered file, else
    ``. `experiment` (the command's experiment=..., e.g. finding_rope_vs_learned_v2) names the findings command."""
    from experiments.findings.data import DATA_FILE, DATA_FILES, URL, WHAT  # only on a miss: it loads the findings

    paths = [paths] if isinstance(paths, str) else list(paths or [])
    name = experiment[len("finding_"):] if experiment and experiment.startswith("finding_") else "NAME"
    for p in map(str, paths):
        data = next((d for d in DATA_FILES.values() if d.path == p), None)
        if data is not None:
            return (f"; it is {data.what}, the data this finding's YAML selects (finding/data={data.key}); "
                    f"{data.where}; with a copy pass 'data.paths=[COPY]' or run python -m experiments.findings "
                    f"{name} --data-file COPY (checked by its sha256), or train on other data with "
                    f"finding/data=embedded or finding/data=tinystories (docs/findings/README.md#data)")
        if p == DATA_FILE:
            return (f"; it is the v1 findings' pre-registered data, {WHAT}; download it from {URL} and pass "
                    f"'data.paths=[THAT_FILE]', or use data=tinystories (docs/findings/README.md#data)")
    return ""


def check_data_files(cfg: DictConfig, experiment: str | None = None) -> None:
    """ConfigError (one line) when a local data file the composed config `cfg` names is missing or unreadable."""
    data = OmegaConf.select(cfg, "data")
    try:
        plain = OmegaConf.to_container(data, resolve=True) if data is not None else None
    except Exception:  # noqa: BLE001 - an unset or broken value: the value checks after this one name it
        return
    if not isinstance(plain, dict):
        return
    if plain.get("source") in LOCAL_SOURCES:
        try:
            check_source({**plain, "extra_eval": {}} if "extra_eval" in plain else plain)  # the corpus's own files
        except ConfigError as e:
            raise ConfigError(f"{e}{registered_file_hint(plain.get('paths'), experiment)}") from None
    if "extra_eval" in plain:  # every language-model source: its test split and extra corpora, each its own line
        check_held_out(plain)
