"""Packed training (experiments/run/pack.py, run/stacked.py, sweep/packed_launch.py): every member equals its solo run.

The reference is the member's own solo run (the same config through experiments.run.train.train, or the same model
stepped alone). Where stacked kernels round differently the bound is the larger of 1e-5 relative and the distance
between two solo runs with equivalent kernels (sdpa vs explicit attention), measured in the same test.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest
import torch

from arch import ModelConfig, PosConfig, build_model
from arch.config import ACTIVATIONS, NORM_PLACEMENTS, NORM_TYPES, POS_KINDS
from experiments.config.check import validate
from experiments.config.errors import ConfigError
from experiments.run import loop as loop_mod
from experiments.run.pack import pack_key, train_packed, unpackable
from experiments.run.stacked import StackedLoss
from experiments.run.train import train
from experiments.sweep.packed_launch import plan_packs

from ..arch.knobs import KNOBS
from .conftest import train_losses

STEPS = 50
CORPUS = torch.randint(0, 64, (37,), generator=torch.Generator().manual_seed(0)).repeat(30)  # (1110,)


def max_rel(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) and a
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


# -- the stacked step against solo steps, every knob of the model matrix ------------------------------------------

def _curves(cfg: ModelConfig, seeds: list[int], lrs: list[float], packed: bool, steps: int = STEPS,
            device: str | torch.device = "cpu", autocast=None) -> list[list[float]]:
    """Loss curves of len(seeds) models (init from each seed, own AdamW at its own lr, own data) over `steps` steps,
    stepped one by one (packed=False, model.loss as the trainer calls it) or as one stack (StackedLoss), on `device`
    (built on the CPU, then moved), each forward inside autocast() when given (tests/gpu/test_pack_cuda.py)."""
    from contextlib import nullcontext

    autocast = autocast or nullcontext
    models, opts, gens = [], [], []
    for seed, lr in zip(seeds, lrs):
        torch.manual_seed(seed)
        models.append(build_model(cfg).to(device))
        opts.append(torch.optim.AdamW(models[-1].parameters(), lr=lr, weight_decay=0.1))
        gens.append(torch.Generator().manual_seed(1000 + seed))
    wrapped = [loop_mod.LossModule(m) for m in models]
    stacked = StackedLoss(wrapped) if packed else None
    curves: list[list[float]] = [[] for _ in models]
    for _ in range(steps):
        batches = []
        for g in gens:  # windows of a learnable corpus (a 37-token phrase repeated): a smooth descent, not noise
            starts = torch.randint(0, len(CORPUS) - cfg.n_ctx - 1, (4,), generator=g)
            ids = torch.stack([CORPUS[s:s + cfg.n_ctx + 1] for s in starts.tolist()])
            batches.append((ids[:, :-1].to(device), ids[:, 1:].to(device)))
        if packed:
            with autocast():
                losses = stacked.losses(batches)
            losses.sum().backward()
            values = losses.tolist()
        else:
            values = []
            for w, b in zip(wrapped, batches):
                with autocast():
                    loss = w(*b)
                loss.backward()
                values.append(loss.item())
        for j, (m, o) in enumerate(zip(models, opts)):
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            o.step()
            o.zero_grad(set_to_none=True)
            curves[j].append(values[j])
    return curves


def _model(**kw) -> ModelConfig:
    base = dict(vocab_size=64, n_ctx=16, d_model=32, n_layers=2, n_heads=2, attention="sdpa")
    pos = kw.pop("pos", "learned")
    return ModelConfig(**{**base, **kw}, pos=PosConfig(kind=pos))


# knobs x position encodings x norm placements/types x activations: every value of each axis at least once
MATRIX = {**{f"pos_{p}": dict(pos=p) for p in POS_KINDS},
          **{f"norm_{n}": dict(norm=n) for n in NORM_PLACEMENTS},
          **{f"norm_type_{n}": dict(norm_type=n) for n in NORM_TYPES},
          **{f"act_{a}": dict(activation=a) for a in ACTIVATIONS},
          **{k: v for k, v in KNOBS.items()},
          "untied": dict(tie_embeddings=False), "no_bias": dict(bias=False),
          "mup": dict(param="mup", base_width=16)}
DEFAULT = {"all", "pos_alibi", "norm_sandwich", "mup"}  # the rest: `slow` (make test-all)


@pytest.mark.parametrize("name", [pytest.param(k, marks=() if k in DEFAULT else pytest.mark.slow) for k in MATRIX])
def test_stacked_members_equal_solo_steps(name):
    """3 members (own seed, lr, data) stepped as one stack for 50 steps: each curve equals the member stepped alone to
    1e-5 relative, or no further than the same solo run with the explicit or manual kernel instead of sdpa (batched
    kernels round differently, and 50 steps amplify a 1e-8 difference)."""
    torch.set_num_threads(1)
    cfg = _model(**MATRIX[name])
    seeds, lrs = [0, 1, 2], [1e-3, 2e-3, 3e-3]
    solo = _curves(cfg, seeds, lrs, packed=False)
    packed = _curves(cfg, seeds, lrs, packed=True)
    reference = 0.0  # the same members alone with another kernel of the same math (its own rounding)
    for kernel in ("explicit", "manual"):
        other = _curves(dataclasses.replace(cfg, attention=kernel), seeds, lrs, packed=False)
        reference = max(reference, *(max_rel(o, s) for o, s in zip(other, solo)))
    worst = max(max_rel(p, s) for p, s in zip(packed, solo))
    print(f"{name}: packed vs solo {worst:.2e}, solo kernels {reference:.2e}")
    assert worst <= max(1e-5, reference), f"{name}: packed {worst:.2e} vs reference {reference:.2e}"
    assert solo[0] != solo[1]  # the members really differ (seed, lr, data)


def test_a_member_gets_only_its_own_gradient():
    """Backward of member 1's loss alone leaves member 0's and member 2's gradients empty/zero."""
    cfg = _model(pos="rope")
    models = [build_model(cfg) for _ in range(3)]
    stacked = StackedLoss([loop_mod.LossModule(m) for m in models])
    ids = torch.randint(0, 64, (3, 2, 17))
    losses = stacked.losses([(i[:, :-1], i[:, 1:]) for i in ids])
    losses[1].backward()
    for j, m in enumerate(models):
        norms = [p.grad.abs().sum().item() if p.grad is not None else 0.0 for p in m.parameters()]
        assert (sum(norms) > 0) == (j == 1)


# -- the trainer: run dirs, divergence, interrupt and resume ------------------------------------------------------

MEMBERS = [("seed=0", "optim.lr=1e-3"),
           ("seed=1", "optim.lr=3e-3", "schedule.warmup_steps=5"),
           ("seed=2", "optim.lr=1e-2", "optim.weight_decay=0.0", "model/init=xavier")]
RUN = ("model/pos=rope", f"train.steps={STEPS}", "train.eval_interval=25", f"train.ckpt_interval={STEPS}")


def _solo(make_cfg, tmp_path, member, *extra) -> Path:
    d = tmp_path / f"solo{MEMBERS.index(member)}"
    train(make_cfg(*RUN, *member, *extra, run_dir=d))
    return d


def _packed(make_cfg, tmp_path, members, *extra) -> list:
    rcs = [validate(make_cfg(*RUN, *m, *extra, run_dir=tmp_path / f"pack{i}")) for i, m in enumerate(members)]
    return train_packed(rcs)


def test_packed_runs_write_solo_files_and_curves(make_cfg, tmp_path):
    """Members that differ in seed, lr, warmup, weight decay and init: each run dir holds the files a solo run
    writes, and its loss curve, val losses and summary equal the solo run's (fp32, CPU)."""
    outcomes = _packed(make_cfg, tmp_path, MEMBERS)
    assert [o["status"] for o in outcomes] == ["completed"] * 3
    for i, m in enumerate(MEMBERS):
        solo, pack = _solo(make_cfg, tmp_path, m), tmp_path / f"pack{i}"
        assert sorted(p.name for p in pack.iterdir()) == sorted(p.name for p in solo.iterdir())
        assert sorted(p.name for p in (pack / "checkpoints").iterdir()) == \
            sorted(p.name for p in (solo / "checkpoints").iterdir())
        s_curve, p_curve = [v for _, v in train_losses(solo)], [v for _, v in train_losses(pack)]
        assert len(p_curve) == STEPS and max_rel(p_curve, s_curve) <= 1e-5
        s_sum, p_sum = (json.loads((d / "summary.json").read_text()) for d in (solo, pack))
        assert p_sum["steps"] == s_sum["steps"] and p_sum["tokens"] == s_sum["tokens"]
        assert abs(p_sum["final_val_loss"] - s_sum["final_val_loss"]) <= 1e-5 * s_sum["final_val_loss"]
        assert p_sum["seed"] == s_sum["seed"]


def test_a_diverged_member_is_masked_and_the_others_go_on(make_cfg, tmp_path):
    members = [MEMBERS[0], ("seed=1", "optim.lr=1e4", "train.grad_clip=null")]
    outcomes = _packed(make_cfg, tmp_path, members)
    assert outcomes[1]["status"] == "diverged" and outcomes[1]["diverged_at_step"] is not None
    assert outcomes[0]["status"] == "completed"
    solo = _solo(make_cfg, tmp_path, MEMBERS[0])
    assert max_rel([v for _, v in train_losses(tmp_path / "pack0")], [v for _, v in train_losses(solo)]) <= 1e-5


def test_interrupted_pack_resumes_every_member_exactly(make_cfg, tmp_path, monkeypatch):
    """SIGINT after step 20: every member checkpoints and says interrupted; train.resume=true finishes each on the
    curve of its uninterrupted solo run."""
    from experiments.run.interrupt import RunInterrupted

    after_step = loop_mod.TrainingRun.after_step

    def signal_at_20(self):
        after_step(self)
        if self.step == 20:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(loop_mod.TrainingRun, "after_step", signal_at_20)
    with pytest.raises(RunInterrupted):
        _packed(make_cfg, tmp_path, MEMBERS[:2])
    for i in range(2):
        summary = json.loads((tmp_path / f"pack{i}" / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["steps"] == 20
    monkeypatch.setattr(loop_mod.TrainingRun, "after_step", after_step)
    outcomes = _packed(make_cfg, tmp_path, MEMBERS[:2], "train.resume=true")
    assert [o["status"] for o in outcomes] == ["completed", "completed"]
    for i, m in enumerate(MEMBERS[:2]):
        solo = _solo(make_cfg, tmp_path, m)
        steps = [s for s, _ in train_losses(tmp_path / f"pack{i}")]
        assert steps == list(range(1, STEPS + 1))
        assert max_rel([v for _, v in train_losses(tmp_path / f"pack{i}")], [v for _, v in train_losses(solo)]) <= 1e-5


# -- what may be packed, and how a sweep is grouped ---------------------------------------------------------------

@pytest.mark.parametrize("override, knob", [("model.dropout=0.1", "model.dropout"),
                                            ("model/attention=manual", "model/attention=manual"),
                                            ("train.compile=true", "train.compile"),
                                            ("task=seq2seq", "task=seq2seq")])
def test_unpackable_knobs_are_named(make_cfg, override, knob):
    rc = validate(make_cfg(override))
    assert knob in unpackable(rc)
    with pytest.raises(ConfigError, match=knob.split("=")[0]):
        train_packed([rc, rc])


def test_pack_key_frees_seed_optim_schedule_init_budget_only(make_cfg):
    base = pack_key(validate(make_cfg()))
    for free in ("seed=3", "optim.lr=0.1", "optim.weight_decay=0.5", "schedule.warmup_steps=7", "model/init=xavier",
                 "train.steps=9", "train.eval_interval=2"):
        assert pack_key(validate(make_cfg(free))) == base, free
    for bound in ("model.d_model=64", "model/pos=rope", "train.batch_size=8", "train.n_ctx=16", "model/norm=post",
                  "train.grad_accum=2", "model.n_layers=3"):
        assert pack_key(validate(make_cfg(bound))) != base, bound


def test_members_that_differ_in_shape_are_refused(make_cfg, tmp_path):
    rcs = [validate(make_cfg(run_dir=tmp_path / "a")), validate(make_cfg("model.d_model=64", run_dir=tmp_path / "b"))]
    with pytest.raises(ConfigError, match="differ only in"):
        train_packed(rcs)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_plan_packs_groups_equal_keys_in_order_and_caps_their_size():
    assert plan_packs(["a", "b", "a", None, "a", "b"], None) == [[0, 2, 4], [1, 5], [3]]
    assert plan_packs(["a", "a", "a", "a", "a"], 2) == [[0, 1], [2, 3], [4]]
    assert plan_packs([None, None], 4) == [[0], [1]]


# -- the launcher, end to end -------------------------------------------------------------------------------------

SWEEP = ["logger=disabled", "model=tiny", "model.d_model=32", "model.n_heads=2", "model.n_layers=2", "train.n_ctx=32",
         "train.batch_size=4", "train.steps=6", "train.eval_interval=3", "train.eval_batches=2", "train.ckpt_interval=6",
         "train.extrap=never", "train.progress=false", "train.num_threads=1"]


def test_packed_sweep_equals_the_basic_launchers(train_cli, tmp_path):
    """The same sweep (2 seeds x a learned/rope arm) with hydra/launcher=packed and with the basic launcher: the same
    job dirs, each holding the same files and the same curve."""
    args = [*SWEEP, "seed=0,1", "model/pos=learned,rope"]
    packed = train_cli("-m", *args, "hydra/launcher=packed", f"hydra.sweep.dir={tmp_path / 'packed'}")
    assert packed.returncode == 0, packed.stderr[-2000:]
    assert "as 2 pack(s) of sizes [2, 2]" in packed.stderr + packed.stdout
    basic = train_cli("-m", *args, f"hydra.sweep.dir={tmp_path / 'basic'}")
    assert basic.returncode == 0, basic.stderr[-2000:]
    jobs = sorted(p.name for p in (tmp_path / "basic").iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 4
    assert sorted(p.name for p in (tmp_path / "packed").iterdir() if (p / "summary.json").exists()) == jobs
    for job in jobs:
        b, p = tmp_path / "basic" / job, tmp_path / "packed" / job
        assert sorted(x.name for x in p.iterdir()) == sorted(x.name for x in b.iterdir())
        assert (p / ".hydra" / "overrides.yaml").read_text() == (b / ".hydra" / "overrides.yaml").read_text()
        assert max_rel([v for _, v in train_losses(p)], [v for _, v in train_losses(b)]) <= 1e-5
        assert json.loads((p / "summary.json").read_text())["run_name"] == \
            json.loads((b / "summary.json").read_text())["run_name"]
        log = (p / "train.log").read_text()  # its own lines, from setup to the end, and no other member's
        assert f"completed after 6 steps (768 tokens): {p}" in log and f"run dir {p}: preparing data" in log
        assert not any(f"{tmp_path / 'packed' / other}" in log for other in jobs if other != job)


def test_packed_sweep_refuses_an_unpackable_knob_before_any_job(train_cli, tmp_path):
    ran = train_cli("-m", *SWEEP, "seed=0,1", "model.dropout=0.1", "hydra/launcher=packed",
                    f"hydra.sweep.dir={tmp_path / 's'}")
    assert ran.returncode == 2
    errors = [line for line in ran.stderr.splitlines() if line.startswith("config error")]
    assert errors == ["config error: model.dropout=0.1 cannot be packed: a packed member cannot draw its solo run's "
                      "dropout masks; use model.dropout=0 or another launcher (job #0)"], ran.stderr
    assert "Traceback" not in ran.stderr
    assert not any(p.is_dir() for p in (tmp_path / "s").glob("*")), "no job dir may be made"


@pytest.mark.parametrize("value", ["0", "-3", "abc", "1.5"])
def test_bad_max_members_is_one_line(train_cli, tmp_path, value):
    ran = train_cli("-m", *SWEEP, "seed=0,1", "hydra/launcher=packed", f"hydra.launcher.max_members={value}",
                    f"hydra.sweep.dir={tmp_path / 's'}")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert ran.stderr.strip().splitlines()[-1].startswith("config error: hydra.launcher.max_members")


def _tuned(train_cli, sweep: Path, *extra: str):
    return train_cli("-m", *SWEEP, "hydra/sweeper=tuned", "hydra.sweeper.tune={optim.lr:[1e-3,3e-3,1e-2,3e-2]}",
                     "hydra.sweeper.tune_seeds=[1000]", "hydra.sweeper.seeds=[0,1]", "hydra.sweeper.tune_fraction=0.5",
                     "hydra.sweeper.widen=0", "model/pos=learned,rope", "train.steps=6", f"hydra.sweep.dir={sweep}",
                     *extra)


@pytest.mark.slow  # (~11 s; test_tune_confirm_real.py packs every phase of a tuned sweep in the default suite)
def test_tuned_sweep_packs_each_arms_tuning_grid_and_final_seeds(train_cli, tmp_path):
    """hydra/sweeper=tuned with hydra/launcher=packed: the tuning phase is one pack per arm (4 lrs x 1 tuning seed),
    the final phase one pack per arm (its 2 fresh seeds, each at the arm's best lr)."""
    ran = _tuned(train_cli, tmp_path / "packed", "hydra/launcher=packed")
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = ran.stderr + ran.stdout
    assert "Launching 8 jobs as 2 pack(s) of sizes [4, 4]" in said and "Launching 4 jobs as 2 pack(s) of sizes [2, 2]" \
        in said
    record = json.loads((tmp_path / "packed" / "tuning.json").read_text())
    best = [arm["best_lr"] for arm in record["results"]]
    assert record["phase"] == "done" and len(record["finals"]) == 4
    assert all(f["status"] == "completed" and f["lr"] == best[f["arm"]] for f in record["finals"])


@pytest.mark.slow
def test_tuned_sweep_packed_equals_basic(train_cli, tmp_path):
    """The same tuned sweep through the packed and the basic launcher: the same best lr per arm and final curves."""
    assert _tuned(train_cli, tmp_path / "packed", "hydra/launcher=packed").returncode == 0
    assert _tuned(train_cli, tmp_path / "basic").returncode == 0
    records = [json.loads((tmp_path / s / "tuning.json").read_text()) for s in ("packed", "basic")]
    assert len(records[0]["results"]) == 2
    for packed, basic in zip(records[0]["results"], records[1]["results"]):
        assert (packed["best_lr"], packed["edge"]) == (basic["best_lr"], basic["edge"])
        assert packed["loss_spread"] == pytest.approx(basic["loss_spread"], rel=1e-5)
    jobs = sorted(p.name for p in (tmp_path / "basic").iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 12
    for job in jobs:
        p, b = tmp_path / "packed" / job, tmp_path / "basic" / job
        assert max_rel([v for _, v in train_losses(p)], [v for _, v in train_losses(b)]) <= 1e-5


@pytest.mark.slow
def test_sigkilled_packed_sweep_resumes_every_member_on_its_solo_curve(make_cfg, cli_env, train_cli, cache_dir, tmp_path):
    """A packed sweep (2 seeds) SIGKILLed after its first checkpoint: each summary.json keeps `running`; the same
    sweep with train.resume=true finishes each member with every step once, on the curve of its solo run."""
    from .conftest import sigkill_at_checkpoint

    sweep = tmp_path / "sweep"
    args = ["-m", *SWEEP, "seed=0,1", "train.steps=40", "train.ckpt_interval=10", "train.eval_interval=20",
            "hydra/launcher=packed", f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}"]
    sigkill_at_checkpoint(args, cli_env, sweep, "*/checkpoints/step_*/state.pt")
    jobs = sorted(p for p in sweep.iterdir() if (p / "summary.json").exists())
    assert len(jobs) == 2 and all(json.loads((j / "summary.json").read_text())["status"] == "running" for j in jobs)

    resumed = train_cli(*args, "train.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    for seed, job in enumerate(jobs):
        assert json.loads((job / "summary.json").read_text())["status"] == "completed"
        solo = tmp_path / f"solo{seed}"
        train(make_cfg(*SWEEP, f"seed={seed}", "train.steps=40", "train.ckpt_interval=10",
                       "train.eval_interval=20", run_dir=solo))
        steps = [s for s, _ in train_losses(job)]
        assert steps == list(range(1, 41))
        assert max_rel([v for _, v in train_losses(job)], [v for _, v in train_losses(solo)]) <= 1e-5


def test_a_member_that_cannot_start_fails_alone(make_cfg, tmp_path):
    """Member 1's dir already holds another run (refused, its files untouched); member 2 resumes from a damaged
    checkpoint (setup fails, recorded in its summary.json); member 0 trains on its solo curve all the same."""
    taken = tmp_path / "pack1"
    taken.mkdir()
    (taken / "summary.json").write_text('{"status": "completed"}')
    damaged = tmp_path / "pack2"
    train(make_cfg(*RUN, "train.steps=2", "train.ckpt_interval=1", run_dir=damaged))
    for state in damaged.glob("checkpoints/step_*/state.pt"):
        state.write_bytes(b"not a checkpoint")
    members = [MEMBERS[0], ("seed=1",), ("seed=2", "train.resume=true")]
    rcs = [validate(make_cfg(*RUN, *m, run_dir=tmp_path / f"pack{i}")) for i, m in enumerate(members)]
    outcomes = train_packed(rcs)
    assert outcomes[0]["status"] == "completed"
    assert isinstance(outcomes[1], ConfigError) and "already holds" in str(outcomes[1])
    assert (taken / "summary.json").read_text() == '{"status": "completed"}'
    assert isinstance(outcomes[2], ConfigError) and "cannot resume" in str(outcomes[2])
    assert json.loads((damaged / "summary.json").read_text())["status"] == "completed"  # the earlier run, as it was
    solo = _solo(make_cfg, tmp_path, MEMBERS[0])
    assert max_rel([v for _, v in train_losses(tmp_path / "pack0")], [v for _, v in train_losses(solo)]) <= 1e-5


def test_a_packed_sweep_leaves_hydras_job_config_as_it_found_it(train_cli, tmp_path):
    """After an in-process packed sweep, a train() call is not read as one of its jobs (a leftover job config made
    the next run in the process say 'not started: the sweep was stopped')."""
    from hydra.core.hydra_config import HydraConfig

    before = HydraConfig.instance().cfg
    ran = train_cli("-m", *SWEEP, "seed=0,1", "train.steps=2", "hydra/launcher=packed", f"hydra.sweep.dir={tmp_path / 's'}")
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert HydraConfig.instance().cfg is before
