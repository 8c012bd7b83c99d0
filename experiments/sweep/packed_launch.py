"""`hydra/launcher=packed`: a batch of sweep jobs, grouped into packs, each pack trained as one stacked model.

    launch_packed(launcher, job_overrides, initial_job_idx) -> [JobReturn per job, in job order]
    sweep_configs, rcs = compose_jobs(ctx, config, job_overrides, nums)              compose + check; ConfigError
    packs = plan_packs([pack_key(rc) ...], max_members)                               job indices per pack
    returns = run_pack(ctx, task_function, sweep_configs_of_pack, rcs_of_pack)       one pack, in this process

The three parts are separate so that hydra/launcher=slurm hydra.launcher.pack=true plans the packs on the submitting
side and runs one pack per SLURM array task (hydra_plugins/archlab_slurm_launcher, docs/cluster.md).

Every job's config is composed and checked first (as Hydra's basic launcher would compose it). Before any job
starts, a job whose knobs cannot be packed (experiments.run.pack.unpackable: dropout, attention=manual, compile,
seq2seq) stops the whole sweep with one `config error:` line and exit 2: a packed sweep never runs silently unpacked.
The valid jobs are grouped by experiments.run.pack.pack_key (equal but for seed, optim, schedule, model.init, budget
and cadence), in order of their first job, each group cut into packs of at most `max_members`. A pack of one, and a
job whose config is refused (it fails alone, recorded as a solo job's would be), run through Hydra's run_job exactly
as with the basic launcher. A larger pack: each member's job dir and `.hydra/` files are made by Hydra's run_job
(with a task that only registers the job), then experiments.run.pack.train_packed trains the members together with
each member's Hydra config current during its setup (run dir, run name). The returns carry each member's final val
loss, so the tuned sweeper and the report read packed jobs as any others.
Ctrl-C / SIGTERM: the pack in progress checkpoints every member; the later jobs record `interrupted` without
starting; the sweep's callback prints how to resume (train.resume=true), as with the other launchers.
Not handled: packs side by side on several GPUs in one command (packs run one after another; on SLURM
each pack is an array task of its own).
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from experiments.config.check import validate
from experiments.config.errors import ConfigError
from experiments.config.schema import RunConfig
from experiments.run.interrupt import RunInterrupted
from experiments.run.pack import pack_key, train_packed, unpackable

log = logging.getLogger(__name__)


def _fail(message: str) -> None:
    print(f"config error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def check_max_members(value: Any) -> int | None:
    """hydra.launcher.max_members: a positive int or null; anything else is one config-error line (exit 2)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(f"hydra.launcher.max_members: must be an int >= 1 or null, got {value!r}")
    return int(value)


def plan_packs(keys: Sequence[str | None], max_members: int | None) -> list[list[int]]:
    """Job indices grouped into packs: equal keys together, in order of first appearance, each group cut into chunks
    of at most max_members; a None key (a job that will not be packed) is a group of its own, in its place."""
    groups: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key if key is not None else ("solo", i), []).append(i)
    size = max_members or max(1, len(keys))
    return [members[s:s + size] for members in groups.values() for s in range(0, len(members), size)]


def _task_config(sweep_config: DictConfig) -> DictConfig:
    """The job's own config (what the task function receives): the sweep config without its hydra node."""
    task_cfg = copy.deepcopy(sweep_config)
    with open_dict(task_cfg):
        del task_cfg["hydra"]
    return task_cfg


def launch_packed(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """The packed launcher's launch(): see the module docstring. Hydra's current job config is as it found it after
    (as Hydra's run_job leaves it), so a later train() in this process does not read itself as one of these jobs."""
    before = HydraConfig.instance().cfg
    try:
        return _launch(launcher, job_overrides, initial_job_idx)
    finally:
        HydraConfig.instance().cfg = before


def _launch(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    setup_globals()
    config, ctx = launcher.config, launcher.hydra_context
    if launcher.unknown:
        _fail(f"hydra.launcher.{launcher.unknown[0]}: unknown key; the packed launcher takes max_members")
    max_members = check_max_members(launcher.max_members)
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    Path(str(config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
    try:
        nums = range(initial_job_idx, initial_job_idx + len(job_overrides))
        sweep_configs, rcs = compose_jobs(ctx, config, job_overrides, nums)
    except ConfigError as e:
        _fail(str(e))
    packs = plan_packs([pack_key(rc) if rc is not None else None for rc in rcs], max_members)
    log.info("Launching %d jobs as %d pack(s) of sizes %s", len(rcs), len(packs), [len(p) for p in packs])
    returns: list[JobReturn | None] = [None] * len(rcs)
    for pack in packs:
        rets = run_pack(ctx, launcher.task_function, [sweep_configs[i] for i in pack], [rcs[i] for i in pack])
        for i, ret in zip(pack, rets):
            returns[i] = ret
        configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return [r for r in returns if r is not None]


def compose_jobs(ctx: Any, config: DictConfig, job_overrides: Sequence[Sequence[str]], nums: Sequence[int],
                 job_id: Any = None) -> tuple[list[DictConfig], list[RunConfig | None]]:
    """Each job's sweep config (job num nums[i]; job id `job_id`, else its num) and its checked RunConfig (None when
    refused: it runs alone and fails as a solo job would). Raises ConfigError naming the job when a valid job's knobs
    cannot be packed. Leaves the last job's config current in HydraConfig (the caller restores it)."""
    sweep_configs: list[DictConfig] = []
    rcs: list[RunConfig | None] = []
    for idx, overrides in zip(nums, job_overrides):
        sweep_config = ctx.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = idx if job_id is None else job_id
            sweep_config.hydra.job.num = idx
        HydraConfig.instance().set_config(sweep_config)  # the job's own interpolations (${hydra:...}) resolve
        try:
            rc = validate(_task_config(sweep_config))
        except ConfigError:
            rc = None  # refused: it runs alone, and fails as a solo job would (summary.json `failed`, one line)
        if rc is not None and (why := unpackable(rc)):
            raise ConfigError(f"{why} (job #{idx})")
        sweep_configs.append(sweep_config)
        rcs.append(rc)
    return sweep_configs, rcs


def run_pack(ctx: Any, task_function: Any, sweep_configs: Sequence[DictConfig],
             rcs: Sequence[RunConfig | None]) -> list[JobReturn]:
    """One pack's jobs, their JobReturns in order: a job whose config was refused (rc None) and a pack of one through
    Hydra's run_job, as the basic launcher runs them; the others trained together (_train_pack)."""
    together = [i for i, rc in enumerate(rcs) if rc is not None]
    together = together if len(together) > 1 else []
    solo = [i for i in range(len(rcs)) if i not in together]
    rets: dict[int, JobReturn] = {}
    if together:
        for i, ret in zip(together, _train_pack(ctx, [sweep_configs[i] for i in together],
                                                [rcs[i] for i in together])):
            rets[i] = ret
    for i in solo:
        rets[i] = run_job(hydra_context=ctx, task_function=task_function, config=sweep_configs[i],
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    return [rets[i] for i in range(len(rcs))]


def _job_log_file(sweep_config: DictConfig) -> logging.Handler | None:
    """The file handler Hydra's job_logging would give this job (<job dir>/<job name>.log, its format), or None when
    job logging has no file (hydra/job_logging=disabled)."""
    filename = OmegaConf.select(sweep_config, "hydra.job_logging.handlers.file.filename", default=None)
    if not filename:
        return None
    handler = logging.FileHandler(str(filename))
    fmt = OmegaConf.select(sweep_config, "hydra.job_logging.formatters.simple.format", default=None)
    handler.setFormatter(logging.Formatter(fmt) if fmt else logging.Formatter())
    return handler


def _train_pack(ctx: Any, sweep_configs: list[DictConfig], rcs: list[Any]) -> list[JobReturn]:
    """Members trained together: each member's job dir and .hydra files by Hydra's run_job (registering only), then
    train_packed."""
    # run_job sets each config's hydra.runtime.output_dir (the job dir) and writes its .hydra/ files
    rets = [run_job(hydra_context=ctx, task_function=lambda cfg: None, config=sweep_config,
                    job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir", configure_logging=False)
            for sweep_config in sweep_configs]
    hydra_nodes, log_files = [], []
    for sweep_config in sweep_configs:
        HydraConfig.instance().set_config(sweep_config)
        hydra_nodes.append(HydraConfig.instance().cfg)
        log_files.append(_job_log_file(sweep_config))
    root = logging.getLogger()

    @contextmanager
    def member(i: int) -> Iterator[None]:
        """Member i's job is Hydra's current one (run dir, run name) and its log lines also go to its own log file."""
        HydraConfig.instance().cfg = hydra_nodes[i]
        if log_files[i] is not None:
            root.addHandler(log_files[i])
        try:
            yield
        finally:
            if log_files[i] is not None:
                root.removeHandler(log_files[i])

    names = [str(s.hydra.runtime.output_dir) for s in sweep_configs]
    try:
        outcomes: list[Any] = train_packed(rcs, member)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr, flush=True)
        outcomes = [None] * len(rets)
    except RunInterrupted as e:  # every member checkpointed; the later jobs record themselves; the callback says how
        print(f"{e}: {len(rets)} packed runs, each summary.json says so", file=sys.stderr, flush=True)
        outcomes = [None] * len(rets)
    except Exception as e:  # noqa: BLE001 - each member's summary.json says failed with the reason; the sweep goes on
        log.exception("packed runs failed; the sweep goes on")
        outcomes = [e] * len(rets)
    finally:
        for handler in log_files:
            if handler is not None:
                handler.close()
    for ret, outcome, name in zip(rets, outcomes, names):
        if isinstance(outcome, dict):
            ret.return_value = outcome.get("final_val_loss")
        else:
            if isinstance(outcome, ConfigError):
                print(f"config error: {name}: {outcome}", file=sys.stderr, flush=True)
            ret.return_value = None
        ret.status = JobStatus.COMPLETED
    return rets
