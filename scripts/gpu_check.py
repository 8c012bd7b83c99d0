"""The GPU self-check: `make gpu-check` (docs/gpu.md). Runs on a new box, offline, in minutes, and prints one table.

    python scripts/gpu_check.py [--tests-only] [--out DIR] [--budget SECONDS]

Steps, in order, each a subprocess with its own time limit (its share of --budget, default 480 s, plus what the
steps before it left unused), its output in <out>/<step>.log:

1. gpu tests: `pytest -m gpu` over the test files that mark tests `gpu`, with a junit file to count them.
2. bench/bench_gpu.py --json <out>/bench_gpu.json: MFU (the `mfu`, `mfu_spec`, `peak_tflops_measured`,
   `peak_tflops_spec`, `tokens_per_s` keys of its JSON object, where present).
3. bench/bench_packed.py --json <out>/bench_packed.json: the packed speed-up (its `speedup` and `members` keys).
4. packed tuned sweep: `experiment=tuned_pos hydra/launcher=packed` (2 arms, learned vs rope, lr grid then fresh
   seeds) on the embedded corpus, every run dir's summary.json read back.
`--tests-only` stops after step 1. A step whose script or config is not in the checkout yet is SKIPPED, naming it.

Without CUDA (torch.cuda.is_available() False) the CPU-possible parts run: the gpu tests (they skip themselves and
the table says why), a bench script's `--smoke` mode where it has one (else SKIPPED: needs CUDA), and the sweep with
a tiny budget (4 steps a final run). The GPU figures (MFU, speed-up) are shown only from a run on a GPU.

Outputs: <out> defaults to gpu-check/<time>/ in the checkout (gitignored): summary.md (the table printed at the
end), summary.json (the same, for a machine), the logs, the bench JSON files, the sweep. Caches (the tokenizer
and token files of the embedded corpus, torch.compile's and Triton's) go to gpu-check/cache/, so a second check
compiles less. Data: only the embedded corpus (CPython's pydoc topics); nothing outside the checkout is read, the
network is not used (wandb off, Hugging Face offline). Exit status: 0 when no step FAILED, 1 otherwise, 2 for a
bad argument (one line), 130 after Ctrl-C (the table of what ran is still written).
Not handled: more than one GPU is reported (name of GPU 0 and the count) but every step uses the default device.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: the checkout's packages (or the installed archlab's, the same)
from tokenizer.cli_args import OneLineParser, UsageError, fail  # noqa: E402

OK, FAILED, SKIPPED = "OK", "FAILED", "SKIPPED"
DEFAULT_BUDGET = 480.0  # seconds: the whole check on one H100/H200-class GPU
MIN_STEP_S = 10.0  # a step is not started with less time than this left
# The sweep's budget on the CPU: 4 steps of 1024 tokens a final run, 1 a tuning run, 2 fresh seeds, no widening,
# no length-extrapolation eval (on a loaded 2-core CPU a packed rope member's took ~50 s of a 6-minute sweep).
CPU_SWEEP = ["train.tokens=4096", "train.eval_interval=4", "train.eval_batches=2", "hydra.sweeper.seeds=[0,1]",
             "hydra.sweeper.widen=0", "train.extrap=never"]


class CheckError(ValueError):
    """Bad input: one line for the user."""


@dataclass
class Result:
    """What one step found: status OK / FAILED / SKIPPED, and in `detail` what it measured or why not."""

    name: str
    status: str
    detail: str = ""
    seconds: float | None = None
    figures: dict[str, float] = field(default_factory=dict)  # mfu, mfu_spec, peak_tflops_*, tokens_per_s, speedup, ...
    log: str | None = None  # the step's log, relative to the out dir


@dataclass
class Context:
    out: Path
    cuda: bool
    env: dict[str, str]
    python: str = sys.executable

    def run(self, name: str, cmd: list[str], timeout: float) -> tuple[int | None, float, Path]:
        """Run cmd in the checkout with its output to <out>/<name>.log; (exit status or None if it ran past
        `timeout` and was stopped, seconds, the log). The command and what it starts are one process group,
        stopped together at the limit or on Ctrl-C."""
        log = self.out / f"{name}.log"
        t0 = time.monotonic()
        with open(log, "w") as f:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop(proc, signal.SIGTERM)
                rc = None
            except KeyboardInterrupt:
                stop(proc, signal.SIGINT)
                raise
            finally:
                signal_group(proc, signal.SIGKILL)  # what the step left behind (it would hold the GPU)
        return rc, time.monotonic() - t0, log


def signal_group(proc: subprocess.Popen, sig: int) -> bool:
    """Send sig to proc's process group; False when the group is gone."""
    try:
        os.killpg(proc.pid, sig)
        return True
    except ProcessLookupError:
        return False


def stop(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group, then SIGKILL it if its leader has not ended within 15 s."""
    if signal_group(proc, sig):
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            signal_group(proc, signal.SIGKILL)
            proc.wait()


@dataclass
class Step:
    """One check: `share` seconds of the budget are kept for it; `fn(ctx, timeout)` returns its Result."""

    name: str
    share: float
    fn: Callable[[Context, float], Result]


def last_line(log: Path) -> str:
    """The last line of a log that says something (an error line if there is one), shortened."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()[1:] if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    line = (errors or lines or ["(no output)"])[-1]
    return line if len(line) <= 160 else line[:157] + "..."


def ended(name: str, rc: int | None, seconds: float, log: Path, timeout: float) -> Result | None:
    """The FAILED result of a command that ran past its limit or exited non-zero; None when it exited 0."""
    if rc is None:
        return Result(name, FAILED, f"stopped at its time limit ({timeout:.0f} s)", seconds, log=log.name)
    if rc != 0:
        return Result(name, FAILED, f"exit {rc}: {last_line(log)}", seconds, log=log.name)
    return None


# ---- the steps ---------------------------------------------------------------------------------------------------

def gpu_test_files() -> list[str]:
    """The test files that mark tests `gpu` (collecting only these keeps the check independent of the other tests'
    requirements, e.g. hypothesis, which a GPU box may not have)."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if "mark.gpu" in p.read_text(errors="replace"))


def junit_counts(path: Path) -> tuple[dict[str, int], str, str]:
    """(counts of passed/failed/errors/skipped, the most frequent skip reason, the first failing test) from pytest's
    junit file."""
    counts = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
    reasons: dict[str, int] = {}
    failing = ""
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
        elif outcome.tag == "skipped":
            counts["skipped"] += 1
            reason = (outcome.get("message") or "").removeprefix("Skipped: ")
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            counts["failed" if outcome.tag == "failure" else "errors"] += 1
            failing = failing or f"{case.get('classname', '')}::{case.get('name', '')}"
    return counts, max(reasons, key=lambda r: (reasons[r], len(r)), default=""), failing


def gpu_tests(ctx: Context, timeout: float) -> Result:
    name = "gpu tests"
    files = gpu_test_files()
    if not files:
        return Result(name, SKIPPED, "no test is marked gpu")
    junit = ctx.out / "gpu-tests.xml"
    cmd = [ctx.python, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
           f"--basetemp={ctx.out / 'pytest-tmp'}", *files]
    rc, seconds, log = ctx.run("gpu-tests", cmd, timeout)
    if rc is None or not junit.is_file():
        return ended(name, rc, seconds, log, timeout) or Result(name, FAILED, "pytest wrote no junit file",
                                                                seconds, log=log.name)
    counts, skip_reason, failing = junit_counts(junit)
    said = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    if counts["failed"] or counts["errors"] or rc not in (0, 5):
        return Result(name, FAILED, f"{said or f'pytest exit {rc}'}; first: {failing or last_line(log)}",
                      seconds, log=log.name)
    if counts["passed"] == 0:
        return Result(name, SKIPPED, f"{said or 'none collected'}: {skip_reason or 'no gpu test ran'}",
                      seconds, log=log.name)
    return Result(name, OK, said, seconds, log=log.name)


def shown(path: Path) -> str:
    """A path as the table shows it: relative to the checkout when inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def bench_step(path: Path, keys: tuple[str, ...]) -> Callable[[Context, float], Result]:
    """The step that runs the bench script `path` --json <out>/<stem>.json (with --smoke on the CPU, where it has
    that mode; a script without --json is run without it) and keeps `keys` of the JSON object as figures, from a
    GPU run only."""
    script = path.name

    def run(ctx: Context, timeout: float) -> Result:
        if not path.is_file():
            return Result(script, SKIPPED, f"{shown(path)} not present")
        text = path.read_text(errors="replace")
        args = []
        if not ctx.cuda:
            if "--smoke" not in text:
                return Result(script, SKIPPED, "needs CUDA (no CUDA here, and the script has no --smoke mode)")
            args.append("--smoke")
        out_json = ctx.out / f"{path.stem}.json"
        if "--json" in text:
            args += ["--json", str(out_json)]
        rc, seconds, log = ctx.run(path.stem, [ctx.python, shown(path), *args], timeout)
        if failed := ended(script, rc, seconds, log, timeout):
            return failed
        if not ctx.cuda:
            return Result(script, OK, "CPU smoke run only: no GPU figures", seconds, log=log.name)
        figures = bench_figures(out_json, keys)
        return Result(script, OK, "" if figures else f"no {' / '.join(keys[:1])} in its JSON", seconds, figures,
                      log.name)

    return run


def bench_figures(path: Path, keys: tuple[str, ...]) -> dict[str, float]:
    """The numeric top-level `keys` of a bench's JSON object ({} when the file is missing or not such an object)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: float(data[k]) for k in keys if isinstance(data.get(k), (int, float)) and not isinstance(data[k], bool)}


def sweep_statuses(sweep: Path) -> dict[str, int]:
    """How many run dirs of a sweep ended in each status (their summary.json)."""
    counts: dict[str, int] = {}
    for summary in sorted(sweep.glob("*/summary.json")):
        try:
            status = json.loads(summary.read_text()).get("status", "unreadable")
        except (OSError, ValueError, AttributeError):
            status = "unreadable"
        counts[status] = counts.get(status, 0) + 1
    return counts


def sweep_step(launcher: str) -> Callable[[Context, float], Result]:
    """The step that runs the tuned sweep experiment=tuned_pos (learned vs rope) with hydra/launcher=<launcher>
    (the check uses `packed`; tests use Hydra's `basic`) and reads back every run's status."""
    name = f"{launcher} tuned sweep"

    def run(ctx: Context, timeout: float) -> Result:
        config = REPO / "conf" / "hydra" / "launcher" / f"{launcher}.yaml"
        if launcher != "basic" and not config.is_file():
            return Result(name, SKIPPED, f"{launcher} launcher not available ({config.relative_to(REPO)})")
        sweep = ctx.out / "sweep"
        cmd = [ctx.python, "-m", "experiments.train", "-m", "experiment=tuned_pos", f"hydra/launcher={launcher}",
               "logger=disabled", f"train.device={'cuda' if ctx.cuda else 'cpu'}", f"hydra.sweep.dir={sweep}",
               *([] if ctx.cuda else CPU_SWEEP)]
        rc, seconds, log = ctx.run("sweep", cmd, timeout)
        if failed := ended(name, rc, seconds, log, timeout):
            return failed
        counts = sweep_statuses(sweep)
        said = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        where = "" if ctx.cuda else "on the CPU, tiny budget: "
        if set(counts) != {"completed"}:
            return Result(name, FAILED, f"{where}runs {said or 'none found'}", seconds, log=log.name)
        report = sweep / "report" / "report.html"
        return Result(name, OK, f"{where}{said} runs (learned vs rope)" + ("" if report.is_file() else "; no report"),
                      seconds, log=log.name)

    return run


# Shares of the 480 s: docs/gpu-correctness.md expects ~3 minutes for the gpu tests and ~2 for bench_gpu.py on an
# H100/H200 (estimates, not yet measured on a GPU); 10 s are left for the device probe and the table.
STEPS = [Step("gpu tests", 180, gpu_tests),
         Step("bench_gpu.py", 120, bench_step(REPO / "bench" / "bench_gpu.py",
                                             ("mfu", "mfu_spec", "peak_tflops_measured", "peak_tflops_spec",
                                              "tokens_per_s"))),
         Step("bench_packed.py", 90, bench_step(REPO / "bench" / "bench_packed.py", ("speedup", "members"))),
         Step("packed tuned sweep", 80, sweep_step("packed"))]


# ---- the device, the table ---------------------------------------------------------------------------------------

PROBE = """
import json, torch
info = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cuda": torch.cuda.is_available()}
if info["cuda"]:
    p = torch.cuda.get_device_properties(0)
    info.update(device=torch.cuda.get_device_name(0), count=torch.cuda.device_count(),
                memory_gib=round(p.total_memory / 2**30, 1), capability=f"sm_{p.major}{p.minor}")
print(json.dumps(info))
"""


def probe_device(ctx: Context) -> dict:
    """torch's version, its CUDA build and the GPU, asked in a subprocess (this process never holds a CUDA context;
    a broken CUDA install fails there, not here)."""
    try:
        proc = subprocess.run([ctx.python, "-c", PROBE], cwd=REPO, env=ctx.env, capture_output=True, text=True,
                              timeout=120)
    except subprocess.TimeoutExpired:
        return {"torch": "?", "cuda_build": None, "cuda": False, "error": "no answer within 120 s"}
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines() or ["(no output)"]
        return {"torch": "?", "cuda_build": None, "cuda": False, "error": lines[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def device_line(info: dict) -> str:
    if info.get("error"):
        return f"unknown: torch could not be asked ({info['error']})"
    if not info.get("cuda"):
        return "CPU only (torch.cuda.is_available() is False)"
    more = f"{info['count']} GPUs, GPU 0 used" if info.get("count", 1) > 1 else "1 GPU"
    return f"{info['device']} ({more}, {info.get('memory_gib')} GiB, {info.get('capability')})"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def figure_lines(results: list[Result]) -> list[tuple[str, str]]:
    """The summary's figure rows: MFU and the packed speed-up, or why there is none."""
    figs = {k: v for r in results for k, v in r.figures.items()}
    by_name = {r.name: r for r in results}
    if "mfu" in figs:
        mfu = f"{pct(figs['mfu'])} of the bf16 matmul peak measured in the same run"
        if "peak_tflops_measured" in figs:
            mfu += f" ({figs['peak_tflops_measured']:.0f} TFLOP/s)"
        if "mfu_spec" in figs:
            mfu += f"; {pct(figs['mfu_spec'])} of the spec peak"
        if "peak_tflops_spec" in figs:
            mfu += f" ({figs['peak_tflops_spec']:.0f} TFLOP/s)"
        if "tokens_per_s" in figs:
            mfu += f"; {figs['tokens_per_s']:,.0f} tokens/s"
    else:
        mfu = f"not measured ({why_none(by_name.get('bench_gpu.py'))})"
    if "speedup" in figs:
        speed = f"{figs['speedup']:.2f}x one-at-a-time"
        if "members" in figs:
            speed += f" at {figs['members']:.0f} members"
    else:
        speed = f"not measured ({why_none(by_name.get('bench_packed.py'))})"
    return [("MFU (bench_gpu.py)", mfu), ("packed speed-up (bench_packed.py)", speed)]


def why_none(result: Result | None) -> str:
    if result is None:
        return "not run: --tests-only"
    return f"{result.status}: {result.detail}" if result.detail else result.status


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(info: dict, results: list[Result], out: Path, seconds: float) -> str:
    """The summary as one markdown table (printed, and written to summary.md)."""
    failed = sum(r.status == FAILED for r in results)
    rows = [("device", device_line(info)),
            ("torch / CUDA", f"{info.get('torch')} / {info.get('cuda_build') or 'none (CPU build)'}")]
    rows += [(r.name, f"**{r.status}**" + (f" ({r.seconds:.0f} s)" if r.seconds is not None else "")
              + (f": {r.detail}" if r.detail else "")) for r in results]
    rows += figure_lines(results)
    rows.append(("result", f"{'FAILED: ' + str(failed) + ' step(s)' if failed else 'no step failed'} "
                           f"in {seconds:.0f} s; logs in {out}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"| {'check'.ljust(width)} | result |", f"|{'-' * (width + 2)}|--------|",
                      *(f"| {cell(k).ljust(width)} | {cell(v)} |" for k, v in rows)]) + "\n"


def write_summary(out: Path, info: dict, results: list[Result], seconds: float, interrupted: bool) -> str:
    table = render(info, results, out, seconds)
    (out / "summary.md").write_text(f"# archlab GPU self-check, {out.name}\n\n{table}")
    (out / "summary.json").write_text(json.dumps(
        {"device": info, "results": [asdict(r) for r in results], "figures": dict(figure_lines(results)),
         "seconds": round(seconds, 1), "interrupted": interrupted,
         "failed": sum(r.status == FAILED for r in results)}, indent=1) + "\n")
    return table


# ---- the command -------------------------------------------------------------------------------------------------

def child_env(cache: Path) -> dict[str, str]:
    """The steps' environment: offline, wandb off, caches under `cache`."""
    return {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg",
            "ARCHLAB_CACHE": str(cache / "archlab"), "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
            "TRITON_CACHE_DIR": str(cache / "triton"), "MPLCONFIGDIR": str(cache / "matplotlib")}


def prepare_out(out: Path | None) -> Path:
    """--out: a new or empty folder (default gpu-check/<time>/ in the checkout)."""
    if out is None:
        out = REPO / "gpu-check" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckError(f"--out {out}: exists and is not an empty folder; name a new one")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CheckError(f"--out {out}: cannot create it ({e.strerror})") from None
    return out.resolve()


def run_checks(ctx: Context, steps: list[Step], budget: float,
               clock: Callable[[], float] = time.monotonic) -> tuple[list[Result], bool]:
    """Run the steps in order within `budget` seconds: each gets at least its share while the budget lasts, and
    what earlier steps left unused. (results, interrupted by Ctrl-C)."""
    results: list[Result] = []
    deadline = clock() + budget
    for i, step in enumerate(steps):
        left = deadline - clock()
        timeout = min(left, max(step.share, left - sum(s.share for s in steps[i + 1:])))
        if timeout < MIN_STEP_S:
            results.append(Result(step.name, SKIPPED, f"time budget spent ({budget:.0f} s)"))
            continue
        print(f"[gpu-check] {step.name} (at most {timeout:.0f} s) ...", flush=True)
        try:
            result = step.fn(ctx, timeout)
        except KeyboardInterrupt:
            results.append(Result(step.name, FAILED, "interrupted (Ctrl-C)"))
            results += [Result(s.name, SKIPPED, "interrupted (Ctrl-C)") for s in steps[i + 1:]]
            return results, True
        print(f"[gpu-check] {step.name}: {result.status}" + (f": {result.detail}" if result.detail else ""), flush=True)
        results.append(result)
    return results, False


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests-only", action="store_true", help="stop after the gpu tests")
    parser.add_argument("--out", type=Path, help="a new or empty folder for the outputs (default gpu-check/<time>/)")
    parser.add_argument("--budget", default=str(DEFAULT_BUDGET),
                        help=f"seconds for the whole check (default {DEFAULT_BUDGET:.0f})")
    args = parser.parse_args(argv)
    try:
        args.budget = float(args.budget)
    except ValueError:
        parser.error(f"--budget {args.budget}: not a number of seconds")
    if not args.budget > 0 or args.budget == float("inf"):
        parser.error(f"--budget {args.budget:g}: must be a number of seconds > 0")
    return args


def main(argv: list[str] | None = None, steps: list[Step] | None = None,
         probe: Callable[[Context], dict] = probe_device) -> int:
    try:
        args = parse_args(argv)
        out = prepare_out(args.out)
    except (UsageError, CheckError) as e:
        return fail("gpu-check", e)
    t0 = time.monotonic()
    ctx = Context(out=out, cuda=False, env=child_env(REPO / "gpu-check" / "cache"))
    info = probe(ctx)
    ctx.cuda = bool(info.get("cuda"))
    print(f"[gpu-check] {device_line(info)}; torch {info.get('torch')}; outputs in {out}", flush=True)
    todo = list(STEPS if steps is None else steps)
    if args.tests_only:
        todo = todo[:1]
    results, interrupted = run_checks(ctx, todo, args.budget)
    print(write_summary(out, info, results, time.monotonic() - t0, interrupted), end="")
    if interrupted:
        return 130
    return 1 if any(r.status == FAILED for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
