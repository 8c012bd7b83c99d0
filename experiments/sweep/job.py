"""The Hydra job this process runs: a single run, or one job of a multirun (a sweep). What Hydra tells it:

    hydra_runtime()          Hydra's runtime config, None outside Hydra (train(cfg) from a test or a notebook)
    is_multirun()            a job of a sweep (`-m`)?           sweep_dir()   that sweep's dir, else None
    resolve_run_dir(rc)      where the run writes: train.run_dir > Hydra's output dir > outputs/<experiment>/<time>
    run_identity(run_dir)    (run name, overrides) for summary.json and wandb: `model/pos=rope,seed=1`
    progress_label(run_dir)  the values this job sweeps, for its progress bar: `pos=rope seed=1`
    num_threads(n, ranks)    torch CPU threads per job: SLURM's cpus per task, or the CPUs shared by the sweep's
                             parallel jobs and DDP ranks, or (a single job) the CPUs no other process keeps busy
    busy_cpus()              how many CPUs other processes keep busy now (/proc/stat over 0.2 s), None off Linux

Not handled: sweepers other than Hydra's basic one for `progress_label` (an Optuna sweep has no comma lists to
read: the label then shows every override of the job). For `num_threads`: load that starts or stops after the run
has started (the count is chosen once), SMT (a busy machine's free logical CPUs may exceed its free physical cores),
and load measured where /proc/stat is missing (macOS, Windows: torch's default then).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments.compare.grouping import short_key
from experiments.config.schema import RunConfig


def hydra_runtime() -> Any | None:
    """HydraConfig of this job, None outside Hydra."""
    try:
        return HydraConfig.get()
    except ValueError:  # HydraConfig was not set: train(cfg) called directly
        return None


def is_multirun() -> bool:
    hc = hydra_runtime()
    return hc is not None and hc.mode == RunMode.MULTIRUN


def sweep_dir() -> str | None:
    """The sweep dir of the multirun job this process is running, else None."""
    return str(hydra_runtime().sweep.dir) if is_multirun() else None


def resolve_run_dir(rc: RunConfig | DictConfig) -> Path:
    """train.run_dir, else Hydra's output dir, else outputs/<experiment_name>/<time> (train() outside Hydra).
    `rc` is the RunConfig, or the composed DictConfig of a run that may not have validated (same attributes)."""
    if rc.train.run_dir:
        return Path(os.path.expanduser(rc.train.run_dir))
    hc = hydra_runtime()
    if hc is not None:
        return Path(hc.runtime.output_dir)
    return Path("outputs") / rc.experiment_name / time.strftime("%Y-%m-%d_%H-%M-%S")


def run_identity(run_dir: Path) -> tuple[str, list[str]]:
    """(run name, overrides): Hydra's job overrides when run through Hydra, else the run dir's name.

    The name leaves out the keys the sweep dir names leave out (`hydra.job.config.override_dirname.exclude_keys`:
    experiment, logger, ...), so a pos_encodings job is `model/pos=rope,seed=1`; `overrides` keeps them all.
    """
    hc = hydra_runtime()
    if hc is None:
        return run_dir.name, []
    overrides = [str(o) for o in hc.overrides.task if not o.startswith(("hydra.", "hydra/"))]
    return (",".join(_named(hc, overrides)) or run_dir.name), overrides


def _named(hc: Any, overrides: list[str]) -> list[str]:
    exclude = set(OmegaConf.select(hc, "job.config.override_dirname.exclude_keys", default=None) or [])
    return [o for o in overrides if _key(o) not in exclude]


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def swept_keys(sweep: str | os.PathLike[str]) -> list[str] | None:
    """The keys a sweep varies (comma lists / ranges on its command line or in hydra.sweeper.params, and for the tuned
    sweeper its tuned key and `seed`), read from the `multirun.yaml` Hydra's sweepers leave in the sweep dir; None
    when that cannot be read."""
    try:
        conf = OmegaConf.load(Path(sweep) / "multirun.yaml")
        params = OmegaConf.select(conf, "hydra.sweeper.params", default=None)
        params = OmegaConf.to_container(params, resolve=False) if params is not None else {}
        args = [f"{k}={v}" for k, v in params.items()] + [str(o) for o in conf.hydra.overrides.task]
        parsed = OverridesParser.create().parse_overrides(args)
        tune = OmegaConf.select(conf, "hydra.sweeper.tune", default=None)  # hydra/sweeper=tuned: lr and seed vary too
        tuned = [*tune.keys(), "seed"] if tune is not None else []
    except Exception:  # noqa: BLE001 - no multirun.yaml (another sweeper), or one we cannot parse: no label data
        return None
    return list(dict.fromkeys([*(o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()), *tuned]))


def progress_label(run_dir: Path) -> str:
    """What tells this job from the others of its sweep, short: `model/pos=alibi`, `seed=0` -> `pos=alibi seed=0`.

    In a sweep: the values of the swept keys; a single run (or a sweep whose multirun.yaml cannot be read): its
    named overrides (run_identity); outside Hydra: the run dir's name.
    """
    hc = hydra_runtime()
    if hc is None:
        return run_dir.name
    _, overrides = run_identity(run_dir)
    swept = swept_keys(hc.sweep.dir) if is_multirun() else None
    chosen = [o for o in overrides if _key(o) in swept] if swept else _named(hc, overrides)
    return " ".join(f"{short_key(_key(o).replace('/', '.'))}={o.split('=', 1)[1]}" for o in chosen if "=" in o) \
        or run_dir.name


def parallel_jobs() -> int:
    """Jobs of this sweep running at once on this machine: the joblib launcher's n_jobs (-1: one per CPU), else 1."""
    hc = hydra_runtime()
    launcher = hc.launcher if hc is not None and "launcher" in hc else None
    n_jobs = launcher.get("n_jobs") if launcher is not None else None
    if not isinstance(n_jobs, int) or n_jobs == 1:
        return 1
    return n_jobs if n_jobs > 0 else (os.cpu_count() or 1)


# A CPU counts as busy when other processes used more than this share of it on average over the probe (a shell, a
# daemon or an editor stay below it; a test suite, a compiler or another training run do not).
BUSY_SLACK = 0.25
PROBE_S = 0.2
PROC_STAT = Path("/proc/stat")


def busy_ticks(stat: str, cpus: set[int] | None = None) -> int:
    """USER_HZ ticks the CPUs of `cpus` (None: all) spent busy, summed over /proc/stat's per-CPU lines (`stat`: its
    text); idle and iowait are not busy."""
    busy = 0
    for line in stat.splitlines():
        name, *vals = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        v = [int(x) for x in vals[:8]]  # user nice system idle iowait irq softirq steal
        busy += sum(v) - v[3] - v[4]
    return busy


def busy_cpus(cpus: set[int] | None = None, probe_s: float = PROBE_S) -> int | None:
    """CPUs of `cpus` (None: all) that other processes keep busy, measured from /proc/stat over `probe_s` seconds
    (busy_by_others); None where /proc/stat cannot be read."""
    try:
        stat0, own0, t0 = PROC_STAT.read_text(), time.process_time(), time.monotonic()
        time.sleep(probe_s)
        stat1, own1, t1 = PROC_STAT.read_text(), time.process_time(), time.monotonic()
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        return busy_by_others(stat0, stat1, own1 - own0, t1 - t0, cpus, hz)
    except (OSError, ValueError, IndexError):
        return None


def busy_by_others(stat0: str, stat1: str, own_s: float, wall_s: float, cpus: set[int] | None = None,
                   hz: int = 100) -> int:
    """CPUs busy between two /proc/stat texts `wall_s` seconds apart, less this process's `own_s` CPU seconds,
    rounded up once past BUSY_SLACK: 0.2 CPUs busy -> 0, 0.3 -> 1, 1.3 -> 2."""
    others = max(0.0, ((busy_ticks(stat1, cpus) - busy_ticks(stat0, cpus)) / hz - own_s) / max(wall_s, 1e-9))
    return max(0, math.ceil(others - BUSY_SLACK))


def num_threads(requested: int | None, local_ranks: int) -> int | None:
    """Torch CPU threads for this job: `requested` (train.num_threads), else in a SLURM job its SLURM_CPUS_PER_TASK
    (a cluster without CPU binding would let each job's torch use every core of the node), else the CPUs this
    process may use divided by (parallel sweep jobs x local DDP ranks) when that is > 1, else (a single job) the CPUs
    no other process keeps busy (busy_cpus), at least 1; None (torch's default: one per physical core, or
    OMP_NUM_THREADS when set, which then wins over the load) when none is busy or the load cannot be read.

    Why the load: torch's threads wait for each other after every operator, so a thread that shares its core with
    another process holds up the rest: on a 2-core machine with one or two other busy processes, 2 threads trained
    1.7-3.4x slower than 1 (up to 25x on a machine shared with a test suite), while on an idle one they trained
    1.2-1.9x faster (tiny to medium; docs/benchmarks.md#threads-benchbench_threadspy)."""
    if requested:
        return int(requested)
    if os.environ.get("SLURM_CPUS_PER_TASK", "").isdigit():  # a SLURM job: the CPUs it asked for (cpus_per_task)
        return max(1, int(os.environ["SLURM_CPUS_PER_TASK"]))
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    n = len(cpus) if cpus is not None else (os.cpu_count() or 1)
    parallel = local_ranks * parallel_jobs()
    if parallel > 1:
        return max(1, n // parallel)
    if n <= 1 or os.environ.get("OMP_NUM_THREADS", "").strip():  # one CPU, or the user's OpenMP setting: torch's
        return None
    busy = busy_cpus(cpus)
    if not busy:  # idle (or unknown): torch's default
        return None
    return max(1, n - busy)
