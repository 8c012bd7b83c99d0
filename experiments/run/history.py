"""What summary.json reports of a run's metrics: the last and best eval values and the last train loss.

    hist = EvalHistory.from_metrics(RunDir(run_dir).read_metrics())   # a resumed run picks up where it was
    hist.record_eval({"val/loss": 3.2, "val/bpb": 1.1, "extrap/sliding/loss@2x": 3.4})

`best_*` is min() over the evals so far; `extrap` holds the last eval that measured extrapolation, `test` the
test/* metrics of the final eval (the only one that has them). Not handled: bests of metrics other than val/loss
and val/bpb.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class EvalHistory:
    final_val_loss: float | None = None
    best_val_loss: float | None = None
    final_val_bpb: float | None = None
    best_val_bpb: float | None = None
    final_train_loss: float | None = None
    extrap: dict[str, Any] = field(default_factory=dict)  # extrap/<mode>/loss@<k>x -> value (None: not measurable)
    test: dict[str, Any] = field(default_factory=dict)  # test/loss, test/bpb, test/<name>/loss, ... of the final eval

    @classmethod
    def from_metrics(cls, rows: list[dict[str, Any]]) -> EvalHistory:
        """From metrics.jsonl's rows, oldest first (after a resume truncated them to the checkpoint)."""
        h = cls()
        for row in rows:
            if "val/loss" in row:
                h.record_eval(row)
            if "train/loss" in row:
                h.final_train_loss = row["train/loss"]
        return h

    def record_eval(self, row: dict[str, Any]) -> None:
        """Fold one eval row into the final / best val values and the last extrap values."""
        self.final_val_loss, self.final_val_bpb = row["val/loss"], row.get("val/bpb")
        self.best_val_loss = _lower(self.best_val_loss, row.get("val/loss"))
        self.best_val_bpb = _lower(self.best_val_bpb, row.get("val/bpb"))
        extrap = {k: v for k, v in row.items() if k.startswith("extrap/")}
        if extrap:
            self.extrap = extrap
        test = {k: v for k, v in row.items() if k.startswith("test/")}
        if test:
            self.test = test


def _lower(best: float | None, value: float | None) -> float | None:
    if value is None:
        return best
    return value if best is None else min(best, value)
