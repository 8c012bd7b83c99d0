"""Torch CPU threads for training (issue 29 §3): which `train.num_threads` trains fastest, idle and loaded.

    python bench/bench_threads.py                                  # tiny, small, medium x idle, loaded x 2 rounds
    python bench/bench_threads.py --models tiny --rounds 1 --settings 1,2 --load-procs 1

What is measured: steady-state optimizer steps per second of the real trainer, `python -m experiments.train
model=M train.num_threads=T logger=disabled ...` (medium: model=small with d_model 256, 6 layers, 8 heads) in a new
process per run (forked from the bench after it imported
the trainer, which saves each run ~2 CPU-s of imports; the bench runs no torch operator, so every run starts
torch's thread pool afresh, as a user's process does), read from the
`time` column of its metrics.jsonl (log every step): (steps after the first `--warmup`) / (time they took). Process
start, imports, data and model setup and the first `--warmup` steps are excluded; the run is killed once it has
trained `--min-steps` steps and `--min-seconds` after warm-up (or `--max-seconds`, whichever comes first), so no
eval or checkpoint is timed. Settings: an integer T (`train.num_threads=T`; on a machine whose physical cores are
all its CPUs, T = cores is torch's own default) and `null` (the project's default rule, experiments.sweep.job
.num_threads, what a user gets without the option). The bench restarts itself without OMP_NUM_THREADS /
MKL_NUM_THREADS when they are set, so torch's default is its own.
Loads: `idle` (nothing started by the bench; other users of the machine are not stopped) and `loaded`
(`--load-procs` processes spinning in pure Python, started before the block of runs and killed after it, each
ending by itself after `--load-seconds` at most). Every round runs every (load, model, setting), the loads'
order alternating and the settings' rotating between rounds, so drift hits all settings alike.
`--quiet-wait S` waits, before each idle run, up to S seconds for other users' processes to keep fewer than
`--quiet-below` CPUs busy (a shared machine is rarely idle; the others' busy column says what each run got).
`--idle-nice -19` (root) runs the idle cells' trainer at the highest priority, in a session and so a scheduler
autogroup of its own at that nice, so that other users' processes barely take its cores: an idle machine emulated
on a shared one. Its `null` rows then show what the rule picks on the shared machine (it sees the others' load),
not on an idle one (there it keeps torch's default: the cores' row).
`--isolate -19` puts the whole bench, runs and spinners, in one such group: a machine whose only load is the
bench's own (idle: none; loaded: the spinners), emulated on a shared one; the same caveat holds for idle `null`.
Reported per (model, load, setting): steps/s median [min, max] over rounds, its ratio to the best setting's
median (the acceptance number: the default must be >= 0.90 of the best in every cell), the best round's ratio
(min of rounds, less sensitive to other users' bursts), the threads the run used (summary.json), the process CPU
ms per step (all threads, spinning included) and the cores other processes kept busy during the run (from
/proc/stat minus the run's own CPU time; the spinners count here). The load average before and after is printed.
Not measured: GPUs (threads there only feed the CPU side), parallel sweeps and DDP (their jobs divide the CPUs,
bench_runner.py --part sweep), loads that start or stop in the middle of a run, memory bandwidth-bound
contention (the spinners use one core each and almost no memory).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from experiments.sweep.job import busy_ticks

REPO = Path(__file__).resolve().parents[1]
USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
TARGET = 0.90  # the default's steps/s over the best setting's, in every cell


class BenchError(Exception):
    """Bad input or a run that failed: one line, exit 2."""


@dataclass
class Run:
    steps_per_s: float
    cpu_ms_per_step: float | None
    others_busy: float | None  # cores kept busy by other processes during the measured steps
    threads: int | None  # torch.get_num_threads() the run reported


@dataclass
class Cell:
    model: str
    load: str
    setting: str
    runs: list[Run] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [r.steps_per_s for r in self.runs]


# -- pure logic (tested in tests/test_bench_threads.py) ------------------------------------------------------------

def parse_settings(text: str) -> list[str]:
    """'1,2,null' -> ['1', '2', 'null']: positive integers or null, no repeats."""
    out = []
    for item in (s.strip() for s in text.split(",")):
        if item != "null" and not (item.isdigit() and int(item) >= 1):
            raise BenchError(f"--settings: {item!r} is not a positive integer or null")
        if item in out:
            raise BenchError(f"--settings: {item} given twice")
        out.append(item)
    return out


def parse_models(text: str, available: list[str]) -> list[str]:
    models = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in models if m not in available]
    if unknown or not models:
        raise BenchError(f"--models: unknown preset {', '.join(unknown) or '(none)'}; "
                         f"choose from {', '.join(available)}")
    return models


def steady_rate(train_rows: list[dict], warmup: int) -> tuple[float, int] | None:
    """(steps per second, steps counted) over the rows after step `warmup` ({"step", "time"} of metrics.jsonl's
    train lines, consecutive steps); None until at least one step after warm-up is logged."""
    rows = sorted((r for r in train_rows if r["step"] >= warmup), key=lambda r: r["step"])
    if len(rows) < 2:
        return None
    steps, dt = rows[-1]["step"] - rows[0]["step"], rows[-1]["time"] - rows[0]["time"]
    return (steps / dt if dt > 0 else float("inf")), steps


def median_range(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}, {max(xs):.2f}]"


def summarize(cells: list[Cell]) -> list[dict]:
    """One row per cell: median/min/max steps/s, median over the best setting's median for its (model, load)
    (`ratio`), best round over the best setting's best round (`ratio_best_round`), and whether every run of the
    cell used the one thread count every run of the best setting used (`same_threads_as_best`: then the two are
    replicates of one configuration and their ratio is the machine's noise)."""
    best_med, best_max, best_cell = {}, {}, {}
    for c in cells:
        key = (c.model, c.load)
        if statistics.median(c.rates) > best_med.get(key, 0.0):
            best_med[key], best_cell[key] = statistics.median(c.rates), c
        best_max[key] = max(best_max.get(key, 0.0), max(c.rates))
    rows = []
    for c in cells:
        key, med = (c.model, c.load), statistics.median(c.rates)
        threads = sorted({r.threads for r in c.runs if r.threads is not None})
        cpu = [r.cpu_ms_per_step for r in c.runs if r.cpu_ms_per_step is not None]
        others = [r.others_busy for r in c.runs if r.others_busy is not None]
        best_threads = sorted({r.threads for r in best_cell[key].runs if r.threads is not None})
        rows.append({"model": c.model, "load": c.load, "setting": c.setting, "threads": threads,
                     "best_setting": best_cell[key].setting,
                     "same_threads_as_best": len(threads) == 1 and threads == best_threads,
                     "steps_per_s": c.rates, "median": med, "ratio": med / best_med[key],
                     "ratio_best_round": max(c.rates) / best_max[key],
                     "cpu_ms_per_step": statistics.median(cpu) if cpu else None,
                     "others_busy": statistics.median(others) if others else None})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | load | train.num_threads | threads used | steps/s median [min, max] | / best (median) "
             "| / best (best round) | CPU ms/step | others' busy cores |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cpu = f"{r['cpu_ms_per_step']:.0f}" if r["cpu_ms_per_step"] is not None else "-"
        others = f"{r['others_busy']:.2f}" if r["others_busy"] is not None else "-"
        mark = "**" if r["ratio"] >= 0.999 else ""
        lines.append(f"| {r['model']} | {r['load']} | {r['setting']} | {','.join(map(str, r['threads'])) or '-'} "
                     f"| {median_range(r['steps_per_s'])} | {mark}{r['ratio']:.2f}{mark} | {r['ratio_best_round']:.2f} "
                     f"| {cpu} | {others} |")
    return "\n".join(lines)


def verdict(rows: list[dict], setting: str = "null") -> str:
    """How the default (`setting`) fares against the best setting in each (model, load) cell: measured within
    TARGET, and run with the best setting's thread count."""
    mine = [r for r in rows if r["setting"] == setting]
    if not mine:
        return f"train.num_threads={setting} not measured"
    ok = [r for r in mine if r["ratio"] >= TARGET]
    same = [r for r in mine if r["same_threads_as_best"] or r["setting"] == r["best_setting"]]
    worst = min(mine, key=lambda r: r["ratio"])
    return (f"train.num_threads={setting}: within {1 - TARGET:.0%} of the best setting in {len(ok)}/{len(mine)} "
            f"cells (worst {worst['model']}/{worst['load']} at {worst['ratio']:.2f}); the best setting's thread "
            f"count in {len(same)}/{len(mine)} cells")


# -- measuring -------------------------------------------------------------------------------------------------

def _spin(deadline: float) -> None:
    while time.monotonic() < deadline:
        pass


def start_load(n: int, seconds: float) -> list[mp.Process]:
    deadline = time.monotonic() + seconds
    procs = [mp.Process(target=_spin, args=(deadline,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # let the scheduler see them before the run starts
    return procs


def wait_for_quiet(below: float, max_wait: float) -> tuple[float, float]:
    """Wait until other processes keep fewer than `below` CPUs busy (over 1 s), at most `max_wait` seconds;
    (the last busy CPUs measured, seconds waited). Without /proc/stat: (nan, 0)."""
    t0 = time.monotonic()
    while True:
        s0 = _read_stat()
        if s0 is None:
            return float("nan"), 0.0
        time.sleep(1.0)
        busy = (busy_ticks(_read_stat() or s0) - busy_ticks(s0)) / USER_HZ
        waited = time.monotonic() - t0
        if busy < below or waited >= max_wait:
            return busy, waited


def stop_load(procs: list[mp.Process]) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=5)


def _read_stat() -> str | None:
    try:
        return Path("/proc/stat").read_text()
    except OSError:
        return None


def _proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a process, all its threads, in seconds (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / USER_HZ


def _new_rows(path: Path, pos: int) -> tuple[list[dict], int]:
    """Complete train lines appended to metrics.jsonl since byte `pos`, and the new position."""
    try:
        with path.open("rb") as f:
            f.seek(pos)
            chunk = f.read()
    except FileNotFoundError:
        return [], pos
    end = chunk.rfind(b"\n") + 1
    rows = [json.loads(line) for line in chunk[:end].splitlines() if line.strip()]
    return [{"step": r["step"], "time": r["time"]} for r in rows if "train/loss" in r], pos + end


def _train_child(overrides: list[str], log_path: str, nice: int = 0) -> None:
    """`python -m experiments.train <overrides>` in a process forked from the bench (imports already done; torch's
    thread pool not yet started: the bench itself runs no torch operator), output to `log_path`, at priority `nice`
    (set before torch starts its threads, which inherit it)."""
    if nice:  # with sched_autogroup, nice ranks tasks only within one session's group: a group of its own
        isolate(nice)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.argv = ["experiments.train", *overrides]
    from experiments.run.train import cli

    cli()


# Sizes that are not presets of conf/model/: `medium` is model=small widened and deepened (4.74M non-embedding). It is
# not added to arch/presets.py because xiong_postln_warmup_v2's registration hashes that file (a new preset there
# would read as a changed setup of a finding that has run).
SHAPES = {"medium": ["model=small", "model.d_model=256", "model.n_layers=6", "model.n_heads=8"]}


def model_overrides(model: str) -> list[str]:
    """The overrides that select `model`: a preset (model=NAME) or one of SHAPES."""
    return list(SHAPES.get(model, [f"model={model}"]))


def measure(model: str, setting: str, args: argparse.Namespace, workdir: Path, nice: int = 0) -> Run:
    """One run of the trainer at `train.num_threads=setting`, killed once its steady state is measured."""
    run_dir = workdir / f"{model}-{setting}-{time.monotonic_ns()}"
    overrides = [*model_overrides(model), "logger=disabled", "train.progress=false", "train.steps=1000000",
                 "train.tokens=null", "train.log_interval=1", "train.eval_interval=100000000",
                 "train.ckpt_interval=100000000", "train.extrap=never", f"train.num_threads={setting}",
                 f"hydra.run.dir={run_dir}"]
    log_path = workdir / f"{run_dir.name}.log"
    proc = mp.get_context("fork").Process(target=_train_child, args=(overrides, str(log_path), nice),
                                          daemon=True)
    proc.start()
    rows: list[dict] = []
    pos, mark, t_setup = 0, None, time.monotonic()
    try:
        while True:
            time.sleep(0.05)
            new, pos = _new_rows(run_dir / "metrics.jsonl", pos)
            rows += new
            now = time.monotonic()
            if not proc.is_alive():
                tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
                raise BenchError(f"model={model} num_threads={setting}: the run exited ({proc.exitcode}): "
                                 f"{tail[0] if tail else 'no output'}")
            if mark is None:
                if any(r["step"] >= args.warmup for r in rows):
                    mark = (now, _proc_cpu_s(proc.pid), _read_stat(), rows[-1]["step"])
                elif now - t_setup > args.setup_timeout:
                    raise BenchError(f"model={model} num_threads={setting}: no step {args.warmup} after "
                                     f"{args.setup_timeout:.0f} s")
                continue
            got = steady_rate(rows, args.warmup)
            elapsed = now - mark[0]
            if got and ((got[1] >= args.min_steps and elapsed >= args.min_seconds) or elapsed >= args.max_seconds):
                break
        end = (now, _proc_cpu_s(proc.pid), _read_stat(), rows[-1]["step"])
    finally:
        proc.kill()
        proc.join()
    rate, _ = steady_rate(rows, args.warmup)
    steps_between = end[3] - mark[3]
    cpu_ms = others = None
    if mark[1] is not None and end[1] is not None and steps_between > 0:
        cpu_ms = 1e3 * (end[1] - mark[1]) / steps_between
    if mark[2] and end[2] and end[1] is not None and mark[1] is not None:
        cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        b0, b1 = busy_ticks(mark[2], cpus), busy_ticks(end[2], cpus)
        others = max(0.0, ((b1 - b0) / USER_HZ - (end[1] - mark[1])) / (end[0] - mark[0]))
    threads = None
    try:
        threads = json.loads((run_dir / "summary.json").read_text())["num_threads"]
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return Run(rate, cpu_ms, others, threads)


def isolate(nice: int) -> None:
    """This process and all it starts in a session, and so (sched_autogroup) a scheduler group, of their own whose
    nice is `nice`: the group then outranks other sessions' processes."""
    try:
        os.setsid()
        Path("/proc/self/autogroup").write_text(str(nice))
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as e:
        raise BenchError(f"--isolate: {e} (needs root, Linux with sched_autogroup, and not a process-group leader: "
                         f"start it as `setsid python bench/bench_threads.py ...`)") from None


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _torch_default_threads() -> int:
    """torch.get_num_threads() of a fresh interpreter (asked in a child: the bench runs no torch operator itself)."""
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                         text=True, check=True)
    return int(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    if {"OMP_NUM_THREADS", "MKL_NUM_THREADS"} & set(os.environ) and argv is None:  # read when torch loads: restart
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,small,medium",
                   help="presets (conf/model/) or medium (d_model 256, 6 layers, 8 heads), comma-separated")
    p.add_argument("--settings", default=f"1,{cores},null" if cores > 1 else "1,null",
                   help="train.num_threads values, comma-separated: integers or null (the project's default)")
    p.add_argument("--loads", default="idle,loaded", help="idle, loaded or both")
    p.add_argument("--load-procs", type=int, default=cores, help="spinning processes for `loaded` (default: cores)")
    p.add_argument("--load-seconds", type=float, default=600, help="a spinner ends by itself after this long")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quiet-wait", type=float, default=0.0,
                   help="before each idle run, wait up to this many seconds for other processes to go quiet")
    p.add_argument("--idle-nice", type=int, default=0,
                   help="run the idle cells at this priority (e.g. -19, root only): an idle machine emulated on a "
                        "shared one")
    p.add_argument("--isolate", type=int, default=0, metavar="NICE",
                   help="run the whole bench (its runs and spinners) in a scheduler autogroup of its own at this "
                        "nice (e.g. -19, root only): a machine whose only load is the bench's, emulated on a "
                        "shared one")
    p.add_argument("--quiet-below", type=float, default=0.3, help="quiet: fewer CPUs than this busy (over 1 s)")
    p.add_argument("--warmup", type=int, default=1,
                   help="steps excluded at the start of each run (timing starts when step WARMUP is logged)")
    p.add_argument("--min-steps", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=2.0)
    p.add_argument("--max-seconds", type=float, default=8.0)
    p.add_argument("--setup-timeout", type=float, default=120.0)
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args(argv)
    try:
        available = sorted([*(f.stem for f in (REPO / "conf" / "model").glob("*.yaml")), *SHAPES])
        models = parse_models(args.models, available)
        settings = parse_settings(args.settings)
        loads = [x.strip() for x in args.loads.split(",")]
        if not loads or any(x not in ("idle", "loaded") for x in loads):
            raise BenchError(f"--loads: {args.loads!r}; use idle, loaded or idle,loaded")
        for name in ("rounds", "warmup", "min_steps", "load_procs"):
            if getattr(args, name) < (0 if name in ("warmup", "load_procs") else 1):
                raise BenchError(f"--{name.replace('_', '-')}: {getattr(args, name)} is too small")
        if args.isolate:
            isolate(args.isolate)
        rows = run_bench(models, settings, loads, args)
    except BenchError as e:
        print(f"bench_threads: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_threads: interrupted", file=sys.stderr)
        return 130
    print(table(rows))
    if "null" in settings:
        print(verdict(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def run_bench(models: list[str], settings: list[str], loads: list[str], args: argparse.Namespace) -> list[dict]:
    import torch

    import experiments.run.train  # noqa: F401 - imported once here; every run is forked from this process

    os.chdir(REPO)
    signal.signal(signal.SIGTERM, _interrupt)  # `kill` of the bench: its runs and spinners are killed on the way out
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {cores} CPUs, torch {torch.__version__} (its default threads "
          f"here: {_torch_default_threads()}), loadavg before {os.getloadavg()}; models {models}, settings "
          f"{settings}, loads {loads} ({args.load_procs} spinners), {args.rounds} round(s)", flush=True)
    cells = {(m, ld, s): Cell(m, ld, s) for ld in loads for m in models for s in settings}
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as tmp:
        for rnd in range(args.rounds):
            order = loads if rnd % 2 == 0 else loads[::-1]
            for load in order:
                spinners = start_load(args.load_procs, args.load_seconds) if load == "loaded" else []
                try:
                    for model in models:
                        k = rnd % len(settings)
                        for setting in settings[k:] + settings[:k]:
                            if load == "idle" and args.quiet_wait > 0:
                                busy, waited = wait_for_quiet(args.quiet_below, args.quiet_wait)
                                if waited >= 1.5:
                                    print(f"  waited {waited:.0f} s for a quiet machine: others busy {busy:.2f}",
                                          flush=True)
                            run = measure(model, setting, args, Path(tmp),
                                          nice=args.idle_nice if load == "idle" else 0)
                            cells[(model, load, setting)].runs.append(run)
                            print(f"round {rnd + 1} {load:6s} {model:6s} num_threads={setting:4s} -> "
                                  f"{run.steps_per_s:7.2f} steps/s (threads {run.threads}, others busy "
                                  f"{run.others_busy if run.others_busy is None else round(run.others_busy, 2)})",
                                  flush=True)
                finally:
                    stop_load(spinners)
    print(f"loadavg after {os.getloadavg()}", flush=True)
    return summarize(list(cells.values()))


if __name__ == "__main__":
    sys.exit(main())
