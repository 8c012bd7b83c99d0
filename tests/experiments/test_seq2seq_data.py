"""Seq2seq data: the synthetic tasks against their definitions, deterministic splits by length, pair files
(tsv / jsonl through the datasets loader), and padded batches."""

from __future__ import annotations

import json

import pytest
import torch

from experiments.config.errors import ConfigError
from experiments.data.pairs import IGNORE, PairBatcher, SPECIALS, collate, encode_pairs, load_pairs
from experiments.data.seq2seq_tasks import TASKS, make_pairs, make_split


@pytest.mark.parametrize("task", sorted(TASKS))
def test_tasks_follow_their_definitions(task):
    for src, tgt in make_pairs(task, 200, (1, 12), seed=3):
        if task == "addition":
            a, b = src.split("+")
            assert len(a) == len(b) and (len(a) == 1 or a[0] != "0") and int(tgt) == int(a) + int(b)
        else:
            assert src.isdigit() and 1 <= len(src) <= 12
            assert tgt == {"copy": src, "reverse": src[::-1], "sort": "".join(sorted(src))}[task]


def test_split_is_deterministic_by_length_and_disjoint():
    cfg = {"source": "seq2seq_synthetic", "task": "reverse", "train_lengths": [1, 4], "test_lengths": [3, 8],
           "n_train": 500, "n_test_per_length": 20, "seed": 0}
    a, b = make_split(cfg), make_split(cfg)
    assert a.train == b.train and a.test == b.test
    assert not set(a.test) & set(a.train)
    assert all(len(s) == k for (s, _), k in zip(a.test, a.test_lengths)) and set(a.test_lengths) == set(range(3, 9))
    assert make_split({**cfg, "seed": 1}).train != a.train
    with pytest.raises(ConfigError, match="data.test_lengths"):
        make_split({**cfg, "test_lengths": [5, 2]})
    with pytest.raises(ConfigError, match="unknown task 'rot13'"):
        make_split({**cfg, "task": "rot13"})


def test_pair_files(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text("".join(f"s{i}\tt{i}\n" for i in range(20)))
    split = load_pairs({"source": "seq2seq_pairs", "path": str(tsv), "val_fraction": 0.25})
    assert len(split.test) == 5 and split.test[0] == ("s3", "t3") and ("s0", "t0") in split.train
    jl = tmp_path / "p.jsonl"
    jl.write_text("".join(json.dumps({"de": f"d{i}", "en": f"e{i}" if i != 4 else None}) + "\n" for i in range(10)))
    split = load_pairs({"source": "seq2seq_pairs", "path": str(jl), "src_column": "de", "tgt_column": "en",
                        "val_fraction": 0.5})
    assert ("d4", None) not in split.train + split.test and len(split.train + split.test) == 9
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\tc\n")
    with pytest.raises(ConfigError, match="bad.tsv:1 has 3 tab-separated fields"):
        load_pairs({"source": "seq2seq_pairs", "path": str(bad)})


def test_encoding_and_padding():
    from tokenizer import Tokenizer

    tok = Tokenizer([], special_tokens=list(SPECIALS))
    pad_id, bos, eos = (tok.special_tokens[s] for s in SPECIALS)
    data = encode_pairs(tok, [("12", "21"), ("3", "3")])
    assert data.src == [[ord("1"), ord("2"), eos], [ord("3"), eos]]
    assert data.tgt_in[0] == [bos, ord("2"), ord("1")] and data.tgt_out[0] == [ord("2"), ord("1"), eos]
    src, tgt_in, tgt_out = collate(data, [1, 0], pad_id)
    assert src.tolist() == [[ord("3"), eos, pad_id], [ord("1"), ord("2"), eos]]
    assert tgt_out.tolist()[0] == [ord("3"), eos, IGNORE]
    b = PairBatcher(data, 4, pad_id, torch.Generator().manual_seed(0))
    state = b.generator.get_state()
    first = b.next()
    b.generator.set_state(state)
    assert all(torch.equal(x, y) for x, y in zip(first, b.next()))  # resumable from the generator state
