"""A data file the command names must exist before any run starts, sweeps included (experiments/config/data_files.py).

In a clone without ../shared, `python -m experiments.train -m experiment=finding_rope_vs_learned_v2` started 10 jobs
that each failed on the same missing file, then printed a resume command that would fail again. Now it is one line,
exit 2, before any job or dir exists, naming the file, what it is and how to get it (a findings' pre-registered
file) and the options that train the sweep on other data. The class: every v2 finding whose YAML selects ELTeC, the
v1 TinyStories file named by hand, any missing text file or token file, in a single run and in a sweep. A file that
is there is never refused. The expected paths and options are written out here (the docs name them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.config.errors import ConfigError
from experiments.config.precheck import precheck

from .conftest import TINY

ELTEC = "../shared/data/bench/eltec_eng_novels.txt"
TINYSTORIES = "../shared/data/bench/tinystories_v1_train_head_lowercase.txt"
V2_ELTEC = ["rope_vs_learned_v2", "alibi_extrapolation_v2", "swiglu_vs_gelu_v2", "rmsnorm_vs_layernorm_v2",
            "xiong_postln_warmup_v2", "kaplan_aspect_ratio_v2", "gqa_vs_mha", "qk_norm_lr_sensitivity",
            "tied_vs_untied", "mup_lr_transfer", "kaplan_aspect_ratio_mup"]  # every finding whose YAML has `finding/data: eltec`


@pytest.fixture
def no_shared(tmp_path, monkeypatch) -> Path:
    """A cwd with no ../shared beside it (a fresh clone elsewhere)."""
    cwd = tmp_path / "clone"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert not (cwd / ELTEC).exists()
    return cwd


def _refused(argv: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        precheck(argv)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("name,multirun", [*((n, True) for n in V2_ELTEC), ("rope_vs_learned_v2", False)])
def test_a_v2_finding_without_its_data_is_refused_once_naming_the_file_and_how_to_get_it(no_shared, name, multirun):
    msg = _refused([*(["-m"] if multirun else []), f"experiment=finding_{name}"])
    assert msg.startswith(f"data.paths: no file matches '{ELTEC}'"), msg
    for needle in ("99 English novels", "no public copy", f"python -m experiments.findings {name} --data-file COPY",
                   "'data.paths=[COPY]'", "finding/data=embedded", "finding/data=tinystories"):
        assert needle in msg, (needle, msg)
    assert not (no_shared / "multirun").exists() and not (no_shared / "outputs").exists()


def test_the_v1_file_named_by_hand_says_where_to_download_it(no_shared):
    msg = _refused(["-m", "data=text", f"data.paths=[{TINYSTORIES}]", "model/pos=learned,rope"])
    assert "TinyStories" in msg and "https://raw.githubusercontent.com/" in msg and "data=tinystories" in msg, msg


@pytest.mark.parametrize("argv,start", [
    (["-m", "data=text", "data.paths=[nope.txt]", "seed=0,1"], "data.paths: no file matches 'nope.txt'"),
    (["-m", "data=text", "data.paths=[books/*.txt]", "seed=0,1"], "data.paths: no file matches 'books/*.txt'"),
    (["-m", "data=tokens", "data.train_path=nope.bin", "tokenizer=load", "tokenizer.path=.", "seed=0,1"],
     "data.train_path: "),
    (["data=text", "data.paths=[nope.txt]"], "data.paths: no file matches 'nope.txt'"),
])
def test_any_missing_data_file_is_refused_before_a_job_starts(no_shared, argv, start):
    flags = [a for a in argv if a == "-m"]
    msg = _refused([*flags, *TINY, *[a for a in argv if a != "-m"]])
    assert msg.startswith(start) and "pre-registered" not in msg and "finding" not in msg, msg


def test_files_that_are_there_are_accepted(no_shared):
    (no_shared / "books").mkdir()
    (no_shared / "books" / "a.txt").write_text("some text " * 100)
    precheck(["-m", *TINY, "data=text", "data.paths=[books/*.txt]", "seed=0,1"])
    eltec = no_shared.parent / "shared" / "data" / "bench" / "eltec_eng_novels.txt"
    eltec.parent.mkdir(parents=True)
    eltec.write_text("a novel\n" * 100)  # the precheck asks for the file, not for its bytes (a run checks those)
    precheck(["-m", "experiment=finding_rope_vs_learned_v2"])
    precheck(["-m", "experiment=finding_rope_vs_learned_v2", "finding/data=embedded"])


def test_the_command_prints_one_line_and_starts_nothing(train_cli, no_shared):
    r = train_cli("-m", "experiment=finding_rope_vs_learned_v2", cwd=no_shared)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("config error: data.paths: no file matches")
    assert sorted(p.name for p in no_shared.iterdir()) == []
