"""hydra/launcher=slurm hydra.launcher.pack=true without a scheduler: the array tasks a planned sweep submits, what
the submitter reads back from a packed task (one return per member, every member recorded when the task died), the
next instance a requeued packed task runs, and the refusals before anything is written. The same paths under a real
scheduler (SIGUSR2, SIGKILL, scancel, resume): test_slurm.py's packed tests."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.core.utils import JobReturn, JobStatus

from experiments.sweep import slurm
from experiments.sweep.packed_launch import plan_packs
from experiments.sweep.slurm import SweepJobs, array_tasks, is_pack

from .test_slurm_check import _bin, earlier_sweep, one_error_line, sweep_argv, tree

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the slurm extra: pip install -e '.[slurm]'")

STATE = {"singleton": "state"}


# -- planning: one array task per pack ----------------------------------------------------------------------------

def test_each_pack_is_one_array_task_carrying_its_members():
    jobs = [["seed=0", "optim.lr=1e-3"], ["seed=0", "model.d_model=64"], ["seed=1", "optim.lr=1e-3"], ["seed=2"]]
    packs = plan_packs(["a", "b", "a", "a"], 2)
    assert packs == [[0, 2], [3], [1]]
    tasks = array_tasks(jobs, 10, packs, STATE)
    assert tasks == [
        ([["seed=0", "optim.lr=1e-3"], ["seed=1", "optim.lr=1e-3"]], "hydra.sweep.dir", [10, 12], "job_id_for_10",
         STATE),
        (["seed=2"], "hydra.sweep.dir", 13, "job_id_for_13", STATE),            # a pack of one: a plain job
        (["seed=0", "model.d_model=64"], "hydra.sweep.dir", 11, "job_id_for_11", STATE),
    ]
    assert [is_pack(t[0]) for t in tasks] == [True, False, False]


def test_without_packs_each_job_is_its_own_task_as_before():
    jobs = [["seed=0"], ["seed=1"]]
    assert array_tasks(jobs, 0, None, STATE) == [(["seed=0"], "hydra.sweep.dir", 0, "job_id_for_0", STATE),
                                                 (["seed=1"], "hydra.sweep.dir", 1, "job_id_for_1", STATE)]


def test_a_requeued_packed_task_resumes_every_member():
    """The next instance a packed task writes before `scontrol requeue`: the same call, train.resume=true added to
    each member's overrides (an earlier train.resume=false replaced)."""
    from hydra_plugins.archlab_slurm_launcher.slurm_launcher import SlurmLauncher

    launcher = SlurmLauncher(timeout_min=60, max_num_timeout=3, pack=True, max_members=2)
    nxt = launcher.checkpoint([["seed=0", "train.resume=false"], ["seed=1"]], "hydra.sweep.dir", [4, 5], "j", STATE)
    assert nxt.args[0] == [["seed=0", "train.resume=true"], ["seed=1", "train.resume=true"]]
    assert nxt.args[1:] == ("hydra.sweep.dir", [4, 5], "j", STATE)
    solo = launcher.checkpoint(["seed=0"], "hydra.sweep.dir", 4, "j", STATE)
    assert solo.args[0] == ["seed=0", "train.resume=true"]


# -- the submitter reading packed tasks back ----------------------------------------------------------------------

def _job(folder: Path, job_id: str) -> SimpleNamespace:
    return SimpleNamespace(job_id=job_id, paths=SimpleNamespace(result_pickle=folder / f"{job_id}_result.pkl"))


def _ret(overrides: list[str], value: float) -> JobReturn:
    ret = JobReturn(overrides=overrides, working_dir="")
    ret.status, ret.return_value = JobStatus.COMPLETED, value
    return ret


def _status(run_dir: Path) -> str:
    return json.loads((run_dir / "summary.json").read_text())["status"]


def test_packed_tasks_give_one_return_per_member_in_job_order(tmp_path, monkeypatch):
    """SLURM job 0 packs sweep jobs 0 and 2 and returned both; job 1 (job 1 alone) and job 2 (a pack of 3 and 4)
    ended CANCELLED without a result: each of their runs still `running` reads `interrupted` with the SLURM state,
    a member that had completed keeps `completed`; a pack whose result does not hold one return per member fails
    every member."""
    overrides = [[f"seed={i}"] for i in range(7)]
    run_dirs = [tmp_path / f"run{i}" for i in range(7)]
    for d, status in zip(run_dirs, ["completed", "running", "completed", "completed", "running", "running",
                                    "running"]):
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"status": status, "run_dir": str(d)}))
    jobs = [_job(tmp_path, f"9_{k}") for k in range(4)]
    with open(jobs[0].paths.result_pickle, "wb") as f:
        pickle.dump(("success", [[_ret(["seed=0"], 0.5), _ret(["seed=2"], 0.7)]]), f)
    with open(jobs[3].paths.result_pickle, "wb") as f:
        pickle.dump(("success", [[_ret(["seed=5"], 0.1)]]), f)  # 1 return for a pack of 2
    monkeypatch.setattr(slurm, "squeue_states", lambda ids: {i: "CANCELLED" for i in ids})
    returns = SweepJobs(jobs, overrides, run_dirs, str(tmp_path), members=[[0, 2], [1], [3, 4], [5, 6]]).wait(
        poll_s=0.0)

    assert len(returns) == 7
    assert [r.return_value for r in returns[:3]] == [0.5, None, 0.7]
    assert [r.overrides for r in returns] == overrides
    assert [r.working_dir for r in returns[3:]] == [str(d) for d in run_dirs[3:]]
    assert [_status(d) for d in run_dirs] == ["completed", "interrupted", "completed", "completed", "interrupted",
                                             "failed", "failed"]
    for i in (1, 4):
        error = json.loads((run_dirs[i] / "summary.json").read_text())["error"]
        assert f"SLURM job 9_{1 if i == 1 else 2} ended CANCELLED without a result" in error


def test_a_result_is_seen_at_the_next_poll_while_squeue_backs_off(tmp_path, monkeypatch):
    """The result file is read every poll_s; squeue only ever more rarely (x1.25 a time, capped at max_poll_s). On a
    fake clock: the job's result appears at t = 30 s, and the return is taken at the poll at t = 30, not at the next
    squeue; squeue was asked at t = 0, then at gaps that never shrink, from 1 s to at most 10 s (+ one poll)."""
    clock = {"t": 0.0}
    monkeypatch.setattr(slurm.time, "monotonic", lambda: clock["t"])
    asked = []
    monkeypatch.setattr(slurm, "squeue_states", lambda ids: (asked.append(clock["t"]), {i: "RUNNING" for i in ids})[1])
    job = _job(tmp_path, "7_0")

    def sleep(self, seconds):
        clock["t"] += seconds
        if clock["t"] >= 30 and not job.paths.result_pickle.exists():
            with open(job.paths.result_pickle, "wb") as f:
                pickle.dump(("success", [_ret(["seed=0"], 0.25)]), f)
            sleeps.append(clock["t"])

    sleeps = []
    monkeypatch.setattr(SweepJobs, "_sleep", sleep)
    run = tmp_path / "run0"
    run.mkdir()
    (returned,) = SweepJobs([job], [["seed=0"]], [run], str(tmp_path)).wait(poll_s=1.0, max_poll_s=10.0)

    assert returned.return_value == 0.25 and sleeps == [30.0] and clock["t"] == 30.0  # read at once, not at a squeue
    gaps = [b - a for a, b in zip(asked, asked[1:])]
    assert asked[0] == 0.0 and gaps[0] == 1.0 and all(1.0 <= g <= 11.0 for g in gaps), asked
    assert gaps == sorted(gaps) and gaps[-1] > 2.0 and len(asked) < 30 / 2, asked


def test_members_must_cover_every_job_once(tmp_path):
    with pytest.raises(AssertionError):
        SweepJobs([_job(tmp_path, "1")], [["a"], ["b"]], [tmp_path / "a", tmp_path / "b"], str(tmp_path),
                  members=[[0, 0]])


# -- refusals before anything is written --------------------------------------------------------------------------

def _stand_ins(folder: Path) -> Path:
    """sbatch, srun, squeue that only record that they were called."""
    for name in ("sbatch", "srun", "squeue"):
        _bin(folder, name, f"touch {folder / (name + '.called')}; exit 1")
    return folder


def _argv(sweep: Path, *extra: str) -> list[str]:
    return sweep_argv(sweep, "hydra.launcher.pack=true", *extra)


@pytest.mark.parametrize("existing", [False, True], ids=["new sweep dir", "resumed sweep dir"])
def test_an_unpackable_knob_is_refused_before_any_submission(existing, train_cli, cli_env, tmp_path):
    """pack=true with model.dropout=0.1: hydra/launcher=packed's line, exit 2, nothing submitted (sbatch never
    called) and the sweep dir as it was (a new one not created, a resumed one byte for byte)."""
    bin_dir = _stand_ins(tmp_path / "bin")
    cli_env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    sweep = tmp_path / "sweeps" / "s"
    extra = earlier_sweep(sweep) if existing else []
    before = tree(tmp_path / "sweeps") if existing else None
    ran = train_cli(*_argv(sweep, "model.dropout=0.1", *extra))

    assert ran.returncode == 2, ran.stderr[-2000:]
    assert one_error_line(ran.stderr) == ("config error: model.dropout=0.1 cannot be packed: a packed member cannot "
                                          "draw its solo run's dropout masks; use model.dropout=0 or another "
                                          "launcher (job #0)")
    assert not (bin_dir / "sbatch.called").exists()
    if existing:
        assert tree(tmp_path / "sweeps") == before
    else:
        assert not (tmp_path / "sweeps").exists()


@pytest.mark.parametrize("via_main", [False, True], ids=["precheck", "launcher setup"])
def test_a_bad_max_members_is_one_line(via_main, train_cli, cli_env, tmp_path):
    cli_env["PATH"] = f"{_stand_ins(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"
    sweep = tmp_path / "sweep"
    ran = train_cli(*_argv(sweep, "hydra.launcher.max_members=0"), via_main=via_main)
    assert ran.returncode == 2
    assert one_error_line(ran.stderr) == ("config error: hydra.launcher.max_members: must be an integer >= 1 or "
                                          "null, got 0")
    assert not sweep.exists()
