"""bench/bench_nanogpt.py: the log parsing, the step arithmetic, nanoGPT's data preparation, the one-line refusals,
the rounds of paused processes, and archlab's side of the job (its trainer on the char token files). No timing is
asserted. The tests that need nanoGPT's checkout run when NANOGPT_DIR names one (git clone
https://github.com/karpathy/nanoGPT); the end-to-end run also needs tinyshakespeare at ../shared/data/."""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import bench_nanogpt as bn

REPO = Path(__file__).resolve().parents[1]
NANOGPT = Path(os.environ["NANOGPT_DIR"]) if os.environ.get("NANOGPT_DIR") else None
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"
needs_nanogpt = pytest.mark.skipif(
    NANOGPT is None or not (NANOGPT / "train.py").is_file(),
    reason="set NANOGPT_DIR to a nanoGPT checkout (git clone https://github.com/karpathy/nanoGPT)")

NANOGPT_LOG = """\
found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)
step 0: train loss 4.1676, val loss 4.1649
iter 0: loss 4.1860, time 1203.44ms, mfu -100.00%
iter 1: loss 4.1125, time 80.50ms, mfu -100.00%
iter 2: loss 3.9870, time 78.25ms, mfu -100.00%
step 3: train loss 3.5000, val loss 3.6000
iter 3: loss 3.9000, time 300.00ms, mfu 0.02%
"""


def test_nanogpt_log_lines_give_step_times_losses_and_evals():
    times, losses, vals = bn.parse_nanogpt_log(NANOGPT_LOG)
    assert times == {0: 1203.44, 1: 80.50, 2: 78.25, 3: 300.0}
    assert losses[2] == 3.9870
    assert vals == {0: 4.1649, 3: 3.6}


def test_archlab_metrics_give_the_same_spans_as_nanogpts_iterations():
    rows = [{"step": 1, "time": 1.0, "train/loss": 4.0}, {"step": 2, "time": 1.08, "train/loss": 3.9},
            {"step": 2, "time": 1.5, "val/loss": 3.95}, {"step": 3, "time": 1.6, "train/loss": 3.8}]
    times, losses, vals = bn.parse_archlab_metrics("\n".join(json.dumps(r) for r in rows) + "\n")
    # step 2 ran from the end of step 1 to its own end: nanoGPT's iteration 1 (0-based); the eval after step 2
    # lands in step 3's span, as nanoGPT's eval at the start of an iteration lands in that iteration's time
    assert times.keys() == {1, 2}
    assert times[1] == pytest.approx(80.0) and times[2] == pytest.approx(520.0)
    assert losses == {0: 4.0, 1: 3.9, 2: 3.8}
    assert vals == {2: 3.95}


def test_step_stats_skip_the_first_iterations_and_the_ratio_is_reference_over_ours():
    s = bn.step_stats({0: 1000.0, 1: 10.0, 2: 30.0, 3: 20.0}, skip=1)
    assert s == {"n": 3, "median_ms": 20.0, "min_ms": 10.0, "mean_ms": 20.0}
    assert math.isnan(bn.step_stats({0: 5.0}, skip=1)["median_ms"])
    # nanoGPT's extra iteration (it == iters) is not counted; the mean leaves out the steps a pause inflated
    s = bn.step_stats({0: 1000.0, 1: 10.0, 2: 3000.0, 3: 20.0, 4: 12.0, 5: 99.0}, skip=1, iters=5, pauses=1)
    assert s == {"n": 4, "median_ms": 16.0, "min_ms": 10.0, "mean_ms": 14.0}
    assert bn.speed_ratio(90.0, 75.0) == pytest.approx(1.2)  # nanoGPT 90 ms, ours 75 ms: 1.2x the step speed


def test_cpu_per_iteration_is_the_slope_between_the_first_and_last_pause_in_the_steady_stretch():
    samples = [(0, 3.0), (5, 3.5), (12, 4.0), (52, 6.0), (100, 9.0), (120, 9.5)]  # (iterations done, CPU s)
    assert bn.cpu_ms_per_iter(samples, skip=10, iters=110) == pytest.approx(1e3 * (9.0 - 4.0) / (100 - 12))
    assert math.isnan(bn.cpu_ms_per_iter(samples[:2], skip=10, iters=110))


def test_progress_is_read_from_each_trainers_log(tmp_path):
    log = tmp_path / "ng.log"
    log.write_text("step 0: train loss 4.1, val loss 4.2\n")
    assert bn.nanogpt_progress(log) == 0
    log.write_text(NANOGPT_LOG)
    assert bn.nanogpt_progress(log) == 4  # iterations 0..3 done
    metrics = tmp_path / "metrics.jsonl"
    assert bn.archlab_progress(metrics) == 0
    metrics.write_text('{"step": 1, "time": 1.0, "train/loss": 4.0}\n{"step": 1, "time": 2.0, "val/loss": 3.0}\n')
    assert bn.archlab_progress(metrics) == 1


def test_equal_val_loss_is_within_two_seed_stds_or_the_tolerance():
    assert bn.equal_within(1.50, 1.52, [], tol=0.03) == (True, 0.03)
    assert bn.equal_within(1.50, 1.54, [], tol=0.03) == (False, 0.03)
    ok, limit = bn.equal_within(1.50, 1.52, [1.49, 1.50, 1.51], tol=0.0)
    assert limit == pytest.approx(0.02) and ok
    assert not bn.equal_within(1.50, 1.53, [1.49, 1.50, 1.51], tol=1.0)[0]


def test_char_data_is_what_prepare_py_writes(tmp_path):
    text = "hello world, to be or not to be!\n" * 40
    (tmp_path / "input.txt").write_text(text)
    info = bn.prepare_char_data(tmp_path / "input.txt", tmp_path / "data")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    n = len(text)
    train = np.fromfile(tmp_path / "data" / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "data" / "val.bin", dtype=np.uint16)
    assert train.tolist() == [stoi[c] for c in text[: int(n * 0.9)]]
    assert val.tolist() == [stoi[c] for c in text[int(n * 0.9) :]]
    meta = pickle.loads((tmp_path / "data" / "meta.pkl").read_bytes())
    assert meta == {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    assert (info["vocab_size"], info["train_tokens"], info["val_tokens"]) == (len(chars), len(train), len(val))


def test_nanogpt_command_is_the_readme_cpu_job():
    cmd = bn.nanogpt_command(Path("/ng"), 2000, Path("/w/out"))
    assert cmd[2:4] == ["/ng/train.py", "/ng/config/train_shakespeare_char.py"]
    for flag in ("--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
                 "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
                 "--lr_decay_iters=2000", "--dropout=0.0", "--eval_interval=250"):
        assert flag in cmd, flag
    assert "--eval_interval=60" in bn.nanogpt_command(Path("/ng"), 60, Path("/w/out"))  # the last iter is evaluated


def _fake_checkout(root: Path) -> Path:
    for f in bn.NANOGPT_FILES:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("# stand-in\n")
    return root


@pytest.mark.parametrize("case", ["no --nanogpt", "missing dir", "incomplete checkout", "missing text", "no --text",
                                  "bad variant"])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("NANOGPT_DIR", raising=False)
    text = tmp_path / "input.txt"
    text.write_text("x" * 2000)
    checkout = _fake_checkout(tmp_path / "ng")
    argv = {
        "no --nanogpt": ["--text", str(text)],
        "no --text": ["--nanogpt", str(checkout)],
        "missing dir": ["--text", str(text), "--nanogpt", str(tmp_path / "nope")],
        "incomplete checkout": ["--text", str(text), "--nanogpt", str(tmp_path)],
        "missing text": ["--text", str(tmp_path / "none.txt"), "--nanogpt", str(checkout)],
        "bad variant": ["--text", str(text), "--nanogpt", str(checkout), "--variants", "eager,warp"],
    }[case]
    assert bn.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("bench_nanogpt: error: ")
    if case not in ("missing text", "no --text", "bad variant"):
        assert "git clone https://github.com/karpathy/nanoGPT" in err


def test_the_revision_of_a_plain_folder_is_a_content_hash(tmp_path):
    rev = bn.nanogpt_revision(_fake_checkout(tmp_path))
    assert rev.startswith("not a git checkout; files sha256 ")


def test_rounds_run_every_job_to_the_end_and_count_its_cpu(tmp_path):
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('done')"
    jobs = [bn.Job(f"j{i}", [sys.executable, "-c", spin], tmp_path / f"j{i}.log", dict(os.environ),
                   progress=lambda: 7) for i in range(2)]
    jobs.append(bn.Job("fails", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "f.log", dict(os.environ)))
    bn.run_in_rounds(jobs, slice_s=0.05, say=lambda *_: None)
    assert [j.returncode for j in jobs] == [0, 0, 3]
    assert all(j.cpu_s >= 0.3 for j in jobs[:2])
    assert jobs[0].pauses >= 1 and jobs[0].samples and all(it == 7 for it, _ in jobs[0].samples)  # read while paused
    assert (tmp_path / "j0.log").read_text() == "done\n"


def test_full_val_loss_scores_every_full_window_once():
    val = np.arange(200, dtype=np.uint16)
    seen = []

    def loss_fn(x, y):
        seen.extend(x[:, 0].tolist())
        assert (y == x + 1).all()
        return x.float().mean() * 0 + 2.0

    loss, n = bn.full_val_loss(loss_fn, val, block=64, batch=2)
    assert seen == [0, 64, 128] and n == 3 * 64 and loss == pytest.approx(2.0)


def test_archlab_worker_trains_on_the_char_files(tmp_path):
    """The worker's trainer run: nanoGPT's shape on char ids, a metrics line every step, the last checkpoint at
    `--iters`, whose whole-split loss the benchmark reads."""
    rng = np.random.default_rng(0)
    text = "".join(rng.choice(list("abcdefgh \n"), size=6000))
    (tmp_path / "in.txt").write_text(text)
    data = tmp_path / "data"
    bn.prepare_char_data(tmp_path / "in.txt", data)
    run_dir = tmp_path / "run"
    # a process of its own, as the benchmark runs it: the worker patches the trainer's data step and chdirs
    done = subprocess.run([sys.executable, str(REPO / "bench" / "bench_nanogpt.py"), "--archlab-worker", "--data",
                           str(data), "--run-dir", str(run_dir), "--iters", "3", "train.eval_batches=1"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    times, losses, vals = bn.parse_archlab_metrics((run_dir / "metrics.jsonl").read_text())
    assert sorted(losses) == [0, 1, 2] and sorted(times) == [1, 2] and list(vals) == [3]
    config = (run_dir / "config.yaml").read_text()
    assert "vocab_size: 10" in config and "d_model: 128" in config and "activation: gelu_exact" in config
    val = np.memmap(data / "val.bin", dtype=np.uint16, mode="r")
    assert 0 < bn.archlab_final_loss(run_dir, val, 3) < 10


@needs_nanogpt
def test_archlab_model_computes_nanogpts_function():
    assert bn.same_function(NANOGPT) < 1e-5


@needs_nanogpt
def test_step_ab_times_every_candidate_against_nanogpts_model():
    rows = bn.step_ab(NANOGPT, steps=2, threads=1, warmup=1)
    assert [r["row"].split(",")[0] for r in rows] == ["nanoGPT model.py", "archlab", "archlab",
                                                      "archlab compiled (train.compile=true)", "archlab compiled"]
    assert rows[0]["speed_vs_nanogpt"] == 1.0 and all(r["cpu_ms_min"] > 0 for r in rows)


@needs_nanogpt
@pytest.mark.slow
@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason=f"needs {SHAKESPEARE}")
def test_a_short_side_by_side_run_prints_both_rows(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    assert bn.main(["--nanogpt", str(NANOGPT), "--text", str(SHAKESPEARE), "--iters", "20", "--skip", "2",
                    "--seeds", "0,1", "--json", str(out_json)]) == 0
    result = json.loads(out_json.read_text())
    rows = result["rows"]
    assert [r["name"] for r in rows] == ["nanoGPT", "eager", "eager_seed1"]
    assert all(r["n"] == 18 and 0 < r["val_loss"] < 5 for r in rows)
    assert rows[1]["val_loss"] != rows[2]["val_loss"]  # another seed trains another model
    spread = abs(rows[1]["val_loss"] - rows[2]["val_loss"])  # 2 x std of two values = sqrt(2) x their difference
    assert result["val_loss_verdicts"]["eager"]["tolerance"] == pytest.approx(math.sqrt(2) * spread)
    out = capsys.readouterr().out
    assert "| archlab eager (seed 0) |" in out and "| archlab eager_seed1 (seed 1) |" in out
