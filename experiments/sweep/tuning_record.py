"""`<sweep dir>/tuning.json`: what a tuned sweep (experiments/sweep/tune.py) declared and measured; this module is
its one reader and writer.

    record = TuningRecord(key="optim.lr", grid=[3e-4, 1e-3, 3e-3, 1e-2], tune_seeds=[1000], seeds=[0, 1, 2],
                          fraction=0.25, widen=2, arms=[{"model/pos": "learned"}, {"model/pos": "rope"}])
    record.write(sweep_dir)                          # atomically (tokenizer.outputs.atomic_write)
    record = TuningRecord.read(sweep_dir)            # None when the dir holds no tuning.json

The file (version 1):

    key, grid, tune_seeds, seeds, fraction, widen    the declaration (grid ascending, as declared)
    arms        [{"model/pos": "rope"}, ...]          each arm's overrides, in job order
    horizon     [{"key": "train.steps", "full": 200, "tuning": 50}, ...]   per arm: the budget key scaled
    phase       "tuning" | "final" | "done"           where the sweep is (a stopped sweep stays in its phase)
    runs        every tuning run: run_dir (relative to the sweep dir), arm (its index), lr, seed,
                final_val_loss (null: no finite value), status (a summary.json status, or "not started")
    results     per arm: best_lr (null: none), edge (null = interior | "low" | "high"), widened (the points
                added beyond the grid), loss_spread (max - min of the finite mean losses over the grid), note
    finals      every final run: run_dir, arm, lr, seed (written before the final phase starts)
    proxy       null, or the index in `arms` of the one arm tuned (hydra.sweeper.proxy): every arm's final runs use
                its best lr (results[i].note "transferred from the proxy ...")
    proxy_only  true when the proxy is not one of the compared arms (appended to `arms`, tuned, no final runs)

Run dirs are stored relative to the sweep dir, so a moved or copied sweep dir keeps its record.
Not handled: two sweeps writing one sweep dir at once.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tokenizer.outputs import atomic_write

TUNING_JSON = "tuning.json"
VERSION = 1
PHASES = ("tuning", "final", "done")
NOT_STARTED = "not started"  # a planned run with no summary.json (yet)


class TuningRecordError(ValueError):
    """A tuning.json that cannot be read as one (one line naming the file)."""


@dataclass
class TuningRun:
    """One run of the tuning phase (or, in `finals`, of the final phase: final_val_loss / status unused)."""

    run_dir: str                          # relative to the sweep dir, e.g. "3_model.pos=rope,optim.lr=0.001,..."
    arm: int                              # index into TuningRecord.arms
    lr: float                             # the tuned key's value (TuningRecord.key, optim.lr unless declared otherwise)
    seed: int
    final_val_loss: float | None = None   # summary.json's final_val_loss when finite, else None
    status: str = NOT_STARTED             # summary.json's status


@dataclass
class ArmResult:
    """What the tuning phase concluded for one arm."""

    best_lr: float | None                 # None: no tuning run of the arm has a finite result
    edge: str | None                      # None: an interior optimum; "low" / "high": still at that edge of the grid
    widened: list[float] = field(default_factory=list)  # points added beyond the declared grid, in the order run
    loss_spread: float | None = None      # max - min of the finite mean losses over the arm's grid
    note: str = ""                        # why there is no best lr ("no tuning run completed", ...)

    @property
    def interior(self) -> bool:
        return self.best_lr is not None and self.edge is None


@dataclass
class TuningRecord:
    key: str
    grid: list[float]
    tune_seeds: list[int]
    seeds: list[int]
    fraction: float
    widen: int
    arms: list[dict[str, str]]
    horizon: list[dict[str, Any]] = field(default_factory=list)
    phase: str = "tuning"
    runs: list[TuningRun] = field(default_factory=list)
    results: list[ArmResult] = field(default_factory=list)
    finals: list[TuningRun] = field(default_factory=list)
    proxy: int | None = None              # the arm tuned for every arm (μTransfer), None: each arm tuned
    proxy_only: bool = False              # the proxy is not a compared arm: tuning runs only

    @property
    def tuned_arms(self) -> list[int]:
        """The arms that get tuning runs: the proxy alone, or every arm."""
        return [self.proxy] if self.proxy is not None else list(range(len(self.arms)))

    @property
    def tuning_horizon(self) -> dict[str, Any]:
        """The tuning horizon of the (first) tuned arm, {} when none is recorded: what the tuning runs trained."""
        return self.horizon[self.tuned_arms[0]] if self.horizon and self.arms else {}

    @property
    def compared_arms(self) -> list[int]:
        """The arms that get final runs: every arm but a proxy that is not one of them."""
        return [a for a in range(len(self.arms)) if not (self.proxy_only and a == self.proxy)]

    # -- the declaration, for a resume to compare with its own

    def declaration(self) -> dict[str, Any]:
        return {"key": self.key, "grid": self.grid, "tune_seeds": self.tune_seeds, "seeds": self.seeds,
                "fraction": self.fraction, "widen": self.widen, "arms": self.arms, "proxy": self.proxy,
                "proxy_only": self.proxy_only}

    def arm_label(self, arm: int) -> str:
        """`model/pos=rope` (the arm's overrides, comma-joined); `(one arm)` when the sweep has no other sweep key."""
        return ",".join(f"{k}={v}" for k, v in self.arms[arm].items()) or "(one arm)"

    # -- JSON

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out = {"version": VERSION, **out}
        for run in out["runs"]:
            run["final_val_loss"] = _finite(run["final_val_loss"])
        for res in out["results"]:
            res["loss_spread"] = _finite(res["loss_spread"])
        return out

    @classmethod
    def from_json(cls, data: Any) -> TuningRecord:
        """The record of a parsed tuning.json; TuningRecordError (one line) for anything else."""
        try:
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError(f"not a version-{VERSION} tuning record")
            if data["phase"] not in PHASES:
                raise ValueError(f"unknown phase {data['phase']!r}")
            return cls(key=str(data["key"]), grid=[float(v) for v in data["grid"]],
                       tune_seeds=[int(s) for s in data["tune_seeds"]], seeds=[int(s) for s in data["seeds"]],
                       fraction=float(data["fraction"]), widen=int(data["widen"]),
                       arms=[{str(k): str(v) for k, v in a.items()} for a in data["arms"]],
                       horizon=list(data.get("horizon") or []), phase=data["phase"],
                       runs=[_run(r) for r in data["runs"]], results=[_result(r) for r in data["results"]],
                       finals=[_run(r) for r in data["finals"]],
                       proxy=None if data.get("proxy") is None else int(data["proxy"]),
                       proxy_only=bool(data.get("proxy_only", False)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise TuningRecordError(f"not a tuning record ({type(e).__name__}: {e})") from None

    # -- the file

    @staticmethod
    def path(sweep_dir: str | os.PathLike) -> Path:
        return Path(sweep_dir) / TUNING_JSON

    def write(self, sweep_dir: str | os.PathLike) -> Path:
        """Replace <sweep_dir>/tuning.json atomically (a reader or a kill sees the old record or the new one)."""
        path = self.path(sweep_dir)
        text = json.dumps(self.to_json(), indent=2, allow_nan=False) + "\n"
        atomic_write(path, lambda f: f.write(text), binary=False)
        return path

    @classmethod
    def read(cls, sweep_dir: str | os.PathLike) -> TuningRecord | None:
        """The record in `sweep_dir`, None when there is none; TuningRecordError naming the file when unreadable."""
        path = cls.path(sweep_dir)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise TuningRecordError(f"cannot read {path} ({type(e).__name__})") from None
        try:
            return cls.from_json(data)
        except TuningRecordError as e:
            raise TuningRecordError(f"{path}: {e}") from None


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _run(d: dict[str, Any]) -> TuningRun:
    return TuningRun(run_dir=str(d["run_dir"]), arm=int(d["arm"]), lr=float(d["lr"]), seed=int(d["seed"]),
                     final_val_loss=_finite(d.get("final_val_loss")), status=str(d.get("status") or NOT_STARTED))


def _result(d: dict[str, Any]) -> ArmResult:
    best = d.get("best_lr")
    return ArmResult(best_lr=None if best is None else float(best), edge=d.get("edge"),
                     widened=[float(v) for v in d.get("widened") or []], loss_spread=_finite(d.get("loss_spread")),
                     note=str(d.get("note") or ""))
