"""`python -m experiments.sample`: streamed text equals the decoded result of arch.generate with the same seed,
sampling is reproducible, beam search prints at the end, bad values are one line."""

from __future__ import annotations

import subprocess

import pytest
import torch

from experiments import load_run
from experiments.use.sample import main, parse_args, sample
from experiments.run.train import train

from .conftest import PYTHON, REPO


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir):
    from experiments.config.compose import compose_config

    from .conftest import TINY

    run = tmp_path_factory.mktemp("sample") / "run"
    train(compose_config([*TINY, "train.steps=20", f"data.cache_dir={cache_dir}", f"train.run_dir={run}"]))
    return run


@pytest.mark.parametrize("extra", [["--temperature", "0.9", "--top-k", "20", "--seed", "3"], ["--temperature", "0"],
                                   ["--num-beams", "3"]])
def test_streamed_text_is_the_generated_text(run_dir, capsys, extra):
    a = parse_args([str(run_dir), "--prompt", "The list of", "--max-new-tokens", "12", *extra])
    (text,) = sample(a)
    printed = capsys.readouterr().out
    # the reference: arch.generate on the loaded model, decoded in one piece (not streamed)
    model, tok, _ = load_run(run_dir)
    ids = torch.tensor([tok.encode("The list of")])
    eot = tok.special_tokens.get("<|endoftext|>")
    out = model.generate(ids, max_new_tokens=12, temperature=a.temperature, top_k=a.top_k, eos_id=eot,
                         num_beams=a.num_beams, generator=torch.Generator().manual_seed(a.seed))
    want = tok.decode([t for t in out[0, ids.size(1):].tolist() if t != eot])
    assert text == want
    assert printed == "The list of" + want + "\n"


def test_same_seed_same_text_other_seed_other_text(run_dir, capsys):
    args = [str(run_dir), "--prompt", "x", "--max-new-tokens", "30", "--num-samples", "2"]
    first = sample(parse_args([*args, "--seed", "5"]))
    again = sample(parse_args([*args, "--seed", "5"]))
    other = sample(parse_args([*args, "--seed", "6"]))
    assert first == again and first != other and first[0] != first[1]
    assert capsys.readouterr().out.count("--- sample ") == 6


@pytest.mark.parametrize("args,msg", [(["--top-p", "1.5"], "--top-p"), (["--max-new-tokens", "0"], "--max-new-tokens"),
                                      (["--num-beams", "2", "--top-k", "5"], "--num-beams")])
def test_bad_values_one_line(run_dir, capsys, args, msg):
    assert main([str(run_dir), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sample: error:") and msg in err[0]


def test_cli_streams_and_missing_run_is_one_line(run_dir, tmp_path, capfd):
    ok = subprocess.run([PYTHON, "-m", "experiments.sample", str(run_dir), "--prompt", "a", "--max-new-tokens", "5"],
                        cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.startswith("a"), ok.stderr
    capfd.readouterr()
    code = main([str(tmp_path)])  # what experiments/sample.py exits with; in this process (no second interpreter)
    bad = capfd.readouterr()
    assert code == 2 and bad.err.strip().startswith("sample: error:") and "Traceback" not in bad.err
