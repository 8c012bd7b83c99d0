"""A v3 finding's pilot: its arms at one lr on pilot seeds at the full budget, untuned, whose noise fixes the seeds of
the power plan before the finding is registered (docs/findings/PLAN_v3.md, "Power plan").

    python -m experiments.findings.pilot rope_vs_learned_v3 --sizes s,m        # runs, then docs/findings/<name>/pilot.json
    python -m experiments.findings.pilot rope_vs_learned_v3 --smoke --out-dir /tmp/p   # seconds: the pipeline only
    python -m experiments.findings.pilot rope_vs_learned_v3 --from-dir multirun/findings/<name>/pilot_<time>

The arms are the finding's sweep (its YAML's `hydra.sweeper.params`), each at PILOT_LR on PILOT_SEEDS
(claims/protocol_v3.py), each run a single `python -m experiments.train experiment=finding_<name> <arm> seed=S
optim.lr=LR hydra.run.dir=<dir>/<k>_<arm>,seed=S` (`--jobs` at a time; a run dir that holds a finished run is kept, an
unfinished one resumed: the command is resumable). Per size (the finding's second --by key, model.d_model) the noise
is the sd of the per-seed paired differences arm − baseline (the first --by key; the baseline its BASELINE value) of
`final test/loss`, pooled with the module's PRIOR_NOISE at that size (v2's final runs), and power.plan gives the seeds
per arm at the registered SESOI for the module's claim (directional, or equivalence for "equal"); the plan's n is the
largest over the sizes of each size's planned n at the noise's point estimate (the n its 80% upper bound would need is
recorded beside it: with a pilot's few degrees of freedom it is often the cap). pilot.json holds the runs as data
(rundata.py), the noise and the plans; the finding's YAML then gets that many seeds and its module the plan's text
(POWER) before `--register`. Pilot runs never enter a reported interval (they are not in the finding's sweep dir).
Not handled: findings with more than two arms per size, tuned pilots (the lr is fixed), a pilot on SLURM.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.registry import FINDINGS, Finding
from experiments.rundir.layout import RunDir, RunStatus
from tokenizer.cli_args import OneLineParser, UsageError, non_empty_path, positive_int

METRIC = "final test/loss"
FORMAT = "archlab-finding-pilot"
CLAIM_TEST = {"lower": "directional", "higher": "directional", "equal": "equivalence"}


def arms(f: Finding, sizes: Sequence[str] | None = None) -> list[list[str]]:
    """The finding's sweep points as override lists (its YAML's hydra.sweeper.params crossed), `sizes` keeping only
    those values of finding/size."""
    from omegaconf import OmegaConf

    from experiments.config.compose import compose_config

    cfg = compose_config([f"experiment={f.experiment}", "hydra/launcher=basic"], return_hydra_config=True)
    params = OmegaConf.to_container(cfg.hydra.sweeper.params)
    axes = []
    for key, values in params.items():
        vals = [v.strip() for v in str(values).split(",")]
        if key == "finding/size" and sizes:
            unknown = sorted(set(sizes) - set(vals))
            if unknown:
                raise UsageError(f"--sizes: {unknown[0]} is not a size of {f.name} (choose from {', '.join(vals)})")
            vals = [v for v in vals if v in sizes]
        axes.append([f"{key}={v}" for v in vals])
    return [list(p) for p in itertools.product(*axes)]


def _done(run_dir: Path) -> bool:
    """The run dir holds a result (completed or diverged): the pilot keeps it."""
    status = RunStatus.of((RunDir(run_dir).read_summary() or {}).get("status"))
    return status is not None and status.has_result


def run_all(f: Finding, out: Path, points: list[list[str]], seeds: Sequence[int], lr: float, jobs: int,
            extra: Sequence[str]) -> list[int]:
    """Train every point × seed (skipping finished runs, resuming started ones); the exit statuses."""
    todo = []
    for k, (point, seed) in enumerate(itertools.product(points, seeds)):
        name = f"{k}_{','.join(p.replace('/', '.') for p in point)},seed={seed}"
        run_dir = out / name
        if _done(run_dir):
            continue
        argv = [sys.executable, "-m", "experiments.train", f"experiment={f.experiment}", *point, f"seed={seed}",
                f"optim.lr={lr:g}", f"hydra.run.dir='{run_dir}'", *extra,
                *(["train.resume=true"] if RunDir(run_dir).checkpoint_dir.is_dir() else [])]
        todo.append((argv, out / f"{name}.log"))

    def one(item: tuple[list[str], Path]) -> int:
        argv, log = item
        with open(log, "a") as fh:
            return subprocess.run(argv, stdout=fh, stderr=subprocess.STDOUT).returncode

    print(f"pilot: {len(todo)} runs to train in {out} ({jobs} at a time)", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, todo))


def pooled_noise(diffs: Sequence[float], prior: tuple[float, float, str] | None) -> Any:
    """power.Noise of the pilot's paired differences pooled with a prior (sd, df, source) by sums of squares,
    sd² = (Σ(d − d̄)² + sd_prior² · df_prior) / (n − 1 + df_prior); None when neither gives a degree of freedom."""
    from experiments.findings.power import Noise, noise_of

    noise = noise_of([diffs], f"the pilot's {len(diffs)} paired differences") if len(diffs) >= 2 else None
    if prior is None:
        return noise
    sd, df, source = prior
    ss = (noise.sd ** 2 * noise.df if noise else 0.0) + sd ** 2 * df
    dof = (noise.df if noise else 0) + df
    return Noise((ss / dof) ** 0.5, int(dof), f"{noise.source} pooled with {source}" if noise else source)


def noise_and_plans(f: Finding, out: Path) -> dict[str, Any]:
    """Per size: the paired differences, the noise (pooled with the module's PRIOR_NOISE) and power.plan."""
    from experiments.compare import group_runs, read_runs
    from experiments.findings.evidence import records_from_groups
    from experiments.findings.power import plan, plan_record, plan_text

    module = importlib.import_module(f"experiments.findings.claims.{f.name}")
    claim = getattr(module, "CLAIM_KIND", "lower")
    prior = getattr(module, "PRIOR_NOISE", {})  # {size value: (sd, df, source)}
    cap = getattr(module, "SEED_CAP", getattr(getattr(module, "v3", None), "SEED_CAP", 16))
    arm_key, size_key = f.by[0], f.by[1]
    records = records_from_groups(group_runs(read_runs([str(out)]), list(f.by)), list(f.by))
    sizes = sorted({str(r.keys[size_key]) for r in records} | {str(k) for k in prior}, key=float)
    per_size: dict[str, Any] = {}
    for s in sizes:
        at = [r for r in records if str(r.keys[size_key]) == str(s) and r.get(METRIC) is not None]
        base = {r.seed: r.get(METRIC) for r in at if str(r.keys[arm_key]) == str(f.baseline[arm_key])}
        diffs = [r.get(METRIC) - base[r.seed] for r in at
                 if str(r.keys[arm_key]) != str(f.baseline[arm_key]) and r.seed in base]
        noise = pooled_noise(diffs, next((v for k, v in prior.items() if str(k) == str(s)), None))
        if noise is None:
            per_size[str(s)] = {"differences": diffs, "noise": None, "plan": None, "text": "no noise estimate"}
            continue
        p = plan(CLAIM_TEST[claim], f.sesoi or 0.02, noise, cap=cap)
        per_size[str(s)] = {"differences": diffs, "plan": plan_record(p), "text": plan_text(p),
                            "n": p.n}
    ns = [v["n"] for v in per_size.values() if v.get("n") is not None]
    return {"metric": METRIC, "claim": claim, "by": list(f.by), "sizes": per_size, "n": max(ns) if ns else None,
            "cap": cap, "rule": "the largest over the sizes of each size's planned n (at its noise's point estimate; the n at "
                    "the 80% upper bound is recorded beside it)"}


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m experiments.findings.pilot", description=__doc__.split("\n\n")[0])
    p.add_argument("name", help="a v3 finding (python -m experiments.findings --list)")
    p.add_argument("--sizes", default=None, help="comma-separated finding/size values to pilot (default: all)")
    p.add_argument("--jobs", type=positive_int, default=2, help="runs at a time (default 2)")
    p.add_argument("--out-dir", type=non_empty_path, default=None, help="the pilot's runs (default multirun/findings/"
                                                                        "<name>/pilot)")
    p.add_argument("--pilot-file", type=non_empty_path, default=None,
                   help="where pilot.json goes (default docs/findings/<name>/pilot.json; with --smoke <out-dir>)")
    p.add_argument("--smoke", action="store_true", help="seconds: the smoke's shape, data and budget")
    p.add_argument("--from-dir", action="store_true", help="no training: read the runs already in --out-dir")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.name not in FINDINGS:
            raise UsageError(f"unknown finding {args.name!r}; choose from {', '.join(FINDINGS)}")
        f = FINDINGS[args.name]
        module = importlib.import_module(f"experiments.findings.claims.{f.name}")
        protocol = getattr(module, "v3", None)
        if protocol is None or len(f.by) != 2:
            raise UsageError(f"{f.name} is not a two-arm v3 finding (its module imports claims.protocol_v3 as v3)")
        out = args.out_dir or Path("multirun") / "findings" / f.name / ("pilot_smoke" if args.smoke else "pilot")
        sizes = args.sizes.split(",") if args.sizes else None
        points = arms(f, sizes)
        if not args.from_dir:
            extra = [o for o in f.smoke_overrides(tuned=False, data_in_yaml=True) if not o.startswith("seed=")] \
                if args.smoke else []
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.time()
            codes = run_all(f, out, points, protocol.PILOT_SEEDS, protocol.PILOT_LR, args.jobs, extra)
            print(f"pilot: {len(codes)} runs in {time.time() - t0:.0f} s, {sum(c != 0 for c in codes)} failed",
                  file=sys.stderr)
        from experiments.compare import RunsError
        from experiments.findings.rundata import export

        try:
            planned = noise_and_plans(f, out)
        except RunsError as e:
            print(f"pilot: error: {e}", file=sys.stderr)
            return 1

        result = {"format": FORMAT, "version": 1, "name": f.name, "lr": protocol.PILOT_LR,
                  "seeds": list(protocol.PILOT_SEEDS), "smoke": args.smoke, **planned,
                  "data": export(out, by=list(f.by))}
        path = args.pilot_file or (out / "pilot.json" if args.smoke else
                                   Path("docs") / "findings" / f.name / "pilot.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")
        for s, v in result["sizes"].items():
            print(f"pilot: {f.by[1]}={s}: {v['text']}", file=sys.stderr)
        print(f"pilot: seeds per arm for {f.name}: {result['n']} ({result['rule']})", file=sys.stderr)
        print(path)
        return 0
    except UsageError as e:
        print(f"pilot: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("pilot: interrupted; the same command resumes", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
