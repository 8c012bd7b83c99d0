"""DDP across nodes, simulated on this one machine.

* `torchrun --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d` (two agents, one per "node", meeting at node 0's
  rendezvous) trains exactly the loss curve of `torchrun --standalone --nproc_per_node 2` and of one process at
  the same global batch; so does (slow) an srun step on 2 nodes x 1 task (the variables srun sets, by hand);
* the SLURM host-list parser against hand-written cases and against `scontrol show hostnames`;
* env_info() on a hand-made SLURM environment of 2 nodes x 1 task.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest

from experiments.config.errors import ConfigError
from experiments.run import distributed
from experiments.run.train import train

from .conftest import PYTHON, REPO, TINY

# the epoch sampler: ranks take disjoint slices of one shuffled order, so one process with grad_accum=2 draws the
# same windows (module docstring of experiments/data/epochs.py); the random sampler draws per-rank streams
STEPS = ["train.steps=3", "train.sampler=epoch"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def curve(run_dir: Path) -> tuple[list[float], float]:
    """(every train/loss of metrics.jsonl, in order; summary.json's final_val_loss) of a completed run."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    return [r["train/loss"] for r in rows if "train/loss" in r], summary["final_val_loss"]


def one_process(make_cfg, tmp_path: Path) -> tuple[list[float], float]:
    """The reference at the same global batch: one process, batch 4, grad_accum=2 (the curve of rank 0 + rank 1).

    Its micro-batches 2s and 2s+1 are the batches ranks 0 and 1 draw at step s, its summed gradient g0/2 + g1/2
    is DDP's (g0 + g1)/2 (halving is exact), so weights and val loss are equal bit for bit; its logged loss is
    float32(l0 + l1) / 2 where DDP's mean over ranks adds in float64, so DDP's curve is compared rounded to float32.
    Running it first also fills the session's tokenizer / token cache before the subprocesses start."""
    train(make_cfg(*STEPS, "train.grad_accum=2", run_dir=tmp_path / "one_process"))
    return curve(tmp_path / "one_process")


def as_float32(c: tuple[list[float], float]) -> tuple[list[float], float]:
    return [float(np.float32(x)) for x in c[0]], c[1]


def run_all(commands: list[tuple[list[str], dict[str, str]]]) -> None:
    """Start every (argv, env) side by side in the repo, wait for all; each must exit 0 (else all are killed)."""
    procs = [subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for argv, env in commands]
    try:
        for p in procs:
            out, _ = p.communicate(timeout=300)
            assert p.returncode == 0, out[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.slow  # (~20 s: two torchrun nodes; test_ddp.py's two ranks keep DDP in the default suite)
def test_two_nodes_train_the_curve_of_one_node_and_of_one_process(make_cfg, cli_env, cache_dir, tmp_path):
    """Bit for bit on the CPU: 2 nodes x 1 process == 1 node x 2 processes == 1 process at the same global batch.

    Run dirs: every process resolves its own (here hydra.run.dir, a different one per node), but the run dir is
    rank 0's, broadcast to the others; rank 1 writes nothing there, and Hydra leaves only `.hydra/` and
    `train.log` in its own. Which node gets rank 0 is the c10d rendezvous's choice (it sorts the agents by
    address, then pid), not necessarily the rendezvous host: on a cluster give every node the same hydra.run.dir on
    a shared filesystem. --local_addr 127.0.0.1: the address the agents advertise (the workers' MASTER_ADDR is
    rank 0's), so the test does not depend on this machine's host name resolving.
    """
    torchrun = Path(PYTHON).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun not found next to the interpreter")
    reference = one_process(make_cfg, tmp_path)
    args = ["-m", "experiments.train", *TINY, *STEPS, f"data.cache_dir={cache_dir}"]
    rdzv = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
            f"localhost:{free_port()}", "--rdzv_id", "two_nodes", "--local_addr", "127.0.0.1"]
    nodes, one_node = [tmp_path / "node0", tmp_path / "node1"], tmp_path / "one_node"
    run_all([([str(torchrun), *rdzv, "--rdzv_conf", f"is_host={int(i == 0)},join_timeout=120", *args,
               f"hydra.run.dir={nodes[i]}"], cli_env) for i in range(2)]
            + [([str(torchrun), "--standalone", "--nproc_per_node", "2", *args, f"hydra.run.dir={one_node}"],
                cli_env)])

    main = [d for d in nodes if (d / "metrics.jsonl").exists()]
    assert len(main) == 1  # rank 0's dir holds the run
    other = next(d for d in nodes if d != main[0])
    assert sorted(p.name for p in other.iterdir()) == [".hydra", "train.log"]  # rank 1's: what Hydra writes
    two_nodes = curve(main[0])
    assert len(two_nodes[0]) == 3
    assert two_nodes == curve(one_node)
    assert as_float32(two_nodes) == reference


@pytest.mark.slow
def test_an_srun_step_on_two_nodes_trains_the_curve_of_one_process(make_cfg, cli_env, tmp_path):
    """`srun --nodes 2 --ntasks-per-node 1 python -m experiments.train ...`, with the variables srun would set by
    hand: MASTER_ADDR comes from SLURM_STEP_NODELIST alone (its first host, here localhost), the port from
    MASTER_PORT (set here to a free one; srun leaves it to 20000 + SLURM_JOB_ID mod 20000)."""
    reference = one_process(make_cfg, tmp_path)
    run_dir = tmp_path / "srun"
    step = {k: v for k, v in cli_env.items() if not k.startswith("SLURM_") and k not in ("MASTER_ADDR", "RANK")}
    step.update({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2",
                 "SLURM_NTASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_LOCALID": "0",
                 "SLURM_STEP_NODELIST": "localhost,node[2]", "MASTER_PORT": str(free_port())})
    argv = [PYTHON, "-m", "experiments.train", *TINY, *STEPS, f"data.cache_dir={cli_env['ARCHLAB_CACHE']}",
            f"hydra.run.dir={run_dir}"]
    run_all([(argv, {**step, "SLURM_PROCID": str(i), "SLURM_NODEID": str(i)}) for i in range(2)])
    assert json.loads((run_dir / "summary.json").read_text())["world_size"] == 2
    assert as_float32(curve(run_dir)) == reference


# -- SLURM host lists ------------------------------------------------------------------------------------------

HOSTLISTS = {
    "gpu5": ["gpu5"],
    "node[01-03,07],gpu5": ["node01", "node02", "node03", "node07", "gpu5"],
    "n[8-11]": ["n8", "n9", "n10", "n11"],
    "n[008-010]": ["n008", "n009", "n010"],
    "n[1-010]": ["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"],  # the width is the first bound's
    "a[1-2]b[3-4],c": ["a1b3", "a1b4", "a2b3", "a2b4", "c"],
    "rack[0-1]-node[09-10]": ["rack0-node09", "rack0-node10", "rack1-node09", "rack1-node10"],
    "x[3],y[1,5-6],,z": ["x3", "y1", "y5", "y6", "z"],
    "127.0.0.[1-2]": ["127.0.0.1", "127.0.0.2"],
}


@pytest.mark.parametrize("spec", HOSTLISTS)
def test_expand_hostlist_by_hand(spec):
    assert distributed.expand_hostlist(spec) == HOSTLISTS[spec]


def test_expand_hostlist_as_scontrol_does(tmp_path):
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        pytest.skip("scontrol not installed")
    conf = tmp_path / "slurm.conf"  # `scontrol show hostnames` reads no cluster, but refuses to start without a conf
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n")
    for spec in HOSTLISTS:
        out = subprocess.run([scontrol, "show", "hostnames", spec], env={"SLURM_CONF": str(conf)},
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert distributed.expand_hostlist(spec) == out.stdout.split(), spec


@pytest.mark.parametrize("spec", ["node[01-", "node[a-b]", "", "node[3-1]", "n[1,]", "n[1-2]]"])
def test_a_bad_hostlist_is_one_config_error(spec):
    with pytest.raises(ConfigError, match="host list"):
        distributed.expand_hostlist(spec)


def test_first_host_asks_scontrol_when_it_answers(tmp_path, monkeypatch):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho from-scontrol\necho other\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert distributed.first_host("node[01-02]") == "from-scontrol"
    fake.write_text("#!/bin/sh\necho 'scontrol: fatal: Could not establish a configuration source' >&2\nexit 1\n")
    assert distributed.first_host("node[01-02]") == "node01"  # a failing scontrol: the parser
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert distributed.first_host("node[07-08]") == "node07"  # no scontrol: the parser


# -- env_info under an srun step ----------------------------------------------------------------------------------

STEP_2x1 = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2", "SLURM_STEP_NUM_NODES": "2",
            "SLURM_NTASKS": "2", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_LOCALID": "0",
            "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_STEP_NODELIST": "gpu[07-08]"}


@pytest.fixture
def step_env(monkeypatch):
    """An environment without torchrun's or SLURM's variables; set(name=value, ...) adds some. Every key is set
    before it is removed, so monkeypatch restores what env_info writes into os.environ (MASTER_ADDR / _PORT)."""
    for key in [k for k in os.environ if k.startswith("SLURM_")] + [
            "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", "/nonexistent")  # the parser, not this machine's scontrol

    def set_(**values: str) -> None:
        for k, v in values.items():
            monkeypatch.setenv(k, v)

    return set_


@pytest.mark.parametrize("rank", [0, 1])
def test_env_info_two_nodes_one_task_each(step_env, rank):
    step_env(**STEP_2x1, SLURM_PROCID=str(rank), SLURM_NODEID=str(rank))
    info = distributed.env_info()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (rank, 2, 0, 1)
    assert os.environ["MASTER_ADDR"] == "gpu07"
    assert os.environ["MASTER_PORT"] == str(20000 + 4242)


def test_env_info_step_nodes_before_job_nodes(step_env):
    """A step on part of the allocation: rank 0 runs on the step's first node."""
    step_env(**{**STEP_2x1, "SLURM_JOB_NODELIST": "gpu[01-08]"}, SLURM_PROCID="1", SLURM_NODEID="1")
    distributed.env_info()
    assert os.environ["MASTER_ADDR"] == "gpu07"


def test_env_info_keeps_a_master_addr_set_by_hand(step_env):
    step_env(**STEP_2x1, SLURM_PROCID="0", SLURM_NODEID="0", MASTER_ADDR="10.0.0.5", MASTER_PORT="1234")
    assert distributed.env_info().world_size == 2
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("10.0.0.5", "1234")


def test_env_info_uneven_tasks_per_node(step_env):
    """3 tasks on 2 nodes (2 + 1): the second node's one task has the node's CPUs to itself."""
    step_env(**{**STEP_2x1, "SLURM_NTASKS": "3", "SLURM_STEP_TASKS_PER_NODE": "2,1"}, SLURM_PROCID="2",
             SLURM_NODEID="1")
    info = distributed.env_info()
    assert (info.rank, info.world_size, info.local_world_size) == (2, 3, 1)


def test_env_info_one_node_unchanged(step_env):
    """One node: no MASTER_ADDR is set (setup() then uses 127.0.0.1), as before."""
    step_env(SLURM_JOB_ID="5", SLURM_STEP_ID="0", SLURM_NNODES="1", SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="2",
             SLURM_PROCID="1", SLURM_LOCALID="1", SLURM_JOB_NODELIST="gpu01")
    info = distributed.env_info()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (1, 2, 1, 2)
    assert "MASTER_ADDR" not in os.environ


def test_env_info_several_nodes_without_a_node_list(step_env):
    step_env(**{k: v for k, v in STEP_2x1.items() if "NODELIST" not in k}, SLURM_PROCID="0")
    with pytest.raises(ConfigError, match="MASTER_ADDR"):
        distributed.env_info()
