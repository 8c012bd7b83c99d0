"""A tuned sweep in the report (experiments/sweep/tune.py): which runs are compared, how the comparison is labelled,
and the tuning section's table and basin data.

    tuned = find_tuned(["multirun/tuned_pos/2026-01-01_00-00-00"], runs)   # the tuning.json records of the paths, runs
    runs, tuning_runs = split_runs(runs, tuned)                     # the final runs; the tuning runs set aside
    protocol(runs, tuned)           # "tuned: each arm at its own best lr, fresh seeds" | "untuned (one shared lr)"
    tuning_table(tuned), basin_data(tuned)

When a run read for the report sits in a sweep dir holding tuning.json (the sweep dir given, a dir above it
searched, a run dir or a glob inside it), the comparison (groups, differences with their intervals, --by) uses
that sweep's FINAL runs only (tuning.json's `finals`): its tuning runs, and any other run left in its dir, never
enter a mean or an interval (their seeds are not the fresh seeds), and are shown in the tuning section instead: each arm's
best lr, whether it is interior or still at an edge of the grid (after widening), the points widened, the loss
spread over the grid, and basin.png (final val loss vs lr per arm, from tuning.json). A sweep tuned on a proxy (hydra.sweeper.proxy) is labelled
TUNED_PROXY: one arm was tuned and its lr transferred, so a difference is not best-vs-best. A comparison without a record
is labelled untuned: "one shared lr" when every run has the same optim.lr, else "lr set per run, not tuned".
A sweep with a confirm phase (hydra.sweeper.confirm: true) keeps its confirm runs (full budget, tune seeds) out of
the comparison as it does its tuning runs; its table adds each arm's full-horizon best (the final runs' lr), whether
that is interior or at an end of the lrs confirmed (confirm edge), and the confirm runs' mean losses; the basin adds
them as a dashed line per arm.
Not handled: records of other tuned keys drawn against lr (the figure's x axis is the tuned key, whatever it is);
runs pulled from wandb (no dir: they cannot be told apart from final runs).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from experiments.compare.runs import Run, RunsError
from experiments.compare.tables import Table, fmt
from experiments.rundir.layout import RunStatus
from experiments.sweep.tune_select import point_losses, run_loss
from experiments.sweep.tuning_record import TuningRecord, TuningRecordError

TUNED = "tuned: each arm at its own best lr, fresh seeds"
TUNED_PROXY = "tuned once on a proxy: every arm at the proxy's best lr, fresh seeds"
UNTUNED = "untuned (one shared lr)"
UNTUNED_BY_HAND = "untuned (lr set per run, not tuned)"
BASIN = "basin.png"
LR_KEY = "optim.lr"


@dataclass
class Tuned:
    """One tuned sweep the report reads: its dir and its record."""

    sweep_dir: Path
    record: TuningRecord

    def paths(self, runs: Iterable[Any]) -> set[Path]:
        return {(self.sweep_dir / r.run_dir).resolve() for r in runs}

    def arm_labels(self, several: bool) -> list[str]:
        """The arms' labels, prefixed with the sweep dir's name when the report holds several tuned sweeps."""
        prefix = f"{self.sweep_dir.name}: " if several else ""
        rec = self.record
        role = {rec.proxy: " (proxy, tuning only)" if rec.proxy_only else " (proxy)"} if rec.proxy is not None else {}
        return [prefix + rec.arm_label(i) + role.get(i, "") for i in range(len(rec.arms))]


def find_tuned(paths: Iterable[str | os.PathLike], runs: Iterable[Run] = ()) -> list[Tuned]:
    """The tuned sweeps among `paths` and `runs`: a dir holding tuning.json, the sweep dir above a run dir given
    directly, and the dir holding each run read (so a tuning run found by searching a dir above its sweep, or by a
    glob, is known for one). RunsError (one line) for a record that cannot be read."""
    found: dict[Path, Tuned] = {}
    dirs = [d for raw in paths for d in (Path(raw), Path(raw).parent)]
    for d in [*dirs, *(r.path.parent for r in runs if r.path is not None)]:
        if any(c in str(d) for c in "*?[") or not TuningRecord.path(d).is_file() or d.resolve() in found:
            continue
        try:
            record = TuningRecord.read(d)
        except TuningRecordError as e:
            raise RunsError(str(e)) from None
        if record is not None:
            found[d.resolve()] = Tuned(d.resolve(), record)
    return list(found.values())


def split_runs(runs: list[Run], tuned: list[Tuned]) -> tuple[list[Run], list[Run]]:
    """(reported, set aside): a run inside a tuned sweep's dir is reported only when it is one of the sweep's final
    runs (its tuning runs, and any other run left there, never enter a mean); runs outside one are all reported.
    RunsError (one line) when nothing is left to compare, saying why: the final phase has not run yet (resume), the
    sweep ended without final runs (every tuning run diverged: resuming changes nothing), or the runs given are
    tuning runs (naming the sweep's final runs)."""
    if not tuned:
        return runs, []
    finals = set().union(*(t.paths(t.record.finals) for t in tuned))
    reported = [r for r in runs if r.path is None or r.path.resolve() in finals or _tuned_of(r, tuned) is None]
    set_aside = [r for r in runs if r not in reported]
    if not reported:
        raise RunsError(_nothing_to_compare(set_aside, tuned))
    return reported, set_aside


def _tuned_of(run: Run, tuned: list[Tuned]) -> Tuned | None:
    """The tuned sweep whose dir holds the run, None when none does."""
    path = run.path.resolve() if run.path is not None else None
    return next((t for t in tuned if path is not None and path.is_relative_to(t.sweep_dir)), None)


def _nothing_to_compare(set_aside: list[Run], tuned: list[Tuned]) -> str:
    t = _tuned_of(set_aside[0], tuned) if set_aside else tuned[0]
    t = t or tuned[0]
    rec = t.record
    if why := rec.no_final_runs():
        return f"tuned sweep {t.sweep_dir}: nothing to compare: {why}"
    if not rec.finals:
        return (f"tuned sweep {t.sweep_dir}: no final run yet (phase {rec.phase}); the tuning runs alone are not "
                f"compared: resume the sweep (train.resume=true) to run its final runs")
    mine = {r.path.resolve(): r for r in set_aside if r.path is not None}
    tuning = [r for r in rec.runs if (t.sweep_dir / r.run_dir).resolve() in mine]
    confirm = [r for r in rec.confirm_runs if (t.sweep_dir / r.run_dir).resolve() in mine]
    what = (f"{t.sweep_dir / tuning[0].run_dir} is a tuning run ({rec.key}={tuning[0].lr:g}, seed {tuning[0].seed})"
            if len(tuning) == 1 and not confirm else
            f"{t.sweep_dir / confirm[0].run_dir} is a confirm run ({rec.key}={confirm[0].lr:g}, seed "
            f"{confirm[0].seed}, full budget)" if len(confirm) == 1 and not tuning else
            f"these {len(set_aside)} runs are tuning runs or other runs")
    names = [r.run_dir for r in rec.finals]
    shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
    return (f"{what} of the tuned sweep {t.sweep_dir}, never compared (its seeds are not the fresh seeds): compare "
            f"the sweep dir, or its final runs: {shown}")


def protocol(runs: list[Run], tuned: list[Tuned]) -> str:
    """The label shown where the differences are: tuned (a record), else untuned with one or several lrs."""
    if tuned:
        return TUNED_PROXY if any(t.record.proxy is not None for t in tuned) else TUNED
    lrs = {r.flat.get(LR_KEY) for r in runs if r.flat}
    return UNTUNED if len(lrs) <= 1 else UNTUNED_BY_HAND


def _optimum(res: Any) -> str:
    if res.best_lr is None:
        return "none"
    return "interior" if res.edge is None else f"edge ({res.edge})"


def _counts(runs: list[Any]) -> str:
    """`3 completed, 1 diverged`: the runs' statuses in order of first appearance."""
    counts = {s: sum(r.status == s for r in runs) for s in dict.fromkeys(r.status for r in runs)}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


CONFIRM_HEAD = ["full-horizon best lr", "confirm optimum", "confirmed lrs (mean final val/loss)", "confirm runs"]


def _confirm_cells(rec: TuningRecord, arm: int, res: Any) -> list[tuple[Any, Any]]:
    """The table's confirm columns for one arm (a transferred arm shows the proxy's confirm)."""
    runs = [r for r in rec.confirm_runs if r.arm == (arm if rec.proxy is None else rec.proxy)]
    losses = point_losses(runs)
    shown = ", ".join(f"{lr:g} ({'diverged' if v == math.inf else f'{v:.4f}'})" for lr, v in losses.items()) or "—"
    best = res.confirmed_lr if res is not None else None
    where = "none" if best is None else "interior" if res.confirm_edge is None else f"edge ({res.confirm_edge})"
    return [(f"{best:g}" if best is not None else "—", best), (where, where), (shown, shown),
            (_counts(runs) or "—", len(runs))]


def tuning_table(tuned: list[Tuned]) -> Table:
    """One row per arm: best lr, interior or edge, widened points, loss spread over the grid, tuning runs; with a
    confirm phase in any record, the short-horizon best is named so and the confirm columns follow (CONFIRM_HEAD)."""
    confirm = any(t.record.confirm for t in tuned)
    head = ["arm", "short-horizon best lr" if confirm else "best lr", "optimum", "widened",
            "loss spread over the grid", "tuning runs", *(CONFIRM_HEAD if confirm else []), "note"]
    rows = []
    for t in tuned:
        rec = t.record
        for arm, label in enumerate(t.arm_labels(len(tuned) > 1)):
            res = rec.results[arm] if arm < len(rec.results) else None
            runs = [r for r in rec.runs if r.arm == arm]
            count_text = _counts(runs)
            more = _confirm_cells(rec, arm, res) if confirm else []
            if res is None:
                rows.append([(label, label), ("—", None), ("not concluded", ""), ("—", ""), ("—", None),
                             (count_text, len(runs)), *more, (f"tuning phase not finished ({rec.phase})", "")])
                continue
            widened = ", ".join(f"{v:g}" for v in res.widened) or "—"
            rows.append([(label, label), (f"{res.best_lr:g}" if res.best_lr is not None else "—", res.best_lr),
                         (_optimum(res), _optimum(res)), (widened, widened), (fmt(res.loss_spread), res.loss_spread),
                         (count_text, len(runs)), *more, (res.note, res.note)])
    return head, rows


def tuning_text(tuned: list[Tuned]) -> str:
    """The sentence above the tuning table: grid, seeds, horizon (and why the horizon matters)."""
    parts = []
    for t in tuned:
        rec = t.record
        horizon = rec.tuning_horizon
        best = "full-horizon best lr" if rec.confirm else "best lr"
        on, each = ((f" on the proxy {rec.arm_label(rec.proxy)} alone", f"every arm at the proxy's {best}")
                    if rec.proxy is not None else ("", f"each arm at its {best}"))
        whose = "its" if rec.proxy is not None else "each arm's"
        confirmed = (f", then {whose} best lr, x2 and /2 of it at the "
                     f"full budget ({horizon.get('full', '?')}) on the same seed(s) (the confirm phase; up to "
                     f"{rec.confirm_widen} more x2 step(s) beyond an end)" if rec.confirm else "")
        parts.append(f"{rec.key} over [{', '.join(f'{v:g}' for v in rec.grid)}]{on} on tuning seed(s) "
                     f"{', '.join(map(str, rec.tune_seeds))} at {rec.fraction:g} of {horizon.get('key', 'the budget')} "
                     f"({horizon.get('tuning', '?')} of {horizon.get('full', '?')}){confirmed}; the comparison above "
                     f"uses the final runs only, {each} on fresh seeds {', '.join(map(str, rec.seeds))}.")
    horizon_note = ("The final runs use the full-horizon best (the best of the confirm runs), not the short-horizon "
                    "one; a confirm edge means the full-horizon optimum may lie beyond the lrs confirmed. "
                    if any(t.record.confirm for t in tuned) else
                    "The best lr depends on the tuning horizon: at the full budget it may be lower. ")
    return (" ".join(parts) + f" {horizon_note}"
            "Best = lowest mean final val/loss over the tuning seeds; diverged = +inf; failed runs left out.")


def basin_data(tuned: list[Tuned]) -> list[dict[str, Any]]:
    """Per arm: [{label, index, key, points: [(lr, mean loss)], seeds: [(lr, loss)], diverged: [lr], best: lr |
    None, edge, grid: (lo, hi) of the declared grid}], from the records' tuning runs (final val loss, status); with a
    confirm phase also its confirm runs (_confirm_basin)."""
    out = []
    for t in tuned:
        rec = t.record
        for arm, label in enumerate(t.arm_labels(len(tuned) > 1)):
            if arm not in rec.tuned_arms:
                continue  # transferred from the proxy: no basin of its own
            runs = [r for r in rec.runs if r.arm == arm]
            means = point_losses(runs)
            res = rec.results[arm] if arm < len(rec.results) else None
            out.append({"label": label, "index": len(out), "key": rec.key,
                        "points": [(lr, v) for lr, v in means.items() if math.isfinite(v)],
                        "seeds": [(r.lr, run_loss(r)) for r in runs if run_loss(r) not in (None, math.inf)],
                        "diverged": sorted({r.lr for r in runs if r.status == RunStatus.DIVERGED or run_loss(r) == math.inf}),
                        "best": res.best_lr if res else None, "edge": res.edge if res else None,
                        "grid": (min(rec.grid), max(rec.grid)), **_confirm_basin(rec, arm, res)})
    return out


def _confirm_basin(rec: TuningRecord, arm: int, res: Any) -> dict[str, Any]:
    """basin_data's confirm keys: confirm (finite (lr, mean) of the confirm runs, full budget), confirm_diverged,
    confirmed (the full-horizon best) and confirm_edge; {} without a confirm phase."""
    if not rec.confirm:
        return {}
    means = point_losses([r for r in rec.confirm_runs if r.arm == arm])
    return {"confirm": [(lr, v) for lr, v in means.items() if math.isfinite(v)],
            "confirm_diverged": [lr for lr, v in means.items() if v == math.inf],
            "confirmed": res.confirmed_lr if res else None, "confirm_edge": res.confirm_edge if res else None}
