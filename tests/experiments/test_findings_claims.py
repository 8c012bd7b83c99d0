"""The findings folder keeps the engine apart from the claims (issue 32 §4): every claim module lives in
experiments/findings/claims/ and is discovered there; the modules moved there keep working by their old import names
and still read "unchanged" against registrations that name their old paths; a moved file that changed reads
"changed" with its diff; new registrations record the new paths; FINDINGS keeps its documented order.

No training. Registration tests work in a temp repo (registration.ROOT) with records written by hand here, as the
2026-11-26 records were: the expected sha256s come from hashlib on the files' bytes, not from registration.py.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import pkgutil
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import experiments.findings as findings_pkg
from experiments.findings import FINDINGS, claims, registration, registry
from experiments.findings.cli import require_registered
from experiments.findings.registration import FileCheck, SetupCheck
from tokenizer.cli_args import UsageError

from .conftest import REPO

ENGINE = REPO / "experiments" / "findings"
CLAIMS = ENGINE / "claims"
CLAIM_NAMES = sorted(m.name for m in pkgutil.iter_modules([str(CLAIMS)]))
PROTOCOLS = [n for n in CLAIM_NAMES if n.startswith("protocol_")]  # shared setups (no NAME): not findings
# FINDINGS' order as it was before the move (registry.py's list then): v1's six, v2's nine, μP's two
ORDER_BEFORE = ["alibi_extrapolation", "xiong_postln_warmup", "kaplan_aspect_ratio", "swiglu_vs_gelu",
                "rmsnorm_vs_layernorm", "rope_vs_learned", "alibi_extrapolation_v2", "xiong_postln_warmup_v2",
                "kaplan_aspect_ratio_v2", "swiglu_vs_gelu_v2", "rmsnorm_vs_layernorm_v2", "rope_vs_learned_v2",
                "qk_norm_lr_sensitivity", "gqa_vs_mha", "tied_vs_untied", "mup_lr_transfer", "kaplan_aspect_ratio_mup"]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _module_constants(path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}


# ------------------------------------------------------------------------------------------------ the folder


def test_every_claim_is_in_claims_and_no_engine_module_is_a_claim():
    assert set(FINDINGS) == {n for n in CLAIM_NAMES if n not in PROTOCOLS} and "protocol_v2" in PROTOCOLS
    for name in CLAIM_NAMES:
        consts = _module_constants(CLAIMS / f"{name}.py")
        if name not in PROTOCOLS:
            assert "NAME" in consts and FINDINGS[name].name == name  # a claim's NAME is its file name
            assert importlib.import_module(f"experiments.findings.claims.{name}").NAME == name
        else:
            assert "NAME" not in consts  # shared setup, not a finding
    engine = sorted(p for p in ENGINE.glob("*.py"))
    assert len(engine) > 10
    for path in engine:
        assert path.stem not in CLAIM_NAMES, path  # no copy left at the old place
        assert "NAME" not in _module_constants(path), path  # nothing claim-like in the engine


def test_findings_order_is_the_one_before_the_move():
    """The 17 registered on 2026-11-26 keep their order, first; findings registered later, or not yet, follow."""
    assert list(FINDINGS)[:len(ORDER_BEFORE)] == ORDER_BEFORE


def test_order_is_by_registration_date_then_the_2026_11_26_order_then_name_unregistered_last(tmp_path, monkeypatch):
    reg = tmp_path / "experiments" / "findings" / "registered"
    reg.mkdir(parents=True)
    files = {"module": {"path": "m", "sha256": "0", "text": ""}, "sweep": {"path": "s", "sha256": "0", "text": ""}}
    for name, date in [("b_new", "2026-12-01"), ("a_new", "2026-12-01"), ("c_old", "2026-11-20"),
                       ("rope_vs_learned", "2026-11-26"), ("alibi_extrapolation", "2026-11-26"),
                       ("zz_same_day", "2026-11-26")]:
        (reg / f"{name}.json").write_text(json.dumps({"name": name, "registered": date, "files": files}))
    (reg / "broken.json").write_text("{not json")
    monkeypatch.setattr(registration, "ROOT", tmp_path)
    names = ["unreg", "b_new", "broken", "zz_same_day", "rope_vs_learned", "a_new", "alibi_extrapolation", "c_old"]
    assert sorted(names, key=registry.order_key) == ["c_old", "alibi_extrapolation", "rope_vs_learned",
                                                     "zz_same_day", "a_new", "b_new", "broken", "unreg"]


def test_a_claim_module_dropped_into_claims_is_a_finding_with_no_registry_edit(tmp_path, monkeypatch):
    text = (CLAIMS / "rope_vs_learned.py").read_text()
    assert text.count('NAME = "rope_vs_learned"') == 1
    (tmp_path / "zz_tmp_claim.py").write_text(text.replace('NAME = "rope_vs_learned"', 'NAME = "zz_tmp_claim"'))
    (tmp_path / "zz_tmp_protocol.py").write_text("GRID = (1e-3,)\n")  # no NAME: shared setup, not a finding
    monkeypatch.setattr(claims, "__path__", [*claims.__path__, str(tmp_path)])
    try:
        found = registry.discover()
        assert list(found)[:len(ORDER_BEFORE)] == ORDER_BEFORE and list(found)[-1] == "zz_tmp_claim"  # unregistered: last
        assert found["zz_tmp_claim"].claim == FINDINGS["rope_vs_learned"].claim
        assert findings_pkg.zz_tmp_claim is sys.modules["experiments.findings.claims.zz_tmp_claim"]  # old-style name
    finally:
        for m in ("zz_tmp_claim", "zz_tmp_protocol"):
            sys.modules.pop(f"experiments.findings.claims.{m}", None)


def test_a_moved_module_that_finds_docs_by_its_own_place_still_reads_the_repos_docs():
    # kaplan_aspect_ratio_mup's registered DOCS is Path(__file__).parents[2] / "docs" / "findings": from claims/ that
    # would be experiments/docs/findings; it reads COMPARED_WITH's doc in the repo's docs/findings, as registered
    kmup = importlib.import_module("experiments.findings.claims.kaplan_aspect_ratio_mup")
    assert kmup.DOCS == REPO / "docs" / "findings"
    first = (REPO / "docs" / "findings" / f"{kmup.COMPARED_WITH}.md").read_text().splitlines()[0]
    meta = json.loads(first.removeprefix("<!-- archlab-finding: ").removesuffix(" -->"))
    assert not meta["smoke"]
    assert kmup.agreement_source() == {"outcome": meta["verdict"], "key_number": meta["key_number"]}
    for name in CLAIM_NAMES:  # no claim holds a path into a folder that is not there
        m = importlib.import_module(f"experiments.findings.claims.{name}")
        for value in vars(m).values():
            if isinstance(value, Path) and value.is_absolute():
                assert value.exists(), (name, value)


# ------------------------------------------------------------------------------------------------ old import names


@pytest.mark.parametrize("name", CLAIM_NAMES)
def test_a_claims_old_import_name_is_the_moved_module_itself(name):
    new = importlib.import_module(f"experiments.findings.claims.{name}")
    assert getattr(findings_pkg, name) is new
    exec(f"from experiments.findings import {name} as old", ns := {})
    assert ns["old"] is new


def test_other_names_are_not_resolved():
    with pytest.raises(AttributeError, match="no attribute 'not_a_claim'"):
        findings_pkg.not_a_claim  # noqa: B018
    with pytest.raises(ImportError):
        exec("from experiments.findings import not_a_claim", {})
    with pytest.raises(AttributeError):
        findings_pkg.__wrapped__  # noqa: B018  (dunder names never reach claims/)
    from experiments.findings import index  # an engine module not imported yet still imports as itself
    assert index.__name__ == "experiments.findings.index"


def test_a_fresh_interpreter_imports_a_claim_by_its_old_name_first_without_torch_or_matplotlib():
    code = ("import sys; from experiments.findings import kaplan_aspect_ratio_mup as k; "
            "print(k.__name__, k.v2k.__name__, 'torch' in sys.modules, 'matplotlib' in sys.modules, "
            "sorted(m for m in sys.modules if m.startswith('experiments.findings.') and "
            "m.split('.')[2] in " + repr(CLAIM_NAMES) + "))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.split(" ", 4) == ["experiments.findings.claims.kaplan_aspect_ratio_mup",
                                 "experiments.findings.claims.kaplan_aspect_ratio_v2", "False", "False", "[]\n"]


# ------------------------------------------------------------------------------------------------ registration


@pytest.fixture
def moved_repo(tmp_path, monkeypatch):
    """A temp repo as after the move: claims/demo.py and claims/shared.py, an engine file, the sweep YAML; and a
    record written by hand as on 2026-11-26, naming the claim files at experiments/findings/<x>.py."""
    root = tmp_path / "repo"
    files = {"experiments/findings/claims/demo.py": 'NAME = "demo"\nLR = 2e-3\n',
             "experiments/findings/claims/shared.py": "GRID = (1e-3, 2e-3)\nSEEDS = (0, 1)\n",
             "experiments/findings/engine_part.py": "def f():\n    return 1\n",
             "conf/experiment/finding_demo.yaml": "# @package _global_\noptim:\n  lr: 2.0e-3\n"}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    old = {"module": "experiments/findings/demo.py", "sweep": "conf/experiment/finding_demo.yaml",
           "extra:experiments/findings/shared.py": "experiments/findings/shared.py",
           "extra:experiments/findings/engine_part.py": "experiments/findings/engine_part.py"}
    now = {"experiments/findings/demo.py": "experiments/findings/claims/demo.py",
           "experiments/findings/shared.py": "experiments/findings/claims/shared.py"}
    record = {"name": "demo", "registered": "2026-11-26", "note": "", "files": {
        role: {"path": rel, "sha256": _sha(files[now.get(rel, rel)].encode()), "text": files[now.get(rel, rel)]}
        for role, rel in old.items()}}
    (root / "experiments/findings/registered").mkdir(parents=True)
    (root / "experiments/findings/registered/demo.json").write_text(json.dumps(record))
    monkeypatch.setattr(registration, "ROOT", root)
    return root


EXTRA = ["experiments/findings/shared.py", "experiments/findings/engine_part.py"]  # as the module lists them


def test_moved_files_with_their_registered_bytes_read_unchanged(moved_repo):
    c = registration.check("demo", EXTRA)
    assert c.status == "unchanged" and c.diff() == ""
    assert [f.path for f in c.files] == ["experiments/findings/claims/demo.py", "conf/experiment/finding_demo.yaml",
                                         "experiments/findings/claims/shared.py", "experiments/findings/engine_part.py"]
    assert registration.check("demo").status == "unchanged"  # the registered extras are checked without the list


@pytest.mark.parametrize("rel, old_path", [
    ("experiments/findings/claims/demo.py", "experiments/findings/demo.py"),
    ("experiments/findings/claims/shared.py", "experiments/findings/shared.py"),
    ("experiments/findings/engine_part.py", "experiments/findings/engine_part.py"),  # not moved: read where it is
])
def test_a_moved_file_that_changed_reads_changed_with_its_diff(moved_repo, rel, old_path):
    path = moved_repo / rel
    first = path.read_text().splitlines()[0]
    path.write_text(path.read_text().replace(first, first + "  # edited", 1))
    c = registration.check("demo", EXTRA)
    assert c.status == "changed" and c.changed_paths() == [rel]
    diff = c.diff().splitlines()
    assert diff[:2] == [f"--- {old_path} (registered)", f"+++ {rel} (now)"]
    changes = [ln for ln in diff if ln[:1] in "-+" and ln[:3] not in ("---", "+++")]
    assert changes == [f"-{first}", f"+{first}  # edited"]


@pytest.mark.parametrize("rel", ["experiments/findings/claims/demo.py", "experiments/findings/claims/shared.py"])
def test_a_file_at_neither_place_reads_changed_and_missing(moved_repo, rel):
    (moved_repo / rel).unlink()
    c = registration.check("demo", EXTRA)
    assert c.status == "changed" and len(c.changed_paths()) == 1 and "(the file is missing)" in c.diff()
    assert next(f for f in c.files if f.path in c.changed_paths()).sha256 is None


def test_a_copy_back_at_the_old_place_is_not_what_is_checked(moved_repo):
    # the old import name resolves to claims/, so claims/ is what runs and what is checked
    (moved_repo / "experiments/findings/shared.py").write_text("GRID = (9.0,)\n")
    assert registration.check("demo", EXTRA).status == "unchanged"


def test_a_new_registration_records_the_new_paths(moved_repo):
    (moved_repo / "experiments/findings/claims/demo2.py").write_text('NAME = "demo2"\n')
    (moved_repo / "conf/experiment/finding_demo2.yaml").write_text("# @package _global_\n")
    path = registration.register("demo2", date="2026-12-01", extra=["experiments/findings/shared.py"])
    files = json.loads(path.read_text())["files"]
    assert files["module"]["path"] == "experiments/findings/claims/demo2.py"
    assert set(files) == {"module", "sweep", "extra:experiments/findings/claims/shared.py"}
    shared = (moved_repo / "experiments/findings/claims/shared.py").read_bytes()
    assert files["extra:experiments/findings/claims/shared.py"]["sha256"] == _sha(shared)
    assert registration.check("demo2", ["experiments/findings/shared.py"]).status == "unchanged"
    assert registration.check("demo2", ["experiments/findings/claims/shared.py"]).status == "unchanged"


def test_every_committed_record_matches_the_moved_bytes():
    """Independent of check(): each file a record names at an old claim path hashes, at claims/, to its sha256."""
    seen = set()
    for path in sorted((ENGINE / "registered").glob("*.json")):
        record = json.loads(path.read_text())
        if record["files"]["module"]["path"] != f"experiments/findings/{record['name']}.py":
            assert record["name"] not in ORDER_BEFORE  # registered after the move, at claims/
            continue
        for reg in record["files"].values():
            if reg["path"].startswith("experiments/findings/") and reg["path"].count("/") == 2 \
                    and not (REPO / reg["path"]).exists():
                moved = CLAIMS / reg["path"].rsplit("/", 1)[1]
                assert _sha(moved.read_bytes()) == reg["sha256"], (path.name, reg["path"])
                seen.add(moved.stem)
    assert seen == {*ORDER_BEFORE, "protocol_v2"}  # every moved module is named by some record


# ------------------------------------------------------------------------------------------------ references


def test_the_new_version_refusal_names_the_claims_folder():
    f = FINDINGS["rope_vs_learned"]
    check = SetupCheck(f.name, "2026-11-26", "", (FileCheck("module", "experiments/findings/claims/rope_vs_learned.py",
                                                            "a", "b", "diff"),))
    with pytest.raises(UsageError) as e:
        require_registered(f, check)
    nxt = registry.next_version(f.name)
    assert f"experiments/findings/claims/{nxt}.py" in str(e.value) and "FINDINGS" not in str(e.value)


def test_the_claims_package_ships_and_the_docs_name_paths_that_exist():
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "experiments").rglob("__init__.py")}
    assert folders <= set(packages)
    text = (REPO / "docs" / "findings" / "README.md").read_text()
    text = re.sub(r"```text\n.*?```", "", text, flags=re.S)  # quoted messages name a version still to be made
    named = {p for p in re.findall(r"experiments/findings/[\w/]+\.(?:py|json)", text) if "NAME" not in p}
    assert "experiments/findings/claims/protocol_v2.py" in named
    assert [p for p in sorted(named) if not (REPO / p).exists()] == []
