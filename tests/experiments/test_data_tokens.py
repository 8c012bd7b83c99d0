"""`data=tokens`: token files from `bpe encode` as the runner's data (fingerprint-checked, exact bytes/token).

The reference for every value is the text files themselves (their UTF-8 bytes) and the tokenizer's per-token
bytes, never the runner's own output. The end-to-end tests go through both CLIs: `bpe train` -> `bpe encode`
-> `python -m experiments.train data=tokens ...` as a subprocess.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from experiments.data.corpus import check_source
from experiments.config.errors import ConfigError
from experiments.data.cache import prepare_data
from tests.experiments.conftest import PYTHON, REPO, TINY
from tokenizer.cli import main as bpe
from tokenizer.corpus import embedded_documents
from tokenizer.tokenfile import read_sidecar

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Two tokenizers (vocab 300 and 290) trained with `bpe train`, and train/val text encoded with the first."""
    d = tmp_path_factory.mktemp("tokens")
    docs = embedded_documents()
    (d / "train.txt").write_text(EOT.join(docs[:6]), encoding="utf-8")
    (d / "val.txt").write_text(EOT.join(docs[6:8]) + " naïve café ✓", encoding="utf-8")  # multi-byte characters too
    for name, vocab in (("tok", 300), ("other", 290)):
        assert bpe(["train", str(d / "train.txt"), "--vocab-size", str(vocab), "--special-token", EOT,
                    "--out", str(d / name), "--workers", "1"]) == 0
    for split in ("train", "val"):
        assert bpe(["encode", "--tokenizer", str(d / "tok"), str(d / f"{split}.txt"), "--out", str(d / f"{split}.bin")]) == 0
    assert bpe(["encode", "--tokenizer", str(d / "other"), str(d / "val.txt"), "--out", str(d / "val_other.bin")]) == 0
    return {"dir": d, "tok": d / "tok", "other": d / "other", "train": d / "train.bin", "val": d / "val.bin",
            "val_other": d / "val_other.bin"}


def _cfg(train, val=None, fraction=0.1) -> dict:
    return {"source": "tokens", "train_path": str(train), "val_path": None if val is None else str(val),
            "val_fraction": fraction}


def _load(path) -> dict:
    return {"mode": "load", "path": str(path)}


def test_token_files_are_the_runs_data_with_exact_bytes_per_token(files, tmp_path):
    p = prepare_data(_cfg(files["train"], files["val"]), _load(files["tok"]), tmp_path)
    ids = np.fromfile(files["train"], dtype="<u2")  # the file, read by hand
    assert np.array_equal(np.asarray(p.data.train), ids) and p.name == "train"
    assert p.tokenizer.decode([int(i) for i in p.data.val]) == (files["dir"] / "val.txt").read_text(encoding="utf-8")
    val_bytes = len((files["dir"] / "val.txt").read_bytes())
    assert p.data.bytes_per_token == pytest.approx(val_bytes / len(np.fromfile(files["val"], dtype="<u2")))
    assert p.tokenizer_info["path"] == str(files["tok"])


@pytest.mark.parametrize("fraction", [0.1, 0.37])
def test_without_val_path_the_tail_is_held_out_and_its_bytes_are_exact(files, tmp_path, fraction):
    p = prepare_data(_cfg(files["train"], fraction=fraction), _load(files["tok"]), tmp_path)
    ids = np.fromfile(files["train"], dtype="<u2")
    cut = int(round(len(ids) * (1 - fraction)))
    assert np.array_equal(np.asarray(p.data.train), ids[:cut]) and np.array_equal(np.asarray(p.data.val), ids[cut:])
    tok = p.tokenizer
    val_bytes = sum(len(tok.id_to_token(int(i))) for i in ids[cut:])  # per-token bytes, summed by hand
    assert p.data.bytes_per_token == pytest.approx(val_bytes / (len(ids) - cut))
    if read_sidecar(files["train"]).get("n_bytes") is not None:  # `bpe encode` sidecars with n_bytes: train keeps the rest
        assert p.data.meta["train_bytes"] + p.data.meta["val_bytes"] == len((files["dir"] / "train.txt").read_bytes())


def test_a_file_encoded_with_another_tokenizer_is_refused_naming_it(files, tmp_path):
    with pytest.raises(ConfigError, match=r"data\.train_path: .*train\.bin was encoded with another tokenizer") as e:
        prepare_data(_cfg(files["train"]), _load(files["other"]), tmp_path)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"different tokenizers"):  # val is checked against train's sidecar first
        prepare_data(_cfg(files["train"], files["val_other"]), _load(files["tok"]), tmp_path)


def test_tokens_need_a_loaded_tokenizer(files, tmp_path):
    with pytest.raises(ConfigError, match=r"data=tokens needs .*tokenizer=load tokenizer.path=DIR"):
        prepare_data(_cfg(files["train"]), {"mode": "train", "vocab_size": 300}, tmp_path)


def test_check_source_reads_sidecars_only(files, tmp_path):
    check_source(_cfg(files["train"], files["val"]))
    with pytest.raises(ConfigError, match=r"data\.train_path: .*nope\.bin: no such token file"):
        check_source(_cfg(tmp_path / "nope.bin"))
    (tmp_path / "bare.bin").write_bytes(b"\0\0")
    with pytest.raises(ConfigError, match=r"data\.val_path: .*bare\.bin: its sidecar .* is missing"):
        check_source(_cfg(files["train"], tmp_path / "bare.bin"))
    with pytest.raises(ConfigError, match=r"encoded with different tokenizers"):
        check_source(_cfg(files["train"], files["val_other"]))
    with pytest.raises(ConfigError, match=r"data\.train_path: is required"):
        check_source({"source": "tokens", "train_path": None, "val_fraction": 0.1})
    # a truncated .bin: caught by the size check of the sidecar, without reading any id
    (tmp_path / "cut.bin").write_bytes(files["train"].read_bytes()[:-2])
    (tmp_path / "cut.bin.json").write_text(Path(str(files["train"]) + ".json").read_text())
    with pytest.raises(ConfigError, match=r"truncated or replaced"):
        check_source(_cfg(tmp_path / "cut.bin"))


def _train_cli(cli_env, tmp_path, *overrides) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "experiments.train", *TINY, f"hydra.run.dir={tmp_path}/run", *overrides],
                          cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=300)


def test_bpe_train_encode_then_train_on_the_token_files(files, cli_env, tmp_path):
    proc = _train_cli(cli_env, tmp_path, "data=tokens", f"data.train_path={files['train']}",
                      f"data.val_path={files['val']}", "tokenizer=load", f"tokenizer.path={files['tok']}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    # val/bpb = val/loss / ln 2 / (val bytes / val tokens), with the bytes of the val text file
    val_bytes = len((files["dir"] / "val.txt").read_bytes())
    bpt = val_bytes / len(np.fromfile(files["val"], dtype="<u2"))
    assert summary["final_val_bpb"] == pytest.approx(summary["final_val_loss"] / np.log(2) / bpt, rel=1e-6)


def test_cli_refuses_a_mismatched_tokenizer_with_one_line(files, cli_env, tmp_path):
    proc = _train_cli(cli_env, tmp_path, "data=tokens", f"data.train_path={files['train']}",
                      "tokenizer=load", f"tokenizer.path={files['other']}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("config error: data.train_path: ") and "train.bin" in lines[0]
    assert "Traceback" not in proc.stderr
