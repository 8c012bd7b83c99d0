"""Corpus sources, the deterministic train/val split, seeded window sampling and the content-hash cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from experiments.data.corpus import Corpus, WindowSampler, expand_paths, load_corpus, rank_seed, split_documents
from experiments.config.errors import ConfigError
from experiments.data.cache import get_token_data, get_tokenizer

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
    with pytest.raises(ConfigError, match=r"^data\.name: dataset .* has no column 'text'; columns: \['story'\]"):
        load_corpus({"source": "hf", "name": str(path), "split": "train", "text_column": "text", "val_fraction": 0.1,
                     "split_by": "documents"})


@pytest.mark.parametrize("rows", ['{"n": 7}', '{"n": [1, 2]}'])
def test_hf_source_refuses_a_column_that_is_not_text_in_one_line(tmp_path, rows):
    path = tmp_path / "numbers.jsonl"
    path.write_text(f"{rows}\n" * 10)
    with pytest.raises(ConfigError, match=r"column 'n' holds .*, not text") as e:
        load_corpus({"source": "hf", "name": str(path), "split": "train", "text_column": "n", "val_fraction": 0.2,
                     "split_by": "documents"})
    assert "\n" not in str(e.value)


def test_hf_source_loads_a_folder_of_data_files(tmp_path):
    """A folder of .jsonl files, through the shared loader (tokenizer.datasets_source): every row, once."""
    for k in range(2):
        (tmp_path / "d").mkdir(exist_ok=True)
        (tmp_path / "d" / f"part{k}.jsonl").write_text("".join(f'{{"text": "part {k} row {i}"}}\n' for i in range(5)))
    corpus = load_corpus({"source": "hf", "name": str(tmp_path / "d"), "split": "train", "val_split": None,
                          "text_column": "text", "val_fraction": 0.1, "split_by": "documents"})
    assert sorted(corpus.train_docs + corpus.val_docs) == sorted(f"part {k} row {i}" for k in range(2) for i in range(5))


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


def test_prepare_data_reads_trains_and_encodes_a_text_corpus(tmp_path):
    from tokenizer.corpus import embedded_documents

    from experiments.data.cache import prepare_data

    text = "".join(embedded_documents()[:3])
    (tmp_path / "book.txt").write_text(text, encoding="utf-8")
    data_cfg = {"source": "text", "paths": [str(tmp_path / "book.txt")], "val_fraction": 0.2, "split_by": "stream"}
    cut = int(round(len(text) * 0.8))  # the stream split, by hand: the last 20% of the characters is validation
    p = prepare_data(data_cfg, TOK, tmp_path / "cache")
    assert p.name == "book" and p.tokenizer.vocab_size == 300 and p.tokenizer_info["cached"] is False
    eot = p.tokenizer.special_tokens["<|endoftext|>"]
    assert p.tokenizer.decode([int(i) for i in p.data.train if i != eot]) == text[:cut]
    assert p.tokenizer.decode([int(i) for i in p.data.val if i != eot]) == text[cut:]
    assert p.data.bytes_per_token == pytest.approx(len(text[cut:].encode()) / len(p.data.val))
    again = prepare_data(data_cfg, TOK, tmp_path / "cache")
    assert again.tokenizer_info["cached"] is True and again.tokenizer_info["path"] == p.tokenizer_info["path"]


def test_token_cache_entries_are_token_files_that_bpe_decode_reads(tmp_path, capsysbinary):
    from tokenizer.cli import main as bpe
    from tokenizer.corpus import embedded_documents
    from tokenizer.tokenfile import read_sidecar

    docs = embedded_documents()[:4]
    corpus = Corpus("t", docs[:3], docs[3:])
    tok, info = get_tokenizer(corpus, TOK, tmp_path)
    data = get_token_data(corpus, tok, tmp_path)
    side = read_sidecar(data.path / "val.bin")  # the one token-file format: a sidecar next to each .bin
    assert side["tokenizer_fingerprint"] == tok.fingerprint() and side["count"] == len(data.val)
    assert side["n_bytes"] == len(docs[3].encode("utf-8"))  # the document's bytes, not the appended <|endoftext|>
    assert read_sidecar(data.path / "train.bin")["n_bytes"] == sum(len(d.encode("utf-8")) for d in docs[:3])
    capsysbinary.readouterr()
    assert bpe(["decode", "--tokenizer", info["path"], str(data.path / "val.bin")]) == 0
    assert capsysbinary.readouterr().out == (docs[3] + "<|endoftext|>").encode("utf-8")


@pytest.mark.parametrize("n,T", [(12, 4), (9, 8), (5, 4)])
def test_windows_cover_every_start_up_to_the_last_token(n, T):
    """Closed form: with N tokens and context T every start s in [0, N-T-1] is drawn, x = t[s:s+T],
    y = t[s+1:s+T+1]; so the last token t[N-1] is a target."""
    tokens = (np.arange(n, dtype=np.uint16) * 7 + 3) % 1000  # distinct values: a window's first id names its start
    first = {int(v): s for s, v in enumerate(tokens)}
    sampler = WindowSampler(tokens, T, 64, torch.Generator().manual_seed(0))
    seen = set()
    for _ in range(20):
        x, y = sampler.next()
        for xr, yr in zip(x.tolist(), y.tolist()):
            s = first[xr[0]]
            assert xr == tokens[s : s + T].tolist() and yr == tokens[s + 1 : s + T + 1].tolist()
            seen.add(s)
    assert seen == set(range(n - T))  # every start 0..N-T-1, none beyond
    assert n - T - 1 in seen  # the window whose last target is t[N-1]
