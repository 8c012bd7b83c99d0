"""hydra/launcher=slurm refused in one line before anything is written (experiments/sweep/slurm_check.py), and a
refused submission leaving the sweep dir as it was (slurm.submit_array; the snapshot itself is tested in
test_dir_snapshot.py).

The table spells out, from sbatch's documentation and not from the code under test, which values of every launcher
key are bad: each is refused naming its key, each good one passes, and every key the composed `hydra/launcher=slurm`
node has is in the table (a key a new hydra-submitit-launcher adds fails here until it has a rule). The CLI tests
run the command in this process (conftest's train_cli): exit 2, one stderr line, no traceback, no sweep dir; with
the precheck and without it (Hydra's main alone: the launcher's setup() refuses the same way). No cluster is needed
here: a machine without sbatch is a PATH without it, and sbatch refusing a job is a stand-in `sbatch` that answers
as sbatch does (exit 1, its two error lines); the real scheduler's refusal is in test_slurm.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.config.compose import compose_config
from experiments.config.errors import ConfigError
from experiments.sweep.slurm import sbatch_message
from experiments.sweep.slurm_check import RULES, check_commands, check_params

from .conftest import TINY

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="the slurm extra: pip install -e '.[slurm]'")

GOOD = {"timeout_min": 60, "signal_delay_s": 30, "max_num_timeout": 3, "nodes": 1, "tasks_per_node": 1,
        "gpus_per_node": 0, "cpus_per_task": 1, "array_parallelism": 4}
LINE_BREAK = "gpu\n#SBATCH --exclusive"
# key -> (bad values, good values)
TABLE = {
    "timeout_min": ([-5, 0, 1.5, "10", True, None], [1, 60, 10_000]),
    "signal_delay_s": ([-1, 0, 65536, 2.5, None], [1, 59, 120]),
    "max_num_timeout": ([-1, 0.5, "3", None], [0, 3]),
    "nodes": ([0, -1, 1.5, None], [1, 4]),
    "tasks_per_node": ([0, -2, None], [1, 8]),
    "gpus_per_node": ([-1, 1.5, "1"], [0, 8, None]),
    "cpus_per_task": ([0, -1, 2.5], [1, 64, None]),
    "cpus_per_gpu": ([0, -3], [1, None]),
    "gpus_per_task": ([0, -1], [1, None]),
    "mem_gb": ([0, -1, 1.5, "32"], [1, 512, None]),
    "mem_per_cpu": (["0", "-4G", "4 G", "lots", "", "4X", 4096], ["4096", "4G", "4GB", "512m", None]),
    "mem_per_gpu": (["0", "1.5G", ""], ["16G", None]),
    "array_parallelism": ([0, -1, None, 2.5], [1, 256]),
    "partition": (["", "a b", LINE_BREAK, 5], ["gpu", "gpu,cpu", None]),
    "account": (["", "my account"], ["proj1", None]),
    "qos": (["", "\t"], ["high", None]),
    "constraint": (["", "a100 nvlink"], ["a100&nvlink", None]),
    "exclude": (["", "n1 n2"], ["n[1-3]", None]),
    "gres": (["", "gpu: 2"], ["gpu:2", None]),
    "comment": (["", "   ", LINE_BREAK], ["my sweep", None]),
    "name": ([None, "", LINE_BREAK], ["train", "my job"]),
    "submitit_folder": ([None, "", "  "], ["/scratch/x/.submitit/%j"]),
    "stderr_to_stdout": (["yes", 1, None], [True, False]),
    "setup": (["module load cuda", [1], {"a": 1}], [None, [], ["module load cuda", "source env"]]),
    "additional_parameters": ([[], "mail_type=END", {"time": 5}, {"mem": "4G"}, {"job_name": "x"},
                               {"signal": "USR1@60"}, {"array": "0-3"}, {"output": "x"}, {"open_mode": "truncate"},
                               {"mail_type": LINE_BREAK}, {"mail_type": None}, {"mail_type": False},
                               {"mail_type": ["END"]}, {"bad key": 1}, {"": 1}],
                              [{}, {"mail_type": "END"}, {"exclusive": True}, {"nice": 10}, {"mail-user": "a@b.c"}]),
    "pack": (["yes", 1, None], [True, False]),
    "max_members": ([0, -1, 1.5, "8", True], [1, 16, None]),
}
BAD = [(k, v) for k, (bad, _) in TABLE.items() for v in bad]
OK = [(k, v) for k, (_, good) in TABLE.items() for v in good]


def slurm_node() -> dict:
    cfg = compose_config(["hydra/launcher=slurm"], return_hydra_config=True)
    return OmegaConf.to_container(cfg.hydra.launcher, resolve=False)


def test_every_key_of_the_launcher_is_in_the_table_and_its_defaults_pass():
    node = slurm_node()
    assert set(node) - {"_target_"} == set(TABLE) == set(RULES)
    check_params(node)


@pytest.mark.parametrize("key, value", BAD, ids=[f"{k}={v!r}" for k, v in BAD])
def test_a_bad_value_is_refused_naming_its_key(key, value):
    with pytest.raises(ConfigError) as e:
        check_params({**GOOD, key: value})
    msg = str(e.value)
    assert msg.startswith(f"hydra.launcher.{key}: ") and "\n" not in msg, msg


@pytest.mark.parametrize("key, value", OK, ids=[f"{k}={v!r}" for k, v in OK])
def test_a_good_value_passes(key, value):
    check_params({**GOOD, key: value})


@pytest.mark.parametrize("limit_min, delay_s, ok", [(1, 59, True), (1, 60, False), (2, 119, True), (2, 121, False),
                                                    (240, 120, True), (2000, 65535, True)])
def test_sigusr2_comes_before_the_time_limit(limit_min, delay_s, ok):
    params = {**GOOD, "timeout_min": limit_min, "signal_delay_s": delay_s}
    if ok:
        check_params(params)
    else:
        with pytest.raises(ConfigError, match=r"^hydra.launcher.signal_delay_s: must be less than the time limit"):
            check_params(params)


@pytest.mark.parametrize("mem", [{"mem_gb": 4, "mem_per_cpu": "1G"}, {"mem_gb": 4, "mem_per_gpu": "8G"},
                                 {"mem_gb": None, "mem_per_cpu": "1G", "mem_per_gpu": "8G"}])
def test_one_memory_request_at_a_time(mem):
    with pytest.raises(ConfigError, match=r"^hydra.launcher.mem_per_(cpu|gpu): SLURM takes one of"):
        check_params({**GOOD, **mem})


def test_interpolations_wait_for_hydra():
    check_params({**GOOD, "name": "${hydra.job.name}", "submitit_folder": "${hydra.sweep.dir}/.submitit/%j"})


def _bin(folder: Path, name: str, script: str = "exit 0") -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("present", [(), ("sbatch",), ("srun", "squeue"), ("sbatch", "srun", "squeue")])
def test_the_missing_commands_are_named(present, tmp_path, monkeypatch):
    for name in present:
        _bin(tmp_path / "bin", name)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    missing = [c for c in ("sbatch", "srun", "squeue") if c not in present]
    if not missing:
        check_commands()
        return
    with pytest.raises(ConfigError) as e:
        check_commands()
    assert str(e.value).startswith(f"hydra/launcher=slurm: {', '.join(missing)} not found on PATH")
    assert "docs/cluster.md" in str(e.value)


def test_sbatch_message_is_one_line():
    text = ("sbatch: error: invalid partition specified: nosuch\n"
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n")
    assert sbatch_message(text) == ("sbatch: invalid partition specified: nosuch; Batch job submission failed: "
                                    "Invalid partition name specified")


def earlier_sweep(sweep: Path) -> list[str]:
    """A sweep dir an earlier command left (multirun.yaml, a stopped run): the overrides that resume it."""
    (sweep / "0_seed=0").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("an earlier sweep's config\n")
    (sweep / "0_seed=0" / "summary.json").write_text('{"status": "interrupted"}')
    return ["train.resume=true"]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root: a file's bytes, None for a dir (the reference: a plain walk)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}


# -- the command --------------------------------------------------------------------------------------------------


def sweep_argv(sweep: Path, *extra: str) -> list[str]:
    return ["-m", *TINY, "train.steps=2", "seed=0,1", "hydra/launcher=slurm", "hydra.launcher.gpus_per_node=0",
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", f"hydra.sweep.dir={sweep}", *extra]


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[archlab] sweep ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# the values issue 31 named; the table above covers every key, so the default tier runs three through the command
NUMERIC_BAD = [(k, v, ()) for k, v in [("timeout_min", -5), ("nodes", 0), ("signal_delay_s", -1)]] + [
    (k, v, pytest.mark.slow) for k, v in [("tasks_per_node", 0), ("gpus_per_node", -1), ("cpus_per_task", 0),
                                          ("mem_gb", 0), ("array_parallelism", 0), ("max_num_timeout", -1)]]


@pytest.mark.parametrize("key, value", [pytest.param(k, v, marks=m, id=f"{k}={v}") for k, v, m in NUMERIC_BAD])
def test_the_command_refuses_a_bad_launcher_value_before_writing(key, value, train_cli, tmp_path):
    sweep = tmp_path / "sweep"
    ran = train_cli(*sweep_argv(sweep, f"hydra.launcher.{key}={value}"))
    assert ran.returncode == 2
    assert one_error_line(ran.stderr).startswith(f"config error: hydra.launcher.{key}: must be ")
    assert not sweep.exists()


@pytest.mark.parametrize("via_main", [False, True], ids=["precheck", "launcher setup"])
def test_no_slurm_here_is_one_line_before_anything_is_written(via_main, train_cli, cli_env, tmp_path):
    cli_env["PATH"] = str(tmp_path / "empty")  # train_cli sets the command's environment from cli_env
    sweep = tmp_path / "sweep"
    ran = train_cli(*sweep_argv(sweep), via_main=via_main)
    assert ran.returncode == 2
    line = one_error_line(ran.stderr)
    assert line.startswith("config error: hydra/launcher=slurm: sbatch, srun, squeue not found on PATH"), line
    assert "docs/cluster.md" in line and not sweep.exists()


def test_the_launcher_setup_refuses_a_bad_value_too(train_cli, tmp_path):
    """Hydra's main without the precheck (a caller that skips it): the launcher's own check, same line."""
    sweep = tmp_path / "sweep"
    ran = train_cli(*sweep_argv(sweep, "hydra.launcher.timeout_min=-5"), via_main=True)
    assert ran.returncode == 2
    assert one_error_line(ran.stderr) == "config error: hydra.launcher.timeout_min: must be an integer >= 1, got -5"
    assert not sweep.exists()


SBATCH_REFUSES = ("echo 'sbatch: error: invalid account: nosuch' >&2; "
                  "echo 'sbatch: error: Batch job submission failed: Invalid account' >&2; exit 1")


@pytest.mark.parametrize("existing", [False, True], ids=["new sweep dir", "resumed sweep dir"])
def test_sbatch_refusing_leaves_the_sweep_dir_as_it_was(existing, train_cli, cli_env, tmp_path):
    """A stand-in sbatch that refuses as sbatch does: exit 1, one line with its message, the dir as before (a new
    one not created, a resumed one byte for byte: multirun.yaml not rewritten, no job pickles)."""
    for name, script in [("sbatch", SBATCH_REFUSES), ("srun", "exit 0"), ("squeue", "exit 0")]:
        _bin(tmp_path / "bin", name, script)
    cli_env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    sweep = tmp_path / "sweeps" / "s"
    extra = earlier_sweep(sweep) if existing else []
    before = tree(tmp_path / "sweeps") if existing else None
    ran = train_cli(*sweep_argv(sweep, "hydra.launcher.account=nosuch", *extra))
    assert ran.returncode == 1
    line = one_error_line(ran.stderr)
    assert line.startswith("[archlab] sbatch refused the job array (2 job(s)), nothing was submitted"), line
    assert line.endswith("sbatch: invalid account: nosuch; Batch job submission failed: Invalid account"), line
    if existing:
        assert tree(tmp_path / "sweeps") == before
    else:
        assert not (tmp_path / "sweeps").exists()
