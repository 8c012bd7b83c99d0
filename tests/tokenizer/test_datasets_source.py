"""tokenizer.datasets_source: the one `datasets` text loader (saved dirs, data files, hub names), on tiny local
datasets built in tmp_path; no network (hub names are tested offline / with the hub made unreachable)."""

from __future__ import annotations

import json
import time

import pytest

datasets = pytest.importorskip("datasets")

from tokenizer import datasets_source  # noqa: E402
from tokenizer.cli import main  # noqa: E402
from tokenizer.datasets_source import DatasetError, check_dataset, load_texts  # noqa: E402

ROWS = {"text": ["alpha beta", None, "gamma", "delta é"], "label": [0, 1, 2, 3], "tags": [["a"], [], ["b"], ["c"]]}
EXPECTED = ["alpha beta", "gamma", "delta é"]  # None skipped


@pytest.fixture
def saved(tmp_path):
    d = tmp_path / "saved"
    datasets.Dataset.from_dict(ROWS).save_to_disk(str(d))
    return d


@pytest.fixture
def saved_dict(tmp_path):
    d = tmp_path / "saved_dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(ROWS), "validation": datasets.Dataset.from_dict({"text": ["v"]})}).save_to_disk(str(d))
    return d


@pytest.fixture
def jsonl(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps({"text": t, "label": i}) + "\n" for i, t in enumerate(ROWS["text"])), encoding="utf-8")
    return p


@pytest.mark.parametrize("streaming", [True, False])
def test_saved_dir_and_jsonl_yield_the_column_skipping_none(saved, jsonl, streaming):
    assert list(load_texts(str(saved), streaming=streaming)) == EXPECTED
    assert list(load_texts(str(jsonl), streaming=streaming)) == EXPECTED


def test_dataset_dict_split_and_limit(saved_dict):
    assert list(load_texts(str(saved_dict), split="validation")) == ["v"]
    assert list(load_texts(str(saved_dict), limit=3)) == ["alpha beta", "gamma"]  # 3 rows read, one was None
    with pytest.raises(DatasetError, match=r"has no split 'test'; splits: \['train', 'validation'\]"):
        load_texts(str(saved_dict), split="test")


def test_txt_file_and_folder_of_files(tmp_path):
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "f" / "b.txt").write_text("three\n", encoding="utf-8")
    assert list(load_texts(str(tmp_path / "f" / "a.txt"))) == ["one", "two"]
    assert list(load_texts(str(tmp_path / "f"))) == ["one", "two", "three"]


def test_missing_column_lists_columns(saved, jsonl):
    with pytest.raises(DatasetError, match=r"has no column 'body'; columns: \['text', 'label', 'tags'\]"):
        load_texts(str(saved), column="body")
    with pytest.raises(DatasetError, match=r"no column 'body'.*'text'"):
        list(load_texts(str(jsonl), column="body"))


@pytest.mark.parametrize("column,held", [("label", "int64"), ("tags", "list")])
def test_non_text_column_refused_up_front(saved, column, held):
    with pytest.raises(DatasetError) as e:
        load_texts(str(saved), column=column)  # no iteration needed: features are checked eagerly
    msg = str(e.value)
    assert f"column '{column}' holds" in msg and held in msg.lower() and "not text" in msg and "--text-column" in msg
    assert "\n" not in msg and str(saved) in msg


def test_non_text_value_while_streaming_refused(jsonl, tmp_path):
    with pytest.raises(DatasetError, match=r"column 'label' holds int.*not text"):
        list(load_texts(str(jsonl), column="label"))
    mixed = tmp_path / "mixed.jsonl"  # json builder infers no features for a streamed file up front
    mixed.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"text": 5}) + "\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="not text|cannot read dataset"):
        list(load_texts(str(mixed)))


def test_bad_local_paths(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "x.xml").write_text("<a/>")
    with pytest.raises(DatasetError, match="is a directory but neither a saved dataset"):
        check_dataset(str(tmp_path / "empty"))
    with pytest.raises(DatasetError, match="cannot tell the format of"):
        check_dataset(str(tmp_path / "x.xml"))
    with pytest.raises(DatasetError, match="no such dataset file or directory"):
        check_dataset(str(tmp_path / "nope.jsonl"))


def test_hub_name_fails_fast_offline_or_unreachable(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert datasets_source.offline()
    with pytest.raises(DatasetError, match="'someone/corpus' is not a local path.*hub is off"):
        check_dataset("someone/corpus")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: refused at once
    assert not datasets_source.hub_reachable(timeout=1.0)
    start = time.perf_counter()
    with pytest.raises(DatasetError, match="unreachable"):
        load_texts("someone/corpus")
    assert time.perf_counter() - start < 5


def test_bpe_train_dataset_non_text_column_one_line(saved, tmp_path, capsys):
    code = main(["train", "--dataset", str(saved), "--text-column", "label", "--vocab-size", "300", "--out", str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "column 'label' holds int64, not text" in err[0]
    assert not (tmp_path / "t").exists()
