"""Bad input to the tuned sweeper, as classes (issue 31 §2): its declaration is checked up front like every other
value, a resume that changes what defines the sweep is refused, and its messages say what is true.

Through `python -m experiments.train`'s own entry (experiments.run.train.cli, in this process: the precheck, then
Hydra) with the stand-in trainer of test_tune_sweep.py, so nothing trains. The invariant checked for every refusal:
exit 2, exactly one line on stderr (`config error: ...`, no traceback, no banner before it), nothing written (no
sweep dir, or the sweep dir byte for byte as it was), no run started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.compare import build_report
from experiments.compare.cli import main as compare_main
from experiments.compare.runs import RunsError
from experiments.run import train as train_mod
from experiments.sweep.tuning_record import NOT_DEFINING, TuningRecord, defining

from .conftest import exit_status, file_bytes
from .test_tune_report import FINAL, config, make_sweep, metric_doc, t_interval, write_run
from .test_tune_sweep import fake, job_dirs, sweep_argv  # noqa: F401 (fake: the stand-in trainer fixture)

GRID = "[1e-3,3e-3,1e-2,3e-2]"


def cli(monkeypatch, argv: list[str]) -> int:
    """`python -m experiments.train argv[1:]` (argv[0]: the program, as sweep_argv gives it) in this process."""
    return exit_status(train_mod.cli, monkeypatch, argv)


def argv_without(sweep: Path, *drop: str, extra: tuple[str, ...] = ()) -> list[str]:
    """sweep_argv(sweep) without the arguments starting with `drop`, then `extra`."""
    return [a for a in sweep_argv(sweep) if not a.startswith(drop)] + list(extra)


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("config error: "), lines
    return lines[0]


TUNE = "hydra.sweeper.tune="
# (arguments replacing / added to the declaration, what the one line says)
DECLARATIONS = [
    ([f"{TUNE}{{optim.lrr:{GRID}}}"], "hydra.sweeper.tune: optim.lrr: unknown key; did you mean optim.lr?"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", f"{TUNE}{{optim.lrr:{GRID}}}"],
     "hydra.sweeper.tune: optim.lrr: unknown key; did you mean optim.lr?"),  # typed again: merged into the first
    ([f"{TUNE}{{optim.lr:{GRID}}}", f"{TUNE}{{schedule.warmup_ratio:{GRID}}}"],
     "hydra.sweeper.tune: this sweep tunes optim.lr"),
    ([f"{TUNE}{{train.batch_size:[1.5,2.5,3.5,4.5]}}"], "hydra.sweeper.tune: train.batch_size: "),  # the key's type
    ([f"{TUNE}{{optim.lr:[1e-3,3e-3,1e-2]}}"], "hydra.sweeper.tune.optim.lr: a log grid needs at least 4"),
    ([f"{TUNE}{{optim.lr:[0,1e-3,3e-3,1e-2]}}"], "every point must be a number > 0"),
    ([f"{TUNE}{{optim.lr:[1e-3,1e-3,3e-3,1e-2]}}"], "a point is repeated"),
    ([f"{TUNE}{{optim.lr:{GRID},schedule.warmup_ratio:{GRID}}}"], "hydra.sweeper.tune: must name one key"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.tune_seed=[3]"], "hydra.sweeper.tune_seed: not a key of the "
                                                                   "tuned sweeper; did you mean tune_seeds?"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "+hydra.sweeper.tune_seed=[3]"], "did you mean tune_seeds?"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.widen=-1"], "hydra.sweeper.widen: must be an integer >= 0"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.widen=1.5"], "hydra.sweeper.widen: must be an integer >= 0"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.tune_fraction=0"], "hydra.sweeper.tune_fraction: must be"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.seeds=[0,1000]"], "hydra.sweeper.seeds: the final runs need"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.seeds=[]"], "hydra.sweeper.seeds: needs at least one seed"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.proxy={model/pos:ropee}"],
     "hydra.sweeper.proxy: model/pos: unknown option 'ropee'"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.proxy={model/pos:rope,model.d_modl:32}"],
     "hydra.sweeper.proxy: model.d_modl: unknown key; did you mean model.d_model?"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "+hydra.sweeper.params.model.d_modl='32,64'"],
     "hydra.sweeper.params: model.d_modl: unknown key; did you mean model.d_model?"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "+hydra.sweeper.params.model.d_model='32,abc'"],
     "hydra.sweeper.params: model.d_model: "),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "hydra.sweeper.params=3"], "hydra.sweeper.params: must map keys to values"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "seed=0,1"], "seed: set per run by the tuned sweeper"),
    ([f"{TUNE}{{optim.lr:{GRID}}}", "optim.lr=1e-3"], "optim.lr: set per run by the tuned sweeper"),
]


DEFAULT_TIER = {0, 1, 3, 8, 10, 13, 15, 16, 18, 20}  # the others run in the slow tier (each costs ~1 s of precheck)


@pytest.mark.parametrize("args, message", [
    pytest.param(*case, id=str(i), marks=() if i in DEFAULT_TIER else pytest.mark.slow)
    for i, case in enumerate(DECLARATIONS)])
def test_every_bad_declaration_is_one_line_before_hydra_starts(fake, monkeypatch, tmp_path, capfd, args, message):
    sweep = tmp_path / "sweep"
    capfd.readouterr()
    assert cli(monkeypatch, argv_without(sweep, TUNE, extra=tuple(args))) == 2
    line = one_line(capfd.readouterr().err)
    assert message in line
    assert fake == [] and not sweep.exists()


@pytest.mark.parametrize("args, message", [
    ([f"{TUNE}{{optim.lrr:{GRID}}}"], "hydra.sweeper.tune: optim.lrr: unknown key; did you mean optim.lr?"),
    (["hydra.sweeper.widen=-1"], "hydra.sweeper.widen: must be an integer >= 0"),
    (["hydra.sweeper.tune_fractoin=0.5"], "did you mean tune_fraction?"),
])
def test_a_declaration_from_an_experiment_is_checked_as_well(fake, monkeypatch, tmp_path, capfd, args, message):
    """experiment=tuned_pos declares the sweep; the command line's hydra.sweeper.* are merged into it."""
    sweep = tmp_path / "sweep"
    capfd.readouterr()
    assert cli(monkeypatch, ["train", "-m", "experiment=tuned_pos", f"hydra.sweep.dir={sweep}", "logger=disabled",
                             "hydra/job_logging=disabled", *args]) == 2
    assert message in one_line(capfd.readouterr().err)
    assert fake == [] and not sweep.exists()


# ------------------------------------------------------------------------------------------------------ resume

# (what the resume changes: arguments dropped, arguments added; what its line says the sweep declared, and this command)
CHANGES = [
    (("train.steps=",), ("train.steps=4",), "train.steps = 8", "4"),                          # the budget
    (("train.steps=",), ("train.tokens=4096",), "train.tokens = None", "4096"),                              # another budget key
    ((), ("model.d_model=48",), "model.d_model = 64", "48"),                                  # the model
    ((), ("model/norm=post",), "model.norm = pre", "post"),
    ((), ("data.val_fraction=0.2",), "data.val_fraction = 0.1", "0.2"),                       # the data
    ((), ("data=tinystories",), "data.source = embedded", "hf"),
    ((), ("train.batch_size=3",), "train.batch_size = 16", "3"),
    ((TUNE,), (f"{TUNE}{{optim.lr:[1e-3,3e-3,1e-2,1e-1]}}",),                                   # the grid
     "grid = [0.001, 0.003, 0.01, 0.03]", "[0.001, 0.003, 0.01, 0.1]"),
    (("hydra.sweeper.seeds=",), ("hydra.sweeper.seeds=[0,2]",), "seeds = [0, 1]", "[0, 2]"),    # the seeds
    (("hydra.sweeper.tune_seeds=",), ("hydra.sweeper.tune_seeds=[7]",), "tune_seeds = [1000]", "[7]"),
    (("hydra.sweeper.tune_fraction=",), ("hydra.sweeper.tune_fraction=0.5",), "fraction = 0.25", "0.5"),
    (("hydra.sweeper.widen=",), ("hydra.sweeper.widen=1",), "widen = 2", "1"),
    (("model/pos=",), ("model/pos=learned,rope,alibi",),                                         # the arms
     "arms = [{'model/pos': 'learned'}, {'model/pos': 'rope'}]",
     "[{'model/pos': 'learned'}, {'model/pos': 'rope'}, {'model/pos': 'alibi'}]"),
    ((), ("hydra.sweeper.proxy={model/pos:rope}",), "proxy = None", "1"),
    (("experiment_name=",), ("experiment_name=other",), "experiment_name = tuned_test", "other"),
]


def _finished_sweep(monkeypatch, sweep: Path, fake: list) -> dict[str, bytes]:
    assert cli(monkeypatch, sweep_argv(sweep)) == 0
    fake.clear()
    return file_bytes(sweep)


def _refused_resumes(monkeypatch, capfd, sweep: Path, fake: list, before: dict[str, bytes], changes: list) -> None:
    """Each change of the table: exit 2, one line naming the key with its recorded and its new value, no run
    started, the sweep dir byte for byte as it was."""
    for drop, add, declared, now in changes:
        capfd.readouterr()
        assert cli(monkeypatch, argv_without(sweep, *drop, extra=(*add, "train.resume=true"))) == 2, add
        line = one_line(capfd.readouterr().err)
        assert f"train.resume=true: {sweep / 'tuning.json'} declared {declared}, this command {now}" in line, line
        assert fake == [] and file_bytes(sweep) == before, add


def test_a_resume_that_changes_what_defines_the_sweep_is_one_line_and_changes_nothing(fake, monkeypatch, tmp_path,
                                                                                      capfd):
    """A finished sweep (train.steps=8), then a resume per change of the table (budget, model, data, grid, seeds
    here; every change in the slow tier). A resume of the same sweep with keys that do not define it changed
    (NOT_DEFINING) is accepted and starts nothing."""
    sweep = tmp_path / "sweep"
    before = _finished_sweep(monkeypatch, sweep, fake)
    _refused_resumes(monkeypatch, capfd, sweep, fake, before, [CHANGES[i] for i in (0, 2, 4, 7, 8)])
    capfd.readouterr()
    assert cli(monkeypatch, [*sweep_argv(sweep), "train.resume=true", "train.num_threads=1",
                             "train.progress=false"]) == 0
    assert fake == [] and TuningRecord.read(sweep).phase == "done"
    assert {p.name for p in job_dirs(sweep)} == {Path(n).parts[0] for n in before if n[0].isdigit()}


@pytest.mark.slow
def test_every_change_of_what_defines_the_sweep_is_refused_on_resume(fake, monkeypatch, tmp_path, capfd):
    sweep = tmp_path / "sweep"
    before = _finished_sweep(monkeypatch, sweep, fake)
    _refused_resumes(monkeypatch, capfd, sweep, fake, before, CHANGES)


FLAT = st.dictionaries(st.sampled_from(["train.steps", "model.d_model", "data.paths", "logger.kind", "seed",
                                        "optim.lr", "train.num_threads", "experiment_name"]),
                       st.one_of(st.integers(0, 3), st.sampled_from(["a", "b"]), st.lists(st.integers(0, 2), max_size=2)))


def _reference_difference(mine: dict, theirs: dict) -> tuple | None:
    """The obvious implementation: the declaration's fields in order, then the config's shared keys in order."""
    for k in ("key", "grid", "tune_seeds", "seeds", "fraction", "widen", "arms", "proxy", "proxy_only"):
        if mine["decl"][k] != theirs["decl"][k]:
            return k, theirs["decl"][k], mine["decl"][k]
    for k, v in mine["config"].items():
        if k in theirs["config"] and theirs["config"][k] != v:
            return k, theirs["config"][k], v
    return None


@settings(max_examples=60, deadline=None)
@given(a=FLAT, b=FLAT, seeds=st.tuples(st.sampled_from([[0, 1], [0, 2]]), st.sampled_from([[0, 1], [0, 2]])),
       widen=st.tuples(st.integers(0, 1), st.integers(0, 1)))
def test_difference_names_the_first_defining_difference(a, b, seeds, widen):
    def record(flat, s, w):
        return TuningRecord(key="optim.lr", grid=[1e-3, 1e-2, 1e-1, 1.0], tune_seeds=[1000], seeds=s, fraction=0.25,
                            widen=w, arms=[{"model/pos": "rope"}], config=defining(flat, "optim.lr"))

    mine, theirs = record(a, seeds[0], widen[0]), record(b, seeds[1], widen[1])
    got = mine.difference(theirs)
    assert got == _reference_difference({"decl": mine.declaration(), "config": mine.config},
                                        {"decl": theirs.declaration(), "config": theirs.config})
    assert got is None or got[0] not in ("seed", "optim.lr", *NOT_DEFINING) and not got[0].startswith("logger.")
    # a record written before `config` existed is compared on its declaration alone
    old = TuningRecord.from_json({**theirs.to_json(), "config": None})
    expected = _reference_difference({"decl": mine.declaration(), "config": mine.config},
                                     {"decl": old.declaration(), "config": {}})
    assert mine.difference(old) == expected


# ------------------------------------------------------------------------------------------- what is true

def test_every_tuning_run_diverged_is_said_and_no_resume_is_advised(fake, monkeypatch, tmp_path, capfd):
    """Every lr of the grid diverges in the stand-in (> 0.2), also the one widened below it: no final run. The sweep
    says so in one line; neither it nor compare tells the user to resume (a resume reruns nothing)."""
    sweep = tmp_path / "sweep"
    capfd.readouterr()
    assert cli(monkeypatch, argv_without(sweep, TUNE, "hydra.sweeper.widen=",
                                         extra=(f"{TUNE}{{optim.lr:[1,2,4,8]}}", "hydra.sweeper.widen=1"))) == 0
    err = capfd.readouterr().err
    rec = TuningRecord.read(sweep)
    assert rec.finals == [] and {r.status for r in rec.runs} == {"diverged"} and len(rec.runs) == 10  # 8 + 2 widened
    said = [line for line in err.splitlines() if "every tuning run diverged (10 runs, optim.lr 0.5 to 8)" in line]
    assert len(said) >= 1 and said[0].startswith("[archlab] the tuned sweep ends here: ")
    assert "resuming changes nothing" in said[0]
    assert "train.resume=true" not in err and "resume the sweep" not in err
    with pytest.raises(RunsError) as e:
        build_report([str(sweep)], tmp_path / "report")
    assert "every tuning run diverged" in str(e.value) and "resume the sweep" not in str(e.value)
    capfd.readouterr()
    assert compare_main([str(sweep)]) == 2
    line = capfd.readouterr().err.strip().splitlines()
    assert len(line) == 1 and "every tuning run diverged" in line[0] and "train.resume" not in line[0]


def test_compare_on_a_tuning_run_says_so_and_names_the_final_runs(tmp_path, capsys):
    sweep = make_sweep(tmp_path / "sweep")
    rec = TuningRecord.read(sweep)
    for run in rec.runs[:2]:
        assert compare_main([str(sweep / run.run_dir)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1, lines
        assert f"{sweep / run.run_dir} is a tuning run (optim.lr={run.lr:g}, seed 1000)" in lines[0]
        assert all(f.run_dir in lines[0] for f in rec.finals) and "resume" not in lines[0]
    # a tuned sweep still in its tuning phase: there the resume is the advice
    early = make_sweep(tmp_path / "early", finals=False)
    assert compare_main([str(early / TuningRecord.read(early).runs[0].run_dir)]) == 2
    assert "no final run yet (phase tuning)" in capsys.readouterr().err


def _stray(sweep: Path) -> None:
    """A run left in the sweep dir that tuning.json does not list (as an earlier record's tuning run would be)."""
    write_run(sweep / "99_model.pos=learned,optim.lr=0.003,seed=1000,train.steps=4", config("learned", 3e-3, 1000), 1.0)


@pytest.mark.parametrize("paths", [
    lambda s: [s], lambda s: [f"{s}/*"], lambda s: [s.parent], lambda s: [f"{s.parent}/*/*"],
    lambda s: [s, *sorted(s.iterdir())], lambda s: sorted(p for p in s.iterdir() if p.is_dir()),
], ids=["sweep dir", "glob", "dir above", "glob above", "sweep and runs", "each run dir"])
def test_tuning_runs_never_enter_a_mean_whatever_the_paths(tmp_path, paths):
    """Every way of naming a tuned sweep's runs (the dir, a glob, a dir above it searched, each run dir): the groups
    are the final runs alone, their means and intervals scipy's on FINAL, whatever else sits in the sweep dir."""
    sweep = make_sweep(tmp_path / "runs" / "sweep")
    _stray(sweep)
    out = tmp_path / "report"
    build_report([str(p) for p in paths(sweep)], out, by=["model.pos.kind"])
    doc, m = metric_doc(out)
    assert doc["protocol"].startswith("tuned")
    for g, pos in zip(m["groups"], ("learned", "rope")):
        mean, lo, hi = t_interval(FINAL[pos])
        assert g["n"] == 3 and g["seeds"] == [0, 1, 2] and g["mean"] == pytest.approx(mean), g
        assert g["ci"] == pytest.approx([lo, hi])


def test_a_tuned_sweep_with_one_final_run_reports_into_its_sweep_dir(fake, monkeypatch, tmp_path):
    """One arm, one fresh seed: one final run. The sweep's report goes to <sweep dir>/report/ (docs/tuning.md), not
    into the run's dir; so does compare's default out dir for the sweep dir."""
    sweep = tmp_path / "sweep"
    assert cli(monkeypatch, argv_without(sweep, "model/pos=", "hydra.sweeper.seeds=",
                                         extra=("model/pos=learned", "hydra.sweeper.seeds=[0]"))) == 0
    rec = TuningRecord.read(sweep)
    assert len(rec.finals) == 1
    assert (sweep / "report" / "report.html").is_file() and not (sweep / rec.finals[0].run_dir / "report").exists()
    (sweep / "report" / "report.html").unlink()
    assert Path(build_report([str(sweep)])) == sweep / "report" / "report.html"
