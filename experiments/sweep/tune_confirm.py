"""The confirm phase of a tuned sweep (`hydra.sweeper.confirm: true`, docs/tuning.md): each tuned arm's short-horizon
best lr and its neighbours at exactly x2 and /2 of it train the FULL budget on the tune seeds, and the arm's final
runs use the best of those (the full-horizon best). Pure functions over a TuningRecord (no Hydra, no files): the
tuned sweep (tune.py) plans, launches and records the runs; its tests call these too.

    confirm_points(3e-3)                     # [0.0015, 0.003, 0.006]: exactly /2 and x2, grid points or not
    points = confirm_plan(record)            # [(arm, lr, seed)]: every tuned arm with a best lr, tune seeds first
    record.results = confirmed(record, widened)   # confirmed_lr, confirm_edge, confirm_widened per arm
    more = confirm_widening(record, widened) # one more x2 step beyond a confirm edge (up to confirm_widen per side)
    confirm_lines(record)                    # what the sweep prints once the phase has ended

Picking is tuning's (tune_select.point_losses / pick_best): the lowest mean final val/loss over the tune seeds, a
diverged run (or a NaN/inf loss) +inf, a failed run left out, ties to the smaller lr. `confirm_edge` is "low" /
"high" when the full-horizon best is the lowest / highest lr confirmed: the optimum at the full budget may lie
beyond it. With `confirm_widen` > 0 the edge side gets one more point (half the lowest, twice the highest), trained
and picked again, at most confirm_widen times per side; still at the end after that, it stays flagged. An arm
whose every confirm run diverged widens downwards the same way, and has no final runs when none is left to try;
an arm with no confirm result at all (failed runs) has none either.
With a proxy (hydra.sweeper.proxy) the proxy alone is confirmed, at its own full budget, and every arm's final runs
use its full-horizon best, as they use its best lr without confirm.
Not handled: confirming on seeds other than the tune seeds, or at another factor than 2.
"""

from __future__ import annotations

from dataclasses import replace

from experiments.sweep.tune_select import pick_best, point_losses
from experiments.sweep.tuning_record import ArmResult, TuningRecord

FACTOR = 2  # the confirm neighbours: best / FACTOR and best * FACTOR (a power of 2: exact in binary floating point)


def confirm_points(best: float) -> list[float]:
    """The lrs the confirm phase trains for a short-horizon best lr, ascending.
    Example: confirm_points(0.003) -> [0.0015, 0.003, 0.006]"""
    return [best / FACTOR, best, best * FACTOR]


def confirm_plan(record: TuningRecord) -> list[tuple[int, float, int]]:
    """(arm, lr, seed) of the confirm runs: every tuned arm that has a short-horizon best, at confirm_points of it,
    on each tune seed (seed-major, as the tuning runs)."""
    arms = [a for a in record.tuned_arms if a < len(record.results) and record.results[a].best_lr is not None]
    return [(a, lr, s) for s in record.tune_seeds for a in arms for lr in confirm_points(record.results[a].best_lr)]


def _runs(record: TuningRecord, arm: int) -> list:
    return [r for r in record.confirm_runs if r.arm == arm]


def confirmed(record: TuningRecord, widened: list[list[float]]) -> list[ArmResult]:
    """record.results with each confirmed arm's full-horizon best (confirmed_lr), confirm_edge and confirm_widened
    (`widened[arm]`: the points added so far) from record.confirm_runs; with a proxy, every other arm gets the
    proxy's. An arm without a short-horizon best is left as it is (its note says why)."""
    out = list(record.results)
    for arm in record.tuned_arms:
        res = out[arm]
        if res.best_lr is None:
            continue
        runs = _runs(record, arm)
        losses = point_losses(runs)
        best, edge = pick_best(losses)
        note = res.note
        if not losses:
            note = f"no confirm run completed ({', '.join(sorted({r.status for r in runs}))}): no final runs"
        elif best is None:
            note = "every confirm run diverged at the full budget: no final runs"
        out[arm] = replace(res, confirmed_lr=best, confirm_edge=edge, confirm_widened=list(widened[arm]), note=note)
    if record.proxy is not None:
        p = out[record.proxy]
        for arm in range(len(out)):
            if arm != record.proxy:
                out[arm] = replace(out[arm], confirmed_lr=p.confirmed_lr, confirm_edge=p.confirm_edge)
    return out


def confirm_widening(record: TuningRecord, widened: list[list[float]]) -> list[tuple[int, float, int]]:
    """The next round beyond a confirm edge: for each tuned arm whose full-horizon best (record.results) is at an
    end of its confirmed lrs with fewer than confirm_widen points added on that side, one more x2 step beyond it (x
    every tune seed); `widened[arm]` gets the point. [] when no arm needs one."""
    points = []
    for arm in record.tuned_arms:
        res = record.results[arm]
        if res.best_lr is None or res.confirm_edge is None:
            continue
        side = [v for v in widened[arm] if (v < res.best_lr) == (res.confirm_edge == "low")]
        measured = sorted({r.lr for r in _runs(record, arm)})
        if len(side) >= record.confirm_widen or not measured:
            continue
        lr = measured[0] / FACTOR if res.confirm_edge == "low" else measured[-1] * FACTOR
        widened[arm].append(lr)
        points += [(arm, lr, s) for s in record.tune_seeds]
    return points


def confirm_lines(record: TuningRecord) -> list[str]:
    """The sweep's lines once the confirm phase has ended: per confirmed arm, its full-horizon best against its
    short-horizon one, interior or at an edge, the points added, the confirm losses."""
    h = record.horizon[record.tuned_arms[0]] if record.horizon else {}
    out = [f"[archlab] confirmed {record.key} at the full budget ({h.get('key', 'the budget')} {h.get('full', '?')}) "
           f"on seeds {', '.join(map(str, record.tune_seeds))}: each best, x{FACTOR} and /{FACTOR} of it; the final "
           f"runs use the full-horizon best:"]
    for arm in record.tuned_arms:
        res = record.results[arm]
        if res.best_lr is None:
            continue
        losses = point_losses(_runs(record, arm))
        shown = ", ".join(f"{lr:g}: {v:.4f}" for lr, v in losses.items())
        where = ("interior" if res.confirm_edge is None else f"at the {res.confirm_edge} edge") \
            if res.confirmed_lr is not None else res.note
        more = f", widened by {', '.join(f'{v:g}' for v in res.confirm_widened)}" if res.confirm_widened else ""
        best = f"{res.confirmed_lr:g} " if res.confirmed_lr is not None else ""
        out.append(f"  {record.arm_label(arm)}: full-horizon best {best}(short-horizon best {res.best_lr:g}; "
                   f"{where}{more}; {shown or 'no result'})")
    return out
