"""Every refusal of `python -m experiments.train ... train.resume=true` leaves the run dir byte-identical: every file's
bytes, mode and mtime and every dir's mtime, Hydra's `.hydra/*.yaml` and `train.log` included (Hydra writes them
before train() runs: experiments/run/keep_dirs.py puts them back), with one line on stderr and a non-zero exit.

One table over the refusal reasons, wherever they are decided: before Hydra (precheck: the dir's config.yaml holds
another model or cannot be parsed, resume with overwrite, a bad value, a dir another process holds, a corrupt
tokenizer file) and after it, in train() (the checkpoint's tokenizer or data fingerprints differ, a damaged
checkpoint, another model with no config.yaml to tell, a validation split too short, a budget past
train.max_epochs), plus a Ctrl-C and an exception in setup (no refusal line then, but the dir is kept the same). The
run dir is given as hydra.run.dir (Hydra writes into it) and, for a few rows, as train.run_dir (Hydra's own
timestamped dir must not be left behind; relative, under hydra.job.chdir=true, inside Hydra's dir). What must not be
put back: a resume that is accepted gets Hydra's new record, and one that fails in its loop keeps what it wrote. The
reference is an independent walk of the tree (test_dir_snapshot.tree).
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arch
from experiments.data import cache
from experiments.rundir.lock import LOCK_NAME

from .conftest import REPO, TINY, exit_status
from .test_dir_snapshot import tree

REFUSED = 2


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, cache_dir) -> Path:
    """One finished 3-step run made by the CLI into hydra.run.dir: config.yaml, checkpoints, .hydra/, train.log."""
    from experiments.run import train as train_mod

    run = tmp_path_factory.mktemp("base") / "run"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in {"WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                           "ARCHLAB_CACHE": str(cache_dir), "OMP_NUM_THREADS": "1"}.items():
            mp.setenv(key, value)
        mp.chdir(REPO)
        code = exit_status(train_mod.cli, mp, ["train.py", *TINY, "tokenizer.vocab_size=300", f"hydra.run.dir={run}"])
    assert code == 0 and (run / ".hydra" / "overrides.yaml").is_file() and (run / "train.log").is_file()
    assert any((run / "checkpoints").glob("step_*"))
    return run


@pytest.fixture
def run_dir(base_run, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(base_run, run)  # copy2: mtimes kept, so a restore to the copy's own times is checked
    return run


def _truncate_state(run: Path) -> None:
    state = next((run / "checkpoints").glob("step_*")) / "state.pt"
    state.write_bytes(state.read_bytes()[:100])


def _hold_lock(run: Path):
    fd = os.open(run / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file description: train()'s lock is refused, as by a live process
    os.write(fd, b"4242\n")
    return lambda: os.close(fd)


def _corrupt_tokenizer(run: Path) -> list[str]:
    bad = run.parent / "bad_tokenizer.json"
    bad.write_text('{"format": "archlab-bpe", "version": 1, "pattern": "gpt2", "special_tokens": {"<|e|>": '
                   '1099511627776}, "vocab": null, "merges": []}')
    return ["tokenizer=load", f"tokenizer.path={bad}"]


# name: (overrides, setup(run) -> extra overrides | cleanup | None, exit status, words of the one stderr line)
CASES = {
    "another tokenizer": (["tokenizer.pattern=gpt4"], None, REFUSED, "trained on another tokenizer"),
    "other data": (["data.val_fraction=0.2"], lambda run: ["tokenizer=load", f"tokenizer.path={run / 'tokenizer.json'}"],
                   REFUSED, "trained on other data"),  # the run's own tokenizer, so only the data differ
    "damaged checkpoint": ([], _truncate_state, REFUSED, "not a readable checkpoint"),
    "another model, no config.yaml": (["model.d_model=64"], lambda run: (run / "config.yaml").unlink(), REFUSED,
                                      "holds a different model"),
    "validation split too short": (["data.val_fraction=0.00001"], None, REFUSED, "validation split has"),
    "budget past train.max_epochs": (["train.max_epochs=0.0001"], None, REFUSED, "train.max_epochs: the budget"),
    "another model (config.yaml)": (["model.d_model=64"], None, REFUSED, "holds a run of another model"),
    "config.yaml not YAML": ([], lambda run: (run / "config.yaml").write_text("model: [\n"), REFUSED,
                             "cannot parse"),
    "resume and overwrite": (["train.overwrite=true"], None, REFUSED, "contradict each other"),
    "a bad value": (["optim.lr=-1"], None, REFUSED, "optim.lr"),
    "dir in use": ([], _hold_lock, REFUSED, "in use by another process"),
    "corrupt tokenizer file": ([], _corrupt_tokenizer, REFUSED, "token ids must be below 2**32"),
    "Ctrl-C in setup": ([], "ctrl-c", 130, "summary.json says completed; resume with"),  # what it still says
    "exception in setup": ([], "exception", 1, None),
}
DEFAULT = {"another tokenizer", "damaged checkpoint", "Ctrl-C in setup"}  # the rest: slow (make test-all)


def _prepare(name: str, run: Path, monkeypatch) -> tuple[list[str], object]:
    overrides, setup, _, _ = CASES[name]
    extra, cleanup = [], None
    if setup == "ctrl-c":
        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt
        monkeypatch.setattr(cache, "prepare_data", interrupted)
    elif setup == "exception":
        def broken(*args, **kwargs):
            raise RuntimeError("a bug in setup")
        monkeypatch.setattr(arch, "build_model", broken)
    elif setup is not None:
        got = setup(run)
        extra = got if isinstance(got, list) else []
        cleanup = got if callable(got) else None
    tokenizer = [] if "tokenizer=load" in extra else ["tokenizer.vocab_size=300"]  # the base run's tokenizer
    return [*TINY, *tokenizer, *overrides, *extra, "train.resume=true"], cleanup


def _check_refused(name: str, ran, before: dict, run: Path) -> None:
    _, _, status, words = CASES[name]
    assert ran.returncode == status, (name, ran.stderr[-2000:])
    if words is not None:
        lines = ran.stderr.splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in ran.stderr, (name, ran.stderr[-2000:])
    assert tree(run) == before, name


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT else pytest.mark.slow) for n in CASES])
def test_a_refused_resume_leaves_the_run_dir_byte_identical(name, run_dir, train_cli, monkeypatch):
    argv, cleanup = _prepare(name, run_dir, monkeypatch)
    before = tree(run_dir)
    try:
        ran = train_cli(*argv, f"hydra.run.dir={run_dir}")
    finally:
        if cleanup:
            cleanup()
    _check_refused(name, ran, before, run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["another tokenizer", "damaged checkpoint", "corrupt tokenizer file"])
def test_with_train_run_dir_no_hydra_dir_is_left_behind(name, run_dir, train_cli, monkeypatch, tmp_path):
    argv, _ = _prepare(name, run_dir, monkeypatch)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = tree(run_dir)
    ran = train_cli(*argv, f"train.run_dir={run_dir}", cwd=cwd)  # hydra.run.dir: outputs/<name>/<time> under cwd
    _check_refused(name, ran, before, run_dir)
    assert list(cwd.iterdir()) == []


def _break_the_loop(monkeypatch) -> None:
    from experiments.run.loop import TrainingRun

    def broken(self):
        raise RuntimeError("a bug in the loop")

    monkeypatch.setattr(TrainingRun, "after_step", broken)


@pytest.mark.slow
@pytest.mark.parametrize("fails_in", ["setup", "loop"])
def test_a_relative_train_run_dir_under_hydra_job_chdir(base_run, tmp_path, train_cli, monkeypatch, fails_in):
    """hydra.job.chdir=true: train() resolves a relative train.run_dir inside Hydra's dir, and so does the snapshot:
    a refusal puts the dir back, a run that failed in its loop keeps what it wrote there."""
    hydra_dir = tmp_path / "hydra_dir"
    shutil.copytree(base_run, hydra_dir / "rel")
    shutil.rmtree(hydra_dir / "rel" / ".hydra")
    before = tree(hydra_dir)
    if fails_in == "loop":
        _break_the_loop(monkeypatch)
    ran = train_cli(*TINY, "tokenizer.vocab_size=300", "train.resume=true", "train.run_dir=rel", "train.steps=5",
                    *(["tokenizer.pattern=gpt4"] if fails_in == "setup" else []), "hydra.job.chdir=true",
                    f"hydra.run.dir={hydra_dir}", cwd=tmp_path)
    if fails_in == "setup":
        assert ran.returncode == REFUSED and "trained on another tokenizer" in ran.stderr, ran.stderr[-2000:]
        assert tree(hydra_dir) == before
    else:
        assert ran.returncode == 1 and "a bug in the loop" in ran.stderr, ran.stderr[-2000:]
        assert '"status": "failed"' in (hydra_dir / "rel" / "summary.json").read_text()
        assert (hydra_dir / ".hydra" / "overrides.yaml").is_file()


def test_a_resume_that_fails_in_its_loop_keeps_what_it_wrote(run_dir, train_cli, monkeypatch):
    """Only a run that wrote nothing of its own is put back: one that reached its loop keeps its summary, metrics
    and Hydra's record of it."""
    _break_the_loop(monkeypatch)
    before = (run_dir / ".hydra" / "overrides.yaml").read_text()
    ran = train_cli(*TINY, "tokenizer.vocab_size=300", "train.steps=5", "train.resume=true",
                    f"hydra.run.dir={run_dir}")
    assert ran.returncode == 1 and "a bug in the loop" in ran.stderr
    assert '"status": "failed"' in (run_dir / "summary.json").read_text()
    assert "train.steps=5" in (run_dir / ".hydra" / "overrides.yaml").read_text() and "train.steps=5" not in before


@pytest.mark.slow
def test_an_accepted_resume_gets_hydras_new_record(run_dir, train_cli):
    before = (run_dir / ".hydra" / "overrides.yaml").read_text()
    ran = train_cli(*TINY, "tokenizer.vocab_size=300", "train.steps=4", "train.resume=true",
                    f"hydra.run.dir={run_dir}")
    assert ran.returncode == 0, ran.stderr[-2000:]
    after = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "train.steps=4" in after and "train.steps=4" not in before


# Any mix of refusing overrides with ones that a resume accepts is refused and changes nothing.
REFUSING = st.sampled_from(["tokenizer.pattern=gpt4", "data.val_fraction=0.2", "model.d_model=64",
                            "data.val_fraction=0.00001", "train.overwrite=true", "optim.lr=-1"])
HARMLESS = st.sampled_from(["train.log_interval=1", "train.eval_batches=1", "train.progress=false",
                            "logger=disabled", "train.keep_last_k=2"])


@pytest.mark.slow
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refusing=st.lists(REFUSING, min_size=1, max_size=3, unique=True),
       harmless=st.lists(HARMLESS, max_size=3, unique=True))
def test_any_refusing_override_mix_changes_nothing(base_run, tmp_path, train_cli, refusing, harmless):
    run = tmp_path / "mix"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(base_run, run)
    before = tree(run)
    ran = train_cli(*TINY, "tokenizer.vocab_size=300", *harmless, *refusing, "train.resume=true",
                    f"hydra.run.dir={run}")
    assert ran.returncode == REFUSED and len(ran.stderr.splitlines()) == 1, ran.stderr[-2000:]
    assert tree(run) == before
