"""Which device a run gets: a device that does not exist is one line (ConfigError), and the jobs of a parallel
sweep on a machine with several GPUs each get their own (a slot per live worker process, modulo the GPU count).
The GPU count is faked (torch.cuda patched at the place of use), so this runs on any machine."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch

from experiments.config.errors import ConfigError
from experiments.run import distributed
from experiments.run.distributed import DistInfo, pick_device

from .conftest import PYTHON, REPO


def fake_gpus(monkeypatch, n: int, mps: bool = False) -> None:
    monkeypatch.setattr(distributed.torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(distributed.torch.cuda, "device_count", lambda: n)
    monkeypatch.setattr(distributed.torch.backends.mps, "is_available", lambda: mps)


@pytest.mark.parametrize(("pref", "gpus", "mps"), [
    ("cuda:7", 1, False), ("cuda:2", 2, False), ("cuda:0", 0, False), ("cuda", 0, False), ("mps", 0, False),
    ("banana", 0, False), ("cuda:x", 2, False), ("xpu", 1, False), ("meta", 0, False), ("", 0, False),
])
def test_a_device_that_does_not_exist_is_one_line(monkeypatch, pref, gpus, mps):
    fake_gpus(monkeypatch, gpus, mps)
    with pytest.raises(ConfigError) as e:
        pick_device(pref, DistInfo())
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"train.device={pref}:"), msg
    assert "train.device=auto" in msg or "choose" in msg, msg


@pytest.mark.parametrize(("pref", "gpus", "mps", "want"), [
    ("auto", 0, False, "cpu"), ("auto", 0, True, "mps"), ("auto", 2, True, "cuda:0"), ("cpu", 2, False, "cpu"),
    ("cuda", 3, False, "cuda:0"), ("cuda:2", 3, False, "cuda:2"), ("mps", 0, True, "mps"),
])
def test_a_device_that_exists_is_used(monkeypatch, pref, gpus, mps, want):
    fake_gpus(monkeypatch, gpus, mps)
    assert str(pick_device(pref, DistInfo())) == want


@pytest.mark.parametrize("gpus", [1, 2, 3, 4])
def test_ddp_ranks_take_their_local_gpu(monkeypatch, gpus):
    fake_gpus(monkeypatch, gpus)
    got = [str(pick_device("cuda", DistInfo(rank=r, world_size=4, local_rank=r, local_world_size=4))) for r in range(4)]
    assert got == [f"cuda:{r % gpus}" for r in range(4)]


# ------------------------------------------------------------------------------------------ parallel sweep jobs

WORKER = """
import sys, time
from pathlib import Path
from experiments.run import distributed
distributed.torch.cuda.is_available = lambda: True
distributed.torch.cuda.device_count = lambda: int(sys.argv[1])
print(distributed.pick_device(sys.argv[2], distributed.DistInfo(), parallel=True), flush=True)
stop = Path(sys.argv[3])
while not stop.exists():  # a joblib worker lives on between jobs, holding its slot
    time.sleep(0.02)
print(distributed.pick_device(sys.argv[2], distributed.DistInfo(), parallel=True), flush=True)  # its next job
"""


def _worker(gpus: int, pref: str, stop) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-c", WORKER, str(gpus), pref, str(stop)], cwd=REPO, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "TMPDIR": str(stop.parent)})


@pytest.mark.parametrize(("gpus", "workers", "pref"), [(2, 4, "cuda"), pytest.param(4, 4, "auto", marks=pytest.mark.slow),
                                                       pytest.param(3, 5, "auto", marks=pytest.mark.slow)])
def test_parallel_sweep_jobs_get_their_own_gpu(tmp_path, gpus, workers, pref):
    stops = [tmp_path / f"stop_{i}" for i in range(workers + 1)]
    procs = [_worker(gpus, pref, stops[i]) for i in range(workers)]
    firsts = [p.stdout.readline().strip() for p in procs]  # all alive at once: each holds a slot
    # each GPU serves floor or ceil of workers / gpus workers: the slots 0..workers-1, modulo the GPU count
    assert sorted(firsts) == sorted(f"cuda:{i % gpus}" for i in range(workers))
    # a worker keeps its GPU for its next job; one that exits frees its slot (and GPU) for a new worker
    stops[1].touch()
    assert procs[1].stdout.readline().strip() == firsts[1]
    assert procs[1].wait(timeout=60) == 0
    newcomer = _worker(gpus, pref, stops[workers])
    assert newcomer.stdout.readline().strip() == firsts[1]
    for s in stops:
        s.touch()
    for p in [*procs, newcomer]:
        p.wait(timeout=60)


def test_a_single_process_or_a_cpu_run_claims_no_slot(monkeypatch, tmp_path):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    fake_gpus(monkeypatch, 4)
    assert str(pick_device("cuda", DistInfo())) == "cuda:0"  # not a parallel sweep: the first GPU, as before
    fake_gpus(monkeypatch, 0)
    assert str(pick_device("auto", DistInfo(), parallel=True)) == "cpu"
    assert list(tmp_path.iterdir()) == []
