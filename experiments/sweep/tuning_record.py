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
    phase       "tuning" | "confirm" | "final" | "done"   where the sweep is (a stopped sweep stays in its phase;
                "confirm" only with confirm: true)
    runs        every tuning run: run_dir (relative to the sweep dir), arm (its index), lr, seed,
                final_val_loss (null: no finite value), status (a summary.json status, or "not started")
    results     per arm: best_lr (null: none), edge (null = interior | "low" | "high"), widened (the points
                added beyond the grid), loss_spread (max - min of the finite mean losses over the grid), note
    finals      every final run: run_dir, arm, lr, seed (written before the final phase starts)
    proxy       null, or the index in `arms` of the one arm tuned (hydra.sweeper.proxy): every arm's final runs use
                its best lr (results[i].note "transferred from the proxy ...")
    proxy_only  true when the proxy is not one of the compared arms (appended to `arms`, tuned, no final runs)
    confirm, confirm_widen, confirm_runs    only when hydra.sweeper.confirm is true (a record without them: false):
                every confirm run (as `runs`: the full budget on the tune seeds), and in each result confirmed_lr (the
                full-horizon best: the lr of the final runs; null: none), confirm_edge (null | "low" | "high": the
                lowest / highest lr confirmed) and confirm_widened (the x2 steps added beyond a confirm edge)
    config      the first arm's final run config, flat (`train.steps`: 8, `model.d_model`: 64, data, ...), without
                the keys that do not define the sweep (NOT_DEFINING, the seed and the tuned key): with the
                declaration above, what a resume must find unchanged (`difference`)

Run dirs are stored relative to the sweep dir, so a moved or copied sweep dir keeps its record.
`difference(earlier)` names the first thing that differs between two records' definitions (the declaration, then the
config's keys both hold: a key one of them lacks, as after a schema field was added, is not compared; a record
written before `config` existed is compared on its declaration alone). `no_final_runs()` says why a concluded sweep
has no final runs, for the sweep's own output and the report.
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
PHASES = ("tuning", "confirm", "final", "done")
CONFIRM_KEYS = ("confirm", "confirm_widen", "confirm_runs")  # in tuning.json only when confirm is true
CONFIRM_RESULT_KEYS = ("confirmed_lr", "confirm_edge", "confirm_widened")
NOT_STARTED = "not started"  # a planned run with no summary.json (yet)
# config keys (and key prefixes) that name where and how a run is carried out, not what it measures: a resume may change
# them (conf/train.yaml leaves the same keys out of the run dir names)
NOT_DEFINING = ("train.resume", "train.overwrite", "train.run_dir", "train.num_threads", "train.progress",
                "data.cache_dir", "logger")


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
    confirmed_lr: float | None = None     # confirm: true: the full-horizon best (the final runs' lr); None: none
    confirm_edge: str | None = None       # None: interior among the lrs confirmed; "low" / "high": at that end
    confirm_widened: list[float] = field(default_factory=list)  # x2 steps added beyond a confirm edge, in run order

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
    config: dict[str, Any] = field(default_factory=dict)  # the first arm's final run config, flat, defining keys only
    confirm: bool = False                 # the confirm phase: best lr, x2 and /2 of it at the full budget
    confirm_widen: int = 0                # at most this many x2 steps per side beyond a confirm edge
    confirm_runs: list[TuningRun] = field(default_factory=list)  # the confirm phase's runs (full budget, tune seeds)

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

    def final_lr(self, arm: int) -> float | None:
        """The lr of the arm's final runs: its confirmed (full-horizon) best with confirm, else its best; None: no
        final runs (or not concluded yet)."""
        if arm >= len(self.results):
            return None
        res = self.results[arm]
        return res.confirmed_lr if self.confirm else res.best_lr

    # -- the declaration, for a resume to compare with its own

    def declaration(self) -> dict[str, Any]:
        out = {"key": self.key, "grid": self.grid, "tune_seeds": self.tune_seeds, "seeds": self.seeds,
               "fraction": self.fraction, "widen": self.widen, "arms": self.arms, "proxy": self.proxy,
               "proxy_only": self.proxy_only, "confirm": self.confirm}
        return {**out, "confirm_widen": self.confirm_widen} if self.confirm else out

    def difference(self, earlier: TuningRecord) -> tuple[str, Any, Any] | None:
        """(name, earlier value, this value) of the first thing that defines the sweep and differs (the declaration,
        then each config key both records hold), None when they define the same sweep.
        Example: a record of train.steps=8 against one of 4 -> ("train.steps", 4, 8)"""
        mine, theirs = self.declaration(), earlier.declaration()
        for k in mine:
            if mine[k] != theirs.get(k):
                return k, theirs.get(k), mine[k]
        for k in self.config:
            if k in earlier.config and self.config[k] != earlier.config[k]:
                return k, earlier.config[k], self.config[k]
        return None

    def no_final_runs(self) -> str | None:
        """Why a concluded sweep (every tuned arm has a result) runs no final run, None when it runs some or has not
        concluded (with confirm: the confirm phase too). Every tuning run diverged: a resume changes nothing (its runs
        keep their results)."""
        if len(self.results) != len(self.arms) or any(self.final_lr(a) is not None for a in self.compared_arms):
            return None
        if self.confirm and self.phase in ("tuning", "confirm") and any(
                self.results[a].best_lr is not None for a in self.tuned_arms):
            return None  # tuned, not yet confirmed
        runs = [r for r in self.runs if r.arm in self.tuned_arms]
        if runs and all(r.status == "diverged" for r in runs):
            lrs = sorted({r.lr for r in runs})
            return (f"every tuning run diverged ({len(runs)} runs, {self.key} {lrs[0]:g} to {lrs[-1]:g}), so no arm "
                    f"has a best {self.key} and no final run was started; resuming changes nothing (diverged runs "
                    f"keep their result): declare lower values in hydra.sweeper.tune and start another sweep dir")
        notes = "; ".join(f"{self.arm_label(a)}: {self.results[a].note}" for a in self.tuned_arms)
        best = "full-horizon best" if self.confirm else "best"
        return f"no arm has a {best} {self.key}, so no final run was started ({notes})"

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
        for run in out["confirm_runs"]:
            run["final_val_loss"] = _finite(run["final_val_loss"])
        if not self.confirm:  # the file of a sweep without a confirm phase, as before confirm existed
            for k in CONFIRM_KEYS:
                del out[k]
            for res in out["results"]:
                for k in CONFIRM_RESULT_KEYS:
                    del res[k]
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
                       proxy_only=bool(data.get("proxy_only", False)), config=dict(data.get("config") or {}),
                       confirm=bool(data.get("confirm", False)), confirm_widen=int(data.get("confirm_widen") or 0),
                       confirm_runs=[_run(r) for r in data.get("confirm_runs") or []])
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
    confirmed = d.get("confirmed_lr")
    return ArmResult(best_lr=None if best is None else float(best), edge=d.get("edge"),
                     widened=[float(v) for v in d.get("widened") or []], loss_spread=_finite(d.get("loss_spread")),
                     note=str(d.get("note") or ""), confirmed_lr=None if confirmed is None else float(confirmed),
                     confirm_edge=d.get("confirm_edge"),
                     confirm_widened=[float(v) for v in d.get("confirm_widened") or []])


def defining(flat: dict[str, Any], key: str) -> dict[str, Any]:
    """A flat run config without the keys that do not define a tuned sweep: NOT_DEFINING, the seed, the tuned `key`
    (both set per run by the sweeper). Example: defining({"seed": 0, "train.steps": 8, "logger.kind": "x"},
    "optim.lr") -> {"train.steps": 8}"""
    drop = ("seed", key, *NOT_DEFINING)
    return {k: v for k, v in flat.items() if not any(k == d or k.startswith(f"{d}.") for d in drop)}
