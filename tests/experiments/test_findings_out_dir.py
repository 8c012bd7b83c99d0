"""A findings command owns its --out-dir (issue 31 §3): it claims the dir before it checks anything else, a second
command on the same dir is refused at once in one line, and a command refused or failed before its sweep started
leaves the dir as it found it, so the corrected command runs (experiments/findings/out_dir.py).

No training: the sweep (cli.run_sweep) is replaced where a command gets that far. The states of the dir before a
command (absent, absent below an absent parent, empty, holding a SIGKILLed holder's lock file) are crossed with the
ways a command ends early (a bad value, a bad option, the sweep itself refused with exit 2, Ctrl-C while checking),
and each is compared byte for byte with the state before.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from experiments.findings import cli
from experiments.findings.cli import main
from experiments.findings.out_dir import LOCK_NAME, OutDir
from tokenizer.cli_args import UsageError

from .conftest import PYTHON, REPO


def state(root: Path) -> dict[str, bytes | None] | None:
    """Every path under root (dirs as None, files as their bytes); None when root does not exist."""
    if not root.exists():
        return None
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def make(kind: str, base: Path) -> Path:
    """An --out-dir in the given state; returns the path to pass."""
    d = base / "parent" / "out"
    if kind == "absent":
        (base / "parent").mkdir()
    elif kind == "empty":
        d.mkdir(parents=True)
    elif kind == "stale lock":  # a command SIGKILLed while it held the dir: its lock file, no lock
        d.mkdir(parents=True)
        (d / LOCK_NAME).write_text("4242\n")
    return d  # "absent parent": neither exists


def _sweep_refused(argv):
    return 2, 0.1  # experiments.train refused the command (its own line) before any run


def _ctrl_c(*_args, **_kw):
    raise KeyboardInterrupt


ENDINGS = {  # how the command ends early -> (extra arguments, patch, exit status, what its last line says)
    "bad value": (["trian.steps=3"], None, 2, "did you mean train.steps?"),
    "bad option": (["--doc", str(REPO / "docs" / "findings" / "x.md")], None, 2, "--smoke never writes into"),
    "sweep refused": ([], ("run_sweep", _sweep_refused), 2, "the sweep was refused (above)"),
    "ctrl-c while checking": ([], ("check_config", _ctrl_c), 130, "findings: interrupted"),
}


KINDS = ["absent", "absent parent", "empty", "stale lock"]
DEFAULT_TIER = {("bad value", "absent parent"), ("bad option", "stale lock"), ("sweep refused", "empty"),
                ("ctrl-c while checking", "absent")}  # each ending and each state once; the whole table: slow


@pytest.mark.parametrize("ending, kind", [
    pytest.param(e, k, id=f"{e}-{k}", marks=() if (e, k) in DEFAULT_TIER else pytest.mark.slow)
    for e in ENDINGS for k in KINDS])
def test_a_command_that_ends_before_its_sweep_leaves_the_dir_as_it_found_it(tmp_path, monkeypatch, capsys,
                                                                           kind, ending):
    out = make(kind, tmp_path)
    top = tmp_path / "parent"
    before = state(top)
    args, patch, code, says = ENDINGS[ending]
    with monkeypatch.context() as m:
        if patch:
            m.setattr(cli, *patch)
        assert main(["rope_vs_learned", "--smoke", "--out-dir", str(out), *args]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert says in err[-1] and not any("Traceback" in line for line in err)
    assert state(top) == before
    # the corrected command runs (its sweep replaced by one that produces nothing: exit 1, "no runs")
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (1, 0.1))
    assert main(["rope_vs_learned", "--smoke", "--out-dir", str(out)]) == 1
    assert json.loads((out / "finding.json").read_text())["attempts"] == 1
    assert not (out / LOCK_NAME).exists()


def test_a_tuned_findings_value_is_refused_with_exit_2_and_no_out_dir(tmp_path, capsys):
    """issue 31 §2: `findings … hydra.sweeper.widen=-1` was exit 1 with an out-dir left behind."""
    for args, says in ((["hydra.sweeper.widen=-1"], "hydra.sweeper.widen: must be an integer >= 0"),
                       (["hydra.sweeper.tune={optim.lrr:[1e-3,3e-3,1e-2,3e-2]}"], "did you mean optim.lr?")):
        out = tmp_path / "out"
        assert main(["rope_vs_learned_v2", "--smoke", "--out-dir", str(out), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("findings: error: config error: ") and says in err[0], err
        assert not out.exists()


def test_a_second_command_on_a_held_dir_is_refused_at_once(tmp_path, monkeypatch, capsys):
    """While one command holds the dir (here this process, through OutDir), another is refused in one line naming
    its pid, within a second, whatever it was asked (a fresh run, --resume, --from-sweep), and changes nothing."""
    out = tmp_path / "out"
    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.1))[1])
    with OutDir(out, fresh=True) as held:
        (out / "finding.json").write_text(json.dumps({"name": "rope_vs_learned", "smoke": True}))
        held.keep()
        before = state(out)
        for args in (["--smoke", "--out-dir", str(out)], ["--resume", "--out-dir", str(out)],
                     ["--from-sweep", str(out)]):
            t0 = time.monotonic()
            assert main(["rope_vs_learned", *args]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert time.monotonic() - t0 < 1.0
            assert len(err) == 1 and f"{out} is in use by another findings command (pid {os.getpid()})" in err[0]
            assert state(out) == before and seen == []
    assert not (out / LOCK_NAME).exists()  # released with its block


def test_resume_refused_by_the_sweep_keeps_finding_json_byte_for_byte(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (1, 0.1))
    assert main(["rope_vs_learned", "--smoke", "--out-dir", str(out)]) == 1
    before = state(out)
    monkeypatch.setattr(cli, "run_sweep", _sweep_refused)
    assert main(["rope_vs_learned", "--resume", "--out-dir", str(out)]) == 2
    assert "the sweep was refused" in capsys.readouterr().err
    assert state(out) == before


def test_outdir_refusals_are_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    for path, fresh, says in ((tmp_path / "file", True, "exists and is not a directory"),
                              (tmp_path / "file" / "below", True, "cannot be created"),
                              (tmp_path / "full", True, "already exists and is not an empty directory"),
                              (tmp_path / "nope", False, "no such directory")):
        before = state(tmp_path)
        with pytest.raises(UsageError, match=says):
            with OutDir(path, fresh=fresh):
                pass
        assert state(tmp_path) == before


RACER = textwrap.dedent("""
    import sys, time
    from experiments.findings import cli
    def sweep(argv):
        time.sleep(3)  # long enough for the other command to meet the claim
        return 1, 3.0
    cli.run_sweep = sweep
    sys.exit(cli.main(["rope_vs_learned", "--smoke", "--out-dir", sys.argv[1], "--doc", sys.argv[2]]))
""")


def test_two_commands_started_together_one_runs_one_is_refused(tmp_path):
    """The race of issue 31 §3, with real processes: both started at once on a new dir. Exactly one claims it and
    runs (its sweep: 3 s, then exit 1, no runs); the other exits 2 in one line naming the holder; finding.json counts
    one attempt."""
    out = tmp_path / "out"
    env = {**os.environ, "WANDB_MODE": "disabled"}
    procs = [subprocess.Popen([PYTHON, "-c", RACER, str(out), str(tmp_path / f"doc{i}.md")], cwd=REPO, env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [1, 2], results
    refused = next(err for rc, err in results if rc == 2).strip().splitlines()
    assert len(refused) == 1 and "is in use by another findings command (pid " in refused[0], refused
    meta = json.loads((out / "finding.json").read_text())
    assert meta["attempts"] == 1 and not (out / LOCK_NAME).exists()
