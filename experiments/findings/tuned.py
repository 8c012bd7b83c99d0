"""A finding whose sweep YAML selects the tuned sweeper (`hydra/sweeper=tuned`, experiments/sweep/tune.py; the v2
findings): how the findings command recognises it, and what its judge reads of the tuning.

    is_tuned("finding_rope_vs_learned_v2")            # True: its hydra.sweeper is the TunedSweeper
    part = split_sweep(sweep_dir, runs)               # TunedPart: final runs, tuning runs, tuning.json
    tuning_meta(part, comparison)                     # the doc's tuning section as plain data (finding.json)

The comparison (report, rule, results table) reads the FINAL runs only: each arm at its own best lr on fresh seeds;
the tuning runs are read apart (experiments.compare.tuning.split_runs, the report's own split), for the best-lr
table, basin.png and the readings of a rule that needs them (qk_norm_lr_sensitivity's sensitivity).
Not handled: running the sweep (cli.py), rendering (doc_tuned.py), picking the best lr (the sweeper).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TUNED_TARGET = "TunedSweeper"  # the end of hydra.sweeper._target_ (hydra_plugins/archlab_tuned_sweeper)


def is_tuned(experiment: str) -> bool:
    """Whether conf/experiment/<experiment>.yaml selects the tuned sweeper."""
    from omegaconf import OmegaConf

    from experiments.config.compose import compose_config

    # the sweeper is all this reads: the basic launcher, so a finding whose YAML names joblib_2 needs no plugin here
    cfg = compose_config([f"experiment={experiment}", "hydra/launcher=basic"], return_hydra_config=True)
    return str(OmegaConf.select(cfg, "hydra.sweeper._target_", default="")).endswith(TUNED_TARGET)


@dataclass
class TunedPart:
    """A sweep's runs split for judging: `finals` are compared; `tuning` (and `tuned`, the report's records) are not."""

    finals: list  # experiments.compare Runs
    tuning: list = field(default_factory=list)
    tuned: list = field(default_factory=list)  # experiments.compare.tuning.Tuned; [] for an untuned sweep

    @property
    def record(self) -> dict[str, Any] | None:
        """The tuning.json of the sweep, as JSON (None: not a tuned sweep)."""
        return self.tuned[0].record.to_json() if self.tuned else None


def split_sweep(sweep_dir: Path, runs: list) -> TunedPart:
    """The sweep's runs split into final and tuning runs (an untuned sweep: all final). RunsError (one line) for an
    unreadable tuning.json or a tuned sweep without a final run."""
    from experiments.compare.tuning import find_tuned, split_runs

    tuned = find_tuned([sweep_dir])
    finals, tuning = split_runs(runs, tuned)
    return TunedPart(finals, tuning, tuned)


def tuning_meta(part: TunedPart, comparison: dict[str, Any]) -> dict[str, Any] | None:
    """The doc's tuning section: the report's protocol label, its tuning sentence and best-lr table (as text
    cells), and the declaration; None for an untuned sweep."""
    from experiments.compare.tuning import tuning_table, tuning_text

    if not part.tuned:
        return None
    head, rows = tuning_table(part.tuned)
    rec = part.tuned[0].record
    return {"protocol": comparison.get("protocol"), "text": tuning_text(part.tuned), "head": list(head),
            "rows": [[str(text) for text, _ in row] for row in rows], "key": rec.key, "grid": rec.grid,
            "tune_seeds": rec.tune_seeds, "seeds": rec.seeds, "fraction": rec.fraction, "widen": rec.widen,
            "horizon": rec.horizon, "phase": rec.phase, "tuning_runs": len(rec.runs), "final_runs": len(rec.finals),
            "proxy": None if rec.proxy is None else rec.arm_label(rec.proxy), "proxy_only": rec.proxy_only,
            "tuning_horizon": rec.tuning_horizon}
