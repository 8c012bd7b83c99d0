"""Every bad value given to sample, evaluate, export, findings and compare is one line `<command>: error: ...`, exit
2, no traceback: numbers out of their range and empty arguments (checked before the run dir is even looked at),
and the bad inputs of using a run: a run dir that does not exist or is a file, one with no checkpoint, a --which
or --device that does not exist, a prompt or text file that cannot be read or is not UTF-8, data overrides Hydra
cannot compose."""

from __future__ import annotations

import subprocess

import pytest

from experiments.compare.cli import main as compare
from experiments.findings.cli import main as findings
from experiments.run.train import train
from experiments.use.evaluate.cli import main as evaluate
from experiments.use.export import main as export
from experiments.use.sample import main as sample

from .conftest import PYTHON, REPO, TINY

COMMANDS = {"sample": sample, "evaluate": evaluate, "export": export, "findings": findings, "compare": compare}
NEVER_READ = "/nonexistent/run"  # an argument error must be found before the run dir is looked at


def one_error_line(capsys, command: str, argv: list[str]) -> str:
    assert COMMANDS[command](argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{command}: error: "), err
    return lines[0]


@pytest.mark.parametrize("command,argv,flag", [
    ("sample", ["--max-new-tokens", "0"], "--max-new-tokens: must be >= 1, got 0"),
    ("sample", ["--max-new-tokens", "abc"], "--max-new-tokens: expected an integer"),
    ("sample", ["--temperature", "-0.5"], "--temperature: must be a finite number >= 0"),
    ("sample", ["--temperature", "nan"], "--temperature"),
    ("sample", ["--temperature", "inf"], "--temperature"),
    ("sample", ["--top-k", "0"], "--top-k"),
    ("sample", ["--top-p", "0"], "--top-p: must be a finite number in (0, 1]"),
    ("sample", ["--top-p", "1.5"], "--top-p"),
    ("sample", ["--top-p", "nan"], "--top-p"),
    ("sample", ["--num-beams", "0"], "--num-beams"),
    ("sample", ["--num-samples", "-1"], "--num-samples"),
    ("sample", ["--seed", "-1"], "--seed"),
    ("sample", ["--seed", str(2**64)], "--seed"),
    ("sample", ["--which", ""], "--which: must not be empty"),
    ("sample", ["--device", ""], "--device"),
    ("sample", ["--prompt-file", ""], "--prompt-file"),
    ("sample", ["--bogus"], "unrecognized arguments: --bogus"),
    ("evaluate", ["--factors", "0"], "--factors: must be >= 1, got 0"),
    ("evaluate", ["--factors", "2", "-1"], "--factors"),
    ("evaluate", ["--max-tokens", "0"], "--max-tokens"),
    ("evaluate", ["--batch-size", "0"], "--batch-size"),
    ("evaluate", ["--batch-size", "x"], "--batch-size"),
    ("evaluate", ["--which", ""], "--which"),
    ("evaluate", ["--device", ""], "--device"),
    ("evaluate", ["--text", ""], "--text"),
    ("export", ["--to", "hf", "--out", ""], "--out: must not be empty"),
    ("export", ["--to", "hf", "--out", "o", "--which", ""], "--which"),
    ("export", ["--to", "onnx", "--out", "o"], "--to: invalid choice: 'onnx'"),
    ("findings", ["rope_vs_learned", "--jobs", "0"], "--jobs: must be >= 1, got 0"),
    ("findings", ["rope_vs_learned", "--jobs", "-3"], "--jobs"),
    ("findings", ["rope_vs_learned", "--out-dir", ""], "--out-dir"),
    ("findings", ["rope_vs_learned", "--docs-dir", ""], "--docs-dir"),
    ("findings", ["rope_vs_learned", "--doc", ""], "--doc"),
    ("findings", ["rope_vs_learned", "--from-sweep", ""], "--from-sweep"),
    ("compare", ["--x", "epochs"], "--x: invalid choice"),
    ("compare", ["{run}", "--out", ""], "--out: must not be empty"),
    ("compare", [""], "paths: must not be empty"),
    ("compare", ["{run}", "--by", "seed", ""], "--by"),
    ("compare", ["{run}", "--metric", ""], "--metric"),
    ("compare", ["{run}", "--baseline", ""], "--baseline"),
])
def test_bad_number_or_empty_argument_before_anything_is_read(capsys, tmp_path, monkeypatch, command, argv, flag):
    monkeypatch.chdir(tmp_path)  # an empty path would mean the cwd: nothing may appear there
    run = [] if command in ("findings", "compare") else [NEVER_READ]
    line = one_error_line(capsys, command, [*run, *(a.format(run=NEVER_READ) for a in argv)])
    assert (flag if flag.startswith("unrecognized") else f"argument {flag}") in line and NEVER_READ not in line, line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["sample", "evaluate", "export"])
def test_empty_run_dir_argument(capsys, command):
    assert "must not be empty" in one_error_line(capsys, command, ["", *(["--to", "hf", "--out", "o"] if
                                                                        command == "export" else [])])


# ---------------------------------------------------------------- the bad inputs of using a run
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir):
    from experiments.config.compose import compose_config

    run = tmp_path_factory.mktemp("use_errors") / "run"
    train(compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={run}"]))
    return run


@pytest.fixture
def inputs(run_dir, tmp_path):
    """Paths for the bad-input cases: {run} a trained run, {nockpt} a run dir without checkpoints, {file} a plain
    file, {latin1} a non-UTF-8 file, {dir} a directory, {missing} nothing."""
    nockpt = tmp_path / "nockpt"
    nockpt.mkdir()
    (nockpt / "config.yaml").write_bytes((run_dir / "config.yaml").read_bytes())
    (nockpt / "tokenizer.json").write_bytes((run_dir / "tokenizer.json").read_bytes())
    (tmp_path / "file.txt").write_text("a prompt\n")
    (tmp_path / "latin1.txt").write_bytes("café crème brûlée\n".encode("latin-1"))
    return {"run": run_dir, "nockpt": nockpt, "file": tmp_path / "file.txt", "latin1": tmp_path / "latin1.txt",
            "dir": tmp_path, "missing": tmp_path / "missing"}


OUT = ["--to", "hf", "--out", "{dir}/hf"]


@pytest.mark.parametrize("command,argv,words", [
    *[(c, ["{missing}", *extra], "run dir {missing} does not exist")
      for c, extra in (("sample", []), ("evaluate", []), ("export", OUT))],
    *[(c, ["{file}", *extra], "run dir {file} is not a directory")
      for c, extra in (("sample", []), ("evaluate", []), ("export", OUT))],
    *[(c, ["{nockpt}", *extra], "{nockpt} holds no checkpoint")
      for c, extra in (("sample", []), ("evaluate", []), ("export", OUT))],
    *[(c, ["{run}", "--which", which, *extra], words)
      for c, extra in (("sample", []), ("evaluate", []), ("export", OUT))
      for which, words in (("7", "no checkpoint at step 7"), ("first", "unknown checkpoint 'first'"),
                           ("²", "unknown checkpoint '²'"))],
    *[(c, ["{run}", "--device", device], words)
      for c in ("sample", "evaluate")
      for device, words in (("nope", "unknown device 'nope'"), ("meta", "device 'meta': meta devices are not used"),
                            ("cuda:7", "device 'cuda:7': this machine has"))],
    ("sample", ["{run}", "--prompt-file", "{missing}"], "cannot read --prompt-file {missing}: No such file"),
    ("sample", ["{run}", "--prompt-file", "{dir}"], "cannot read --prompt-file {dir}: Is a directory"),
    ("sample", ["{run}", "--prompt-file", "{latin1}"],
     "--prompt-file {latin1} is not UTF-8 text (byte 0xe9 at offset 3)"),
    ("evaluate", ["{run}", "--text", "{latin1}"], "--text {latin1} is not UTF-8 text (byte 0xe9 at offset 3)"),
    ("evaluate", ["{run}", "--text", "{missing}"], "no file matches"),
    ("evaluate", ["{run}", "data=nonexistent"], "cannot use the data overrides: "),
    ("evaluate", ["{run}", "data.bogus=1"], "cannot use the data overrides: "),
    ("evaluate", ["{run}", "seed=1"], "only data overrides are accepted here, got 'seed=1'"),
    ("sample", ["{run}", "--num-beams", "2", "--top-k", "5"], "--num-beams searches; it takes no --top-k"),
])
def test_bad_input_of_using_a_run_is_one_line(capsys, inputs, command, argv, words):
    line = one_error_line(capsys, command, [a.format(**inputs) for a in argv])
    assert words.format(**inputs) in line, line
    assert not (inputs["dir"] / "hf").exists()


def test_command_line_has_no_traceback(inputs, cli_env, capfd):
    """The same errors through the command: stderr is exactly the one line. evaluate's in a new interpreter
    (`python -m`); sample's through its main() in this process, as experiments/sample.py calls it (its `python -m`
    runs in test_sample.py and test_use_outputs.py)."""
    for argv, words in ((["experiments.sample", str(inputs["run"]), "--prompt-file", str(inputs["latin1"])],
                         "is not UTF-8 text"),
                        (["experiments.evaluate", str(inputs["run"]), "--factors", "0"], "--factors"),
                        (["experiments.sample", str(inputs["run"]), "--device", "nope"], "unknown device")):
        if argv[0] == "experiments.sample":
            capfd.readouterr()
            returncode, stderr = sample(argv[1:]), capfd.readouterr().err
        else:
            proc = subprocess.run([PYTHON, "-m", *argv], cwd=REPO, env=cli_env, capture_output=True, text=True,
                                  timeout=120)
            returncode, stderr = proc.returncode, proc.stderr
        assert returncode == 2 and len(stderr.strip().splitlines()) == 1, stderr
        assert words in stderr and "Traceback" not in stderr
