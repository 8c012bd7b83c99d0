"""Corpus sources, the deterministic train/val split, seeded window sampling and the content-hash cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from experiments.data import Corpus, WindowSampler, expand_paths, load_corpus, rank_seed, split_documents
from experiments.errors import ConfigError
from experiments.tokenize_cache import get_token_data, get_tokenizer

TOK = {"mode": "train", "vocab_size": 300, "pattern": "gpt2", "special_tokens": ["<|endoftext|>"], "min_frequency": 1,
       "workers": 1, "max_train_bytes": None}


def test_document_split_is_deterministic_and_disjoint():
    docs = [f"doc {i}" for i in range(50)]
    train, val = split_documents(docs, 0.1, "documents")
    assert (train, val) == split_documents(docs, 0.1, "documents")
    assert len(val) == 5 and set(train).isdisjoint(val) and sorted(train + val) == sorted(docs)


def test_stream_split_cuts_the_text_at_the_fraction():
    train, val = split_documents(["a" * 60, "b" * 40], 0.25, "stream")
    assert "".join(train) == "a" * 60 + "b" * 15 and "".join(val) == "b" * 25


def test_document_split_of_one_document_says_what_to_do():
    with pytest.raises(ConfigError, match="split_by=stream"):
        split_documents(["only one"], 0.1, "documents")


def test_text_source_reads_globbed_files_in_order(tmp_path):
    for name in ("b.txt", "a.txt", "c.md"):
        (tmp_path / name).write_text(f"text of {name} " * 50)
    assert [p.name for p in expand_paths([str(tmp_path / "*.txt")])] == ["a.txt", "b.txt"]
    corpus = load_corpus({"source": "text", "paths": [str(tmp_path / "*.txt")], "val_fraction": 0.5, "split_by": "documents"})
    assert corpus.train_docs == [(tmp_path / "a.txt").read_text()] and corpus.val_docs == [(tmp_path / "b.txt").read_text()]


def test_hf_source_reads_a_local_jsonl_file(tmp_path):
    path = tmp_path / "stories.jsonl"
    path.write_text("".join(f'{{"story": "story number {i}"}}\n' for i in range(30)))
    corpus = load_corpus({"source": "hf", "name": str(path), "split": "train", "val_split": None, "text_column": "story",
                          "max_documents": 20, "val_fraction": 0.1, "split_by": "documents"})
    assert len(corpus.train_docs) + len(corpus.val_docs) == 20 and corpus.train_docs[0] == "story number 0"
    with pytest.raises(ConfigError, match="text_column='text' is not a column"):
        load_corpus({"source": "hf", "name": str(path), "split": "train", "text_column": "text", "val_fraction": 0.1,
                     "split_by": "documents"})


def test_windows_follow_the_seed_and_differ_per_rank():
    tokens = np.arange(10_000, dtype=np.uint16)

    def first_batches(seed, rank, n=3):
        sampler = WindowSampler(tokens, 16, 4, torch.Generator().manual_seed(rank_seed(seed, rank)))
        return [sampler.next() for _ in range(n)]

    a, b = first_batches(0, 0), first_batches(0, 0)
    assert all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b))
    x, y = a[0]
    assert x.shape == (4, 16) and x.dtype == torch.int64 and torch.equal(y, x + 1)  # y is x shifted by one
    assert not torch.equal(first_batches(0, 1)[0][0], x) and not torch.equal(first_batches(1, 0)[0][0], x)


def test_tokenizer_and_tokens_are_cached_by_content(tmp_path):
    from tokenizer.corpus import embedded_documents

    docs = embedded_documents()[:4]  # real prose: enough distinct pairs for 300 ids
    corpus = Corpus("t", docs[:3], docs[3:])
    tok, info = get_tokenizer(corpus, TOK, tmp_path)
    assert not info["cached"] and tok.vocab_size == 300
    tok2, info2 = get_tokenizer(corpus, TOK, tmp_path)
    assert info2["cached"] and tok2.fingerprint() == tok.fingerprint()

    data = get_token_data(corpus, tok, tmp_path)
    eot = tok.special_tokens["<|endoftext|>"]
    assert data.train.dtype == np.uint16 and int((data.train == eot).sum()) == 3  # one <|endoftext|> per document
    assert tok.decode([int(i) for i in data.val if i != eot]) == corpus.val_docs[0]
    assert data.bytes_per_token == pytest.approx(len(corpus.val_docs[0]) / len(data.val))
    assert get_token_data(corpus, tok, tmp_path).path == data.path

    edited = Corpus("t", corpus.train_docs[:2] + [corpus.train_docs[2] + "!"], corpus.val_docs)
    assert edited.key != corpus.key
    assert not get_tokenizer(edited, TOK, tmp_path)[1]["cached"]
    assert get_tokenizer(corpus, {**TOK, "vocab_size": 280}, tmp_path)[0].vocab_size == 280
