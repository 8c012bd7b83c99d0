"""DDP plumbing: who am I (rank / world size / device), process-group setup, and the few collectives train() uses.

Launch with `torchrun --nproc_per_node N -m experiments.train ...` (or SLURM + submitit with one task per GPU):
the env vars RANK / WORLD_SIZE / LOCAL_RANK (or, inside an srun step, SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID;
one node, or several with MASTER_ADDR set) switch it on. Backend: nccl on CUDA, gloo otherwise. Without those variables everything here is a no-op for a
single process. Not handled: multi-node rendezvous beyond what torchrun provides, FSDP / tensor parallelism.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_info() -> DistInfo:
    """Rank layout from torchrun's (or SLURM's) environment; a single process when neither is set."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistInfo(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", 1)),
        )
    # an srun step (submitit runs one) with several tasks; one node, or a MASTER_ADDR you set for several nodes
    in_step = "SLURM_STEP_ID" in env or "SLURM_STEPID" in env
    single_node = int(env.get("SLURM_NNODES", "1")) == 1
    if in_step and int(env.get("SLURM_NTASKS", "1")) > 1 and (single_node or "MASTER_ADDR" in env):
        os.environ.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
        n_local = int(env.get("SLURM_NTASKS_PER_NODE", env.get("SLURM_NTASKS", "1")).split("(")[0])
        return DistInfo(
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env["SLURM_NTASKS"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            local_world_size=n_local,
        )
    return DistInfo()


def pick_device(pref: str, info: DistInfo) -> torch.device:
    """`auto` -> cuda (this rank's GPU) > mps > cpu; an explicit name is used as given (cuda -> cuda:local_rank)."""
    if pref == "auto":
        if torch.cuda.is_available():
            pref = "cuda"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available() and not info.enabled:
            pref = "mps"
        else:
            pref = "cpu"
    if pref == "cuda":
        return torch.device("cuda", info.local_rank % max(1, torch.cuda.device_count()))
    return torch.device(pref)


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
