"""A Hydra callback that tells a multirun user where its runs are and builds their comparison report.

Configured in conf/train.yaml (`hydra.callbacks.sweep_report`). At the start of a sweep it prints the sweep
directory; at the end, one line per run (status, final val/loss), then it builds `<sweep dir>/report/` with
experiments.compare and prints the path of report.html (or, if that fails, why, and the command to retry).
Not handled: SLURM sweeps whose jobs are still queued when the launcher returns (statuses then read `running`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def _status_lines(sweep_dir: Path) -> list[str]:
    from experiments.runs import _natural_key

    lines = []  # in job order: 0_, 1_, ..., 10_ (a plain string sort puts 10_ before 2_)
    for summary in sorted(sweep_dir.glob("*/summary.json"), key=lambda p: _natural_key(p.parent)):
        try:
            s = json.loads(summary.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        loss = s.get("final_val_loss")
        loss_txt = f"{loss:.4f}" if isinstance(loss, (int, float)) else "-"
        lines.append(f"  {s.get('status', '?'):<9} val/loss {loss_txt:>8}  {summary.parent}")
    return lines


class SweepReport(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        print(f"[archlab] sweep {config.experiment_name}: runs go to {config.hydra.sweep.dir}/", file=sys.stderr, flush=True)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        lines = _status_lines(sweep_dir)
        print(f"[archlab] sweep {config.experiment_name} finished: {len(lines)} run(s) in {sweep_dir}/", file=sys.stderr)
        for line in lines:
            print(line, file=sys.stderr)
        try:
            from experiments.compare import build_report

            report = build_report([str(sweep_dir)])
            print(f"[archlab] report: {report}", file=sys.stderr)
        except Exception as e:  # the runs are what matters; the report can be rebuilt by hand
            print(f"[archlab] report not built: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        print(f"[archlab] compare them: python -m experiments.compare {sweep_dir}", file=sys.stderr, flush=True)
