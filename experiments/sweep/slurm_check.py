"""hydra/launcher=slurm before anything is written: the launcher's values, and the SLURM commands it needs.

    check_launcher(node)     hydra.launcher of a composed config: nothing unless it is a SLURM launcher (ours or
                             hydra-submitit-launcher's submitit_slurm); else check_params, then check_commands
    check_params(params)     every value against RULES and the rules between values: ConfigError(`hydra.launcher.
                             <key>: must be ..., got ...`)
    check_commands()         sbatch, srun and squeue on PATH: ConfigError naming the missing ones and docs/cluster.md

Called by experiments.config.precheck (before Hydra starts: exit 2, one line, no file written) and again by the
launcher's setup() with the values as Hydra resolved them (before the sweeper writes multirun.yaml), so a command
that skips the precheck is refused the same way.

What a value must be is what `sbatch` accepts and what the launcher can work with: a time limit of at least a
minute, counts >= 1 (GPUs >= 0), SIGUSR2 at least a second and less than the time limit before the limit (at or past
it, every job would be requeued the moment it starts), memory as SLURM sizes (`4G`) and at most one of mem_gb /
mem_per_cpu / mem_per_gpu (SLURM's rule). Names SLURM gives (partition, account, qos, constraint, gres, exclude) are
single words; text written into the job script (`#SBATCH --comment='...'`, the job name, additional_parameters'
values) holds no newline, which would end the `#SBATCH` line and start another. additional_parameters may not set
what the launcher sets itself (array, signal, output, error, open-mode) nor what has its own key (time:
timeout_min, ...); a value of true writes the bare flag (`exclusive: true` -> `--exclusive`), as submitit does.
Types are OmegaConf's business (submitit_slurm is a structured config: `timeout_min=abc` is refused on composing).
Not handled: whether the cluster has the partition, account, QOS or the resources asked for; only sbatch knows, and
its refusal is one line too (experiments/sweep/slurm.py). Interpolated values (`${...}`) are checked by the
launcher's setup() once Hydra resolved them.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.config.errors import ConfigError
from experiments.config.rules import POS_INT, POS_INT_OR_NULL, Rule

TARGETS = ("hydra_plugins.archlab_slurm_launcher.slurm_launcher.SlurmLauncher",
           "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher")
COMMANDS = ("sbatch", "srun", "squeue")  # submit; submitit's job step (and its check); waiting for the jobs
SIGNAL_MAX_S = 65535  # sbatch --signal: sig_time is 0..65535 seconds


@dataclass(frozen=True)
class Text:
    """A string value of the job script: `pattern` (fullmatch), or null when nullable; `what` words it."""

    pattern: str
    what: str
    nullable: bool = True

    def check(self, v: Any) -> str | None:
        if v is None:
            return None if self.nullable else f"must be {self.what}, got null"
        return None if isinstance(v, str) and re.fullmatch(self.pattern, v) else f"must be {self.what}, got {v!r}"


@dataclass(frozen=True)
class Lines:
    """`setup`: shell lines run before the job (a list of strings), or null."""

    def check(self, v: Any) -> str | None:
        ok = v is None or isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)
        return None if ok else f"must be a list of shell lines (strings) or null, got {v!r}"


WORD = Text(r"\S+", "a name without spaces or null")
LINE = Text(r"[^\n\r]*\S[^\n\r]*", "text on one line (it is written into an `#SBATCH` line) or null")
SIZE = Text(r"[1-9][0-9]*([KMGTkmgt][Bb]?)?", "a SLURM memory size such as 4096 (MB), 4G or 4GB, or null")
# sbatch options the launcher writes itself (submitit), and those that have a key of their own
OWN = ("array", "signal", "output", "error", "open-mode")
NAMED = {"time": "timeout_min", "nodes": "nodes", "ntasks-per-node": "tasks_per_node", "cpus-per-task": "cpus_per_task",
         "gpus-per-node": "gpus_per_node", "mem": "mem_gb", "partition": "partition", "account": "account",
         "qos": "qos", "job-name": "name", "constraint": "constraint", "exclude": "exclude", "gres": "gres",
         "comment": "comment", "cpus-per-gpu": "cpus_per_gpu", "gpus-per-task": "gpus_per_task",
         "mem-per-gpu": "mem_per_gpu", "mem-per-cpu": "mem_per_cpu"}


@dataclass(frozen=True)
class Options:
    """`additional_parameters`: {sbatch option: value}, each written `#SBATCH --option=value`."""

    def check(self, v: Any) -> str | None:
        if not isinstance(v, Mapping):
            return f"must be a mapping of sbatch options to values, e.g. {{mail_type: END}}, got {v!r}"
        for key, value in v.items():
            option = str(key).replace("_", "-")
            if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", key):
                return f"{key!r}: not an sbatch option name (e.g. mail_type)"
            if option in OWN:
                return f"{key}: is set by the launcher (SIGUSR2 for requeue, the job array, its logs); remove it"
            if option in NAMED:
                return f"{key}: has its own key; set hydra.launcher.{NAMED[option]}=... instead"
            if value is not True and (isinstance(value, bool) or not isinstance(value, (str, int, float))
                                      or isinstance(value, str) and not re.fullmatch(LINE.pattern, value)):
                return (f"{key}: must be a number, true (a bare flag) or text on one line (written as "
                        f"`#SBATCH --{option}=value`), got {value!r}")
        return None


Check = Rule | Text | Lines | Options
# every key of hydra/launcher=slurm (submitit_slurm's SlurmQueueConf + archlab's); a key without a rule fails
# test_slurm_check
RULES: dict[str, Check] = {
    "timeout_min": POS_INT,
    "signal_delay_s": Rule("int", lo=1, hi=SIGNAL_MAX_S),
    "max_num_timeout": Rule("int", lo=0),
    "nodes": POS_INT,
    "tasks_per_node": POS_INT,
    "gpus_per_node": Rule("int", lo=0, nullable=True),
    "cpus_per_task": POS_INT_OR_NULL,
    "cpus_per_gpu": POS_INT_OR_NULL,
    "gpus_per_task": POS_INT_OR_NULL,
    "mem_gb": POS_INT_OR_NULL,
    "mem_per_cpu": SIZE,
    "mem_per_gpu": SIZE,
    "array_parallelism": POS_INT,
    "partition": WORD, "account": WORD, "qos": WORD, "constraint": WORD, "exclude": WORD, "gres": WORD,
    "comment": LINE,
    "name": Text(LINE.pattern, "the job's name, text on one line", nullable=False),
    "submitit_folder": Text(r".*\S.*", "a folder for the jobs' logs and pickles", nullable=False),
    "stderr_to_stdout": Rule("bool"),
    "setup": Lines(),
    "additional_parameters": Options(),
    # archlab's own (hydra_plugins/archlab_slurm_launcher: ArchlabSlurmConf)
    "pack": Rule("bool"),
    "max_members": POS_INT_OR_NULL,
}


def _between(p: Mapping[str, Any]) -> str | None:
    """The rules between values: (key, why) as `key: why`, or None."""
    limit, delay = p.get("timeout_min"), p.get("signal_delay_s")
    if isinstance(limit, int) and isinstance(delay, int) and delay >= limit * 60:
        return (f"signal_delay_s: must be less than the time limit, timeout_min x 60 = {limit * 60} s (SIGUSR2 comes "
                f"signal_delay_s before the limit: every job would be requeued as it starts), got {delay}")
    mem = [k for k in ("mem_gb", "mem_per_cpu", "mem_per_gpu") if p.get(k) is not None]
    if len(mem) > 1:
        return (f"{mem[1]}: SLURM takes one of mem_gb, mem_per_cpu, mem_per_gpu, and {mem[0]} is set too; set the "
                f"other to null (hydra.launcher.{mem[0]}=null)")
    return None


def _interpolated(v: Any) -> bool:
    return isinstance(v, str) and "${" in v


def check_params(params: Mapping[str, Any]) -> None:
    """Every value of `params` (hydra.launcher, plain) with a rule, then the rules between values."""
    for key, rule in RULES.items():
        if key in params and not _interpolated(params[key]) and (why := rule.check(params[key])):
            raise ConfigError(f"hydra.launcher.{key}: {why}")
    if why := _between({k: v for k, v in params.items() if not _interpolated(v)}):
        raise ConfigError(f"hydra.launcher.{why}")


def check_commands(which: Callable[[str], str | None] = shutil.which) -> None:
    missing = [c for c in COMMANDS if which(c) is None]
    if missing:
        raise ConfigError(f"hydra/launcher=slurm: {', '.join(missing)} not found on PATH: this machine is not a "
                          f"SLURM submit host; run the sweep on the cluster's login node, or start a one-node cluster "
                          f"here (docs/cluster.md)")


def is_slurm(node: Any) -> bool:
    target = node.get("_target_") if isinstance(node, (Mapping, DictConfig)) else None
    return target in TARGETS


def check_launcher(node: Any) -> None:
    """hydra.launcher (a DictConfig or mapping) of a SLURM launcher: its values, then the commands; else nothing."""
    if not is_slurm(node):
        return
    params = OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else dict(node)
    check_params(params)
    check_commands()
