"""scripts/gpu_check.py (`make gpu-check`): the summary table from hand-made results, the junit counting, the time
budget (a fake clock), the bench and sweep steps on small stand-in scripts, bad arguments, and on this CPU the real
`--tests-only` run (the gpu tests skip, the table says why, exit 0) and, in the slow tier, the whole check.

No assertion here is about how long anything took: the budget is checked with an injected clock.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gc = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gc  # dataclasses look their module up by name
_spec.loader.exec_module(gc)

H200 = {"torch": "2.11.0+cu130", "cuda_build": "13.0", "cuda": True, "device": "NVIDIA H200", "count": 1,
        "memory_gib": 139.8, "capability": "sm_90"}
CPU = {"torch": "2.13.0+cpu", "cuda_build": None, "cuda": False}


def ctx_for(tmp_path, cuda: bool):
    out = tmp_path / "out"
    out.mkdir(parents=True)
    return gc.Context(out=out, cuda=cuda, env=gc.child_env(tmp_path / "cache"))


def test_the_table_shows_device_versions_statuses_and_figures(tmp_path):
    results = [gc.Result("gpu tests", gc.OK, "412 passed, 3 skipped", 120.4),
               gc.Result("bench_gpu.py", gc.OK, "", 80, {"mfu": 0.5213, "peak_tflops_measured": 640.2,
                                                          "mfu_spec": 0.337, "peak_tflops_spec": 989.0}),
               gc.Result("bench_packed.py", gc.OK, "", 70, {"speedup": 9.31, "members": 16}),
               gc.Result("packed tuned sweep", gc.FAILED, "exit 1: a | b", 12)]
    table = gc.render(H200, results, tmp_path, 290)
    rows = {line.split("|")[1].strip(): line.split("|", 2)[2].rstrip(" |") for line in table.splitlines()[2:]}
    assert rows["device"].strip() == "NVIDIA H200 (1 GPU, 139.8 GiB, sm_90)"
    assert rows["torch / CUDA"].strip() == "2.11.0+cu130 / 13.0"
    assert rows["gpu tests"].strip() == "**OK** (120 s): 412 passed, 3 skipped"
    assert rows["packed tuned sweep"].strip() == "**FAILED** (12 s): exit 1: a \\| b"  # a | in a cell is escaped
    assert rows["MFU (bench_gpu.py)"].strip() == ("52.1% of the bf16 matmul peak measured in the same run (640 TFLOP/s);"
                                                  " 33.7% of the spec peak (989 TFLOP/s)")
    assert rows["packed speed-up (bench_packed.py)"].strip() == "9.31x one-at-a-time at 16 members"
    assert rows["result"].strip().startswith("FAILED: 1 step(s) in 290 s")
    assert all(line.count("|") - line.count("\\|") == 3 for line in table.splitlines())  # one table, two columns


def test_the_table_says_why_a_figure_is_missing(tmp_path):
    results = [gc.Result("gpu tests", gc.SKIPPED, "3 skipped: needs CUDA"),
               gc.Result("bench_gpu.py", gc.SKIPPED, "bench/bench_gpu.py not present"),
               gc.Result("bench_packed.py", gc.OK, "CPU smoke run only: no GPU figures", 3)]
    table = gc.render(CPU, results, tmp_path, 20)
    assert "| device " in table and "CPU only (torch.cuda.is_available() is False)" in table
    assert "2.13.0+cpu / none (CPU build)" in table
    assert "not measured (SKIPPED: bench/bench_gpu.py not present)" in table
    assert "not measured (OK: CPU smoke run only: no GPU figures)" in table
    assert "no step failed in 20 s" in table
    only_tests = gc.render(CPU, results[:1], tmp_path, 5)
    assert only_tests.count("not measured (not run: --tests-only)") == 2


def test_junit_counts_and_reasons(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(textwrap.dedent("""\
        <testsuites><testsuite>
          <testcase classname="t.a" name="ok"/>
          <testcase classname="t.a" name="s1"><skipped message="needs CUDA (long reason)"/></testcase>
          <testcase classname="t.a" name="s2"><skipped message="needs CUDA (long reason)"/></testcase>
          <testcase classname="t.a" name="s3"><skipped message="needs real CUDA"/></testcase>
          <testcase classname="t.b" name="bad"><failure message="assert 1 == 2"/></testcase>
          <testcase classname="t.b" name="err"><error message="boom"/></testcase>
        </testsuite></testsuites>"""))
    counts, reason, failing = gc.junit_counts(junit)
    assert counts == {"passed": 1, "failed": 1, "errors": 1, "skipped": 3}
    assert reason == "needs CUDA (long reason)"  # the most frequent one
    assert failing == "t.b::bad"


def test_the_budget_is_shared_out_and_unused_time_moves_on(tmp_path):
    now = [0.0]
    seen = {}

    def step(name, takes):
        def fn(ctx, timeout):
            seen[name] = timeout
            now[0] += takes
            return gc.Result(name, gc.OK)
        return gc.Step(name, {"a": 100, "b": 50, "c": 50, "d": 50}[name], fn)

    results, interrupted = gc.run_checks(ctx_for(tmp_path, False), [step("a", 10), step("b", 145), step("c", 90),
                                                                    step("d", 0)], 250, clock=lambda: now[0])
    assert not interrupted
    # a: 250 s left, 150 kept for b, c, d -> its share, 100 s; it used 10, so b may use 240 - 100 kept = 140 s;
    # c gets its share, 50 s of the 95 left (50 kept for d), runs past it (a stand-in: the real steps are stopped
    # at their limit), and the 5 s left are too few for d
    assert seen == {"a": 100, "b": 140, "c": 50}
    assert [r.status for r in results] == [gc.OK, gc.OK, gc.OK, gc.SKIPPED]
    assert results[3].detail == "time budget spent (250 s)"


def test_ctrl_c_in_a_step_writes_the_table_and_exits_130(tmp_path, capsys):
    def interrupted(ctx, timeout):
        raise KeyboardInterrupt

    steps = [gc.Step("gpu tests", 10, lambda ctx, t: gc.Result("gpu tests", gc.OK, "1 passed")),
             gc.Step("bench_gpu.py", 10, interrupted), gc.Step("packed tuned sweep", 10, interrupted)]
    out = tmp_path / "check"
    assert gc.main(["--out", str(out)], steps=steps, probe=lambda ctx: CPU) == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert [(r["name"], r["status"]) for r in summary["results"]] == [
        ("gpu tests", "OK"), ("bench_gpu.py", "FAILED"), ("packed tuned sweep", "SKIPPED")]
    assert "**FAILED**: interrupted (Ctrl-C)" in (out / "summary.md").read_text()


def bench_script(tmp_path, body: str, name: str = "bench_x.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_a_bench_step_skips_what_is_absent_or_needs_cuda(tmp_path):
    ctx = ctx_for(tmp_path, cuda=False)
    absent = gc.bench_step(tmp_path / "bench_gpu.py", ("mfu",))(ctx, 30)
    assert (absent.status, absent.detail) == (gc.SKIPPED, f"{tmp_path / 'bench_gpu.py'} not present")
    no_smoke = bench_script(tmp_path, "raise SystemExit('must not run on the CPU')\n")
    skipped = gc.bench_step(no_smoke, ("mfu",))(ctx, 30)
    assert (skipped.status, skipped.detail) == (gc.SKIPPED, "needs CUDA (no CUDA here, and the script has no --smoke "
                                                            "mode)")
    assert not (ctx.out / "bench_x.log").exists()


def test_a_bench_step_runs_smoke_on_the_cpu_and_reads_figures_on_a_gpu(tmp_path):
    script = bench_script(tmp_path, """\
        import json, sys
        args = sys.argv[1:]
        print("args:", args)
        if "--json" in args:  # "--smoke" is this script's CPU mode
            json.dump({"mfu": 0.5, "tokens_per_s": 1000, "hf": {"mfu": 0.1}, "note": "x"},
                      open(args[args.index("--json") + 1], "w"))
        """)
    cpu = gc.bench_step(script, ("mfu", "tokens_per_s"))(ctx_for(tmp_path / "c", cuda=False), 30)
    assert (cpu.status, cpu.detail, cpu.figures) == (gc.OK, "CPU smoke run only: no GPU figures", {})
    assert "'--smoke', '--json'" in (tmp_path / "c" / "out" / "bench_x.log").read_text()
    gpu = gc.bench_step(script, ("mfu", "tokens_per_s", "speedup"))(ctx_for(tmp_path / "g", cuda=True), 30)
    assert (gpu.status, gpu.figures) == (gc.OK, {"mfu": 0.5, "tokens_per_s": 1000.0})
    assert "--smoke" not in (tmp_path / "g" / "out" / "bench_x.log").read_text()


def test_a_bench_step_that_fails_or_hangs_is_failed(tmp_path):
    failing = bench_script(tmp_path, "import sys\nprint('warming up')\nprint('RuntimeError: CUDA out of memory')\n"
                                     "sys.exit(3)\n", "bench_fail.py")
    result = gc.bench_step(failing, ("mfu",))(ctx_for(tmp_path / "f", cuda=True), 30)
    assert (result.status, result.detail) == (gc.FAILED, "exit 3: RuntimeError: CUDA out of memory")
    hanging = bench_script(tmp_path, "import time\ntime.sleep(60)\n", "bench_hang.py")
    result = gc.bench_step(hanging, ("mfu",))(ctx_for(tmp_path / "h", cuda=True), 1)
    assert (result.status, result.detail) == (gc.FAILED, "stopped at its time limit (1 s)")


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_what_a_step_leaves_running_is_stopped_with_it(tmp_path):
    """A step whose script exits 0 but leaves a process behind (a worker that would keep the GPU): that process
    is ended when the step ends."""
    pid_file = tmp_path / "pid"
    script = bench_script(tmp_path, f"""\
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        """)
    result = gc.bench_step(script, ("mfu",))(ctx_for(tmp_path, cuda=True), 30)
    assert result.status == gc.OK
    pid = int(pid_file.read_text())
    for _ in range(50):  # the kill is sent before the step returns; the process may take a moment to go
        if not alive(pid):
            break
        time.sleep(0.1)
    assert not alive(pid)


def test_the_sweep_step_skips_without_its_launcher_and_reads_run_statuses(tmp_path):
    result = gc.sweep_step("no_such_launcher")(ctx_for(tmp_path, cuda=False), 30)
    assert (result.status, result.detail) == (
        gc.SKIPPED, "no_such_launcher launcher not available (conf/hydra/launcher/no_such_launcher.yaml)")
    sweep = tmp_path / "sweep"
    for i, status in enumerate(["completed", "completed", "diverged"]):
        (sweep / f"{i}_run").mkdir(parents=True)
        (sweep / f"{i}_run" / "summary.json").write_text(json.dumps({"status": status}))
    (sweep / "3_run").mkdir()
    (sweep / "3_run" / "summary.json").write_text("{half")
    assert gc.sweep_statuses(sweep) == {"completed": 2, "diverged": 1, "unreadable": 1}


def test_on_the_cpu_every_gpu_part_says_why_it_was_skipped_and_the_exit_is_0(tmp_path, capsys):
    """The full check on a machine without CUDA, with stand-ins where the real steps take minutes: the bench
    scripts without a --smoke mode, a launcher that is not there."""
    no_smoke = bench_script(tmp_path, "raise SystemExit(1)\n", "bench_gpu.py")
    steps = [gc.Step("gpu tests", 10, lambda ctx, t: gc.Result("gpu tests", gc.SKIPPED, "5 skipped: needs CUDA")),
             gc.Step("bench_gpu.py", 10, gc.bench_step(no_smoke, ("mfu",))),
             gc.Step("bench_packed.py", 10, gc.bench_step(tmp_path / "bench_packed.py", ("speedup",))),
             gc.Step("sweep", 10, gc.sweep_step("no_such_launcher"))]
    out = tmp_path / "check"
    assert gc.main(["--out", str(out)], steps=steps, probe=lambda ctx: CPU) == 0
    printed = capsys.readouterr().out
    table = (out / "summary.md").read_text()
    assert table.split("\n", 2)[2] in printed  # the table printed is the one written
    statuses = {r["name"]: (r["status"], r["detail"]) for r in json.loads((out / "summary.json").read_text())["results"]}
    assert statuses["bench_gpu.py"] == ("SKIPPED", "needs CUDA (no CUDA here, and the script has no --smoke mode)")
    assert statuses["bench_packed.py"] == ("SKIPPED", f"{tmp_path / 'bench_packed.py'} not present")
    assert statuses["no_such_launcher tuned sweep"][0] == "SKIPPED"


def test_a_failed_step_makes_the_exit_1(tmp_path):
    steps = [gc.Step("gpu tests", 10, lambda ctx, t: gc.Result("gpu tests", gc.FAILED, "1 failed"))]
    assert gc.main(["--out", str(tmp_path / "o")], steps=steps, probe=lambda ctx: H200) == 1


@pytest.mark.parametrize("args, message", [
    (["--budget", "0"], "gpu-check: error: --budget 0: must be a number of seconds > 0"),
    (["--budget", "soon"], "gpu-check: error: --budget soon: not a number of seconds"),
    (["--frobnicate"], "gpu-check: error: unrecognized arguments: --frobnicate"),
    (["--out", "{tmp}"], "gpu-check: error: --out {tmp}: exists and is not an empty folder; name a new one"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "something").write_text("x")
    args = [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(message.format(tmp=tmp_path)), proc.stderr
    assert proc.stdout == ""


def test_tests_only_on_this_cpu_skips_the_gpu_tests_with_the_reason(tmp_path):
    """The real script: pytest over the files that mark tests gpu; without CUDA they skip, and so does the step."""
    out = tmp_path / "check"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tests-only", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"]["cuda"] is False
    (tests,) = summary["results"]
    assert tests["status"] == "SKIPPED" and "needs CUDA" in tests["detail"], tests
    assert (out / "gpu-tests.xml").is_file() and (out / "summary.md").is_file()
    assert "| gpu tests " in proc.stdout and "**SKIPPED**" in proc.stdout


@pytest.mark.slow
def test_the_whole_check_on_this_cpu(tmp_path):
    """Every step for real: the gpu tests skip, the bench scripts run their --smoke mode or skip naming why, the
    packed sweep trains on the CPU with its tiny budget; nothing FAILED, exit 0."""
    out = tmp_path / "check"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {r["name"]: r for r in json.loads((out / "summary.json").read_text())["results"]}
    assert list(results) == ["gpu tests", "bench_gpu.py", "bench_packed.py", "packed tuned sweep"]
    assert results["gpu tests"]["status"] == "SKIPPED"
    for name in ("bench_gpu.py", "bench_packed.py"):
        assert results[name]["status"] in ("OK", "SKIPPED") and results[name]["detail"], results[name]
    if (REPO_ROOT / "conf" / "hydra" / "launcher" / "packed.yaml").is_file():
        assert results["packed tuned sweep"]["status"] == "OK", results["packed tuned sweep"]
        assert "on the CPU, tiny budget" in results["packed tuned sweep"]["detail"]
