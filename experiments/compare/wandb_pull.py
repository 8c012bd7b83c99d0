"""Pull the runs of one wandb group into `Run` records, so the report treats them like local runs.

    python -m experiments.compare --wandb-group pos_x_norm --wandb-project my-entity/archlab

Needs network access and a wandb login (`wandb login` or WANDB_API_KEY). Offline, not logged in, or with
WANDB_MODE=disabled|offline it raises RunsError with one line saying so. The records mirror what tracking.py
sends: the nested config, the summary (flattened `extrap/...` keys are folded back into `summary["extrap"]`),
and the full history (`_step` becomes `step`). Not handled: artifacts, system metrics, runs outside the group.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from experiments.compare.runs import Run, RunsError
from experiments.rundir.layout import RunStatus

WANDB_STATES = {"finished": RunStatus.COMPLETED, "crashed": RunStatus.FAILED, "failed": RunStatus.FAILED,
                "killed": RunStatus.FAILED, "running": RunStatus.RUNNING}  # wandb run state -> ours


def _unflatten(d: dict[str, Any]) -> dict[str, Any]:
    """{"model.pos.kind": "rope"} -> {"model": {"pos": {"kind": "rope"}}}; nested input is kept as is."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if str(k).startswith("_"):
            continue  # wandb's own keys (_wandb, ...)
        if isinstance(v, dict) and set(v) == {"value"}:  # the raw API form {"key": {"value": ...}}
            v = v["value"]
        node = out
        parts = str(k).split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _unflatten(v) if isinstance(v, dict) else v
    return out


def run_from_wandb(wr: Any, history: Iterable[dict[str, Any]] | None = None) -> Run:
    """One wandb API run (`wandb.apis.public.Run`) -> Run. `history` defaults to `wr.scan_history()`."""
    config = _unflatten(dict(wr.config))
    raw = getattr(wr.summary, "_json_dict", None)
    summary = {k: v for k, v in dict(raw if raw is not None else wr.summary).items() if not str(k).startswith("_")}
    extrap = {k: v for k, v in summary.items() if str(k).startswith("extrap/")}
    if extrap and not isinstance(summary.get("extrap"), dict):
        summary["extrap"] = extrap
    if RunStatus.of(summary.get("status")) is None:
        summary["status"] = WANDB_STATES.get(getattr(wr, "state", ""), RunStatus.FAILED)
    metrics = []
    for row in history if history is not None else wr.scan_history():
        line = {k: v for k, v in row.items() if not str(k).startswith("_")}
        line.setdefault("step", row.get("_step"))
        metrics.append(line)
    return Run(path=None, config=config, summary=summary, metrics=metrics, name=str(wr.name),
               source=f"wandb:{'/'.join(getattr(wr, 'path', []) or [])}")


def pull_runs(group: str, project: str | None) -> list[Run]:
    """Every run of wandb `group` in `project` ("entity/project" or "project"); RunsError when unreachable."""
    if not project:
        raise RunsError("--wandb-group needs --wandb-project (entity/project)")
    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("disabled", "offline", "dryrun"):
        raise RunsError(f"cannot pull wandb group {group!r}: WANDB_MODE={mode} (unset it and run `wandb login`)")
    try:
        import wandb

        api = wandb.Api(timeout=30)
        runs = list(api.runs(project, filters={"group": group}))
        records = [run_from_wandb(wr) for wr in runs]
    except RunsError:
        raise
    except Exception as e:  # noqa: BLE001 - network / auth / unknown project: one line, no traceback
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise RunsError(f"cannot pull wandb group {group!r} from {project!r} (offline or not logged in?): {first}") from None
    if not records:
        raise RunsError(f"wandb group {group!r} in {project!r} has no runs")
    return records
