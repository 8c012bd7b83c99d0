"""SlurmLauncher: hydra-submitit-launcher's SLURM launcher, with the three things a sweep of archlab needs.

* Requeue that resumes: a job warned of its time limit or preempted (SIGUSR2) finishes its step, checkpoints,
  records `requeued` and requeues itself with `train.resume=true` (experiments/sweep/requeue.py). The plugin's own
  `checkpoint` resubmits the job with its first arguments, so it would start over (hydra #2042).
* Waiting that survives failed jobs: one job cancelled or killed does not end the sweep with a traceback; every job
  is waited for, one that died is recorded `interrupted` with the SLURM state, and the sweep's report and exit
  status come as with the local launchers (experiments/sweep/slurm.py).
* Ctrl-C on the submitting command leaves the jobs running and says how to cancel or collect them.
* Packing (`hydra.launcher.pack=true`, `max_members`): the jobs that differ only in seed, optim, schedule, init,
  budget or cadence are grouped on the submitting side as hydra/launcher=packed groups them
  (experiments/sweep/packed_launch.py: compose_jobs, plan_packs) and each pack is one array task that trains its
  members as one stacked model (run_pack). An unpackable knob is refused in one line (exit 2), the sweep dir as it
  was. SIGUSR2 to a packed task: every member checkpoints and records `requeued`; the requeued task resumes each
  member with train.resume=true. The returns are one per member (experiments/sweep/slurm.py: SweepJobs).
* Refusals in one line, the sweep dir as it was: setup() checks the values and that sbatch/srun/squeue exist
  (experiments/sweep/slurm_check.py, also run by the precheck: exit 2) before the sweeper writes multirun.yaml; sbatch
  refusing the array restores the sweep dir to what it held before this command (or before this batch, for a later
  batch of a tuned sweep) and exits 1 with sbatch's message (experiments/sweep/slurm.py: submit_array).

Its parameters are the plugin's (`timeout_min`, `partition`, `gpus_per_node`, `signal_delay_s`, `max_num_timeout`,
`array_parallelism`, `additional_parameters`, ...: submitit's docs apply). Hydra imports every module under
`hydra_plugins` at startup, so this one stays cheap and defines nothing when hydra-submitit-launcher is not
installed (`hydra/launcher=slurm` is then refused in one line by experiments/config/precheck.py).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, setup_globals
from omegaconf import OmegaConf, open_dict

from experiments.config.errors import ConfigError
from experiments.run.interrupt import release_sweep
from experiments.rundir.snapshot import DirSnapshot
from experiments.sweep import requeue
from experiments.sweep.slurm import SweepJobs, array_tasks, is_pack, submit_array, sweep_snapshot
from experiments.sweep.slurm_check import check_commands, check_params

try:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as _PluginSlurmLauncher

    # found by Hydra's plugin scan here: it registers hydra/launcher/archlab_slurm (pack, max_members)
    from hydra_plugins.archlab_slurm_launcher._conf import ArchlabSlurmConfRegistration  # noqa: F401
except ImportError:  # the `slurm` extra is not installed
    _PluginSlurmLauncher = None

OWN_KEYS = ("submitit_folder", "max_num_timeout", "pack", "max_members")  # not passed to submitit's executor

if _PluginSlurmLauncher is not None:

    class SlurmLauncher(_PluginSlurmLauncher):
        """hydra.launcher: the submitit_slurm parameters, pack and max_members (conf/hydra/launcher/slurm.yaml)."""

        timeouts = 0  # timeouts this job has had (set on the copy that a requeue pickles)
        _before: DirSnapshot | None = None  # the sweep dir before this command, until the first batch is submitted

        # -- in the job's process ------------------------------------------------------------------------------

        def __call__(self, sweep_overrides: list[Any], job_dir_key: str, job_num: Any, job_id: str,
                     singleton_state: dict[type, Singleton]) -> JobReturn | list[JobReturn]:
            """One job (sweep_overrides: its overrides), or one pack (a list of its members' overrides, job_num the
            list of their nums): the run(s), then the requeue if SIGUSR2 asked for one."""
            requeue.arm(self.params["timeout_min"], self.params.get("max_num_timeout") or 0, self.timeouts)
            if is_pack(sweep_overrides):
                ret: JobReturn | list[JobReturn] = self._run_pack(sweep_overrides, job_num, singleton_state)
            else:
                ret = super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
            decision = requeue.pending()
            if decision is not None:
                import submitit  # lazy, as the plugin does: only a job's process needs it

                env = submitit.JobEnvironment()
                if env.global_rank == 0:
                    nxt = self.checkpoint(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)
                    nxt.function.timeouts = self.timeouts + int(decision.timed_out)
                    nxt.set_timeout(self.params["timeout_min"],
                                    (self.params.get("max_num_timeout") or 0) - nxt.function.timeouts)
                    rets = ret if isinstance(ret, list) else [ret]
                    requeue.requeue_now(nxt, env.paths.submitted_pickle, env.job_id,
                                        [Path(str(r.hydra_cfg.hydra.runtime.output_dir)) for r in rets])
            return ret

        def _run_pack(self, members: list[list[str]], nums: list[int],
                      singleton_state: dict[type, Singleton]) -> list[JobReturn]:
            """A pack's members composed as on the submitting side and trained together (packed_launch.run_pack)."""
            import submitit

            from experiments.sweep.packed_launch import compose_jobs, run_pack

            Singleton.set_state(singleton_state)
            setup_globals()
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
            configs, rcs = compose_jobs(self.hydra_context, self.config, members, nums,
                                        job_id=submitit.JobEnvironment().job_id)
            return run_pack(self.hydra_context, self.task_function, configs, rcs)

        def checkpoint(self, sweep_overrides: list[Any], *args: Any, **kwargs: Any) -> Any:
            """The next instance of this job: the same call with train.resume=true, for every member of a pack
            (also what submitit's own SIGUSR2 handler resubmits when the signal comes before the run started)."""
            import submitit

            resumed = ([requeue.with_resume(m) for m in sweep_overrides] if is_pack(sweep_overrides)
                       else requeue.with_resume(sweep_overrides))
            return submitit.helpers.DelayedSubmission(copy.copy(self), resumed, *args, **kwargs)

        # -- in the submitting process -------------------------------------------------------------------------

        def setup(self, **kwargs: Any) -> None:
            """Hydra's sweeper calls this before it writes anything: refuse bad values / no SLURM here (one line,
            exit 2) and note what the sweep dir holds, for a refused submission to put back."""
            super().setup(**kwargs)
            sweep = str(self.config.hydra.sweep.dir)
            try:
                check_params(self.params)
                check_commands()
            except ConfigError as e:
                release_sweep(sweep)
                print(f"config error: {e}", file=sys.stderr, flush=True)
                raise SystemExit(2) from None
            self._before = sweep_snapshot(Path(sweep))

        def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
            import submitit

            assert self.config is not None and self.hydra_context is not None
            executor = submitit.AutoExecutor(cluster="slurm", folder=self.params["submitit_folder"],
                                             slurm_max_num_timeout=self.params.get("max_num_timeout") or 0)
            base = set(OmegaConf.structured(BaseQueueConf).keys())
            executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in self.params.items()
                                          if k not in OWN_KEYS})
            sweep = Path(str(self.config.hydra.sweep.dir))
            before, since = self._before, "this command"
            if before is None:  # a later batch (the tuned sweeper's next phase): what it adds goes if it is refused
                before, since = sweep_snapshot(sweep), "this batch"
            packs = self._plan_packs(job_overrides, initial_job_idx, before) if self.params.get("pack") else None
            sweep.mkdir(parents=True, exist_ok=True)
            run_dirs = []
            for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
                print(f"[archlab] #{idx}: {' '.join(filter_overrides(overrides))}", flush=True)
                run_dirs.append(self._run_dir(list(overrides), idx))
            if packs is not None:
                print(f"[archlab] {len(job_overrides)} job(s) packed into {len(packs)} SLURM array task(s) of sizes "
                      f"{[len(p) for p in packs]}", flush=True)
            params = array_tasks(job_overrides, initial_job_idx, packs, Singleton.get_state())
            self._before = None  # not pickled into the jobs; the sweep dir now holds jobs of this command
            jobs = submit_array(executor, self, params, before, since)
            print(f"[archlab] submitted SLURM job(s) {' '.join(j.job_id for j in jobs)}; their logs: "
                  f"{jobs[0].paths.folder.parent}/<job id>/", flush=True)
            return SweepJobs(jobs, job_overrides, run_dirs, str(sweep), members=packs).wait()

        def _plan_packs(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
                        before: DirSnapshot) -> list[list[int]]:
            """hydra.launcher.pack=true: every job composed and checked, grouped as hydra/launcher=packed groups
            them; a knob that cannot be packed is one `config error:` line, exit 2, the sweep dir put back."""
            from experiments.sweep.packed_launch import compose_jobs, plan_packs
            from experiments.run.pack import pack_key

            current = HydraConfig.instance().cfg
            nums = range(initial_job_idx, initial_job_idx + len(job_overrides))
            try:
                _, rcs = compose_jobs(self.hydra_context, self.config, job_overrides, nums)
            except ConfigError as e:
                before.restore()
                release_sweep(str(before.root))
                print(f"config error: {e}", file=sys.stderr, flush=True)
                raise SystemExit(2) from None
            finally:
                HydraConfig.instance().cfg = current
            return plan_packs([pack_key(rc) if rc is not None else None for rc in rcs], self.params.get("max_members"))

        def _run_dir(self, overrides: list[str], idx: int) -> Path:
            """Where job `idx` writes (hydra.sweep.dir / hydra.sweep.subdir, as Hydra's run_job resolves it)."""
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
            with open_dict(cfg.hydra.job):
                cfg.hydra.job.num = idx
            return Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
