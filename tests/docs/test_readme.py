"""README.md runs top to bottom, as written, in one directory, as a new user would follow it.

What runs: the README's blocks in their order: ```bash / ```console / ```sh blocks one command at a time (the
rules of tests/docs/test_commands.py: `$ ` dropped, `\\` continuations joined, `#` lines skipped), ```python
blocks each as one script (`python -`). All of them in ONE temporary directory that is a fresh clone of this tree:
its tracked and not-ignored files copied, `.venv` the venv of the interpreter running the tests (linked, never
reinstalled: the copied pyproject.toml is dated before the venv's install stamp), and no ../shared beside it.
The first block (`make demo`) runs before the venv is activated, as the README orders it (`.venv/bin` not on PATH);
the blocks after the README's "Activate it with `source .venv/bin/activate`" run with it activated. Placeholders a
user fills in are filled the way a user would: `outputs/default/<time>` / `multirun/<name>/<time>` name the newest
such dir, the one the README's commands above just made (test_commands.resolve).

What the test sets, not the commands: ARCHLAB_MAX_STEPS (every training run stops after that many optimizer steps,
whatever its budget: experiments/run/budget.py), its own ARCHLAB_CACHE, wandb disabled and the hub offline, one
torch thread. What a user supplies (the README names each) is made by the test from the embedded corpus
(test_commands.user_files: data/train.txt, data/val.txt, data/docs.jsonl, books/*.txt, notes.txt), plus GPT-2's
vocab.json / merges.txt as small stand-ins in GPT-2's format (no network here).

A command fails the test when it exits non-zero or prints a Python traceback. A command that a command prints for
the user to run next (`make demo`'s `compare by hand: ...`) is run too, as printed, in the same shell.
Not run, with the reason printed: `make test` (this suite) and `wandb login` / `wandb sync` (network, account).

Two tiers:
* `test_readme_top_to_bottom` (slow): every command for real, ARCHLAB_MAX_STEPS=2.
* `test_readme_in_order` (default; 54 s on the 2-core machine at load ~2, 11 min at load ~8): the same walk, every
  block, ARCHLAB_MAX_STEPS=1, each command in its cheap form where it trains more than one tiny model: a sweep
  (`-m`), `torchrun` and a run of a larger preset (`model=small`) get the command line's own checks in this process
  (experiments.config.precheck: groups, keys, values, launcher plugin, budget, data files, run dirs), and a sweep
  then gets synthetic run dirs (tests/experiments/synthetic_runs.py) where it would have written, so the commands
  below that read it run on something; `make demo` is `make -n demo` (the target is there and would not reinstall; its printed command is
  tests/experiments/test_python_command.py's). The other `python -m experiments.*` commands run in this process
  (as tests/experiments' train_cli: same argv, cwd, environment and exit status), skipping the interpreter's
  start-up, and so do the python blocks (each in a namespace of its own); `bpe` and pipelines run in bash.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.test_commands import resolve, shell_commands, user_files

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FENCE = re.compile(r"^```(bash|console|sh|shell|python)\n(.*?)^```", re.S | re.M)
ACTIVATE = "source .venv/bin/activate"  # the README's sentence that activates the venv, after its first block
TRACEBACK = "Traceback (most recent call last)"
FOLLOW = re.compile(r"^compare by hand: (.+)$", re.M)  # a command the demo prints for the user to run next
SKIP = [(re.compile(r"^make test\b"), "the test suite itself (this test is part of it)"),
        (re.compile(r"^wandb (login|sync)\b"), "needs the network and a wandb account")]
TIMEOUT = 900
BOOK_CHARS = 40_000  # books/*.txt and notes.txt: the user's text files, cut to this many characters each


@dataclass(frozen=True)
class Step:
    line: int  # README line of the command (or of the python block's first line)
    kind: str  # "shell" | "python"
    text: str
    activated: bool  # after the README's `source .venv/bin/activate`

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text if self.kind == 'shell' else 'python block'}"


def readme_steps(text: str | None = None) -> list[Step]:
    """Every command and python block of the README, in order."""
    text = README.read_text() if text is None else text
    activate_at = text.find(ACTIVATE)
    assert activate_at > 0, f"the README no longer says {ACTIVATE!r}: update ACTIVATE"
    steps = []
    for m in FENCE.finditer(text):
        first = text[: m.start(2)].count("\n") + 1
        activated = m.start() > activate_at
        if m.group(1) == "python":
            steps.append(Step(first, "python", m.group(2), activated))
        else:
            steps += [Step(line, "shell", cmd, activated) for line, cmd in shell_commands(m.group(2), first)]
    return steps


def skip_reason(step: Step) -> str | None:
    return next((why for pattern, why in SKIP if step.kind == "shell" and pattern.search(step.text)), None)


# -- the workspace: a fresh clone with the user's files ----------------------------------------------------------


def venv_dir() -> Path | None:
    """The venv of this interpreter when `make` made it (its install stamp is there), else None."""
    prefix = Path(sys.prefix)
    return prefix if prefix != Path(sys.base_prefix) and (prefix / ".archlab-installed").exists() else None


def gpt2_stand_ins(root: Path) -> None:
    """vocab.json and merges.txt in GPT-2's format (byte-to-unicode tokens, `#version` header), a few merges."""
    import json

    from tokenizer.formats import bytes_to_unicode

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    (root / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (root / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), encoding="utf-8")


def make_clone(root: Path) -> Path:
    """A fresh clone of this tree at `root` (tracked and not-ignored files), the venv linked, the user's files."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / rel)
    venv = venv_dir()
    if venv is not None:
        (root / ".venv").symlink_to(venv, target_is_directory=True)
        os.utime(root / "pyproject.toml", (0, 0))  # older than the venv's stamp: make never reinstalls
    user_files(root)
    for name in ("notes.txt", *(f"books/{p.name}" for p in (root / "books").glob("*.txt"))):
        (root / name).write_text((root / name).read_text()[:BOOK_CHARS])  # small: a tokenizer and an eval on them
    gpt2_stand_ins(root)
    return root


def user_shell(root: Path, activated: bool) -> dict[str, str]:
    """The user's shell: this venv not on PATH, or activated (PATH and VIRTUAL_ENV) as the README says."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    bins = {str(Path(sys.prefix) / "bin"), str(Path(sys.executable).parent)}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p not in bins]
    if activated:
        path.insert(0, str(root / ".venv" / "bin"))
        env["VIRTUAL_ENV"] = str(root / ".venv")
    env["PATH"] = os.pathsep.join(path)
    return env


def readme_env(root: Path, cache: Path, max_steps: int, activated: bool) -> dict[str, str]:
    """The user's shell plus the test's settings (module docstring)."""
    return {**user_shell(root, activated), "ARCHLAB_MAX_STEPS": str(max_steps), "ARCHLAB_CACHE": str(cache),
            "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "ARCHLAB_PEAK_FLOPS": "1e12", "PYTHONUNBUFFERED": "1"}


# -- running ----------------------------------------------------------------------------------------------------


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_shell(cmd: str, root: Path, env: dict[str, str], stdin: str | None = None) -> Result:
    p = subprocess.run(["bash", "-c", cmd], cwd=root, env=env, input=stdin, capture_output=True, text=True,
                       timeout=TIMEOUT)
    return Result(p.returncode, p.stdout, p.stderr)


def failure(step: Step, ran_as: str, r: Result) -> str | None:
    """Why the command failed (exit status, a printed traceback) with the tails of its output, else None."""
    text = r.out + r.err
    if r.code == 0 and TRACEBACK not in text:
        return None
    return (f"{step}\n  ran as: {ran_as}\n  exit {r.code}{' (printed a traceback)' if TRACEBACK in text else ''}\n"
            f"--- stderr (tail)\n{r.err[-3000:]}\n--- stdout (tail)\n{r.out[-1500:]}")


@dataclass
class Walk:
    log: list[str]  # what ran (as written / in its cheap form), what was skipped and why
    failures: list[str]


def walk(root: Path, env_of, cheap=None) -> Walk:
    """Every step of the README in order in `root`, going on after a failure (a later one may follow from it), in
    the environment `env_of(activated)`; `cheap(step, cmd, env) -> Result | None` runs a command in its cheap form
    (None: as written)."""
    w = Walk([], [])
    for step in readme_steps():
        t0 = time.perf_counter()
        walk_step(step, w, root, env_of(step.activated), cheap)
        if w.log and not w.log[-1].startswith("skipped"):
            w.log[-1] += f"  ({time.perf_counter() - t0:.1f} s)"
    return w


def walk_step(step: Step, w: Walk, root: Path, env: dict[str, str], cheap) -> None:
    """One step of walk(): its log line(s) and failures go into `w`."""
    if why := skip_reason(step):
        w.log.append(f"skipped {step}  [{why}]")
        return
    if step.kind == "python":
        code = resolve(step.text, root)
        r = cheap(step, code, env) if cheap is not None else None
        w.log.append(f"{'ran' if r is None else 'cheap form of'} {step}")
        r = r or run_shell("python -", root, env, stdin=code)
        w.failures += filter(None, [failure(step, "python - <<< the block", r)])
        return
    if step.text.startswith("make ") and venv_dir() is None:
        w.log.append(f"skipped {step}  [the tests' interpreter is not a venv made by make]")
        return
    try:
        cmd = resolve(step.text, root)
    except AssertionError as e:  # a placeholder with nothing to name: what should have made it failed above
        w.failures.append(f"{step}\n  {e}")
        return
    r = cheap(step, cmd, env) if cheap is not None else None
    w.log.append(f"{'ran' if r is None else 'cheap form of'} {step}")
    if r is None:
        r = run_shell(cmd, root, env)
    w.failures += filter(None, [failure(step, cmd, r)])
    for printed in FOLLOW.findall(r.out):  # what it printed for the user to run next, run as printed
        w.log.append(f"ran {printed}  (printed by README.md:{step.line})")
        w.failures += filter(None, [failure(step, f"{printed}  (printed by it)", run_shell(printed, root, env))])


# -- the cheap forms ---------------------------------------------------------------------------------------------

IN_PROCESS = re.compile(r"^python -m (experiments(\.\w+)*|arch\.info)(\s|$)")
LARGER = re.compile(r"\bmodel=(small|gpt2-\w+|gpt3-\w+)\b")  # a model larger than the tiny one: checked, not trained
SHELL_SYNTAX = re.compile(r"[|&;<>$`*?]")  # outside quotes: the command needs bash


def _plain(cmd: str) -> bool:
    """No shell syntax outside quotes before a trailing comment: shlex.split gives exactly the argv bash would."""
    quote = ""
    for i, c in enumerate(cmd):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or cmd[i - 1].isspace()):
            return True
        elif SHELL_SYNTAX.match(c):
            return False
    return True


def sweep_argv(cmd: str) -> list[str] | None:
    """The experiments.train arguments of a sweep or a torchrun command, else None."""
    words = shlex.split(cmd, comments=True)
    if words[:1] == ["torchrun"] and "experiments.train" in words:
        return words[words.index("experiments.train") + 1:]
    if words[:3] == ["python", "-m", "experiments.train"] and ("-m" in words[3:] or "--multirun" in words[3:]):
        return words[3:]
    return None


class CheapForms:
    """The cheap form of each command (module docstring), run in this process where it is a python -m command."""

    def __init__(self, root: Path, monkeypatch, capfd) -> None:
        self.root, self.monkeypatch, self.capfd = root, monkeypatch, capfd

    def __call__(self, step: Step, cmd: str, env: dict[str, str]) -> Result | None:
        if step.kind == "python":
            return self.exec_block(step, cmd, env)
        words = shlex.split(cmd, comments=True)
        if words[:1] == ["make"]:  # a dry run: the target exists and would not reinstall the venv
            r = run_shell(shlex.join(["make", "-n", *words[1:]]), self.root, env)
            return r if r.code or ".venv/bin/python -m" in r.out else Result(1, r.out, "make -n: no .venv/bin/python")
        argv = sweep_argv(cmd)
        if argv is not None:
            return self.precheck(argv, env, stand_in=True)
        if IN_PROCESS.match(cmd) and _plain(cmd):
            if words[2] == "experiments.train" and LARGER.search(cmd):
                return self.precheck(words[3:], env, stand_in=False)
            return self.in_process(cmd, env)
        return None

    def _enter(self, env: dict[str, str]) -> None:
        for key in set(os.environ) - set(env):
            self.monkeypatch.delenv(key)
        for key, value in env.items():
            self.monkeypatch.setenv(key, value)
        self.monkeypatch.chdir(self.root)
        self.capfd.readouterr()

    def in_process(self, cmd: str, env: dict[str, str]) -> Result:
        from tests.experiments.conftest import exit_status

        words = shlex.split(cmd, comments=True)
        module, args = words[2], words[3:]
        self._enter(env)
        # the interpreter the command would run: the clone's .venv/bin/python (make's, or the activated `python`)
        if (self.root / ".venv" / "bin" / "python").exists():
            self.monkeypatch.setattr(sys, "executable", str(self.root / ".venv" / "bin" / "python"))
        code = exit_status(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True), self.monkeypatch,
                           [module, *args])
        out, err = self.capfd.readouterr()
        return Result(code, out, err)

    def exec_block(self, step: Step, code: str, env: dict[str, str]) -> Result:
        """The block as a script in this process (its own namespace, the clone as cwd): no interpreter start-up."""
        import traceback

        self._enter(env)
        try:
            exec(compile(code, f"README.md:{step.line}", "exec"), {"__name__": "__main__"})
            code_ = 0
        except BaseException:  # noqa: BLE001 - what `python -` would print and exit 1 with
            traceback.print_exc()
            code_ = 1
        out, err = self.capfd.readouterr()
        return Result(code_, out, err)

    def precheck(self, argv: list[str], env: dict[str, str], stand_in: bool) -> Result:
        """The command line's checks (as `python -m experiments.train` makes them before Hydra starts); for a sweep
        (`stand_in`), synthetic run dirs in its sweep dir."""
        from experiments.config.argv import parse_command
        from experiments.config.compose import compose_config
        from experiments.config.errors import ConfigError
        from experiments.config.precheck import _first_point, precheck
        from tests.experiments.synthetic_runs import GROUPS, write_sweep

        self._enter(env)
        argv = [*(["-m"] if stand_in else []), *[a for a in argv if a not in ("-m", "--multirun")]]
        try:
            precheck(argv)
        except ConfigError as e:
            return Result(2, "", f"config error: {e}\n")
        if not stand_in:
            return Result(0, "(checked)\n", "")
        _, overrides = parse_command(argv)
        cfg = compose_config([p for p in map(_first_point, overrides) if p], return_hydra_config=True)
        sweep = self.root / str(cfg.hydra.sweep.dir)
        write_sweep(sweep, groups=[GROUPS[0], GROUPS[3]], seeds=(0, 1), experiment=str(cfg.experiment_name))
        return Result(0, f"(checked; synthetic runs in {sweep})\n", "")


# -- the tests ---------------------------------------------------------------------------------------------------


def test_the_readme_has_its_blocks_in_order_and_the_test_reads_them_all():
    steps = readme_steps()
    text = README.read_text()
    assert len([s for s in steps if s.kind == "python"]) == text.count("```python\n")
    assert steps[0].text.startswith("make demo") and not steps[0].activated and steps[-1].activated
    assert any("wandb login" in s.text for s in steps), "the README says to log in before wandb sync"
    lines = [s.line for s in steps]
    assert lines == sorted(lines)


@pytest.mark.parametrize("cmd,argv", [
    ("python -m experiments.train -m experiment=pos_encodings hydra/launcher=joblib_2",
     ["-m", "experiment=pos_encodings", "hydra/launcher=joblib_2"]),
    ("torchrun --standalone --nproc_per_node 2 -m experiments.train model=small train.tokens=2000000",
     ["model=small", "train.tokens=2000000"]),
    ("python -m experiments.train train.steps=20 hydra.run.dir=outputs/run1", None),
])
def test_sweeps_and_torchrun_are_told_apart(cmd, argv):
    assert sweep_argv(cmd) == argv


def test_a_command_with_shell_syntax_goes_to_bash():
    assert _plain("python -m experiments.train data=text 'data.paths=[books/*.txt]'")
    assert _plain("python -m experiments.compare multirun/x   # -> multirun/x/report/report.html")
    assert not _plain("python -m experiments.compare multirun/x/*/wandb")
    assert not _plain("echo 1 | bpe decode --tokenizer runs/tok8k")


@pytest.fixture(scope="module")
def readme_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme_cache")


def _report(w: Walk) -> str:
    return "\n".join(w.log) + f"\n\n{len(w.failures)} failed:\n\n" + "\n\n".join(w.failures)


def test_readme_in_order(tmp_path, readme_cache, monkeypatch, capfd):
    root = make_clone(tmp_path / "clone")
    w = walk(root, lambda activated: readme_env(root, readme_cache, 1, activated), CheapForms(root, monkeypatch, capfd))
    with capfd.disabled():
        print("\n" + "\n".join(w.log))
    assert not w.failures, _report(w)
    assert sum("python block" in e for e in w.log) == README.read_text().count("```python\n")  # every block went


@pytest.mark.slow
def test_readme_top_to_bottom(tmp_path, readme_cache):
    root = make_clone(tmp_path / "clone")
    w = walk(root, lambda activated: readme_env(root, readme_cache, 2, activated))
    print("\n" + "\n".join(w.log))
    assert not w.failures, _report(w)
    assert any("(printed by" in e for e in w.log), "make demo's last line is run as printed"
