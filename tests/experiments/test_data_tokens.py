"""`data=tokens`: token files from `bpe encode` as the runner's data (fingerprint-checked, exact bytes/token).

The reference for every value is the text files themselves (their UTF-8 bytes) and the tokenizer's per-token
bytes, never the runner's own output. The end-to-end tests go through both CLIs: `bpe train` -> `bpe encode`
-> `python -m experiments.train data=tokens ...`, each run in this process (tokenizer.cli.main, conftest's train_cli).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.data.corpus import check_source
from experiments.config.errors import ConfigError
from experiments.data.cache import prepare_data, token_file_data
from tests.experiments.conftest import TINY
from tokenizer.cli import main as bpe
from tokenizer.corpus import embedded_documents
from tokenizer.tokenfile import TokenFileError, read_sidecar, write_tokens

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


def test_bpe_train_encode_then_train_on_the_token_files(files, train_cli, tmp_path):
    proc = train_cli(*TINY, f"hydra.run.dir={tmp_path}/run", "data=tokens", f"data.train_path={files['train']}",
                     f"data.val_path={files['val']}", "tokenizer=load", f"tokenizer.path={files['tok']}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed"
    # val/bpb = val/loss / ln 2 / (val bytes / val tokens), with the bytes of the val text file
    val_bytes = len((files["dir"] / "val.txt").read_bytes())
    bpt = val_bytes / len(np.fromfile(files["val"], dtype="<u2"))
    assert summary["final_val_bpb"] == pytest.approx(summary["final_val_loss"] / np.log(2) / bpt, rel=1e-6)


def test_cli_refuses_a_mismatched_tokenizer_with_one_line(files, train_cli, tmp_path):
    proc = train_cli(*TINY, f"hydra.run.dir={tmp_path}/run", "data=tokens", f"data.train_path={files['train']}",
                     "tokenizer=load", f"tokenizer.path={files['other']}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("config error: data.train_path: ") and "train.bin" in lines[0]
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------------------------------ ids that do not fit


def _copy_pair(src: Path, dst: Path) -> Path:
    dst.write_bytes(src.read_bytes())
    Path(str(dst) + ".json").write_bytes(Path(str(src) + ".json").read_bytes())
    return dst


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split=st.sampled_from(["train", "val"]), where=st.floats(0, 1), excess=st.integers(0, 65535 - 300))
def test_an_id_outside_the_vocabulary_is_refused_in_one_line_naming_file_and_id(files, tmp_path, split, where, excess):
    d = tmp_path / f"poke_{split}_{excess}"
    d.mkdir(exist_ok=True)
    paths = {s: _copy_pair(files[s], d / f"{s}.bin") for s in ("train", "val")}
    ids = np.fromfile(paths[split], dtype="<u2")
    pos, bad = min(len(ids) - 1, int(where * len(ids))), 300 + excess  # the tokenizer's ids are 0..299
    ids[pos] = bad
    ids.tofile(paths[split])  # same size: the sidecar's count and fingerprint still hold
    with pytest.raises(ConfigError) as e:
        prepare_data(_cfg(paths["train"], paths["val"]), _load(files["tok"]), tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and f"{split}.bin" in msg and f"id {bad} at position {pos}" in msg and "0..299" in msg


def test_a_tokenizer_whose_ids_do_not_fit_the_files_dtype_is_refused(files, tmp_path):
    from tokenizer import Tokenizer

    real = Tokenizer.load(files["tok"])

    class Wide:  # the file's own tokenizer, as far as the fingerprint goes, but with ids past uint16
        vocab_size = 70_000
        fingerprint = staticmethod(real.fingerprint)

    with pytest.raises(ConfigError) as e:
        token_file_data(_cfg(files["train"], files["val"]), Wide())
    msg = str(e.value)
    assert "\n" not in msg and "train.bin" in msg and "70000" in msg and "uint16" in msg


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.integers(0, 299), min_size=1, max_size=50), bad=st.one_of(st.integers(300, 2**16 + 5),
                                                                                 st.integers(-5, -1)))
def test_writing_an_id_the_file_cannot_hold_is_one_line_and_writes_nothing(tmp_path, ids, bad):
    out = tmp_path / f"w{abs(bad)}.bin"
    with pytest.raises(TokenFileError) as e:
        write_tokens(out, [ids, [*ids, bad]], vocab_size=300, fingerprint="f" * 64)
    assert "\n" not in str(e.value) and str(out) in str(e.value) and f"id {bad}" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f"w{abs(bad)}") or p.name.startswith(f".w{abs(bad)}")) == []


def test_cli_refuses_an_id_outside_the_vocabulary_before_training(files, train_cli, tmp_path):
    bad = _copy_pair(files["train"], tmp_path / "train.bin")
    ids = np.fromfile(bad, dtype="<u2")
    ids[-1] = 4000
    ids.tofile(bad)
    proc = train_cli(*TINY, f"hydra.run.dir={tmp_path}/run", "data=tokens", f"data.train_path={bad}",
                     f"data.val_path={files['val']}", "tokenizer=load", f"tokenizer.path={files['tok']}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("config error: data.train_path: ") and "id 4000" in lines[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
