"""The sweep callback's end-of-sweep status lines (fast: fake run dirs, no training)."""

from __future__ import annotations

import json

from experiments.sweep.callbacks import _status_lines


def test_status_lines_are_in_job_order(tmp_path):
    for num in (0, 1, 2, 10, 11):
        run = tmp_path / f"{num}_seed={num}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({"status": "completed", "final_val_loss": float(num)}))
    lines = _status_lines(tmp_path)
    assert [line.rsplit("/", 1)[1].split("_")[0] for line in lines] == ["0", "1", "2", "10", "11"]
    assert "val/loss  10.0000" in lines[3]
