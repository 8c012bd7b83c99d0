"""Fixtures for experiments tests: a composed config (Hydra compose API) pointed at tmp dirs, wandb off.

`make_cfg(*overrides, run_dir=...)` composes conf/train.yaml with TINY (a 2-layer d_model 32 model, 3 steps,
one thread, no extrapolation) plus the given overrides. Every run shares one session-wide tokenizer/token cache in
a tmp dir, so the BPE tokenizer is trained once per test session. `cli_env()` is the environment for
`python -m experiments.train` subprocesses (same cache, wandb disabled, offline hub). `train_cli(*argv)` runs that
command in this process instead (no interpreter start, no torch import: a few seconds less per call) and returns
what a subprocess would: the exit status and what it printed.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from experiments.config.compose import CONF_DIR, compose_config
from experiments.run import train as train_mod

REPO = Path(__file__).resolve().parents[2]
CONF = CONF_DIR  # the one place that knows where conf/ is

# A model and budget small enough for a CPU test: seconds per run.
TINY = [
    "logger=disabled",
    "model=tiny",
    "model.d_model=32",
    "model.n_heads=2",
    "model.n_layers=2",
    "train.n_ctx=32",
    "train.batch_size=4",
    "train.steps=3",
    "train.eval_interval=3",
    "train.eval_batches=2",
    "train.ckpt_interval=3",
    "train.extrap=never",
    "train.progress=false",
    "train.num_threads=1",
]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("archlab_cache")


@pytest.fixture
def make_cfg(cache_dir, tmp_path, monkeypatch):
    """make_cfg(*overrides, run_dir=None) -> DictConfig with TINY + overrides; run_dir defaults to tmp_path/run."""

    monkeypatch.setenv("WANDB_MODE", "disabled")  # tests/conftest.py sets it too; never let a test reach wandb

    def make(*overrides: str, run_dir: Path | None = None):
        run_dir = run_dir or tmp_path / "run"
        return compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run_dir}", *overrides])

    return make


@pytest.fixture
def cli_env(cache_dir):
    env = dict(os.environ)
    env.update({"WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "ARCHLAB_CACHE": str(cache_dir),
                "ARCHLAB_PEAK_FLOPS": "1e12", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    return env


PYTHON = sys.executable


def train_losses(run_dir: Path) -> list[tuple[int, float]]:
    """[(step, train/loss)] of run_dir/metrics.jsonl, every line parsed (a damaged line fails the test)."""
    rows = (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    return [(r["step"], r["train/loss"]) for r in rows if "train/loss" in r]


def exit_status(entry, monkeypatch, argv: list[str]) -> int:
    """entry() run as its command would run it, with sys.argv = argv (argv[0]: the program): SystemExit's code, 0
    when it returns. A message given to sys.exit is printed on stderr and is status 1, as the interpreter does.

    What a Hydra app leaves in the process is put back afterwards: its global state (cleared before and after) and
    the root logger, which Hydra points at the stdout of the moment and at <run dir>/<job>.log (left there, a later
    test's log line would go to a closed capture and print a logging error instead). Hydra re-raises an app's
    error instead of reporting it when it thinks a debugger runs (sys.gettrace() set: coverage's tracer under `make
    coverage` too); a shell runs no tracer, so here it never thinks so."""
    monkeypatch.setattr(sys, "argv", list(argv))
    monkeypatch.setattr("hydra._internal.utils.is_under_debugger", lambda: False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    GlobalHydra.instance().clear()
    try:
        entry()
        return 0
    except SystemExit as e:
        if isinstance(e.code, int) or e.code is None:
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    finally:
        GlobalHydra.instance().clear()
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)


@dataclass
class Ran:
    """What a command run in this process gave, named as subprocess.CompletedProcess names it."""
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def train_cli(cli_env, capfd, monkeypatch):
    """train_cli(*argv, cwd=REPO, via_main=False) -> Ran: `python -m experiments.train *argv` in this process.

    It calls what that command calls (experiments/train.py: experiments.run.train.cli(); via_main: main() alone,
    Hydra without the precheck) with the sys.argv, working dir and environment (cli_env) the subprocess would get;
    stdout/stderr are read at the file-descriptor level (capfd), as a subprocess's pipes would see them. An
    exception the command does not turn into an exit fails the test with its traceback. What only a new interpreter
    proves (-m finds experiments/train.py, the __main__ guard, the status reaching the shell) is left to the
    command's one subprocess test in the default suite (test_compose.py)."""

    def run(*argv: str, cwd: Path = REPO, via_main: bool = False) -> Ran:
        for key, value in cli_env.items():
            if os.environ.get(key) != value:
                monkeypatch.setenv(key, value)
        monkeypatch.chdir(cwd)
        capfd.readouterr()  # only what this command prints
        code = exit_status(train_mod.main if via_main else train_mod.cli, monkeypatch,
                           [str(REPO / "experiments" / "train.py"), *argv])
        out, err = capfd.readouterr()
        return Ran(code, out, err)

    return run


def sigkill_at_checkpoint(args: list[str], env: dict[str, str], checkpoints: Path, pattern: str) -> None:
    """`python -m experiments.train *args` in a subprocess, SIGKILLed as soon as `checkpoints.glob(pattern)` finds a
    checkpoint (polled every 5 ms, 300 s at most); fails the test if the command ended before it could be killed."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen([PYTHON, "-m", "experiments.train", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not any(checkpoints.glob(pattern)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the command ended before it could be killed: {err.decode()[-2000:]}"


def shared_dir(tmp_path_factory) -> Path:
    """A tmp dir every pytest-xdist worker of this session sees (the parent of the workers' own basetemps; the
    basetemp itself without xdist), for what is built once per session rather than once per worker."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@dataclass
class Smoke:
    """One `python -m experiments.findings NAME --smoke` command, run by the first worker that asks for it."""
    name: str
    sweep: Path  # its --out-dir
    returncode: int
    stdout: str
    stderr: str
    docs_unchanged: bool  # docs/findings/ held the same files (mtime and size) after the command as before


TUNED_SMOKE = "rope_vs_learned_v2"  # the cheap tuned smoke: 2 arms, 5-lr grid, confirm phase, 2 fresh seeds


@pytest.fixture(scope="session")
def tuned_smoke(tmp_path_factory) -> Smoke:
    """The one tuned findings smoke of the default suite (TUNED_SMOKE with hydra.sweeper.confirm=true), built once
    per session however many xdist workers ask (a file lock; the others read its result), in a subprocess with its
    own token cache. Tests read its sweep dir and never write into it."""
    import subprocess

    from filelock import FileLock

    root = shared_dir(tmp_path_factory) / "tuned_smoke"
    root.mkdir(exist_ok=True)
    done = root / "result.json"
    with FileLock(str(root / ".lock")):
        if not done.is_file():
            sweep = root / "sweep"
            env = {**os.environ, "ARCHLAB_CACHE": str(root / "cache"), "WANDB_MODE": "disabled",
                   "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "ARCHLAB_PEAK_FLOPS": "1e12",
                   "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
            docs = REPO / "docs" / "findings"
            before = file_stats(docs)
            p = subprocess.run([PYTHON, "-m", "experiments.findings", TUNED_SMOKE, "--smoke", "--out-dir", str(sweep),
                                "hydra.sweeper.confirm=true"], cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=280)
            result = {"name": TUNED_SMOKE, "sweep": str(sweep), "returncode": p.returncode, "stdout": p.stdout,
                      "stderr": p.stderr, "docs_unchanged": file_stats(docs) == before}
            done.write_text(json.dumps(result))
    r = json.loads(done.read_text())
    return Smoke(**{**r, "sweep": Path(r["sweep"])})


def file_bytes(folder: Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file below folder ({} when it is not a dir): equal before and after a command
    exactly when it left every file as it was and wrote none."""
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.is_dir() else {}


def file_stats(folder: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (mtime_ns, size)} of every file below folder ({} when it is not a dir)."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.is_dir() else {}


def keep_figures(monkeypatch, module) -> dict:
    """{PNG name: matplotlib figure} of every figure `module` saves through its `_save` (which still writes them),
    so a test reads the drawn data from the artists, not pixels."""
    figs: dict = {}
    save = module._save

    def keep(fig, path, legend=True):
        figs[Path(path).name] = fig
        return save(fig, path, legend)

    monkeypatch.setattr(module, "_save", keep)
    return figs


def artist(ax, gid: str):
    """The one line or collection of `ax` with this gid."""
    found = [a for a in [*ax.get_lines(), *ax.collections] if a.get_gid() == gid]
    assert len(found) == 1, gid
    return found[0]
