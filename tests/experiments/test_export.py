"""`python -m experiments.export`: a trained run exported to HF loads offline with transformers and gives the
same ids (AutoTokenizer vs our tokenizer) and the same logits (AutoModelForCausalLM vs load_run, fp32, atol 1e-5)
for a GPT-2-shaped and a Llama-shaped (rope, rmsnorm, swiglu, no bias, multi-query) run; tokenizer-only exports
(hf-tokenizer, tiktoken); refusals (alibi, existing --out, a file export did not write) are one line, exit 2.
The --out rules as a property, full disks and read-only dirs: test_use_outputs.py."""

from __future__ import annotations

import subprocess

import pytest
import torch

from experiments import load_run
from experiments.use.export import main
from experiments.run.train import train

from .conftest import PYTHON, REPO, TINY

transformers = pytest.importorskip("transformers")

LLAMA = ["model/pos=rope", "model/norm_type=rmsnorm", "model/activation=swiglu", "model.bias=false",
         "model.n_kv_heads=1"]
TEXTS = ["The list of", "héllo wörld — 日本語 😀 ∑ café", "a  \n\n\t  b   ", "  leading and trailing  ",
         "x<|endoftext|>y", "<|endoftext|>", "", "12345 don't  they'll\r\n", "tab\there\u00a0nbsp"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cache_dir):
    from experiments.config.compose import compose_config

    base = tmp_path_factory.mktemp("export")
    out = {}
    for name, extra in (("gpt2", []), ("llama", LLAMA), ("alibi", ["model/pos=alibi"])):
        out[name] = base / name
        train(compose_config([*TINY, f"data.cache_dir={cache_dir}", f"train.run_dir={out[name]}", *extra]))
    return out


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("export: error: "), err
    return err[0]


@pytest.mark.parametrize("family,hf_class", [("gpt2", "GPT2LMHeadModel"), ("llama", "LlamaForCausalLM")])
def test_hf_export_same_ids_and_logits(runs, tmp_path, offline, capsys, family, hf_class):
    out = tmp_path / "hf"
    assert main([str(runs[family]), "--to", "hf", "--out", str(out)]) == 0
    assert "AutoModelForCausalLM.from_pretrained" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"config.json", "generation_config.json", "model.safetensors",
                                               "tokenizer.json", "tokenizer_config.json", "export_manifest.json"}
    model, tok, _ = load_run(runs[family])
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == hf_class and next(hf.parameters()).dtype == torch.float32
    eot = tok.special_tokens["<|endoftext|>"]
    assert hf.config.eos_token_id == eot and hf_tok.eos_token_id == eot and hf_tok.bos_token_id == eot
    for text in TEXTS:
        ids = tok.encode(text, allowed_special="all")
        assert hf_tok.encode(text) == ids, text
        assert hf_tok(text)["input_ids"] == ids, text
        assert hf_tok.decode(ids) == text
    ids = torch.tensor([tok.encode(" ".join(TEXTS), allowed_special="all")[: model.cfg.n_ctx]])
    with torch.no_grad():
        diff = (hf(ids).logits - model(ids)).abs().max().item()
    print(f"\n  max |Δlogits| export {family} -> AutoModelForCausalLM: {diff:.2e}")
    assert diff <= 1e-5


def test_hf_tokenizer_and_tiktoken_exports(runs, tmp_path, offline):
    _, tok, _ = load_run(runs["gpt2"])
    out = tmp_path / "tok"
    assert main([str(runs["gpt2"]), "--to", "hf-tokenizer", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"tokenizer.json", "tokenizer_config.json", "export_manifest.json"}
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    for text in TEXTS:
        assert hf_tok.encode(text) == tok.encode(text, allowed_special="all"), text

    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import load_tiktoken_bpe

    assert main([str(runs["gpt2"]), "--to", "tiktoken", "--out", str(out)]) == 2  # not empty now
    assert main([str(runs["gpt2"]), "--to", "tiktoken", "--out", str(tmp_path / "tt")]) == 0
    enc = tiktoken.Encoding(name="archlab", pat_str=tok.pattern, special_tokens=tok.special_tokens,
                            mergeable_ranks=load_tiktoken_bpe(str(tmp_path / "tt" / "tokenizer.tiktoken")))
    for text in TEXTS:
        assert enc.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all"), text


def test_alibi_refused_before_anything_is_written(runs, tmp_path, capsys):
    out = tmp_path / "never"
    assert main([str(runs["alibi"]), "--to", "hf", "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("export: error: model.pos.kind=alibi has no HF equivalent")
    assert not out.exists()


def test_existing_out_needs_force_and_force_replaces_only_what_export_wrote(runs, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main([str(runs["gpt2"]), "--to", "hf-tokenizer", "--out", str(out)]) == 2
    assert "exists and is not empty; pass --force" in _one_error_line(capsys)
    assert main([str(runs["gpt2"]), "--to", "hf-tokenizer", "--out", str(out), "--force"]) == 0
    exported = (out / "tokenizer.json").read_bytes()
    (out / "tokenizer.json").write_text("stale")  # export wrote this one: --force replaces it
    assert main([str(runs["gpt2"]), "--to", "hf-tokenizer", "--out", str(out), "--force"]) == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "tokenizer.json").read_bytes() == exported
    assert {p.name for p in out.iterdir()} == {"notes.txt", "tokenizer.json", "tokenizer_config.json",
                                               "export_manifest.json"}  # no temp dir
    # a tokenizer.json export did not write is never replaced, even with --force
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "tokenizer.json").write_text("mine")
    assert main([str(runs["gpt2"]), "--to", "hf-tokenizer", "--out", str(theirs), "--force"]) == 2
    assert "already holds tokenizer.json, which export did not write" in _one_error_line(capsys)
    assert [p.name for p in theirs.iterdir()] == ["tokenizer.json"] and (theirs / "tokenizer.json").read_text() == "mine"


@pytest.mark.parametrize("args,msg", [(["--to", "onnx"], "invalid choice: 'onnx'"),
                                      (["--to", "hf"], "required: --out"),
                                      (["--to", "hf", "--which", "7"], "no checkpoint at step 7")])
def test_bad_arguments_one_line(runs, tmp_path, capsys, args, msg):
    argv = [str(runs["gpt2"]), *args] + ([] if "--out" in args or "required: --out" in msg else
                                         ["--out", str(tmp_path / "o")])
    assert main(argv) == 2
    assert msg in _one_error_line(capsys)


def test_cli_refusal_has_no_traceback(runs, tmp_path, cli_env):
    proc = subprocess.run([PYTHON, "-m", "experiments.export", str(runs["alibi"]), "--to", "hf", "--out",
                           str(tmp_path / "x")], cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith("export: error: model.pos.kind=alibi has no HF equivalent")
