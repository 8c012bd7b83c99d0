"""Sweeps on a real SLURM scheduler (marked `slurm`): a one-node cluster started by scripts/local_slurm.sh, jobs
submitted through `sbatch` by hydra/launcher=slurm and run under `slurmd`. No mock of sbatch/squeue anywhere.

Without root, slurm-wlm or munge (a user's laptop) these skip with the reason; CI is root and `make test` installs
the packages (`make slurm`), so there they run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from experiments.run.train import train

from .conftest import PYTHON, REPO, TINY, train_losses
from .test_slurm_check import earlier_sweep, tree

pytestmark = pytest.mark.slurm

SCRIPT = REPO / "scripts" / "local_slurm.sh"
JOB = ["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0", "hydra.launcher.cpus_per_task=1",
       "hydra.launcher.mem_gb=1"]
LONG = [*TINY, "train.steps=600", "train.eval_interval=300", "train.ckpt_interval=600", "seed=0"]


@pytest.fixture(scope="session")
def slurm_conf(tmp_path_factory) -> str:
    """SLURM_CONF of the local cluster, started here when it is not up (and stopped at the end if started here)."""
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd runs jobs as their user): run as root, as CI does")
    conf = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True).stdout.split("=", 1)[-1].strip()
    env = {**os.environ, "SLURM_CONF": conf}
    was_up = controller_running(conf)
    started = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, env=env)
    if started.returncode != 0:
        pytest.skip(f"no local SLURM cluster: {started.stderr.strip().splitlines()[-1] if started.stderr.strip() else started.returncode}")
    yield conf
    if not was_up:
        # the jobs the tests cancelled end first: stopped while one is still completing, the cluster restarts with it
        # and the next session's `start` waits ~30 s for the node (and gives up at 30 s)
        end = time.monotonic() + 60
        while squeue(env, "-t", "PD,CF,R,CG,S", "-o", "%i") and time.monotonic() < end:
            time.sleep(0.2)
        subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, env=env)


def controller_running(conf: str) -> bool:
    """Whether the cluster's slurmctld runs: the pid file beside slurm.conf names a live process, as local_slurm.sh
    checks before starting one. (`local_slurm.sh status` asks sinfo, which retries for ~9 s when a slurm.conf is left
    from an earlier session and no controller answers.)"""
    try:
        os.kill(int((Path(conf).parent / "slurmctld.pid").read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


@pytest.fixture
def slurm_env(cli_env, slurm_conf):
    return {**cli_env, "SLURM_CONF": slurm_conf}


def squeue(env: dict, *args: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, env=env)
    return out.stdout.split()


def submit(env: dict, sweep: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "experiments.train", "-m", *JOB, *overrides, f"hydra.sweep.dir={sweep}"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def sweep_jobs(sweep: Path) -> dict[str, str]:
    """{array index: SLURM job id} of the sweep's submitted jobs, from submitit's per-job folders (`<sweep>/.submitit/
    12_0/` holding 12_0_submitted.pkl; a one-job sweep is not an array: `13/`): this sweep's own, whatever else the
    cluster runs."""
    folders = [p.parent.name for p in (sweep / ".submitit").glob("*/*_submitted.pkl")
               if p.name == f"{p.parent.name}_submitted.pkl"]
    return {(f.rsplit("_", 1)[1] if "_" in f else "0"): f for f in folders}


def wait_until(check, timeout: float = 120.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def job_dir(sweep: Path, index: int = 0) -> Path:
    return next(sweep.glob(f"{index}_*"))


def summary(run_dir: Path) -> dict:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {}


def started_training(sweep: Path) -> bool:
    dirs = list(sweep.glob("0_*/metrics.jsonl"))
    return bool(dirs) and dirs[0].stat().st_size > 0


def training_pid(job: str) -> int:
    """The pid of array job `job`'s training process (the python of its srun step), found by its SLURM_* environment
    (proctrack/linuxproc has no `scontrol listpids`). The `srun` that started it has the same environment and the
    same module in its command line: killing srun makes SLURM SIGTERM the step, so it is skipped by its argv[0]
    (which of the two comes first in /proc depends on where the pids wrapped)."""
    array, task = job.split("_")
    wanted = {f"SLURM_ARRAY_JOB_ID={array}".encode(), f"SLURM_ARRAY_TASK_ID={task}".encode()}
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
            if b"submitit.core._submit" in argv and Path(argv[0].decode()).name != "srun" \
                    and wanted <= set((proc / "environ").read_bytes().split(b"\0")):
                return int(proc.name)
        except OSError:
            continue
    raise AssertionError(f"no training process of job {job}")


@pytest.mark.slow  # (~70 s; test_a_packed_task_is_requeued_and_every_member_resumes_exactly requeues by default)
def test_sweep_with_a_config_error_and_a_requeue(slurm_env, cache_dir, tmp_path, make_cfg):
    """3 jobs through sbatch, one a config error: 2 completed, 1 failed, the report, exit 1. Job 0 gets SIGUSR2
    (what SLURM sends signal_delay_s before the time limit, or a preemption): it checkpoints, reads `requeued`, is
    requeued by SLURM and resumes; its loss curve equals an uninterrupted run's, bit for bit."""
    sweep = tmp_path / "sweep"
    proc = submit(slurm_env, sweep, *LONG, f"data.cache_dir={cache_dir}", "hydra.launcher.timeout_min=60",
                  "model.n_heads=2,3,4")
    wait_until(lambda: started_training(sweep), what="job 0 to train")
    job0 = sweep_jobs(sweep)["0"]
    subprocess.run(["scancel", "--signal=USR2", job0], check=True, env=slurm_env)
    run_dir = job_dir(sweep, 0)
    wait_until(lambda: summary(run_dir).get("status") == "requeued", what="summary.json to say requeued")
    requeued = summary(run_dir)
    assert "preempted" in requeued["error"] and "requeued" in requeued["error"]  # 60 min limit: not yet a timeout
    stopped_at = requeued["steps"]
    reference = tmp_path / "reference"  # trained while job 0 waits the 5 s before SLURM starts it again
    train(make_cfg(*LONG[len(TINY):], "model.n_heads=2", run_dir=reference))
    out, err = proc.communicate(timeout=600)

    assert proc.returncode == 1, err[-3000:]
    statuses = [summary(job_dir(sweep, i)).get("status") for i in range(3)]
    assert statuses == ["completed", "failed", "completed"], err[-3000:]
    assert summary(job_dir(sweep, 1))["error"].startswith("config error: ")
    assert (sweep / "report" / "report.html").stat().st_size > 0
    assert "1 of 3 run(s) did not complete" in err and "resume them with" not in err  # a config error: no resume
    submitted = [line for line in out.splitlines() if "submitted SLURM job(s)" in line]
    assert len(submitted) == 1 and len(submitted[0].split("job(s) ")[1].split(";")[0].split()) == 3

    done = summary(run_dir)
    assert done["status"] == "completed" and done["steps"] == 600 and 0 < stopped_at < 600
    log = "".join(p.read_text() for p in (sweep / ".submitit").rglob(f"{job0}/*_log.*"))
    assert f"requeued at step {stopped_at}" in log and f"at step {stopped_at} (" in log  # restored, then went on
    assert train_losses(run_dir) == train_losses(reference) and len(train_losses(reference)) == 600
    assert done["final_val_loss"] == summary(reference)["final_val_loss"]


def test_stopped_jobs_read_interrupted_never_running(slurm_env, cache_dir, tmp_path):
    """Job 0: SIGUSR2 past max_num_timeout (a 1-minute limit makes every SIGUSR2 a timeout, submitit's rule: past
    min(0.8 x limit, limit - 10 min); max_num_timeout=0): not requeued. Job 1: `scancel` (SIGTERM: the step finishes,
    a checkpoint). Job 2: its training process SIGKILLed (as the OOM killer would): no chance to write, the launcher
    records the SLURM state. All three read `interrupted`; exit 1 with the sweep's resume command."""
    sweep = tmp_path / "sweep"
    proc = submit(slurm_env, sweep, *LONG, f"data.cache_dir={cache_dir}", "train.steps=100000", "seed=0,1,2",
                  "hydra.launcher.timeout_min=1", "hydra.launcher.signal_delay_s=5", "hydra.launcher.max_num_timeout=0")
    try:
        def training(i: int) -> bool:
            path = next(sweep.glob(f"{i}_*/metrics.jsonl"), None)
            return path is not None and path.stat().st_size > 0

        wait_until(lambda: training(0) and training(1), what="jobs 0 and 1 to train")
        jobs = sweep_jobs(sweep)
        subprocess.run(["scancel", "--signal=USR2", jobs["0"]], check=True, env=slurm_env)
        subprocess.run(["scancel", jobs["1"]], check=True, env=slurm_env)
        wait_until(lambda: training(2), what="job 2 to train")
        jobs = sweep_jobs(sweep)
        os.kill(training_pid(jobs["2"]), signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        for job in sweep_jobs(sweep).values():
            subprocess.run(["scancel", job], env=slurm_env)

    assert proc.returncode == 1, err[-3000:]
    timeout, cancelled, killed = (summary(job_dir(sweep, i)) for i in range(3))
    assert timeout["status"] == "interrupted" and "max_num_timeout=0, not requeued" in timeout["error"]
    assert any((job_dir(sweep, 0) / "checkpoints").glob("step_*"))
    assert cancelled["status"] == "interrupted" and cancelled["error"].startswith("SIGTERM at step")
    assert killed["status"] == "interrupted" and f"SLURM job {jobs['2']} ended" in killed["error"]
    assert "3 of 3 run(s) did not complete" in err
    resume = [line for line in err.splitlines() if line.startswith("[archlab] resume them with: ")]
    assert len(resume) == 1 and f"hydra.sweep.dir={sweep}" in resume[0] and resume[0].endswith("train.resume=true")


def test_ctrl_c_on_the_submitter_leaves_the_jobs_running(slurm_env, cache_dir, tmp_path):
    sweep = tmp_path / "sweep"
    proc = submit(slurm_env, sweep, *LONG, f"data.cache_dir={cache_dir}", "train.steps=100000")
    try:
        wait_until(lambda: started_training(sweep), what="the job to train")
        job = sweep_jobs(sweep)["0"]
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err[-3000:]
        assert f"keep running on the cluster: {job}" in err and f"scancel {job}" in err
        assert f"python -m experiments.compare {sweep}" in err
        assert squeue(slurm_env, "-j", job, "-o", "%T") == ["RUNNING"]
    finally:
        for job in sweep_jobs(sweep).values():
            subprocess.run(["scancel", job], env=slurm_env)


@pytest.mark.parametrize("existing", [False, True], ids=["new sweep dir", "resumed sweep dir"])
def test_sbatch_refusing_the_array_leaves_the_sweep_dir_as_it_was(existing, slurm_env, cli_env, train_cli, tmp_path):
    """partition=nosuch: sbatch refuses the array. One line with sbatch's own message, exit 1, no job queued, and the
    sweep dir as before: a new one not created (nor its parent), a resumed one byte for byte (no multirun.yaml
    rewritten, no job pickles, no run dir reading `running`)."""
    sweep = tmp_path / "sweeps" / "s"
    extra = earlier_sweep(sweep) if existing else []
    before = tree(tmp_path)
    cli_env["SLURM_CONF"] = slurm_env["SLURM_CONF"]  # the command runs in this process (conftest's train_cli)
    ran = train_cli("-m", *JOB, *TINY, "train.steps=2", "seed=0,1", "hydra.launcher.partition=nosuch",
                    f"hydra.sweep.dir={sweep}", *extra)
    err = ran.stderr

    assert ran.returncode == 1, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[archlab] sweep ")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("[archlab] sbatch refused the job array (2 job(s)), nothing was submitted"), lines
    assert "Invalid partition name specified" in lines[0] and "nosuch" in lines[0], lines
    assert tree(tmp_path) == before
    assert not any(str(sweep) in line for line in squeue(slurm_env, "-t", "all", "-o", "%o"))


# -- packed jobs (hydra.launcher.pack=true): one array task trains several runs as one stacked model ---------------

# 200 steps (~2.5 s for the pack): the stop comes a few steps in, as soon as the first metrics line is written
PACKED_RUN = ["train.steps=200", "train.eval_interval=100", "train.ckpt_interval=200"]
PACKED = [*TINY, *PACKED_RUN, "hydra.launcher.pack=true", "seed=0,1"]


def _packed_reference(make_cfg, tmp_path) -> list[Path]:
    """The two members trained as one pack without a stop, in this process (experiments/run/pack.py)."""
    from experiments.config.check import validate
    from experiments.run.pack import train_packed

    dirs = [tmp_path / f"reference{seed}" for seed in (0, 1)]
    rcs = [validate(make_cfg(*PACKED_RUN, f"seed={seed}", run_dir=d))
           for seed, d in zip((0, 1), dirs)]
    assert [o["status"] for o in train_packed(rcs)] == ["completed", "completed"]
    return dirs


def test_a_packed_task_is_requeued_and_every_member_resumes_exactly(slurm_env, cache_dir, tmp_path, make_cfg):
    """2 seeds packed into one array task; SIGUSR2 to it: both members checkpoint and read `requeued` (the same
    decision, the same step), SLURM requeues the task, and it resumes both (train.resume=true for each). Each
    member's curve: every step once, equal bit for bit to the same pack trained without a stop (a pack equals its
    members' solo runs within test_pack's bound: that is test_pack's to check)."""
    sweep = tmp_path / "sweep"
    proc = submit(slurm_env, sweep, *PACKED, f"data.cache_dir={cache_dir}", "hydra.launcher.timeout_min=60")
    wait_until(lambda: started_training(sweep), what="the packed task to train")
    jobs = sweep_jobs(sweep)
    assert len(jobs) == 1  # one task for the two jobs
    task = next(iter(jobs.values()))
    subprocess.run(["scancel", "--signal=USR2", task], check=True, env=slurm_env)
    members = [job_dir(sweep, 0), job_dir(sweep, 1)]
    wait_until(lambda: all(summary(d).get("status") == "requeued" for d in members), what="both to say requeued")
    requeued = [summary(d) for d in members]
    assert requeued[0]["steps"] == requeued[1]["steps"]
    assert all("preempted" in r["error"] and f"SLURM job {task} requeued" in r["error"] for r in requeued)
    stopped_at = requeued[0]["steps"]
    reference = _packed_reference(make_cfg, tmp_path)  # trained while the task waits to start again
    out, err = proc.communicate(timeout=600)

    assert proc.returncode == 0, err[-3000:]
    assert "2 job(s) packed into 1 SLURM array task(s) of sizes [2]" in out
    log = "".join(p.read_text() for p in (sweep / ".submitit").rglob(f"{task}/*_log.*"))
    assert log.count("packed: 2 member(s)") == 2  # the first instance, then the requeued one
    for d, ref in zip(members, reference):
        own = (d / "train.log").read_text()  # each member's own log: its stop, its restore, its end
        assert f"requeued at step {stopped_at}: {d}" in own and f"at step {stopped_at} (" in own
        assert "completed after 200 steps" in own
        done = summary(d)
        assert done["status"] == "completed" and done["steps"] == 200 and 0 < stopped_at < 200
        assert [s for s, _ in train_losses(d)] == list(range(1, 201))
        assert train_losses(d) == train_losses(ref)
        assert done["final_val_loss"] == summary(ref)["final_val_loss"]


# slow (~100 s): SIGKILL and scancel are test_stopped_jobs_read_interrupted_never_running's faults, a packed task's
# stop and exact resume of every member is test_a_packed_task_is_requeued_and_every_member_resumes_exactly's
@pytest.mark.slow
def test_packed_tasks_killed_or_cancelled_resume_every_member_exactly(slurm_env, cache_dir, tmp_path, make_cfg):
    """4 seeds in 2 packed array tasks. Task 0's training process is SIGKILLed (no chance to write: the launcher
    records the SLURM state for both its members), task 1 is cancelled (SIGTERM: both members checkpoint). All four
    read `interrupted`, exit 1; the same sweep with train.resume=true finishes each member with every step once, its
    curve equal bit for bit to the same packs trained without a stop."""
    sweep = tmp_path / "sweep"
    args = [*LONG[:-1], "hydra.launcher.pack=true", "hydra.launcher.max_members=2", "seed=0,1,2,3",
            "train.ckpt_interval=100", f"data.cache_dir={cache_dir}", "hydra.launcher.timeout_min=60"]
    proc = submit(slurm_env, sweep, *args)
    try:
        def checkpointed(i: int) -> bool:
            return any(sweep.glob(f"{i}_*/checkpoints/step_*/state.pt"))

        wait_until(lambda: all(checkpointed(i) for i in range(4)), timeout=300, what="every member to checkpoint")
        jobs = sweep_jobs(sweep)
        assert sorted(jobs) == ["0", "1"]
        os.kill(training_pid(jobs["0"]), signal.SIGKILL)
        subprocess.run(["scancel", jobs["1"]], check=True, env=slurm_env)
        out, err = proc.communicate(timeout=300)
    finally:
        for job in sweep_jobs(sweep).values():
            subprocess.run(["scancel", job], env=slurm_env)
    assert proc.returncode == 1, err[-3000:]
    assert "4 job(s) packed into 2 SLURM array task(s) of sizes [2, 2]" in out
    stopped = [summary(job_dir(sweep, i)) for i in range(4)]
    assert all(s["status"] == "interrupted" for s in stopped), stopped
    assert all(f"SLURM job {jobs['0']} ended" in s["error"] for s in stopped[:2])
    assert all(s["error"].startswith("SIGTERM at step") for s in stopped[2:])
    assert "4 of 4 run(s) did not complete" in err

    resumed = submit(slurm_env, sweep, *args, "train.resume=true")
    out, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-3000:]
    from experiments.config.check import validate
    from experiments.run.pack import train_packed

    for pack in ((0, 1), (2, 3)):
        refs = [tmp_path / f"reference{seed}" for seed in pack]
        train_packed([validate(make_cfg(*LONG[len(TINY):-1], f"seed={seed}", "train.ckpt_interval=100", run_dir=d))
                      for seed, d in zip(pack, refs)])
        for seed, ref in zip(pack, refs):
            d = job_dir(sweep, seed)
            assert summary(d)["status"] == "completed"
            assert [s for s, _ in train_losses(d)] == list(range(1, 601))
            assert train_losses(d) == train_losses(ref)


# slow (~80 s): the tuned sweeper packs through hydra/launcher=packed in the default tier (test_pack.py's
# test_tuned_sweep_packs_each_arms_tuning_grid_and_final_seeds), packed array tasks on SLURM in the requeue test above
@pytest.mark.slow
def test_a_tuned_sweep_packed_on_slurm_equals_the_packed_launcher(slurm_env, cache_dir, tmp_path):
    """hydra/sweeper=tuned with pack=true: each arm's tuning grid is one array task, then each arm's final seeds; the
    tuning record and every run's curve equal the same sweep through hydra/launcher=packed on this machine."""
    tuned = [*TINY, "train.eval_interval=3", "train.ckpt_interval=6", "train.steps=6", "hydra/sweeper=tuned",
             "hydra.sweeper.tune={optim.lr:[1e-3,3e-3,1e-2,3e-2]}", "hydra.sweeper.tune_seeds=[1000]",
             "hydra.sweeper.seeds=[0,1]", "hydra.sweeper.tune_fraction=0.5", "hydra.sweeper.widen=0",
             "model/pos=learned,rope", f"data.cache_dir={cache_dir}"]
    proc = submit(slurm_env, tmp_path / "slurm", *tuned, "hydra.launcher.pack=true")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "8 job(s) packed into 2 SLURM array task(s) of sizes [4, 4]" in out
    assert "4 job(s) packed into 2 SLURM array task(s) of sizes [2, 2]" in out
    local = subprocess.run([PYTHON, "-m", "experiments.train", "-m", *tuned, "hydra/launcher=packed",
                            f"hydra.sweep.dir={tmp_path / 'local'}"], cwd=REPO, env=slurm_env, capture_output=True,
                           text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    records = [json.loads((tmp_path / s / "tuning.json").read_text()) for s in ("slurm", "local")]
    assert records[0]["phase"] == "done" and len(records[0]["results"]) == 2
    assert records[0]["results"] == records[1]["results"] and records[0]["finals"] == records[1]["finals"]
    jobs = sorted(p.name for p in (tmp_path / "local").iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 12
    for job in jobs:
        assert train_losses(tmp_path / "slurm" / job) == train_losses(tmp_path / "local" / job)
