"""Run tracking: local files first (metrics.jsonl, summary.json), mirrored to wandb when asked.

API (what `experiments/run/train.py` calls):

    with Tracker(run_dir, config, logger="wandb_offline", group="pos_x_norm", name="model/pos=rope",
                 tags=["rope", "pre"], job_type="train", resume_from_step=None) as tracker:
        tracker.log({"tokens": ..., "train/loss": ...}, step=step)   # one JSON line, flushed; wandb.log
        tracker.write_summary(summary)       # a RunSummary: atomic summary.json; wandb summary
        tracker.finish(RunStatus.COMPLETED)  # or DIVERGED / FAILED / ...; __exit__ calls finish(FAILED) on an exception

* `metrics.jsonl`: one line per `log` call, `{"step": step, **metrics}` in the dict's order (a `step` key in
  `metrics` must equal `step`). Values are plain JSON; numpy/torch scalars become numbers, NaN/inf are written
  as Python's json writes them (`NaN`, `Infinity`), which `json.loads` reads back.
* Fresh start (`resume_from_step=None`): an existing `metrics.jsonl` is replaced. Resume
  (`resume_from_step=N`, N = the checkpoint's step): lines with `step > N` are dropped (they were logged after
  the checkpoint, the resumed run logs them again), as is a half-written last line; new lines are appended.
  `resume_metrics(run_dir, N)` does the same truncation without a Tracker.
* `summary.json`: a `RunSummary`, written atomically (experiments/rundir/layout.py owns the files and the write);
  `finish(status)` sets its `status` field (`finish()` / a clean `__exit__` keep the status last written, `running`
  becomes `completed`); with no summary written and none in the dir, finish writes one with only the status.
* wandb tags are `tags` plus `variant_tags(config)` (the values of model.pos.kind, model.norm, model.norm_type,
  model.activation, e.g. "rope", "pre", "layernorm", "gelu"); `auto_tags=False` keeps only `tags`.
* `flatten_config(d)` turns a nested config into dotted keys (`{"model": {"pos": {"kind": "rope"}}}` ->
  `{"model.pos.kind": "rope"}`), for tags and comparisons. wandb receives the nested dict and shows it dotted.

wandb (`logger`): "disabled" (no wandb import at all), "wandb_offline" (files in `run_dir/wandb/offline-run-*`,
upload later with `wandb sync`), "wandb_online". An environment `WANDB_MODE` (disabled|offline|online) wins
over `logger`, so `WANDB_MODE=disabled` silences every run (tests). The wandb run id is kept in
`run_dir/wandb_run_id.txt`, so a resumed run continues the same wandb run (`resume="allow"`). A new Tracker finishes
the wandb run a previous one of this process left open, unless `concurrent=True` (the members of a pack: each keeps
its own live run). Any wandb error
(import, init, log, summary, finish) is caught: one warning, wandb is switched off for the rest of the run,
the local files are complete regardless. Not handled: multi-process (DDP) logging; call it from rank 0 only.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.rundir.layout import RunDir, RunStatus, RunSummary, to_json

log = logging.getLogger(__name__)

LOGGERS = {"disabled": "disabled", "wandb_offline": "offline", "wandb_online": "online"}  # logger -> wandb mode
_ENV_MODES = {"dryrun": "offline", "run": "online"}  # legacy WANDB_MODE spellings


def _new_run_id() -> str:
    """An 8-character wandb-style run id (lowercase letters and digits)."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def _summary_for_wandb(summary: Mapping[str, Any]) -> dict[str, Any]:
    """One level of nesting flattened with "/", keeping inner keys that already carry the prefix.

    >>> _summary_for_wandb({"steps": 3, "extrap": {"extrap/sliding/loss@2x": 1.5}, "opt": {"lr": 0.1}})
    {'steps': 3, 'extrap/sliding/loss@2x': 1.5, 'opt/lr': 0.1}
    """
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, Mapping):
            for inner, v in value.items():
                out[inner if str(inner).startswith(f"{key}/") else f"{key}/{inner}"] = v
        else:
            out[key] = value
    return out


def flatten_config(d: Mapping[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> flat dict with dotted keys; lists stay values.

    >>> flatten_config({"model": {"n_layers": 2, "pos": {"kind": "rope"}}, "seed": 0})
    {'model.n_layers': 2, 'model.pos.kind': 'rope', 'seed': 0}
    """
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten_config(value, sep=sep, prefix=name))
        else:
            out[name] = value
    return out


# config keys whose values are variant names (STYLE.md §3): each becomes a wandb tag, e.g. "rope", "pre"
VARIANT_KEYS = ("model.pos.kind", "model.norm", "model.norm_type", "model.activation", "model.block", "model.qk_norm",
                "model.init")


def variant_tags(config: Mapping[str, Any], keys: Sequence[str] = VARIANT_KEYS) -> list[str]:
    """The variant names a config selects, as wandb tags (missing keys are skipped).

    >>> variant_tags({"model": {"pos": {"kind": "rope"}, "norm": "pre", "norm_type": "rmsnorm"}})
    ['rope', 'pre', 'rmsnorm']
    """
    flat = flatten_config(config)
    return [str(flat[k]) for k in keys if flat.get(k) is not None]


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """All complete lines of `run_dir/metrics.jsonl` (a half-written last line is skipped)."""
    return RunDir(run_dir).read_metrics()


def resume_metrics(run_dir: str | os.PathLike, step: int) -> int:
    """Drop the lines of `run_dir/metrics.jsonl` with `step > step` (and unparsable ones); return lines kept.

    Rewrites the file atomically; a missing file counts as empty.
    """
    return RunDir(run_dir).truncate_metrics(step)


class Tracker:
    """Local metrics/summary files plus an optional wandb run; see the module docstring."""

    def __init__(
        self,
        run_dir: str | os.PathLike,
        config: Mapping[str, Any],
        *,
        logger: str = "disabled",
        project: str = "archlab",
        group: str | None = None,
        name: str | None = None,
        tags: Sequence[str] = (),
        job_type: str = "train",
        resume_from_step: int | None = None,
        entity: str | None = None,
        init_timeout: float = 30.0,
        auto_tags: bool = True,
        concurrent: bool = False,
    ) -> None:
        if logger not in LOGGERS:
            raise ValueError(f"unknown logger {logger!r}; choose from {sorted(LOGGERS)}")
        self.run_dir = Path(run_dir)
        self.layout = RunDir(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.layout.metrics_path
        self.summary_path = self.layout.summary_path
        self.finished = False
        self._summary: RunSummary | None = None  # the last one written by this tracker
        if resume_from_step is None:
            self._metrics = open(self.metrics_path, "w")
        else:
            resume_metrics(self.run_dir, resume_from_step)
            self._metrics = open(self.metrics_path, "a")

        env_mode = os.environ.get("WANDB_MODE", "").lower()
        self.wandb_mode = _ENV_MODES.get(env_mode, env_mode) or LOGGERS[logger]  # the environment wins
        if os.environ.get("WANDB_DISABLED", "").lower() in ("1", "true", "yes"):
            self.wandb_mode = "disabled"
        self._wandb = None  # the wandb module while wandb is on
        self._run = None  # the wandb Run while wandb is on
        if self.wandb_mode != "disabled":
            self._init_wandb(
                dict(config),
                project=project,
                entity=entity,
                group=group,
                name=name,
                tags=list(dict.fromkeys([*tags, *(variant_tags(config) if auto_tags else [])])),
                job_type=job_type,
                resume=resume_from_step is not None,
                init_timeout=init_timeout,
                concurrent=concurrent,
            )

    # -- wandb ------------------------------------------------------------------------------------------------

    def _init_wandb(self, config: dict, *, resume: bool, init_timeout: float, concurrent: bool,
                    **kwargs: Any) -> None:
        try:
            import wandb

            id_path = self.layout.wandb_id_path
            run_id = id_path.read_text().strip() if resume and id_path.exists() else _new_run_id()
            id_path.write_text(run_id + "\n")
            settings = wandb.Settings(
                silent=True,
                init_timeout=init_timeout,
                console="off",  # metrics.jsonl and the Hydra log already hold the output
                x_disable_stats=True,  # no system-metrics sampler thread competing with training
                disable_git=True,
                x_save_requirements=False,
            )
            self._run = wandb.init(
                dir=self.run_dir,
                mode=self.wandb_mode,
                config=config,
                id=run_id,
                resume="allow" if resume else None,
                allow_val_change=resume,
                # one wandb run per Hydra job, also when jobs share a process one after another; the members of a
                # pack (experiments/run/pack.py) run at once, each with its own live run
                reinit="create_new" if concurrent else "finish_previous",
                settings=settings,
                **kwargs,
            )
            self._wandb = wandb
            # charts default to tokens on the x axis: depth and width differ in step time (STYLE.md §3)
            self._run.define_metric("tokens")
            for pattern in ("train/*", "val/*", "extrap/*", "attn_entropy/*", "attn_max_logit*", "act_rms/*", "grad_norm*", "lr",
                            "mfu", "tokens_per_s"):
                self._run.define_metric(pattern, step_metric="tokens")
            self._run.define_metric("val/loss", step_metric="tokens", summary="min")
        except Exception as exc:  # wandb must never stop a run
            self._wandb_failed("init", exc)

    def _wandb_failed(self, what: str, exc: BaseException) -> None:
        log.warning("wandb %s failed (%s: %s); continuing with local files only", what, type(exc).__name__, exc)
        run, self._run = self._run, None
        if run is not None:
            try:
                run.finish(exit_code=1)
            except Exception:
                pass

    @property
    def wandb_run(self) -> Any:
        """The live wandb Run, or None when wandb is off (disabled, or switched off by an error)."""
        return self._run

    # -- logging ----------------------------------------------------------------------------------------------

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Append `{"step": step, **metrics}` to metrics.jsonl (flushed) and log it to wandb at `step`."""
        if "step" in metrics and metrics["step"] != step:
            raise ValueError(f"metrics['step']={metrics['step']!r} disagrees with step={step!r}")
        row = {"step": step, **metrics}
        self._metrics.write(json.dumps(row, default=to_json) + "\n")
        self._metrics.flush()
        if self._run is not None:
            try:
                # None means N/A (e.g. extrap beyond learned positions): leave the cell empty in wandb
                self._run.log({k: v for k, v in metrics.items() if v is not None and k != "step"}, step=step)
            except Exception as exc:
                self._wandb_failed("log", exc)

    def write_summary(self, summary: RunSummary) -> None:
        """Atomically write summary.json (exactly `summary`) and update the wandb run summary."""
        self._summary = summary
        self.layout.write_summary(summary)
        if self._run is not None:
            try:
                self._run.summary.update(_summary_for_wandb(summary.to_dict()))
            except Exception as exc:
                self._wandb_failed("summary", exc)

    def finish(self, status: RunStatus | None = None) -> None:
        """Close metrics.jsonl, set summary.json's `status` and finish wandb (exit code 1 if the run ended early:
        diverged / interrupted / failed).

        `status=None` keeps the status of the last `write_summary` (`running` becomes `completed`). Idempotent:
        only the first call has an effect.
        """
        if self.finished:
            return
        self.finished = True
        try:
            self._metrics.close()
            summary = self._summary
            if summary is None and (on_disk := self.layout.read_summary()):
                summary = RunSummary.from_dict(on_disk)
            if status is None:
                kept = RunStatus.of(summary.status) if summary is not None else None
                status = kept if kept not in (None, RunStatus.RUNNING) else RunStatus.COMPLETED
            status = RunStatus(status)  # a plain string too ("failed")
            if summary is None:
                self.layout.write_summary(RunSummary(status, run_dir=str(self.run_dir)))
            elif summary.status != status:
                self.layout.write_summary(summary.with_status(status))
        finally:
            run, self._run = self._run, None
            if run is not None:
                try:
                    ended = RunStatus.of(status)  # None if finishing failed before the status was known
                    run.summary["status"] = str(status)
                    run.finish(exit_code=1 if ended is not None and ended.ended_early else 0)
                except Exception as exc:
                    log.warning("wandb finish failed (%s: %s); local files are complete", type(exc).__name__, exc)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(RunStatus.FAILED if exc_type is not None else None)
