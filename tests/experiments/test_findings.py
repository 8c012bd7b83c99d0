"""python -m experiments.findings: every finding's --smoke run end to end (sweep, report, rule, doc), the verdict
rules against hand-made numbers (each rule reaches each of its outcomes), --list, bad arguments, the index.

The smoke runs share the session's token cache (conftest's cache_dir: the tokenizer is trained once), run one job
at a time with one torch thread, and write only under tmp_path; a check after each run asserts that nothing under
docs/findings/ changed.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments.config.compose import compose_config
from experiments.findings import FINDINGS, OUTCOMES, Evidence, RunRecord
from experiments.findings import doc as doc_lib
from experiments.findings import index as index_lib
from experiments.findings.cli import judge, main
from experiments.findings.tuned import is_tuned

from .conftest import PYTHON, REPO, TUNED_SMOKE, file_stats

DOCS = REPO / "docs" / "findings"


@pytest.fixture
def findings_env(monkeypatch, cache_dir):
    """The environment the training subprocess inherits: the session's token cache, wandb off, offline, 1 thread."""
    for k, v in {"ARCHLAB_CACHE": str(cache_dir), "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1",
                 "HF_DATASETS_OFFLINE": "1", "ARCHLAB_PEAK_FLOPS": "1e12", "OMP_NUM_THREADS": "1",
                 "PYTHONUNBUFFERED": "1"}.items():
        monkeypatch.setenv(k, v)


def _n_groups(name: str) -> int:
    """Groups the finding's sweep makes: the product of its swept values, seeds excluded."""
    params = compose_config([f"experiment=finding_{name}"], return_hydra_config=True).hydra.sweeper.params
    return math.prod(len(str(v).split(",")) for k, v in params.items() if k != "seed")


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"no section {title!r}"
    return m.group(1)


def _table_rows(section: str) -> list[list[str]]:
    """The body rows of the first markdown table in a section."""
    lines = section.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[start + 2:end]]


# ------------------------------------------------------------------------------------------------ smoke runs


V1 = ("alibi_extrapolation", "xiong_postln_warmup", "kaplan_aspect_ratio", "swiglu_vs_gelu", "rmsnorm_vs_layernorm",
      "rope_vs_learned")
CHEAP_TUNED = TUNED_SMOKE  # the one tuned smoke of the default suite: conftest.tuned_smoke, built once per session
# (shared with test_findings_data.py) with the confirm phase; the other tuned smokes are slow (30-100 s)
# swiglu_vs_gelu and rmsnorm_vs_layernorm are two-arm sweeps with rope_vs_learned's figures: the same path with
# another YAML (composed and checked, untrained, by test_every_finding_has_its_preregistered_sweep), so their smokes
# are slow; alibi (extrapolation), kaplan (shapes, aspect ratio figure) and xiong (the init measurement) each take
# a path of their own and stay in the default suite
SAME_PATH_AS_ROPE = ("swiglu_vs_gelu", "rmsnorm_vs_layernorm")


@pytest.mark.parametrize("name", [n if n in V1 and n not in SAME_PATH_AS_ROPE
                                  else pytest.param(n, marks=pytest.mark.slow) for n in FINDINGS if n != CHEAP_TUNED])
def test_smoke_run_writes_a_doc_that_says_pipeline_ok_and_draws_no_verdict(name, tmp_path, findings_env, capfd):
    f = FINDINGS[name]
    if f.requires is not None and (why := f.requires()):
        pytest.skip(f"{name}: {why}")
    before = file_stats(DOCS)
    sweep = tmp_path / "sweep"
    jobs = ["--jobs", "2"] if name == "rope_vs_learned" else []  # one finding goes through joblib_2, as full runs do
    rc = main([name, "--smoke", "--out-dir", str(sweep), *jobs])
    out, err = capfd.readouterr()
    assert rc == 0, err[-3000:]
    assert file_stats(DOCS) == before  # a smoke run never writes into docs/findings/
    _check_smoke(name, sweep, out, tmp_path)


def test_the_tuned_smoke_with_a_confirm_phase_writes_a_doc_that_says_pipeline_ok(tuned_smoke, tmp_path):
    assert tuned_smoke.returncode == 0, tuned_smoke.stderr[-3000:]
    assert tuned_smoke.docs_unchanged  # a smoke run never writes into docs/findings/
    _check_smoke(tuned_smoke.name, tuned_smoke.sweep, tuned_smoke.stdout, tmp_path)


def _check_smoke(name: str, sweep: Path, out: str, tmp_path: Path) -> None:
    """What every smoke's doc says (and does not say), and what its kind of finding adds, from its --out-dir."""
    f = FINDINGS[name]
    doc = sweep / f"{name}.md"
    assert out.strip().splitlines()[-1] == str(doc)
    text = doc.read_text()
    meta = index_lib.read_meta(doc)
    assert meta["name"] == name and meta["smoke"] is True and meta["verdict"] is None and meta["pipeline"] == "OK"
    assert "Smoke run: not a result" in text and "**Pipeline OK.** All " in text
    # the data actually used: the embedded corpus, named with the sha256 of its text
    assert re.search(r"Data actually used: the embedded corpus `pydoc-topics` .*sha256 of its text `[0-9a-f]{64}`", text)

    rows = _table_rows(_section(text, "Results"))
    assert len(rows) == _n_groups(name)  # a row per group
    assert sum(r[3] == "baseline" for r in rows) == 1
    assert all(re.search(r"\[-?\d", r[2]) for r in rows)  # mean with a 95% CI (2 seeds)
    base_first = next(r[0] for r in rows if r[3] == "baseline").split()[0]
    for r in (r for r in rows if r[3] != "baseline"):  # difference with its CI
        # (xiong_postln_warmup_v2's smoke: 5% of 3 steps rounds to 0 warmup steps, so warmup 0 and 5% of one norm
        # are the same run and their difference has no spread, hence no interval)
        same = name == "xiong_postln_warmup_v2" and r[0].split()[0] == base_first
        # (mup_lr_transfer: μP at its base width 64 is SP exactly, so that row at the baseline's lr is the baseline)
        same = same or (name == "mup_lr_transfer" and r[0].startswith("param=mup lr=0.001 d_model=64"))
        assert re.search(r"\[-?\d", r[3]) or (same and r[3] == "+0.000 [—]"), r
    # no verdict of any kind from a few steps of a tiny model
    for said in ("## Verdict", "**Verdict", "## Multiple comparisons", "Seeds needed", "seeds per group",
                 "## What was tried", "better (", "worse ("):
        assert said not in text, said
    # the registered setup text may name the rule's outcomes (the v3 claims list them); the rest of the doc never does
    unregistered = text.replace(f.setup, "")
    assert "reproduced" not in unregistered.lower() and "partly" not in unregistered
    assert "python -m experiments.findings " + name + " --smoke" in text and "data=tinystories" in text
    assert re.search(r"Wall time of the whole sweep on this machine: \d+ (s|min)", text)

    for link in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text):  # every figure the doc shows was copied beside it
        assert (doc.parent / link).is_file() and link.startswith(f"{name}/") and link.endswith(".png")
    assert re.findall(r"!\[", text), "the doc shows at least one figure"
    assert json.loads((sweep / "finding.json").read_text())["verdict"] is None

    if name == "rope_vs_learned":  # --from-sweep rebuilds the doc without training
        again = tmp_path / "again.md"
        assert main([name, "--from-sweep", str(sweep), "--doc", str(again)]) == 0
        assert index_lib.read_meta(again)["pipeline"] == "OK"
        assert (tmp_path / "again" / "curve_val_loss.png").is_file()
    if is_tuned(f.experiment):  # the v2 findings: the final runs compared, the tuning runs in their own section
        meta = json.loads((sweep / "finding.json").read_text())
        proxy = meta["tuning"]["proxy"]  # kaplan_aspect_ratio_mup: one shape tuned, its lr transferred
        assert meta["tuned"] and meta["tuning"]["final_runs"] == 2 * _n_groups(name)
        assert meta["tuning"]["tuning_runs"] >= 5 * (1 if proxy else _n_groups(name))
        assert all(r[1] == "2" for r in rows)  # 2 fresh seeds per group, never a tuning run
        tuning = _section(text, "Learning-rate tuning")
        assert ("**Protocol: tuned once on a proxy: every arm at the proxy's best lr, fresh seeds.** Every difference "
                f"in this doc is at one transferred lr, not best-vs-best: only the proxy `{proxy}`" if proxy else
                "**Protocol: tuned: each arm at its own best lr, fresh seeds.**") in tuning
        assert len(_table_rows(tuning)) == _n_groups(name) and f"]({name}/basin.png)" in text
        runs = meta["cost"]["runs"]
        confirm = len(json.loads((sweep / "tuning.json").read_text()).get("confirm_runs", []))  # the confirm phase
        assert runs == meta["tuning"]["tuning_runs"] + confirm + meta["tuning"]["final_runs"]
        assert re.search(rf"CPU-hours: [0-9.e-]+ \(the sum over the {runs} runs, tuning runs included", text)
    if name == "xiong_postln_warmup":  # the init measurement: both inits, both norms, both depths, 2 seeds
        init = json.loads((sweep / "init" / "init_grad_norms.json").read_text())
        assert {(r["init"], r["norm"], r["n_layers"]) for r in init["rows"]} == set(
            itertools.product(("gpt2", "xavier"), ("pre", "post"), (6, 12)))
        assert all(len(r["grad_norms"]) == r["n_layers"] for r in init["rows"])
        assert "](xiong_postln_warmup/init_grad_norms.png)" in text  # measured and drawn; not read (no verdict)
        assert "**Init part: ‖" not in text and "training part:" not in text  # (the setup text says "Init part" too)


# ------------------------------------------------------------------------------------------------ the command


def test_list_names_every_finding():
    p = subprocess.run([PYTHON, "-m", "experiments.findings", "--list"], capture_output=True, text=True, cwd=REPO,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(FINDINGS)
    assert all(len(ln.split(None, 1)[1]) > 10 for ln in lines)


def test_unknown_name_is_one_line_and_exit_2():
    p = subprocess.run([PYTHON, "-m", "experiments.findings", "rope_vs_lerned", "--smoke"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert p.returncode == 2 and p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1
    assert p.stderr.startswith("findings: error: unknown finding 'rope_vs_lerned'; choose from ")
    assert all(n in p.stderr for n in FINDINGS)


def test_smoke_refuses_a_doc_inside_docs_findings(tmp_path, capsys):
    before = file_stats(DOCS)
    rc = main(["rope_vs_learned", "--smoke", "--out-dir", str(tmp_path / "s"), "--doc", str(DOCS / "x.md")])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("findings: error: --smoke never writes into") and len(err.strip().splitlines()) == 1
    assert file_stats(DOCS) == before and not (tmp_path / "s").exists()


def test_a_config_mistake_is_one_line_before_any_run(tmp_path, capfd):
    rc = main(["rope_vs_learned", "--smoke", "--out-dir", str(tmp_path / "s"), "trian.steps=3"])
    out, err = capfd.readouterr()
    assert rc == 2, err
    assert err.strip().splitlines() == ["findings: error: config error: trian.steps: unknown key; did you mean train.steps?"]
    assert not any((tmp_path / "s").glob("*_*"))  # no run started


def test_out_dir_must_be_new_or_empty(tmp_path, capsys):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "notes.txt").write_text("mine")
    assert main(["rope_vs_learned", "--smoke", "--out-dir", str(tmp_path / "s")]) == 2
    assert "already exists and is not an empty directory" in capsys.readouterr().err
    assert (tmp_path / "s" / "notes.txt").read_text() == "mine"


def test_full_run_defaults_to_the_preregistered_data(tmp_path, monkeypatch, capsys):
    # no training: the sweep is replaced by one that produces nothing, so the command ends with exit 1
    from experiments.findings import cli
    from experiments.findings.data import DATA_DEFAULT

    if not (REPO / "../shared/data/bench/tinystories_v1_train_head_lowercase.txt").is_file():
        pytest.skip("../shared/data/bench is absent")
    monkeypatch.chdir(REPO)
    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.5))[1])
    assert main(["rope_vs_learned", "--out-dir", str(tmp_path / "s"), "seed=0,1"]) == 1
    assert seen[0][-3:] == [*DATA_DEFAULT, "seed=0,1"] and "hydra/launcher=joblib_2" in seen[0]
    assert json.loads((tmp_path / "s" / "finding.json").read_text())["args"] == [*DATA_DEFAULT, "seed=0,1"]
    assert "no runs" in capsys.readouterr().err
    assert main(["rope_vs_learned", "--out-dir", str(tmp_path / "t"), "hydra/launcher=basic"]) == 2
    assert "set by --jobs, --packed and --out-dir" in capsys.readouterr().err and len(seen) == 1


def _no_sweep(monkeypatch) -> list:
    """run_sweep replaced by one that records its argv and produces nothing (the command then exits 1)."""
    from experiments.findings import cli

    seen = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (seen.append(argv), (1, 0.5))[1])
    return seen


def test_full_run_without_its_data_file_says_what_it_is_and_where_to_get_it(tmp_path, monkeypatch, capsys):
    """A user's machine has no ../shared/data: one line naming the file, what it is, its download and the
    alternatives (--data-file, data=tinystories), exit 2, no run started."""
    from experiments.findings import data

    monkeypatch.chdir(tmp_path)
    seen = _no_sweep(monkeypatch)
    assert main(["rope_vs_learned", "--out-dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("findings: error: the pre-registered data ../shared/data/bench/")
    for part in ("TinyStories V1's train split, lowercased", data.URL, "--data-file", "data=tinystories"):
        assert part in err[0], part
    assert seen == [] and not (tmp_path / "s").exists()


def test_data_file_runs_the_preregistered_sweep_on_a_checked_copy(tmp_path, monkeypatch, capsys):
    """--data-file: a copy with the registered size and sha256 becomes data=text on that file (the doc's command
    says --data-file); another file, or --data-file beside a data override, is one line and exit 2."""
    import hashlib

    from experiments.findings import data

    copy, other = tmp_path / "copy.txt", tmp_path / "other.txt"
    copy.write_text("once upon a time there was a tiny corpus.\n" * 40)
    other.write_text("ONCE UPON A TIME THERE WAS A TINY CORPUS.\n" * 40)
    monkeypatch.setattr(data, "SIZE", copy.stat().st_size)  # the real file is 4 MB; the check is the same
    monkeypatch.setattr(data, "SHA256", hashlib.sha256(copy.read_bytes()).hexdigest())
    monkeypatch.chdir(tmp_path)
    seen = _no_sweep(monkeypatch)
    assert main(["rope_vs_learned", "--out-dir", str(tmp_path / "s"), "--data-file", str(copy), "seed=0,1"]) == 1
    assert seen[0][-3:] == ["data=text", f"data.paths=[{copy}]", "seed=0,1"]
    meta = json.loads((tmp_path / "s" / "finding.json").read_text())
    assert meta["args"] == ["--data-file", str(copy), "seed=0,1"]
    capsys.readouterr()
    for args, message in [(["--data-file", str(other)], "is not the pre-registered data"),
                          (["--data-file", str(tmp_path / "nope.txt")], "no such file"),
                          (["--data-file", str(copy), "data=tinystories"], "exclude each other")]:
        assert main(["rope_vs_learned", "--out-dir", str(tmp_path / "t"), *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert len(seen) == 1


def test_the_real_data_file_passes_the_check(shared_data):
    from experiments.findings.data import file_overrides

    path = shared_data / "bench" / "tinystories_v1_train_head_lowercase.txt"
    assert file_overrides(path) == ["data=text", f"data.paths=[{path}]"]


def test_hub_data_runs_the_same_sweep_and_token_budget(tmp_path, monkeypatch, capsys):
    """data=tinystories (the datasets loader) replaces the data and nothing else: same experiment, same train.tokens."""
    from experiments.findings.data import DATA_DEFAULT, DATA_FILES, HUB_OPTION

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the hub "answers" (no network in tests)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr("tokenizer.datasets_source.hub_reachable", lambda timeout=3.0: True)
    monkeypatch.chdir(tmp_path)  # no ../shared here: the hub needs no file
    seen = _no_sweep(monkeypatch)
    assert main(["rope_vs_learned", "--out-dir", str(tmp_path / "s"), "data=tinystories"]) == 1
    assert seen[0][-1] == "data=tinystories" and "experiment=finding_rope_vs_learned" in seen[0]
    assert not set(DATA_DEFAULT) & set(seen[0])
    # The budget is the experiment's: no data option (conf/data/, conf/finding/data/) sets a train.* key, so the data
    # choice cannot move it whatever a finding's YAML says; then one finding per pre-registered data composes both
    # ways (each composition ~0.2 s: all of them took 13 s of the suite)
    for group in ("data", "finding/data"):
        for path in (REPO / "conf" / group).glob("*.yaml"):
            text = path.read_text()
            header = re.search(r"^# @package (\S+)", text, re.M)
            package = header.group(1) if header else group.replace("/", ".")  # Hydra's default: the group's path
            keys = set(OmegaConf.create(text) or {})
            assert package != "_global_" or "train" not in keys, (path, keys)
            assert package in ("_global_", "data", "finding.data"), (path, package)
    for name in {FINDINGS[n].data: n for n in sorted(FINDINGS)}.values():
        own = FINDINGS[name].data in DATA_FILES
        hub, registered = (compose_config([f"experiment=finding_{name}", *d]).train for d in (
            HUB_OPTION if own else ["data=tinystories"], [] if own else DATA_DEFAULT))
        assert hub.tokens == registered.tokens and hub.tokens and hub.steps == registered.steps


def test_each_doc_gives_the_data_file_and_hub_commands():
    """The committed docs' "Command" sections are what doc.py renders for their command: the registered data,
    the --data-file download, the hub."""
    for name in V1:  # the docs committed (the v2 findings have not run yet)
        text = (DOCS / f"{name}.md").read_text()
        section = _section(text, "Command")
        args = shlex.split(re.search(r"```bash\n(.*?)\n```", section).group(1))[4:]
        rendered = "\n".join(doc_lib.command_section(name, args)[1:])
        assert section.startswith(rendered), name
        assert f"python -m experiments.findings {name} --data-file tinystories_v1_train_head_lowercase.txt" in section
    assert doc_lib.hub_variant(["--jobs", "2", "--data-file", "x.txt", "seed=0"]) == ["--jobs", "2", "seed=0",
                                                                                    "data=tinystories"]


def test_no_run_to_judge_is_exit_1(tmp_path, capsys):
    f = FINDINGS["rope_vs_learned"]
    meta = {"name": f.name, "smoke": True, "train_argv": [], "train_rc": 1}
    (tmp_path / "empty").mkdir()
    assert judge(f, tmp_path / "empty", meta, tmp_path / "doc.md", []) == 1
    run = tmp_path / "failed" / "0_model.pos=learned,seed=0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "failed", "error": "config error: boom", "seed": 0}))
    assert judge(f, tmp_path / "failed", meta, tmp_path / "doc.md", []) == 1
    err = capsys.readouterr().err
    assert "no run completed or diverged" in err and "boom" in err
    assert not (tmp_path / "doc.md").exists()



def test_a_stopped_sweep_writes_no_doc_and_resume_continues_it(tmp_path, monkeypatch, capsys):
    """The sweep exits 130 (stopped by a signal): no doc, finding.json kept, one line naming --resume; --resume
    reruns the same training command with train.resume=true and adds up the wall time."""
    from experiments.findings import cli

    calls = []
    monkeypatch.setattr(cli, "run_sweep", lambda argv: (calls.append(argv), (130, 2.0))[1])
    sweep, doc = tmp_path / "s", tmp_path / "doc.md"
    assert main(["rope_vs_learned", "--smoke", "--out-dir", str(sweep), "--doc", str(doc)]) == 130
    err = capsys.readouterr().err
    assert f"resume with: python -m experiments.findings rope_vs_learned --resume --out-dir {sweep}" in err
    assert not doc.exists() and not (sweep / "report").exists()
    meta = json.loads((sweep / "finding.json").read_text())
    assert meta["attempts"] == 1 and meta["train_rc"] == 130 and meta["train_argv"] == calls[0]

    monkeypatch.setattr(cli, "run_sweep", lambda argv: (calls.append(argv), (1, 3.0))[1])  # no runs: exit 1
    assert main(["rope_vs_learned", "--resume", "--out-dir", str(sweep), "--doc", str(doc)]) == 1
    assert calls[1] == [*calls[0], "train.resume=true"]
    meta = json.loads((sweep / "finding.json").read_text())
    assert meta["attempts"] == 2 and meta["wall_s"] == 5.0 and meta["train_argv"] == calls[0]


@pytest.mark.parametrize("args, message", [
    (["--resume"], "--resume needs --out-dir"),
    (["--resume", "--out-dir", "{empty}"], "no readable finding.json"),
    (["--resume", "--out-dir", "{other}"], "holds finding 'swiglu_vs_gelu'"),
    (["--resume", "--out-dir", "{mine}", "seed=0"], "--resume takes no overrides"),
])
def test_resume_mistakes_are_one_line(tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    for name, finding in (("other", "swiglu_vs_gelu"), ("mine", "rope_vs_learned")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "finding.json").write_text(json.dumps({"name": finding, "train_argv": ["-m"]}))
    argv = [a.format(empty=tmp_path / "empty", other=tmp_path / "other", mine=tmp_path / "mine") for a in args]
    assert main(["rope_vs_learned", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("findings: error: ") and message in err[0]


@pytest.mark.slow
def test_sigterm_to_the_findings_command_stops_the_sweep_and_resume_finishes_it(tmp_path, findings_env):
    sweep = tmp_path / "s"
    cmd = [PYTHON, "-m", "experiments.findings", "rope_vs_learned", "--smoke", "--jobs", "2", "train.tokens=40000",
           "--out-dir", str(sweep)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and \
            sum(1 for m in sweep.glob("*/metrics.jsonl") if m.stat().st_size > 0) < 2:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)  # this process only, as `kill <pid>` does
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and out == ""
    statuses = [json.loads(p.read_text())["status"] for p in sorted(sweep.glob("*/summary.json"))]
    assert statuses == ["interrupted"] * 4
    line = [ln for ln in err.splitlines() if ln.startswith("findings: rope_vs_learned: stopped")]
    assert len(line) == 1 and not (sweep / "rope_vs_learned.md").exists()
    resume = shlex.split(line[0].split("resume with: ", 1)[1])
    done = subprocess.run([PYTHON, *resume[1:]], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [json.loads(p.read_text())["status"] for p in sorted(sweep.glob("*/summary.json"))] == ["completed"] * 4
    text = (sweep / "rope_vs_learned.md").read_text()
    assert "the sum of 2 attempts" in text


# ------------------------------------------------------------------------------------------------ pre-registered setups

# name -> (train.tokens, swept values (seeds excluded), seeds, n_ctx, lr)
SETUPS = {
    "alibi_extrapolation": (1_500_000, {"model/pos": "learned,sinusoidal,rope,alibi,relative"}, "0,1,2", 64, 2e-3),
    "xiong_postln_warmup": (1_500_000, {"model/norm": "post,pre", "schedule.warmup_steps": "0,500"}, "0,1,2", 128, 1e-2),
    "kaplan_aspect_ratio": (1_500_000, {"model": "iso800k_l1,iso800k_l2,iso800k_l4,iso800k_l8,iso800k_l16"}, "0,1,2",
                            128, 2e-3),
    "swiglu_vs_gelu": (2_000_000, {"finding/ffn": "gelu,swiglu"}, "0,1,2,3,4", 128, 2e-3),
    "rmsnorm_vs_layernorm": (2_000_000, {"model/norm_type": "layernorm,rmsnorm"}, "0,1,2,3,4", 128, 2e-3),
    "rope_vs_learned": (2_000_000, {"model/pos": "learned,rope"}, "0,1,2,3,4", 128, 2e-3),
}


def test_every_finding_has_its_preregistered_sweep():  # v1; the v2 setups: test_findings_v2.py
    assert set(SETUPS) == set(V1) and set(V1) <= set(FINDINGS)
    for name, (tokens, swept, seeds, n_ctx, lr) in SETUPS.items():
        cfg = compose_config([f"experiment=finding_{name}"], return_hydra_config=True)
        params = {k: str(v) for k, v in cfg.hydra.sweeper.params.items()}
        assert params == {**swept, "seed": seeds}, name
        assert cfg.experiment_name == f"finding_{name}"
        assert str(cfg.hydra.sweep.dir).startswith(f"multirun/findings/{name}/")
        assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 2
        assert (cfg.train.tokens, cfg.train.n_ctx, cfg.optim.lr) == (tokens, n_ctx, lr), name
        assert (cfg.tokenizer.vocab_size, cfg.train.batch_size, cfg.schedule.name, cfg.schedule.min_lr_ratio) == \
            (2048, 16, "cosine", 0.1)
        assert (cfg.train.eval_interval, cfg.train.eval_batches, cfg.train.ckpt_interval) == (250, 20, 1000)
        assert cfg.schedule.warmup_steps == (500 if name == "xiong_postln_warmup" else 100)
        assert cfg.train.extrap == ("end" if name == "alibi_extrapolation" else "never")
        assert (cfg.train.num_threads, cfg.train.progress, cfg.logger.kind) == (1, False, "disabled")
        assert cfg.data.source == "embedded"  # the YAML runs anywhere; the docs' command passes the data
    alibi = compose_config(["experiment=finding_alibi_extrapolation"])
    assert list(alibi.train.extrap_factors) == [1, 2, 4, 8] and alibi.train.extrap_max_tokens == 65537
    xiong = compose_config(["experiment=finding_xiong_postln_warmup"])
    assert (xiong.model.init, xiong.model.n_layers) == ("xavier", 6)


def test_swiglu_and_gelu_have_equal_parameters():
    from arch import count_params
    from experiments.config.check import model_config, validate

    counts = {}
    for ffn in ("gelu", "swiglu"):
        c = validate(compose_config(["experiment=finding_swiglu_vs_gelu", f"finding/ffn={ffn}"]))
        counts[ffn] = (count_params(model_config(c.model, 2048)), c.model.activation, c.model.d_mlp)
    assert counts["gelu"][1:] == ("gelu", 512) and counts["swiglu"][1:] == ("swiglu", 341)
    assert abs(counts["swiglu"][0] / counts["gelu"][0] - 1) < 0.002


# ------------------------------------------------------------------------------------------------ the rules


def _runs(keys: dict, values: list[float | None], key: str = "final val/loss", status: str = "completed",
          seeds=None, **more) -> list[RunRecord]:
    label = " ".join(f"{k.split('.')[-1]}={v}" for k, v in keys.items())
    return [RunRecord(label, dict(keys), seed, status, {key: v, "vocab_size": 2048, **more})
            for seed, v in zip(seeds or range(len(values)), values)]


def _comparison(records: list[RunRecord], baseline: dict) -> dict:
    """comparison.json's 'final val/loss' block built from records with the report's own statistics."""
    from experiments.compare.significance import difference, mean_ci

    groups: dict[str, list[RunRecord]] = {}
    for r in records:
        groups.setdefault(r.group, []).append(r)
    base = next(rs for rs in groups.values() if all(str(rs[0].keys.get(k)) == str(v) for k, v in baseline.items()))
    bv = [r.get("final val/loss") for r in base if r.status == "completed"]
    rows = []
    for label, rs in groups.items():
        done = [r for r in rs if r.status == "completed"]
        v = [r.get("final val/loss") for r in done]
        row = {"label": label, "keys": rs[0].keys, "n": len(v), "seeds": [r.seed for r in done],
               "mean": sum(v) / len(v), "ci": mean_ci(v), "baseline": rs is base, "vs_baseline": None}
        if rs is not base:
            d = difference(v, bv, False, seeds=[r.seed for r in done], base_seeds=[r.seed for r in base])
            row["vs_baseline"] = {"test": d.test, "n": d.n, "diff": d.diff, "ci": d.ci, "p": d.p, "verdict": d.verdict,
                                  "seeds_needed": d.seeds_needed, "note": d.note}
        rows.append(row)
    return {"baseline": {"label": base[0].group}, "metrics": [{"name": "final val/loss", "groups": rows}]}


def _ev(records: list[RunRecord], baseline: dict, extra=None) -> Evidence:
    return Evidence(_comparison(records, baseline), records, extra)


def _extrap_runs(kind: str, d8: list[float | None]) -> list[RunRecord]:
    out = []
    for seed, d in enumerate(d8):
        values = {"extrap/nonoverlap/loss@1x": 3.0}
        for k in (2, 4, 8):
            values[f"extrap/nonoverlap/loss@{k}x"] = None if d is None else 3.0 + d * k / 8
        out.append(RunRecord(f"pos={kind}", {"model.pos.kind": kind}, seed, "completed",
                             {"final val/loss": 3.0 + 0.01 * seed, **values}))
    return out


def _alibi(**d8) -> Evidence:
    kinds = {"learned": [None] * 3, "sinusoidal": [1.0, 1.1, 0.9], "rope": [0.8, 0.9, 0.85],
             "alibi": [0.01, 0.02, 0.0], "relative": [0.02, 0.03, 0.01], **d8}
    return _ev([r for k, v in kinds.items() for r in _extrap_runs(k, v)], {"model.pos.kind": "sinusoidal"})


def test_alibi_rule_outcomes():
    rule = FINDINGS["alibi_extrapolation"].rule
    v = rule(_alibi())
    assert v.outcome == "reproduced" and "alibi" in v.key_number and not v.likely_reason
    assert rule(_alibi(rope=[0.01, 0.02, 0.015])).outcome == "partly"  # rope holds: 3 of 4 match
    undecided = [0.0, 0.3, 0.1]  # the interval straddles 0.10 nats
    v = rule(_alibi(sinusoidal=undecided, rope=undecided, alibi=[0.5, 0.6, 0.55], relative=undecided))
    assert v.outcome == "not reproduced" and "does not decide" in v.likely_reason
    assert rule(_alibi(learned=[0.0, 0.0, 0.0])).outcome == "not reproduced"  # learned must be N/A past 1x
    rows = v.tables[0].rows
    assert [r[0] for r in rows] == ["learned", "sinusoidal", "rope", "alibi", "relative"]


def _xiong(post0, post500, pre0, pre500, post0_status=("completed",) * 3, ratios=None) -> Evidence:
    recs = []
    for norm, w, vals, statuses in (("post", 0, post0, post0_status), ("post", 500, post500, ("completed",) * 3),
                                    ("pre", 0, pre0, ("completed",) * 3), ("pre", 500, pre500, ("completed",) * 3)):
        for seed, (v, st) in enumerate(zip(vals, statuses)):
            recs.append(RunRecord(f"norm={norm} warmup_steps={w}", {"model.norm": norm, "schedule.warmup_steps": w},
                                  seed, st, {"final val/loss": v, "vocab_size": 2048}))
    rows = []
    for init, norm, depth, seed in itertools.product(("gpt2", "xavier"), ("pre", "post"), (6, 12), (0, 1, 2)):
        r = (ratios or {}).get((init, norm), 1.0)
        rows.append({"init": init, "norm": norm, "n_layers": depth, "seed": seed, "grad_norms": [1.0] * (depth - 1) + [r],
                     "ratio": r})
    return _ev(recs, {"model.norm": "post", "schedule.warmup_steps": 500}, {"rows": rows})


GOOD_INIT = {("xavier", "post"): 2.5, ("xavier", "pre"): 1.1}


def test_xiong_rule_outcomes():
    rule = FINDINGS["xiong_postln_warmup"].rule
    worse = [4.5, 4.62, 4.53]  # worse - fine varies by seed (zero spread has no interval)
    fine, fine2 = [4.0, 4.1, 4.05], [4.01, 4.08, 4.06]
    v = rule(_xiong(worse, fine, fine2, fine, ratios=GOOD_INIT))
    assert v.outcome == "reproduced" and [p[1] for p in v.parts] == ["reproduced", "reproduced"]
    # two of three post-LN no-warmup seeds diverged (their last finite loss is low): still condition A
    diverged = rule(_xiong([3.0, 3.0, 4.5], fine, fine2, fine, post0_status=("diverged", "diverged", "completed"),
                           ratios=GOOD_INIT))
    assert diverged.outcome == "reproduced" and "2 of 3" in diverged.parts[0][2]
    v = rule(_xiong(worse, fine, worse, fine, ratios=GOOD_INIT))  # pre-LN needs warmup too: B fails -> training partly
    assert v.parts[0][1] == "partly" and v.outcome == "partly"
    v = rule(_xiong(fine2, fine, fine2, fine))  # no warmup effect, flat post-LN gradients at init
    assert [p[1] for p in v.parts] == ["partly", "partly"] and v.outcome == "partly"  # B holds; pre flat at ratio 1
    v = rule(_xiong([3.5, 3.6, 3.55], fine, worse, fine, ratios={("xavier", "pre"): 0.3}))
    assert [p[1] for p in v.parts] == ["not reproduced", "not reproduced"] and v.outcome == "not reproduced"
    assert v.likely_reason.startswith("training part")
    assert rule(_xiong(worse, fine, fine2, fine, ratios={("gpt2", "post"): 3.0})).parts[1][1] == "partly"  # gpt2 is not judged


def _kaplan(**means) -> Evidence:
    shapes = {1: (256, 3.30), 2: (180, 3.02), 4: (128, 3.00), 8: (90, 3.03), 16: (64, 3.06)}
    recs = []
    for n, (d, m) in shapes.items():
        m = means.get(f"l{n}", m)
        recs += [RunRecord(f"n_layers={n}", {"model.n_layers": n, "model.d_model": d}, s, "completed",
                           {"final val/loss": m + e + 0.003 * math.sin(n + s), "flops": 1e12, "non_embedding_params": 790_000})
                 for s, e in enumerate((-0.01, 0.0, 0.012))]
    return _ev(recs, {"model.n_layers": 4})


def test_kaplan_rule_outcomes():
    rule = FINDINGS["kaplan_aspect_ratio"].rule
    v = rule(_kaplan())
    assert v.outcome == "reproduced" and "l1" in v.explanation
    assert rule(_kaplan(l1=3.05)).outcome == "partly"  # no extreme is more than 3% worse
    v = rule(_kaplan(l2=3.20))  # a middle shape 6.7% worse
    assert v.outcome == "not reproduced" and "l2" in v.likely_reason
    assert rule(_kaplan(l4=3.10, l16=2.90)).tables[0].rows[-1][5].endswith("(best)")


def _two(key: str, base: str, other: str, diffs: list[float]) -> Evidence:
    recs = _runs({key: base}, [3.0, 3.1, 3.05, 2.95, 3.02]) + \
        _runs({key: other}, [v + d for v, d in zip([3.0, 3.1, 3.05, 2.95, 3.02], diffs)])
    return _ev(recs, {key: base})


@pytest.mark.parametrize("name,key,base,other", [
    ("swiglu_vs_gelu", "model.activation", "gelu", "swiglu"),
    ("rope_vs_learned", "model.pos.kind", "learned", "rope"),
])
def test_two_group_rule_outcomes(name, key, base, other):
    rule = FINDINGS[name].rule
    v = rule(_two(key, base, other, [-0.04, -0.05, -0.03, -0.04, -0.045]))
    assert v.outcome == "reproduced" and v.key_number.startswith(f"{other} − {base} = -0.04")
    v = rule(_two(key, base, other, [-0.04, 0.05, -0.03, 0.04, 0.0]))
    assert v.outcome == "not reproduced" and "not distinguishable at this n" in v.explanation
    v = rule(_two(key, base, other, [0.04, 0.05, 0.03, 0.04, 0.045]))
    assert v.outcome == "not reproduced" and f"{base} better" in v.explanation


def _rms(loss_diffs: list[float], speedup: float, speed_noise: float = 20.0) -> Evidence:
    base = [3.0, 3.1, 3.05, 2.95, 3.02]
    recs = []
    for kind, losses, speed in (("layernorm", base, 1000.0), ("rmsnorm", [b + d for b, d in zip(base, loss_diffs)],
                                                               1000.0 * speedup)):
        recs += [RunRecord(f"norm_type={kind}", {"model.norm_type": kind}, s, "completed",
                           {"final val/loss": v, "tokens_per_s": speed + speed_noise * ((-1) ** s) * (s % 3)
                                                               + (5.0 * (-1) ** s if kind == "rmsnorm" else 0.0)})
                 for s, v in enumerate(losses)]
    return _ev(recs, {"model.norm_type": "layernorm"})


def test_rmsnorm_rule_outcomes():
    rule = FINDINGS["rmsnorm_vs_layernorm"].rule
    same = [0.002, -0.001, 0.0, 0.001, -0.002]
    v = rule(_rms(same, 1.10))
    assert v.outcome == "reproduced"
    diff_row = v.tables[0].rows[-1]
    assert diff_row[0] == "rmsnorm − layernorm" and "(better; higher is better)" in diff_row[3]  # tokens/s: up is better
    assert "(not distinguishable)" in diff_row[2]
    v = rule(_rms(same, 1.0))
    assert v.outcome == "partly" and "not resolvably faster" in v.explanation and "noise" in v.likely_reason
    v = rule(_rms(same, 0.9))  # resolvably slower: a different reason than noise, explained in the post-hoc text
    assert v.outcome == "partly" and "slower" in v.explanation and "resolvably slower" in v.likely_reason
    assert "bench_norms.py" not in v.likely_reason and "bench_norms.py" in FINDINGS["rmsnorm_vs_layernorm"].post_hoc
    v = rule(_rms([0.1, 0.12, 0.09, 0.11, 0.1], 1.0))
    assert v.outcome == "not reproduced" and v.likely_reason


def test_every_rule_is_covered_above():  # v1 here; the v2 rules in test_findings_v2.py, v3's in test_findings_v3.py
    from .test_findings_v2 import V2
    from .test_findings_v3 import V3

    # the μP findings' rules: test_findings_mup.py, test_findings_mup_v2.py, test_findings_kaplan_mup.py
    assert set(FINDINGS) == set(V1) | set(V2) | set(V3) | {"mup_lr_transfer", "mup_lr_transfer_v2",
                                                           "kaplan_aspect_ratio_mup"}


# ------------------------------------------------------------------------------------------------ the index


def test_index_table_from_the_docs_present(tmp_path, capsys):
    docs = tmp_path / "findings"
    docs.mkdir()
    (docs / "README.md").write_text("# Findings\n\nintro stays\n\n" + index_lib.INDEX_START + "\nold\n"
                                    + index_lib.INDEX_END + "\n\n## After\n\nkept too\n")
    full = {"name": "rope_vs_learned_v2", "verdict": "not reproduced",
            "key_number": "rope − learned = +0.01 [-0.02, 0.04] nats", "smoke": False}
    (docs / "rope_vs_learned_v2.md").write_text(f"<!-- archlab-finding: {json.dumps(full, ensure_ascii=False)} -->\n# x\n")
    smoke = {**full, "name": "swiglu_vs_gelu_v2", "verdict": "reproduced", "smoke": True}
    (docs / "swiglu_vs_gelu_v2.md").write_text(f"<!-- archlab-finding: {json.dumps(smoke)} -->\n# x\n")
    assert main(["--index", "--docs-dir", str(docs)]) == 0
    assert capsys.readouterr().out.strip() == str(docs / "README.md")
    text = (docs / "README.md").read_text()
    assert "intro stays" in text and "kept too" in text and "\nold\n" not in text
    rows = {r[0]: r for r in _table_rows(text.split(index_lib.INDEX_START)[1])}
    assert len(rows) == len(index_lib.by_base(list(FINDINGS.values()))) == 11  # one row per finding, its latest version
    rope = rows[FINDINGS["rope_vs_learned_v2"].title]
    assert rope[2] == "**not reproduced**" and "[-0.02, 0.04]" in rope[3]
    assert rope[4] == ("[rope_vs_learned_v2.md](rope_vs_learned_v2.md); newer: `rope_vs_learned_v3` (registered "
                       "2026-11-29, not run yet)")  # its real registration
    assert rope[5] == "not recorded (written before registration existed)"  # its metadata has no setup check
    assert rows[FINDINGS["swiglu_vs_gelu_v3"].title][2] == "not run yet"  # no full-run doc of any version: the latest
    assert rows[FINDINGS["alibi_extrapolation_v2"].title][2] == "not run yet"
    main(["--index", "--docs-dir", str(docs)])
    assert (docs / "README.md").read_text() == text  # idempotent


def test_committed_index_is_current():
    # docs/findings/README.md's table is what --index would write from the committed docs
    text = (DOCS / "README.md").read_text()
    block = text.split(index_lib.INDEX_START)[1].split(index_lib.INDEX_END)[0].strip()
    assert block == "\n".join(index_lib.index_table(list(FINDINGS.values()), DOCS))
