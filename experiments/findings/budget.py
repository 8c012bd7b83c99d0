"""What a finding's sweep spent and how much data its runs saw, computed from the runs' summaries (for the doc).

    spent = cost(records + tuning_records, wall_s=meta["wall_s"], cpus=meta["cpus"])
    spent.cpu_hours, spent.machine_hours, spent.devices
    seen = data_seen(records, tuning_records)   # tokens per non-embedding parameter per group, epochs

CPU-hours = the sum over every run of the sweep (tuning runs included) of its summary's wall_time_s × num_threads
/ 3600: the core time the runs held. Machine-hours = the wall time of the whole sweep as the findings command
measured it (all attempts added, a killed one up to its last heartbeat: attempts.py), / 3600. Devices: the
`device` of every run's summary. Epochs: each run's summary `epochs` (tokens trained / tokens in one pass over the
train split), max over the runs. A run without wall_time_s or num_threads (no summary yet, an older summary) is
counted apart and left out of the sum.
A run killed and resumed counts its time up to its last checkpoint (a run's elapsed time is restored from it), so
the steps lost with a kill and done again are counted once.
Not handled: time outside the runs (the report, a finding's measurement, tokenizer training happens inside the
first run), GPU-hours (a run on a GPU adds its CPU threads' time only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from experiments.findings.evidence import RunRecord


@dataclass(frozen=True)
class Cost:
    cpu_hours: float  # sum of wall_time_s * num_threads / 3600 over the runs that report both
    tuning_cpu_hours: float  # the tuning runs' share
    runs: int  # runs counted
    uncounted: int  # runs without wall_time_s or num_threads
    machine_hours: float | None  # the sweep's wall time / 3600 (None: not measured)
    devices: list[str] = field(default_factory=list)
    cpus: int | None = None  # the host's CPU count (os.sched_getaffinity where the command ran)

    def to_meta(self) -> dict[str, Any]:
        return dict(vars(self))


def cost(records: Sequence[RunRecord], tuning_records: Sequence[RunRecord] = (), wall_s: float | None = None,
         cpus: int | None = None) -> Cost:
    """The cost of a sweep whose runs are `records` (+ `tuning_records`), module docstring."""
    def core_hours(rs: Sequence[RunRecord]) -> tuple[float, int]:
        timed = [(r.get("wall_time_s"), r.get("num_threads")) for r in rs]
        timed = [(w, n) for w, n in timed if w is not None and n is not None]
        return sum(w * n for w, n in timed) / 3600, len(timed)

    final_h, n_final = core_hours(records)
    tuning_h, n_tuning = core_hours(tuning_records)
    everything = [*records, *tuning_records]
    devices = sorted({str(r.values.get("device")) for r in everything if r.values.get("device")})
    return Cost(final_h + tuning_h, tuning_h, n_final + n_tuning, len(everything) - n_final - n_tuning,
                None if wall_s is None else wall_s / 3600, devices, cpus)


def data_seen(records: Sequence[RunRecord], tuning_records: Sequence[RunRecord] = ()) -> dict[str, Any]:
    """{"tokens_per_param": {group: tokens / non-embedding params of its first run that has both}, "epochs_max":
    max epochs over all runs (None: none reported), "epochs_max_final": over `records` only}."""
    per_param: dict[str, float] = {}
    for r in records:
        tokens, params = r.get("tokens"), r.get("non_embedding_params")
        if tokens and params and r.group not in per_param:
            per_param[r.group] = tokens / params
    epochs = [r.get("epochs") for r in [*records, *tuning_records] if r.get("epochs") is not None]
    final = [r.get("epochs") for r in records if r.get("epochs") is not None]
    return {"tokens_per_param": per_param, "epochs_max": max(epochs) if epochs else None,
            "epochs_max_final": max(final) if final else None, "epochs_runs": len(epochs)}
