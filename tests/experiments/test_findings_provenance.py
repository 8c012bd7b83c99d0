"""The provenance a findings sweep records and its doc states (experiments/findings/provenance.py,
doc_provenance.py), and the code tree a registration records (registration.register's "tree").

The setup hash is checked against the shell (`git ls-files -z ... | xargs -0 sha256sum | sha256sum`) in a throwaway
git repo; the dirty files against what the test changed; the files changed since a registration against the test's
own edits.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from experiments.findings import provenance, registration
from experiments.findings.cli import main
from experiments.findings.doc_provenance import SHOWN, provenance_lines

from .conftest import REPO

FILES = {"arch/model.py": "x = 1\n", "tokenizer/bpe.py": "y = 2\n", "experiments/run.py": "z = 3\n",
         "conf/train.yaml": "a: 1\n", "docs/notes.md": "not hashed\n"}


def _git(root: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(root), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=root, env=env, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "repo"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "first")
    return root


def test_the_setup_hash_is_sha256sum_of_the_tracked_files(repo):
    (repo / "arch" / "untracked.py").write_text("not tracked: not hashed\n")
    files = provenance.tree_hashes(repo)
    assert sorted(files) == sorted(p for p in FILES if not p.startswith("docs/"))
    for rel, sha in files.items():
        assert sha == hashlib.sha256((repo / rel).read_bytes()).hexdigest()
    shell = subprocess.run("git ls-files -z arch tokenizer experiments conf | xargs -0 sha256sum | sha256sum",
                           shell=True, cwd=repo, capture_output=True, text=True, check=True).stdout.split()[0]
    assert provenance.combined_hash(files) == shell


def test_git_state_names_the_dirty_tracked_files(repo):
    commit = _git(repo, "rev-parse", "HEAD").strip()
    assert provenance.git_state(repo) == {"commit": commit, "dirty": False, "dirty_files": []}
    (repo / "arch" / "model.py").write_text("x = 2\n")
    (repo / "conf" / "new.yaml").write_text("b: 2\n")  # untracked: not a tracked file that differs
    _git(repo, "mv", "tokenizer/bpe.py", "tokenizer/bpe2.py")
    state = provenance.git_state(repo)
    assert state["commit"] == commit and state["dirty"] is True
    assert state["dirty_files"] == ["arch/model.py", "tokenizer/bpe.py", "tokenizer/bpe2.py"]


def test_outside_a_git_checkout_every_file_under_the_dirs_is_hashed(tmp_path):
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / "arch" / "__pycache__").mkdir()
    (tmp_path / "arch" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    assert sorted(provenance.tree_hashes(tmp_path)) == sorted(p for p in FILES if not p.startswith("docs/"))
    assert provenance.git_state(tmp_path)["commit"] is None


def test_changes_since_registration_leave_the_findings_own_files_out():
    before = {"a.py": "1", "b.py": "2", "own.py": "3", "gone.py": "4"}
    after = {"a.py": "1", "b.py": "9", "own.py": "8", "new.py": "5"}
    assert provenance.changes(before, after, own=["own.py"]) == [
        {"path": "b.py", "change": "modified"}, {"path": "gone.py", "change": "removed"},
        {"path": "new.py", "change": "added"}]


def test_collect_at_run_time_against_a_registration_tree(repo):
    registered = provenance.tree_record(repo)
    (repo / "experiments" / "run.py").write_text("z = 4\n")
    (repo / "arch" / "own.py").write_text("the finding's own\n")
    _git(repo, "add", "arch/own.py")
    p = provenance.collect(own=["arch/own.py"], registered=registered, root=repo)
    assert p["since_registration"] == {"recorded": True, "sha256": registered["sha256"],
                                       "changed": [{"path": "experiments/run.py", "change": "modified"}]}
    assert p["tree"]["files"] == 5 and p["tree"]["sha256"] == provenance.combined_hash(provenance.tree_hashes(repo))
    assert provenance.collect(registered=None, root=repo)["since_registration"] == {"recorded": False, "changed": []}
    assert p["python"] and p["cpu"] and p["dirty_files"] == ["arch/own.py", "experiments/run.py"]


def _meta(**provenance_fields) -> dict:
    p = {"commit": "c" * 40, "dirty": False, "dirty_files": [], "python": "3.11.7", "torch": "2.13.0", "cpu": "EPYC",
         "gpu": None, "platform": "linux x86_64",
         "tree": {"sha256": "f" * 64, "files": 314, "dirs": ["arch", "tokenizer", "experiments", "conf"]},
         "since_registration": {"recorded": False, "changed": []}, **provenance_fields}
    return {"provenance": p, "threads": [1], "setup": {"registered": "2026-11-26"}}


def test_the_doc_states_commit_hash_changes_software_and_threads():
    text = "\n".join(provenance_lines(_meta()))
    assert f"git commit `{'c' * 40}`, the tree clean" in text and f"Setup hash `{'f' * 64}`" in text
    assert "314 git-tracked files under arch/, tokenizer/, experiments/, conf/" in text
    assert "Since the registration on 2026-11-26: not known" in text
    assert "Python 3.11.7, torch 2.13.0" in text and "CPU EPYC; GPU none; torch threads per run: 1" in text
    dirty = [f"f{i}.py" for i in range(SHOWN + 3)]
    changed = [{"path": "arch/a.py", "change": "modified"}, {"path": "conf/b.yaml", "change": "added"}]
    text = "\n".join(provenance_lines(_meta(dirty=True, dirty_files=dirty, gpu=["NVIDIA H200"],
                                            since_registration={"recorded": True, "sha256": "e" * 64,
                                                                "changed": changed})))
    assert f"the tree dirty: {SHOWN + 3} tracked files differed from it (`f0.py`" in text and "and 3 more" in text
    assert "2 files outside the finding's own changed" in text
    assert "`arch/a.py` (modified), `conf/b.yaml` (added)" in text and "GPU NVIDIA H200" in text
    text = "\n".join(provenance_lines(_meta(since_registration={"recorded": True, "sha256": "e" * 64,
                                                                "changed": []})))
    assert "no file under those dirs changed outside the finding's own files" in text
    resumed = _meta(resumed=[{"commit": "d" * 40, "dirty": True, "tree_sha256": "a" * 64}])
    assert f"`{'a' * 64}` at `{'d' * 40}`" in "\n".join(provenance_lines(resumed))
    assert provenance_lines({}) == ["- Provenance (commit, setup hash, software, machine): not recorded (the sweep "
                                    "started before the findings command recorded it)."]


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A temp copy of rope_vs_learned's module and sweep YAML, with nothing registered, as registration.ROOT."""
    root = tmp_path / "repo"
    for rel in registration.setup_paths("rope_vs_learned").values():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, root / rel)
    monkeypatch.setattr(registration, "ROOT", root)
    return root


def test_a_new_registration_records_the_code_tree_and_old_records_stay_valid(root, capsys):
    assert main(["rope_vs_learned", "--register"]) == 0
    path = Path(capsys.readouterr().out.strip())
    record = json.loads(path.read_text())
    files = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest()
             for rel in map(str, registration.setup_paths("rope_vs_learned").values())
             if rel.startswith(provenance.SETUP_DIRS)}  # outside a checkout: every file under the dirs
    assert record["tree"] == {"sha256": provenance.combined_hash(files), "files": files}
    assert registration.load("rope_vs_learned")["tree"] == record["tree"]
    del record["tree"]  # a record made before the field existed
    path.write_text(json.dumps(record))
    assert "tree" not in registration.load("rope_vs_learned")
    path.write_text(json.dumps({**record, "tree": ["not", "a", "map"]}))
    with pytest.raises(registration.RegistrationError):
        registration.load("rope_vs_learned")
