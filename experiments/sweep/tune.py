"""The tuned sweep (`hydra/sweeper=tuned`): every arm at its own best learning rate, judged on fresh seeds.

    python -m experiments.train -m experiment=tuned_pos           # conf/experiment/tuned_pos.yaml declares it

Hydra instantiates the plugin hydra_plugins/archlab_tuned_sweeper (Hydra only loads plugins from that namespace);
it hands its declaration, the composed config and its launcher to `TunedSweep.run`, which:

  0. checks the declaration (tune_spec.declare: one `config error: ...` line and exit 2 before any run starts;
     `python -m experiments.train` runs the same checks in its precheck first, tune_check.py) and, on
     `train.resume=true`, that it defines the sweep <sweep dir>/tuning.json recorded (declaration and run config:
     TuningRecord.difference); a sweep dir that already holds a tuned sweep is refused without train.resume=true;
  1. tuning: every arm x grid point x tune seed, each at `tune_fraction` of the run's budget (tune_spec.horizon_override);
  2. per arm, the best lr by mean final val/loss (tune_select.py); a best point at the edge of the measured grid
     adds the next log step beyond it (up to `widen` per side), runs it and looks again; still at the edge: "edge";
  3. confirm (only with `confirm: true`, tune_confirm.py): each arm's best lr, x2 and /2 of it, at the full budget
     on the tune seeds; the arm's final lr is the best of those (the full-horizon best; an end point is widened by
     up to `confirm_widen` x2 steps, and flagged confirm_edge if still there);
  4. final: every arm with a best lr (with confirm: a full-horizon best) at that lr x the fresh `seeds`, at the
     full budget.
With `proxy` (μTransfer: one model, e.g. the narrowest under model/param=mup), steps 1-3 run for the proxy alone
and every arm's final runs use the proxy's (confirmed) best lr; a proxy that is not one of the arms is tuned and
gets no final runs. Each phase goes through `launcher.launch(batch, initial_job_idx)`, so any Hydra launcher runs
it (basic, joblib, submitit, packed). Job numbers are fixed by the plan (tuning, each widening round, confirm and
its rounds, then the final runs), so a resumed sweep maps every job to the dir it had. tuning.json
(tuning_record.py) is written before the first run, after every phase and round, and at the end.

Stopping: after each launch the sweep's stop state (experiments.run.interrupt, held by the SweepStop callback) is
read; a stopped sweep starts nothing more (the next phase never starts after a stopped tuning or confirm phase)
and SweepStop prints the resume command. A tuning or confirm run left interrupted or running without a stop (a
killed worker) also keeps the next phase from starting: the best lr would be picked on part of the points.
Failed tuning (or confirm) runs are left out of the picking (an arm with no tuning result gets no final runs, and
tuning.json and the report say so; when no arm has one, one line says why, and that a resume changes nothing when
every tuning run diverged).
A launcher error (a job whose config no longer composes, a cluster refusing a job) ends the sweep with Hydra's
error and one line with the resume command.
Resuming (`train.resume=true`, same sweep dir): a job whose dir already holds a result (completed or diverged) is
not launched again; an interrupted one continues from its checkpoint (the trainer's resume), a missing one starts.
Not handled: changing the declaration of a sweep in progress (refused: start another sweep dir), two launchers
writing one sweep dir, SLURM jobs still queued when the launcher returns (they read `not started`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.run.interrupt import release_sweep, sweep_stopped
from experiments.rundir.layout import RunDir, RunStatus
from experiments.rundir.tracking import flatten_config
from experiments.sweep.resume import sweep_resume_command
from experiments.sweep.tune_confirm import confirm_lines, confirm_plan, confirm_widening, confirmed
from experiments.sweep.tune_select import loss_spread, next_point, pick_best, point_losses
from experiments.sweep.tune_spec import SEED_KEY, TuneError, declare, horizon_override
from experiments.sweep.tuning_record import (NOT_STARTED, ArmResult, TuningRecord, TuningRecordError, TuningRun,
                                             defining)

HAS_RESULT = (RunStatus.COMPLETED, RunStatus.DIVERGED)
DONE = (*HAS_RESULT, RunStatus.FAILED)  # a tuning run that will not change by waiting (failed: left out)


@dataclass
class Job:
    idx: int                 # Hydra's job number (the `N_` of its dir)
    overrides: list[str]
    run_dir: Path
    arm: int
    lr: float
    seed: int

    def result(self, sweep_dir: Path) -> TuningRun:
        """This job as tuning.json records it, from its summary.json (status `not started` without one)."""
        s = RunDir(self.run_dir).read_summary() or {}
        loss = s.get("final_val_loss")
        return TuningRun(run_dir=_relative(self.run_dir, sweep_dir), arm=self.arm, lr=self.lr, seed=self.seed,
                         final_val_loss=loss if isinstance(loss, (int, float)) else None,
                         status=str(s.get("status") or NOT_STARTED))


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def refuse(sweep_dir: Path, error: Exception) -> None:
    """One `config error: ...` line, the sweep's stop handlers put back (SweepStop never ends), exit 2."""
    print(f"config error: {error}", file=sys.stderr, flush=True)
    release_sweep(str(sweep_dir))
    raise SystemExit(2)


class TunedSweep:
    """One tuned sweep; `declared` holds hydra.sweeper's keys as plain Python values (the plugin converts them)."""

    def __init__(self, declared: dict[str, Any], config: DictConfig, config_loader: Any, launcher: Any) -> None:
        self.declared = declared
        self.config = config
        self.config_loader = config_loader
        self.launcher = launcher
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.resume = bool(OmegaConf.select(config, "train.resume", default=False))
        self.next_idx = 0
        self.returns: list[Sequence[JobReturn]] = []

    # -- the plan -------------------------------------------------------------------------------------------------

    def plan(self, arguments: list[str]) -> TuningRecord:
        """Check the declaration and the sweep dir; the record of the sweep to run (TuneError when refused)."""
        d = declare(self.declared, arguments, self.config_loader)
        self.spec, self.fixed, arm_lines, proxy, proxy_only = d.spec, d.fixed, d.arm_lines, d.proxy, d.proxy_only
        arms = [dict(line.split("=", 1) for line in arm) for arm in arm_lines]
        self.arm_lines = arm_lines
        runs = [self._run_config(arm) for arm in arm_lines]  # each arm's final run, as composed for its job
        self.horizons = [horizon_override(run["train"], self.spec.fraction) for run in runs]
        record = TuningRecord(key=self.spec.key, grid=list(self.spec.grid), tune_seeds=list(self.spec.tune_seeds),
                              seeds=list(self.spec.seeds), fraction=self.spec.fraction, widen=self.spec.widen,
                              arms=arms, horizon=[{"key": k, "full": f, "tuning": t} for k, f, t in self.horizons],
                              proxy=None if proxy is None else arm_lines.index(proxy), proxy_only=proxy_only,
                              config=defining(flatten_config(runs[0]), self.spec.key), confirm=self.spec.confirm,
                              confirm_widen=self.spec.confirm_widen)
        self._check_sweep_dir(record)
        return record

    def _compose(self, overrides: list[str]) -> DictConfig:
        """A job's config (hydra node included), as Hydra's launchers compose it; TuneError (one line) when it does
        not compose."""
        try:
            return self.config_loader.load_sweep_config(self.config, list(overrides))
        except Exception as e:  # noqa: BLE001 - a composition error, as one line naming the overrides
            raise TuneError(f"{','.join(overrides) or 'the sweep'}: {str(e).splitlines()[0]}") from None

    def _run_config(self, arm: list[str]) -> dict[str, Any]:
        """The run config (plain, resolved, no hydra node) of the arm's final runs but for their seed and tuned key."""
        cfg = self._compose([*arm, *self._fixed(arm).values()])  # the arm's lines, then the fixed ones
        try:
            return OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
        except Exception as e:  # noqa: BLE001 - an interpolation that does not resolve, as one line
            raise TuneError(f"{','.join(arm) or 'the sweep'}: {str(e).splitlines()[0]}") from None

    def _check_sweep_dir(self, record: TuningRecord) -> None:
        try:
            earlier = TuningRecord.read(self.sweep_dir)
        except TuningRecordError as e:
            raise TuneError(f"hydra.sweep.dir: {e}; move it away or choose another hydra.sweep.dir") from None
        if earlier is None:
            return
        if not self.resume:
            raise TuneError(f"hydra.sweep.dir: {self.sweep_dir} already holds a tuned sweep ({TuningRecord.path('')}); "
                            f"continue it with train.resume=true, or choose another hydra.sweep.dir")
        changed = record.difference(earlier)
        if changed:
            k, theirs, mine = changed
            raise TuneError(f"train.resume=true: {TuningRecord.path(self.sweep_dir)} declared {k} = {theirs}, this "
                            f"command {mine}; a resume continues the same sweep: resume with its own arguments, or "
                            f"choose another hydra.sweep.dir for the changed one")

    def jobs(self, points: list[tuple[int, float, int]], tuning: bool) -> list[Job]:
        """Jobs for (arm, lr, seed) points, numbered from self.next_idx; tuning jobs train the tuning horizon."""
        out = []
        for arm, lr, seed in points:
            own = {line.split("=", 1)[0]: line for line in self.arm_lines[arm]}
            fixed = self._fixed(self.arm_lines[arm])
            if tuning:
                key, _, short = self.horizons[arm]
                (own if key in own else fixed)[key] = f"{key}={short}"
            overrides = [*own.values(), f"{self.spec.key}={lr!r}", f"{SEED_KEY}={seed}", *fixed.values()]
            run_dir = self._job_dir(overrides, self.next_idx)
            out.append(Job(self.next_idx, overrides, run_dir, arm, lr, seed))
            self.next_idx += 1
        return out

    def _job_dir(self, overrides: list[str], idx: int) -> Path:
        """The dir a launcher gives job `idx`: its config composed as the launcher composes it (each composition
        after an arm's first is a copy with the job's values: experiments.config.compose_cache), hydra.job.num and
        .id set to idx, hydra.sweep.dir / hydra.sweep.subdir resolved."""
        cfg = self._compose(overrides)
        with open_dict(cfg):
            cfg.hydra.job.id = idx
            cfg.hydra.job.num = idx
        return Path(str(OmegaConf.select(cfg, "hydra.sweep.dir"))) / str(OmegaConf.select(cfg, "hydra.sweep.subdir"))

    def _fixed(self, arm: list[str]) -> dict[str, str]:
        """The fixed overrides ({key: `key=value`}) but those the arm sets itself (a proxy may set a fixed key)."""
        own = {line.split("=", 1)[0] for line in arm}
        return {k: line for k, line in self.fixed if k not in own}

    # -- launching ------------------------------------------------------------------------------------------------

    def stopped(self) -> str | None:
        return sweep_stopped(str(self.sweep_dir))

    def launch(self, jobs: list[Job]) -> None:
        """Launch `jobs` under their own numbers; on resume, a job whose dir holds a result is not launched again
        (the rest go in runs of consecutive numbers, as launch() numbers a batch from initial_job_idx)."""
        todo = [j for j in jobs if not (self.resume and _has_result(j.run_dir))]
        segments: list[list[Job]] = []
        for j in todo:
            if segments and segments[-1][-1].idx == j.idx - 1:
                segments[-1].append(j)
            else:
                segments.append([j])
        for seg in segments:
            if self.stopped():
                return
            try:
                self.returns.append(self.launcher.launch([j.overrides for j in seg], initial_job_idx=seg[0].idx))
            except Exception:  # e.g. a job's config no longer composes: Hydra reports it; say how to continue
                print(f"[archlab] the tuned sweep stopped at a launcher error (below); once it is fixed, resume "
                      f"with: {sweep_resume_command(self.sweep_dir)}", file=sys.stderr, flush=True)
                raise

    # -- the phases -----------------------------------------------------------------------------------------------

    def run(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        try:
            record = self.plan(arguments)
            seeds_first = [(a, lr, s) for s in self.spec.tune_seeds for a in record.tuned_arms
                           for lr in self.spec.grid]
            tuning = self.jobs(seeds_first, tuning=True)
        except TuneError as e:
            refuse(self.sweep_dir, e)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")
        self._record_runs(record, tuning)
        self.launch(tuning)
        widened: list[list[float]] = [[] for _ in record.arms]
        while True:  # tuning, then widening rounds until no arm's best point is at an edge it may still widen
            self._record_runs(record, tuning)
            if not self._ready(record.runs):
                return self.returns
            record.results = self._conclude(record, widened)
            record.write(self.sweep_dir)
            extra = self._widening(record, widened)
            if not extra:
                break
            self.launch(extra)
            tuning += extra
        if record.confirm:
            self._say(record)
            if not self._confirm(record):
                return self.returns
            if record.confirm_runs:
                print("\n".join(confirm_lines(record)), file=sys.stderr, flush=True)
        finals = self.jobs([(a, record.final_lr(a), s) for s in self.spec.seeds for a in record.compared_arms
                            if record.final_lr(a) is not None], tuning=False)
        record.phase, record.finals = "final", [j.result(self.sweep_dir) for j in finals]
        record.write(self.sweep_dir)
        if not record.confirm:
            self._say(record)
        if why := record.no_final_runs():
            print(f"[archlab] the tuned sweep ends here: {why}", file=sys.stderr, flush=True)
        self.launch(finals)
        record.finals = [j.result(self.sweep_dir) for j in finals]
        if not self.stopped():
            record.phase = "done"
        record.write(self.sweep_dir)
        return self.returns

    def _record_runs(self, record: TuningRecord, tuning: list[Job], field: str = "runs") -> None:
        setattr(record, field, [j.result(self.sweep_dir) for j in tuning])
        record.write(self.sweep_dir)

    def _confirm(self, record: TuningRecord) -> bool:
        """The confirm phase (tune_confirm.py): each tuned arm's best lr and its x2 neighbours at the full budget on
        the tune seeds, then rounds beyond a confirm edge; record.results get the full-horizon bests. False when the
        phase did not end (stopped, or a run left unfinished: _ready said why)."""
        record.phase, widened, jobs = "confirm", [[] for _ in record.arms], []
        new = self.jobs(confirm_plan(record), tuning=False)
        while new:
            jobs += new
            self._record_runs(record, jobs, "confirm_runs")  # the planned runs, before they start
            self.launch(new)
            self._record_runs(record, jobs, "confirm_runs")
            if not self._ready(record.confirm_runs, "confirm"):
                return False
            record.results = confirmed(record, widened)
            record.write(self.sweep_dir)
            new = self.jobs(confirm_widening(record, widened), tuning=False)
        return True

    def _ready(self, runs: list[TuningRun], phase: str = "tuning") -> bool:
        """True when every run of the phase has ended (completed, diverged or failed) and the sweep was not stopped;
        else one line saying why the next phase does not start (a stop: SweepStop says how to resume)."""
        if self.stopped():
            return False
        waiting = [r for r in runs if RunStatus.of(r.status) not in DONE]
        if waiting:
            then = "the confirm phase" if phase == "tuning" and self.spec.confirm else "the final phase"
            print(f"[archlab] {phase} incomplete: {len(waiting)} {phase} run(s) did not end ("
                  f"{', '.join(sorted({r.status for r in waiting}))}); {then} does not start; resume with: "
                  f"{sweep_resume_command(self.sweep_dir)}", file=sys.stderr, flush=True)
            return False
        return True

    def _arm_runs(self, record: TuningRecord, arm: int) -> list[TuningRun]:
        return [r for r in record.runs if r.arm == arm]

    def _widening(self, record: TuningRecord, widened: list[list[float]]) -> list[Job]:
        """The next widening round: for each arm whose best point (record.results) is at an edge with fewer than
        `widen` points added on that side, one more point beyond it (x every tune seed)."""
        points = []
        for arm in record.tuned_arms:
            res = record.results[arm]
            below = sum(1 for v in widened[arm] if v < self.spec.grid[0])
            added = below if res.edge == "low" else len(widened[arm]) - below
            if res.edge is None or added >= self.spec.widen:
                continue
            lr = next_point(sorted([*self.spec.grid, *widened[arm]]), res.edge)
            widened[arm].append(lr)
            points += [(arm, lr, s) for s in self.spec.tune_seeds]
        return self.jobs(points, tuning=True)

    def _conclude(self, record: TuningRecord, widened: list[list[float]]) -> list[ArmResult]:
        """Each tuned arm's result from its tuning runs; with a proxy, every other arm gets the proxy's best lr."""
        tuned = {arm: self._tuned_result(record, arm, widened[arm]) for arm in record.tuned_arms}
        if record.proxy is None:
            return [tuned[arm] for arm in range(len(record.arms))]
        p = tuned[record.proxy]
        note = f"transferred from the proxy ({record.arm_label(record.proxy)})"
        if p.best_lr is None:
            note = f"{note}: {p.note}"
        transferred = ArmResult(best_lr=p.best_lr, edge=p.edge, note=note)
        return [p if arm == record.proxy else transferred for arm in range(len(record.arms))]

    def _tuned_result(self, record: TuningRecord, arm: int, widened: list[float]) -> ArmResult:
        runs = self._arm_runs(record, arm)
        losses = point_losses(runs)
        best, edge = pick_best(losses)
        note = ""
        if not losses:
            note = f"no tuning run completed ({', '.join(sorted({r.status for r in runs}))}): no final runs"
        elif best is None:
            note = "every tuning run diverged: no final runs"
        return ArmResult(best_lr=best, edge=edge, widened=list(widened), loss_spread=loss_spread(losses), note=note)

    def _say(self, record: TuningRecord) -> None:
        """One line per arm: its best lr, interior or at an edge, widened points, the loss spread."""
        h = record.tuning_horizon
        on = f" on the proxy {record.arm_label(record.proxy)}" if record.proxy is not None else ""
        print(f"[archlab] tuned {record.key}{on} at {record.fraction:g} of {h.get('key', 'the budget')} on seeds "
              f"{', '.join(map(str, record.tune_seeds))}; final runs on seeds {', '.join(map(str, record.seeds))}:",
              file=sys.stderr)
        for arm, res in enumerate(record.results):
            if arm not in record.tuned_arms:
                best = f"{res.best_lr:g}, " if res.best_lr is not None else ""
                print(f"  {record.arm_label(arm)}: {best}{res.note}", file=sys.stderr)
                continue
            where = "interior" if res.interior else f"at the {res.edge} edge" if res.best_lr is not None else res.note
            where = f"proxy{', tuning only' if record.proxy_only else ''}; {where}" if arm == record.proxy else where
            more = f", widened by {', '.join(f'{v:g}' for v in res.widened)}" if res.widened else ""
            spread = f", spread {res.loss_spread:.4f}" if res.loss_spread is not None else ""
            best = f"best {res.best_lr:g} " if res.best_lr is not None else ""
            print(f"  {record.arm_label(arm)}: {best}({where}{more}{spread})", file=sys.stderr)
        sys.stderr.flush()


def _has_result(run_dir: Path) -> bool:
    status = RunStatus.of((RunDir(run_dir).read_summary() or {}).get("status"))
    return status in HAS_RESULT
