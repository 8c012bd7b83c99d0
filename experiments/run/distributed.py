"""DDP plumbing: who am I (rank / world size / device), process-group setup, and the few collectives train() uses.

`pick_device` also refuses a device that does not exist here (one ConfigError line: cuda:7 on a 2-GPU machine, mps
without MPS, `banana`) and spreads the jobs of a parallel sweep over the GPUs (`gpu_slot`: one slot per live
worker process, device = slot modulo the GPU count).

Two launchers switch DDP on (backend: nccl on CUDA, gloo otherwise); without them everything here is a no-op for a
single process:
* torchrun, one node (`--standalone --nproc_per_node N`) or several (`--nnodes N --rdzv_backend c10d
  --rdzv_endpoint host:port`): its RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE / MASTER_ADDR are used as given;
  one torchrun rank (`--nproc_per_node 1`, a 1-GPU box) also runs the DDP path (a process group of one, the model
  wrapped in DistributedDataParallel), so NCCL is exercised where there is one GPU;
* an srun step with several tasks (`srun python -m experiments.train ...`, or submitit's): SLURM_PROCID /
  SLURM_NTASKS / SLURM_LOCALID, the tasks on this node from SLURM_STEP_TASKS_PER_NODE ("2(x3),1"), MASTER_PORT =
  20000 + SLURM_JOB_ID mod 20000. On one node the group meets on 127.0.0.1; on several, MASTER_ADDR is the first
  host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST), where task 0 runs: `scontrol show hostnames <list>` when
  scontrol is on PATH and answers, else `expand_hostlist` (the same rules, for containers without SLURM's tools or
  a node without slurm.conf, where scontrol refuses to start). A MASTER_ADDR / MASTER_PORT already set is kept.
Not handled: a first node whose name other nodes cannot resolve (set MASTER_ADDR by hand), task 0 elsewhere than on
the first node (`--distribution=arbitrary`), two DDP steps of one job running at once (same MASTER_PORT),
heterogeneous jobs, FSDP / tensor parallelism.
"""

from __future__ import annotations

import datetime
import hashlib
import itertools
import logging
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from filelock import FileLock, Timeout

from experiments.config.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    launched: bool = False  # started by torchrun: the DDP path even for one rank

    @property
    def enabled(self) -> bool:
        return self.world_size > 1 or self.launched

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_info() -> DistInfo:
    """Rank layout from torchrun's (or SLURM's) environment; a single process when neither is set. Inside a
    several-task srun step it also sets MASTER_ADDR (several nodes) and MASTER_PORT unless set (module docstring)."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistInfo(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
            launched=True,
        )
    in_step = "SLURM_STEP_ID" in env or "SLURM_STEPID" in env  # an srun step (submitit runs one)
    if not in_step or int(env.get("SLURM_NTASKS", "1")) <= 1:
        return DistInfo()
    nodes = int(env.get("SLURM_STEP_NUM_NODES", env.get("SLURM_NNODES", "1")))
    if nodes > 1 and "MASTER_ADDR" not in env:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
        if not nodelist:
            raise ConfigError(f"an srun step on {nodes} nodes without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: "
                              "set MASTER_ADDR to the address of the node of task 0")
        os.environ["MASTER_ADDR"] = first_host(nodelist)
    os.environ.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
    return DistInfo(
        rank=int(env["SLURM_PROCID"]),
        world_size=int(env["SLURM_NTASKS"]),
        local_rank=int(env.get("SLURM_LOCALID", 0)),
        local_world_size=_tasks_on_this_node(env),
    )


def _tasks_on_this_node(env: Mapping[str, str]) -> int:
    """The tasks of this srun step on this node. SLURM writes them per node, repeats compressed:
    "2(x3),1" -> [2, 2, 2, 1], indexed by SLURM_NODEID; SLURM_NTASKS_PER_NODE / SLURM_NTASKS when it is absent."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_NTASKS", "1")
    counts = []
    for part in spec.split(","):
        count, _, times = part.partition("(x")
        counts += [int(count)] * int(times.rstrip(")") or 1)
    return counts[min(int(env.get("SLURM_NODEID", 0)), len(counts) - 1)]


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list: `scontrol show hostnames` when it is on PATH and answers, else
    `expand_hostlist` (a ConfigError for a list that is not one)."""
    scontrol = shutil.which("scontrol")
    if scontrol is not None:
        try:
            out = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True, text=True,
                                 timeout=30)
            if out.returncode == 0 and out.stdout.split():
                return out.stdout.split()[0]
            why = (out.stderr.strip().splitlines() or ["no hosts"])[-1]  # its last line: the reason
            log.info("scontrol show hostnames %s: %s; using archlab's parser", nodelist, why)
        except (OSError, subprocess.TimeoutExpired) as e:
            log.info("scontrol show hostnames %s: %s; using archlab's parser", nodelist, e)
    return expand_hostlist(nodelist)[0]


_NAME = re.compile(r"(?:[^,\[\]]|\[[^\[\]]*\])+")  # one host pattern: text and [..] groups, up to a comma outside []
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")  # N or N-M


def expand_hostlist(spec: str) -> list[str]:
    """Every host of a SLURM host list, in order, as `scontrol show hostnames` prints them; ConfigError (one line)
    for a list that is not one. Several [] groups in one name vary the last one fastest; a range is as wide as its
    first bound ("01-10" -> 01..10, "1-010" -> 1..10, "8-11" -> 8..11). Example:
    "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5; "a[1-2]b[3-4]" -> a1b3 a1b4 a2b3 a2b4.
    Text after the last [] group ("n[1-2].ib"), which scontrol 22.05 refuses, is kept as a suffix."""
    names = _NAME.findall(spec)
    if not names or set(_NAME.sub("", spec)) - {","}:  # nothing, or a bracket left unmatched
        raise ConfigError(f"SLURM host list {spec!r}: not a host list (e.g. node[01-03,07],gpu5)")
    hosts: list[str] = []
    for name in names:
        parts = re.split(r"\[([^\]]*)\]", name)  # text, group, text, group, ..., text
        choices = [[p] if i % 2 == 0 else _expand_group(p, spec) for i, p in enumerate(parts)]
        hosts += ["".join(c) for c in itertools.product(*choices)]
    return hosts


def _expand_group(group: str, spec: str) -> list[str]:
    """The numbers of one [..] group: "01-03,7" -> [01, 02, 03, 7]."""
    out = []
    for r in group.split(","):
        m = _RANGE.fullmatch(r)
        if m is None or int(m[1]) > int(m[2] or m[1]):
            raise ConfigError(f"SLURM host list {spec!r}: {r!r} is not a range (N or N-M with N <= M)")
        out += [str(n).zfill(len(m[1])) for n in range(int(m[1]), int(m[2] or m[1]) + 1)]
    return out


def pick_device(pref: str, info: DistInfo, *, parallel: bool = False) -> torch.device:
    """The device of this process for `train.device=pref`; ConfigError (one line) for one that does not exist here.

    `auto` -> cuda > mps > cpu. `cuda` (no index) -> this process's GPU: its local rank's under DDP; with `parallel`
    (a job of a sweep whose launcher runs jobs side by side, e.g. joblib) the GPU of its slot (`gpu_slot`, modulo the
    GPU count), so parallel jobs spread over the GPUs instead of all landing on cuda:0; else cuda:0. An explicit
    `cuda:N` / `mps` / `cpu` is used as given once it exists (cuda:7 on a 2-GPU machine, mps without MPS and names
    that are no device, `banana`, are refused).
    """
    if pref == "auto":
        if torch.cuda.is_available():
            pref = "cuda"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available() and not info.enabled:
            pref = "mps"
        else:
            pref = "cpu"
    try:
        device = torch.device(pref)
    except (RuntimeError, ValueError):
        raise ConfigError(f"train.device={pref}: not a device; choose auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        n = torch.cuda.device_count()
        index = info.local_rank if info.enabled else (gpu_slot() if parallel and n > 1 else 0)
        device = torch.device("cuda", index % max(1, n))
    if why := unavailable(device):
        raise ConfigError(f"train.device={pref}: {why}; use train.device=auto or a device this machine has")
    return device


def unavailable(device: torch.device) -> str | None:
    """Why `device` cannot be used on this machine, in a few words; None when it can. Only cpu, cuda[:N] and mps are
    devices here (`xpu`, `meta`, ... are refused)."""
    if device.type == "cpu":
        return None
    if device.type == "mps":
        ok = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
        return None if ok else "MPS is not available on this machine"
    if device.type != "cuda":
        return f"{device.type} devices are not used by this runner (cpu, cuda, cuda:N, mps)"
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        return "this machine has no CUDA device"
    if device.index is not None and device.index >= n:
        return f"this machine has {n} CUDA device(s), cuda:0..cuda:{n - 1}"
    return None


_slot: tuple[int, FileLock] | None = None  # (slot, its lock), held by this process until it exits


def gpu_slot() -> int:
    """This process's slot: the lowest number no other live process on this machine holds (a lock file per slot in
    the temp dir, per CUDA_VISIBLE_DEVICES). It is kept until the process exits, so a joblib worker keeps its GPU for
    all its jobs, and the OS frees it when the process dies, SIGKILL included. 0 when no lock can be made there."""
    global _slot
    if _slot is not None:
        return _slot[0]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "all")
    scope = hashlib.sha256(f"{_user()}|{visible}".encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"archlab-gpu-slots-{scope}"  # not one shared parent: per user, no chmod
    try:
        root.mkdir(parents=True, exist_ok=True)
        for slot in itertools.count():
            lock = FileLock(root / f"slot_{slot}.lock")
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue
            _slot = (slot, lock)
            return slot
    except OSError as e:
        log.warning("cannot claim a GPU slot in %s (%s); this job uses the first GPU", root, e)
    return 0


def _user() -> str:
    """Who runs this process (slots are per user: another user's lock files need not be writable)."""
    try:
        return str(os.getuid())
    except AttributeError:  # Windows
        return os.environ.get("USERNAME", "")


def setup(info: DistInfo, device: torch.device) -> None:
    """Join the process group (once per process); no-op for a single process."""
    if not info.enabled or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ.setdefault("MASTER_PORT", "29500")
    os.environ.setdefault("RANK", str(info.rank))
    os.environ.setdefault("WORLD_SIZE", str(info.world_size))
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, timeout=datetime.timedelta(minutes=30))
    if info.is_main:
        log.info("DDP: %d rank(s), backend %s", info.world_size, backend)


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def mean_across_ranks(value: float, device: torch.device) -> float:
    """The mean of a Python float over all ranks (gloo has no AVG, so SUM / world_size)."""
    if not dist.is_initialized():
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item()) / dist.get_world_size()


def any_across_ranks(flag: bool, device: torch.device) -> bool:
    """True on every rank when `flag` is true on any rank (so all ranks stop at the same step)."""
    if not dist.is_initialized():
        return flag
    t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def gather_objects(obj: Any) -> list[Any]:
    """[obj of rank 0, obj of rank 1, ...] on every rank; [obj] for a single process."""
    if not dist.is_initialized():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]
