"""Every shell command in docs/**/*.md runs as written (exit status 0). README.md is tests/docs/test_readme.py's: it
runs the README's blocks in order in one clone, as a user follows them (its blocks build on each other).

The commands are the lines of the ```bash / ```console / ```sh blocks (a leading `$ ` dropped, `\\` continuations
joined, `#` comment lines ignored). Each block runs in order, with bash, in a fresh directory of its own that holds
what the docs assume a user has (`make_workspace`): `data/train.txt` and `data/val.txt` (the embedded corpus,
split 90/10), `data/docs.jsonl`, `books/*.txt`, `notes.txt`, `a.txt`, `more/*.txt`, `docs/findings/` (a
copy, for `--index`) and `README.md` (a copy: a v3 finding's --smoke scores it as its stand-in second corpus). Nothing comes from ../shared, so the test runs on a fresh clone. `python` and `bpe` are this
interpreter's; the network and wandb are off.

Placeholders: a run or sweep dir written `<time>` or with a date stamp (`outputs/default/<time>`,
`multirun/pos_encodings/2026-11-21_01-00-00`) and `RUN` are the newest dir of that name in the block's directory,
either made by an earlier command of the block or a stand-in the test trains beforehand (`STAND_INS`: a 20-step
run in outputs/default/, 2-run sweeps in multirun/pos_encodings/, multirun/depth_vs_width/ and
multirun/seq2seq_reverse/). A placeholder with no such dir fails the test (add a stand-in).

Which commands run (`classify`), by rule:
* skipped, with the reason printed:
  - `make ...`: creates the venv and runs the whole suite or the demo (CI runs those itself);
  - network or a cluster: `curl`/`wget` downloads, `pip install`, `wandb login/sync`, `data=tinystories`, `--dataset roneneldan/...`,
    `logger=wandb_online`, `hydra/launcher=slurm`, the local SLURM cluster (`scripts/local_slurm.sh`, `sinfo`: root);
  - many runs or processes: sweeps (`experiments.train -m`), `torchrun`, benchmarks (`bench/`, `taskset`), a
    finding's full run (`experiments.findings NAME` without `--smoke`) or pilot (`experiments.findings.pilot NAME`
    without `--smoke`): minutes to hours;
  - training budgets beyond the tiny model's default 200 steps: `model=small` or a GPT preset, `train.tokens` above
    300,000;
  - a command that names a dir a skipped command of its block makes (`hydra.sweep.dir=` / `hydra.run.dir=`);
* cheap (this file's default test, `test_cheap_doc_commands`): `bpe ...` pipelines and training runs of at most 20
  steps (`train.steps=N`, N <= 20): the tokenizer flow (train / encode / decode / info / convert) and a tiny run;
* the rest (`slow`, `test_doc_commands`): default 200-step training runs, sample / evaluate / export / compare on
  runs, `experiments.findings --smoke`, `--list`, `--index`, `python -m arch.info`, `--cfg job`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [*sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs" / "findings").glob("*.md"))]
BLOCK = re.compile(r"^```(?:bash|console|sh|shell)\n(.*?)^```", re.S | re.M)
STAMP = r"(?:<time>|\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d)"
PLACEHOLDER = re.compile(rf"\b(outputs|multirun)/([\w.-]+)/{STAMP}|(?<![\w/.-])RUN(?![\w/.-])")
OLD = "2000-01-01_00-00-00"  # the stand-ins' stamp: older than anything a block makes
BIN = Path(sys.executable).parent  # this interpreter's python and bpe
TIMEOUT = 600

# Stand-ins for what a user would have run before a block that reads a run or a sweep: (dir, train arguments).
_QUICK = ["train.steps=20", "train.eval_interval=10", "train.eval_batches=2", "train.ckpt_interval=20", "logger=disabled",
          "train.progress=false"]
STAND_INS = [
    (f"outputs/default/{OLD}", [*_QUICK, "train.extrap=end", "train.extrap_max_tokens=1024"]),
    (f"multirun/pos_encodings/{OLD}", ["-m", "model/pos=learned,rope", "experiment_name=pos_encodings", *_QUICK]),
    (f"multirun/depth_vs_width/{OLD}", ["-m", "model.n_layers=1,2", "experiment_name=depth_vs_width", *_QUICK]),
    (f"multirun/seq2seq_reverse/{OLD}", ["-m", "task=seq2seq", "data.task=reverse", "model/pos=learned,alibi",
                                         "experiment_name=seq2seq_reverse", *_QUICK]),
]

SKIPS = [
    (re.compile(r"^make\b|&& (/usr/bin/time .*)?make\b"), "a make target: creates the venv and runs the suite or the demo (CI runs them)"),
    (re.compile(r"-m pytest\b|\bknown_mutations\.sh\b"), "the test suite, a tier of it, or a clone's suite per mutation"),
    (re.compile(r"\bgit (archive|clone -q \.)"), "reads the project's git history (the workspace is not a clone)"),
    (re.compile(r"^(curl|wget)\b|\bgit clone https?://|\bpip install\b|\bwandb (login|sync)\b|data=tinystories|--dataset roneneldan/"
                r"|logger=wandb_online|hydra/launcher=slurm"), "needs the network or a cluster"),
    (re.compile(r"\blocal_slurm\.sh\b|^sinfo\b"), "needs root and the SLURM packages (tests/experiments/test_slurm.py starts it)"),
    (re.compile(r"\btorchrun\b"), "several processes (DDP)"),
    (re.compile(r"experiments\.train\b.*\s(-m|--multirun)(\s|$)"), "a sweep: many training runs"),
    (re.compile(r"experiments\.findings\s+(?!-)(?!.*--smoke)"), "a finding's full run: hours"),
    (re.compile(r"experiments\.findings\.pilot\s+(?!.*--smoke)"), "a finding's pilot: 16 full-budget runs"),
    (re.compile(r"\b(python|bash)\s+bench/|^taskset\b"), "a benchmark: minutes"),
    (re.compile(r"\bmodel=(small|gpt2-\w+|gpt3-\w+)\b"), "trains a model larger than the tiny one"),
]


@dataclass(frozen=True)
class Command:
    doc: str  # path relative to the repo
    line: int  # line of the command in the doc
    text: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def shell_commands(body: str, first: int) -> list[tuple[int, str]]:
    """(line, command) of a shell block's body whose first line is line `first` of its doc: a leading `$ `
    dropped, `\\` continuations joined, blank and `#` comment lines skipped."""
    cmds, pending, start = [], "", 0
    for i, raw in enumerate(body.splitlines()):
        line = raw.strip()
        if not pending:
            if not line or line.startswith("#"):
                continue
            line, start = (line[2:] if line.startswith("$ ") else line), first + i
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        cmds.append((start, pending + line))
        pending = ""
    return cmds


def blocks() -> list[list[Command]]:
    """The shell blocks of every doc, each a list of its commands."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in BLOCK.finditer(text):
            first = text[: m.start(1)].count("\n") + 1
            cmds = [Command(str(path.relative_to(REPO)), line, cmd) for line, cmd in shell_commands(m.group(1), first)]
            if cmds:
                out.append(cmds)
    return out


def classify(cmd: str) -> tuple[str, str]:
    """("skip", why) | ("cheap", "") | ("slow", ""): the rules of the module docstring."""
    for pattern, why in SKIPS:
        if pattern.search(cmd):
            return "skip", why
    tokens = re.search(r"\btrain\.tokens=(\d+)", cmd)
    if tokens and int(tokens.group(1)) > 300_000:
        return "skip", "a training budget beyond the tiny model's 200 steps"
    words = shlex.split(cmd, comments=True)
    programs = {w for w, before in zip(words, ["|", *words]) if before == "|"}  # the first word of each pipe stage
    if programs <= {"bpe", "echo"}:
        return "cheap", ""
    steps = re.search(r"\btrain\.steps=(\d+)", cmd)
    if "experiments.train" in cmd and steps and int(steps.group(1)) <= 20:
        return "cheap", ""
    return "slow", ""


def _block_id(block: list[Command]) -> str:
    return f"{block[0].doc}:{block[0].line}"


BLOCKS = blocks()


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ARCHLAB_CACHE": str(cache),
                "ARCHLAB_PEAK_FLOPS": "1e12", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    return env


def make_workspace(root: Path) -> Path:
    """The files the docs' commands read, from the embedded corpus (no ../shared, no network)."""
    user_files(root)
    shutil.copytree(REPO / "docs" / "findings", root / "docs" / "findings")
    shutil.copy(REPO / "README.md", root / "README.md")  # a v3 --smoke's stand-in second corpus (the repo root's)
    return root


def user_files(root: Path) -> Path:
    """What the docs ask a user to supply, from the embedded corpus: data/train.txt and data/val.txt (split 90/10),
    data/docs.jsonl, books/*.txt, notes.txt, a.txt, more/*.txt."""
    import json

    from tokenizer.corpus import embedded_documents

    docs = embedded_documents()
    n = len(docs) * 9 // 10
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "train.txt").write_text("\n".join(docs[:n]))
    (root / "data" / "val.txt").write_text("\n".join(docs[n:]))
    (root / "data" / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs[:20]))
    (root / "books").mkdir()
    for i in range(3):
        (root / "books" / f"book{i}.txt").write_text("\n".join(docs[i::3]))
    (root / "more").mkdir()
    for i, name in enumerate(("notes.txt", "a.txt", "more/b.txt")):  # a few documents each: val windows of n_ctx
        (root / name).write_text("\n".join(docs[i::7]))
    return root


def _newest(root: Path, parent: str) -> str:
    dirs = sorted(p.name for p in (root / parent).glob("*") if p.is_dir()) if (root / parent).is_dir() else []
    if not dirs:
        raise AssertionError(f"no dir under {parent}/ for its placeholder: add a stand-in to STAND_INS")
    return f"{parent}/{dirs[-1]}"


def resolve(cmd: str, root: Path) -> str:
    """Placeholders -> the newest matching dir in root (module docstring)."""
    def sub(m: re.Match) -> str:
        return _newest(root, f"{m.group(1)}/{m.group(2)}") if m.group(1) else _newest(root, "outputs/default")

    return PLACEHOLDER.sub(sub, cmd)


_WRITES = re.compile(r"\bhydra\.(?:sweep|run)\.dir=([^\s'\"]+)")


def _reads_unmade(cmd: str, unmade: set[str]) -> str | None:
    """The first dir in `unmade` (written by a skipped command of the block) that cmd names, else None."""
    return next((d for d in sorted(unmade) if re.search(rf"(?<![\w/.-]){re.escape(d)}(?![\w.-])", cmd)), None)


def run_block(block: list[Command], root: Path, env: dict[str, str], tiers: set[str]) -> list[str]:
    """Run the block's commands of the given tiers in order; returns what was skipped and why.

    A command that names a run or sweep dir which a skipped command of the block would have made (its
    `hydra.sweep.dir=` / `hydra.run.dir=`) is skipped too: it has nothing to read."""
    skipped, unmade = [], set()
    for c in block:
        tier, why = classify(c.text)
        if tier in tiers and (d := _reads_unmade(c.text, unmade)):
            tier, why = "skip", f"reads {d}, which a skipped command above makes"
        if tier not in tiers:
            skipped.append(f"{c}  [{why or tier}]")
            unmade.update(_WRITES.findall(c.text))
            continue
        cmd = resolve(c.text, root)
        p = subprocess.run(["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, (f"{c}\n  ran as: {cmd}\n  exit {p.returncode}\n"
                                   f"--- stderr (tail)\n{p.stderr[-3000:]}\n--- stdout (tail)\n{p.stdout[-1500:]}")
    return skipped


@pytest.fixture(scope="session")
def doc_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("doc_cache")


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory, doc_cache) -> Path:
    """The runs and sweeps of STAND_INS, trained once per session."""
    root = tmp_path_factory.mktemp("stand_ins")
    for rel, args in STAND_INS:
        key = "hydra.sweep.dir" if "-m" in args else "hydra.run.dir"
        p = subprocess.run([sys.executable, "-m", "experiments.train", *args, f"{key}={rel}"], cwd=root,
                           env=_env(doc_cache), capture_output=True, text=True, timeout=TIMEOUT)
        assert p.returncode == 0, f"stand-in {rel}: exit {p.returncode}\n{p.stderr[-3000:]}"
    return root


def _workspace(tmp_path: Path, stand_ins: Path | None) -> Path:
    root = make_workspace(tmp_path / "ws")
    if stand_ins is not None:
        for top in ("outputs", "multirun"):
            shutil.copytree(stand_ins / top, root / top)
    return root


# -- the rules themselves ----------------------------------------------------------------------------------------


def test_the_docs_have_commands_and_the_cheap_set_holds_the_tokenizer_flow_and_a_tiny_run():
    cmds = [c for b in BLOCKS for c in b]
    cheap = [c.text for c in cmds if classify(c.text)[0] == "cheap"]
    assert len(cmds) > 50
    for needle in ("bpe train data/train.txt", "bpe encode --tokenizer runs/tok8k data/val.txt", "| bpe decode",
                   "bpe info", "bpe convert", "experiments.train model/param=mup model.base_width=32 train.steps=20"):
        assert any(needle in c for c in cheap), needle
    assert classify("python -m experiments.train -m experiment=pos_encodings")[0] == "skip"
    assert classify("python -m experiments.train model=small train.tokens=2000000")[0] == "skip"
    assert classify("python -m experiments.train data=text train.tokens=5000000")[0] == "skip"
    assert classify("python -m experiments.findings rope_vs_learned")[0] == "skip"
    assert classify("python -m experiments.findings rope_vs_learned --smoke")[0] == "slow"
    assert classify("python -m experiments.findings.pilot rope_vs_learned_v3 --sizes s,m")[0] == "skip"
    assert classify("python -m experiments.findings.pilot rope_vs_learned_v3 --smoke --out-dir /tmp/p")[0] == "slow"
    assert classify("python -m experiments.findings --list")[0] == "slow"
    assert classify("python -m experiments.train")[0] == "slow"


def test_no_doc_trains_a_tokenizer_on_validation_text(tmp_path):
    """`bpe train`'s inputs (globs expanded in the workspace) are never a val file that the flow later encodes."""
    root = make_workspace(tmp_path / "ws")
    trains = [c for b in BLOCKS for c in b if re.match(r"bpe train\b", c.text)]
    assert trains
    for c in trains:
        words = shlex.split(c.text, comments=True)[2:]
        inputs = [w for w, before in zip(words, ["", *words]) if not w.startswith("-") and not before.startswith("-")]
        files = [p for pattern in inputs for p in root.glob(pattern)]
        assert not [p for p in files if "val" in p.name], f"{c}: trains on {files}"


def test_placeholders_resolve_to_the_newest_dir(tmp_path):
    for d in (f"outputs/default/{OLD}", "outputs/default/2026-01-02_00-00-00", f"multirun/pos_encodings/{OLD}"):
        (tmp_path / d).mkdir(parents=True)
    assert resolve("python -m experiments.evaluate RUN --json", tmp_path) == \
        "python -m experiments.evaluate outputs/default/2026-01-02_00-00-00 --json"
    assert resolve("x multirun/pos_encodings/2026-11-21_01-00-00 --by a", tmp_path) == \
        f"x multirun/pos_encodings/{OLD} --by a"
    assert resolve("x outputs/default/<time>/wandb", tmp_path) == "x outputs/default/2026-01-02_00-00-00/wandb"
    assert resolve("x data.paths=[RUNS/a.txt] experiments.train", tmp_path) == "x data.paths=[RUNS/a.txt] experiments.train"
    with pytest.raises(AssertionError, match="STAND_INS"):
        resolve("x multirun/norm_placement/<time>", tmp_path)


def test_a_command_reading_what_a_skipped_command_makes_is_skipped(tmp_path):
    sweep = "python -m experiments.train -m model.d_model=64,128 hydra.sweep.dir=multirun/coord_sp"
    block = [Command("x.md", 1, sweep), Command("x.md", 2, "false multirun/coord_sp --out multirun/r"),
             Command("x.md", 3, "test ! -e multirun/coord_spx")]
    skipped = run_block(block, tmp_path, _env(tmp_path), {"cheap", "slow"})  # `false` would fail the block
    assert [s.split("  [")[1] for s in skipped] == ["a sweep: many training runs]",
                                                   "reads multirun/coord_sp, which a skipped command above makes]"]
    assert _reads_unmade("x multirun/coord_sp/0", {"multirun/coord_sp"}) == "multirun/coord_sp"
    assert _reads_unmade("x multirun/coord_sp2 a/multirun/coord_sp", {"multirun/coord_sp"}) is None


# -- running them ------------------------------------------------------------------------------------------------

CHEAP = [b for b in BLOCKS if any(classify(c.text)[0] == "cheap" for c in b)]
SLOW = [b for b in BLOCKS if any(classify(c.text)[0] == "slow" for c in b)]


@pytest.mark.parametrize("block", CHEAP, ids=[_block_id(b) for b in CHEAP])
def test_cheap_doc_commands(block, tmp_path, doc_cache):
    run_block(block, _workspace(tmp_path, None), _env(doc_cache), {"cheap"})


@pytest.mark.slow
@pytest.mark.parametrize("block", SLOW, ids=[_block_id(b) for b in SLOW])
def test_doc_commands(block, tmp_path, doc_cache, stand_ins):
    skipped = run_block(block, _workspace(tmp_path, stand_ins), _env(doc_cache), {"cheap", "slow"})
    print("\n".join(["skipped:", *skipped]) if skipped else "nothing skipped")
