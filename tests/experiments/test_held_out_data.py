"""Held-out data (issue 32 §2): a text file read as several documents (data.doc_separator), a test split of whole
documents beside validation (data.test_fraction), extra corpora (data.extra_eval), and what stays as it was.

Invariants, over generated inputs where they can be: every document in exactly one of train / val / test, whole;
the separator never inside a document; the held-out choice evenly spread and equal to the old validation rule
without a test split; the tokenizer trained on the train documents only; a default config's corpus key and cache
key unchanged (checked against the key computed the way it was before test splits existed); every bad value one
`config error` line before any data is read.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config.errors import ConfigError
from experiments.config.precheck import precheck
from experiments.data import cache
from experiments.data.corpus import load_corpus, split_documents
from experiments.data.documents import assign_documents, split_on_separator
from tokenizer.corpus import EMBEDDED_NAME, embedded_documents

SEP = "<|endoftext|>"

# a document: lines of printable text (no line equal to the separator), non-empty, not ending in \r
line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12)
document = st.lists(line, min_size=1, max_size=5).map("\n".join).filter(lambda d: d != "" and SEP not in d.split("\n"))


@settings(max_examples=150, deadline=None)
@given(docs=st.lists(document, min_size=1, max_size=8), crlf=st.booleans(), lead=st.booleans(), trail=st.booleans())
def test_separator_lines_cut_exactly_the_joined_documents(docs, crlf, lead, trail):
    """shared/data's layout (documents joined by a line holding only the separator) is read back as the documents,
    with CRLF line ends too; separators first, last or doubled give no empty document."""
    nl = "\r\n" if crlf else "\n"
    docs = [d.replace("\n", nl) for d in docs]
    text = (SEP + nl if lead else "") + (nl + SEP + nl).join(docs) + (nl + SEP + nl if trail else "")
    assert split_on_separator(text, SEP) == docs


@settings(max_examples=150, deadline=None)
@given(text=st.lists(st.sampled_from(["a", " ", "\n", "\r", SEP, "<|", "x" + SEP]), max_size=40).map("".join))
def test_the_separator_is_never_a_line_of_a_document(text):
    docs = split_on_separator(text, SEP)
    is_sep = lambda ln: ln in (SEP, SEP + "\r")  # noqa: E731 - a line holding exactly it (CRLF: its \r)
    assert not any(is_sep(ln) for d in docs for ln in d.split("\n"))
    assert all(d for d in docs)
    # only separator lines and line breaks are dropped: the other text is kept, in order
    breaks = str.maketrans("", "", "\r\n")
    kept = "".join(ln for ln in text.split("\n") if not is_sep(ln))
    assert "".join(docs).translate(breaks) == kept.translate(breaks)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(2, 400), f=st.floats(0.01, 0.6), g=st.floats(0.0, 0.39))
def test_every_document_is_in_exactly_one_split_and_the_held_out_ones_are_evenly_spread(n, f, g):
    try:
        train, val, test = assign_documents(n, f, g)
    except ConfigError as e:  # a split asked for with no whole document: refused, one line
        assert "\n" not in str(e) and str(e).startswith(("data.val_fraction: ", "data.test_fraction: "))
        return
    assert sorted(train + val + test) == list(range(n))  # disjoint and complete
    assert all(x == sorted(x) for x in (train, val, test))
    assert bool(test) == (g > 0) and val and train
    held = sorted(val + test)
    assert len(held) == int(n * (f + g))  # floor(n·h)
    gaps = [b - a for a, b in zip(held, held[1:])]
    assert not gaps or max(gaps) - min(gaps) <= 1  # every ~1/h-th document
    if 0 < g <= f:  # test never takes two held-out documents in a row: validation and test alternate
        pos = {i: j for j, i in enumerate(held)}
        assert all(pos[b] - pos[a] > 1 for a, b in zip(test, test[1:]))


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 300), f=st.floats(0.01, 0.9))
def test_without_a_test_split_validation_is_the_old_choice(n, f):
    """The rule validation used before test splits existed: document i when floor((i+1)f) > floor(if)."""
    docs = [str(i) for i in range(n)]
    old_val = [d for i, d in enumerate(docs) if int((i + 1) * f) > int(i * f)]
    if not old_val:
        return
    assert split_documents(docs, f, "documents")[1] == old_val
    assert [docs[i] for i in assign_documents(n, f, 0.0)[1]] == old_val


def _old_key(train: list[str], val: list[str]) -> str:
    """Corpus.key as it was before test splits existed (the cache key of every existing entry)."""
    h = hashlib.sha256()
    for split, docs in (("train", train), ("val", val)):
        h.update(f"{split}:{len(docs)}\n".encode())
        for doc in docs:
            b = doc.encode("utf-8", errors="surrogatepass")
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)
    return h.hexdigest()


@pytest.mark.parametrize("cfg", [
    {"source": "embedded", "val_fraction": 0.1, "split_by": "stream"},             # conf/data/embedded.yaml
    {"source": "embedded", "val_fraction": 0.1, "split_by": "documents"},
    {"source": "embedded", "val_fraction": 0.1, "split_by": "stream", "test_fraction": 0.0, "extra_eval": {}},
])
def test_default_configs_keep_their_corpus_and_cache_identity(cfg):
    corpus = load_corpus(cfg)
    docs = embedded_documents()
    train, val = split_documents(docs, 0.1, cfg["split_by"])
    assert (corpus.train_docs, corpus.val_docs, corpus.test_docs) == (train, val, [])
    assert corpus.key == _old_key(train, val)
    assert corpus.identity == {"source": "embedded", "name": EMBEDDED_NAME, "val_fraction": 0.1,
                               "split_by": cfg["split_by"]}
    assert list(corpus.splits) == ["train", "val"]


def test_a_text_file_without_a_separator_is_one_document(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(f"one\n{SEP}\ntwo\n")
    b.write_text("three\n")
    corpus = load_corpus({"source": "text", "paths": [str(a), str(b)], "val_fraction": 0.5, "split_by": "documents"})
    assert (corpus.train_docs, corpus.val_docs) == ([f"one\n{SEP}\ntwo\n"], ["three\n"])
    assert corpus.key == _old_key(corpus.train_docs, corpus.val_docs)
    assert "doc_separator" not in corpus.identity


def _novels(tmp_path, n=30):
    """n documents of real prose (the embedded corpus's), joined as shared/data joins its novels."""
    docs = [d[:1500] for d in embedded_documents()[:n]]
    path = tmp_path / "novels.txt"
    path.write_text(f"\n{SEP}\n".join(docs) + "\n", encoding="utf-8")
    return path, docs


def test_a_separated_file_splits_into_whole_documents_with_a_record(tmp_path):
    path, docs = _novels(tmp_path)
    cfg = {"source": "text", "paths": [str(path)], "doc_separator": SEP, "split_by": "documents",
           "val_fraction": 0.1, "test_fraction": 0.1}
    corpus = load_corpus(cfg)
    docs[-1] += "\n"  # the file's last line break belongs to the last document (no separator after it)
    assert sorted(corpus.train_docs + corpus.val_docs + corpus.test_docs) == sorted(docs)  # each once, whole
    rec = corpus.record
    assert rec["documents"] == 30 and rec["doc_separator"] == SEP
    assert [docs[i] for i in rec["val"]["indices"]] == corpus.val_docs
    assert [docs[i] for i in rec["test"]["indices"]] == corpus.test_docs
    assert rec["test"]["bytes"] == sum(len(d.encode()) for d in corpus.test_docs)
    assert rec["train"]["documents"] + rec["val"]["documents"] + rec["test"]["documents"] == 30
    assert corpus.key != _old_key(corpus.train_docs, corpus.val_docs)  # the test split is part of the content key
    again = load_corpus(cfg)
    assert (again.key, again.record) == (corpus.key, corpus.record)  # deterministic


def test_the_tokenizer_never_sees_val_or_test_and_test_ids_are_the_test_documents(tmp_path, monkeypatch):
    path, _ = _novels(tmp_path)
    seen: list[str] = []
    real = cache.train_bpe_from_iterator

    def recording(texts, **kw):
        return real((seen.append(t) or t for t in texts), **kw)

    monkeypatch.setattr(cache, "train_bpe_from_iterator", recording)
    data_cfg = {"source": "text", "paths": [str(path)], "doc_separator": SEP, "split_by": "documents",
                "val_fraction": 0.1, "test_fraction": 0.1, "cache_dir": str(tmp_path / "c")}
    tok_cfg = {"mode": "train", "vocab_size": 300, "pattern": "gpt2", "special_tokens": [SEP], "min_frequency": 1,
               "workers": 1, "max_train_bytes": None}
    prepared = cache.prepare_data(data_cfg, tok_cfg, tmp_path / "c")
    corpus = load_corpus(data_cfg)
    assert seen == corpus.train_docs
    tok, eot = prepared.tokenizer, prepared.tokenizer.special_tokens[SEP]
    want = [i for d in corpus.test_docs for i in [*tok.encode(d), eot]]
    assert prepared.data.test.tolist() == want
    assert prepared.data.test_meta["n_bytes"] == sum(len(d.encode()) for d in corpus.test_docs)
    assert sorted(p.name for p in prepared.data.path.glob("*.bin")) == ["test.bin", "train.bin", "val.bin"]


def test_an_extra_corpus_is_encoded_whole_with_the_runs_tokenizer_and_cached(tmp_path):
    from experiments.data.heldout import held_out_sets

    path, _ = _novels(tmp_path, 6)
    extra = tmp_path / "wiki.txt"
    extra.write_text("An extra corpus, ünïcode too.\n" * 20, encoding="utf-8")
    data_cfg = {"source": "text", "paths": [str(path)], "split_by": "stream", "val_fraction": 0.2,
                "extra_eval": {"wiki": str(extra)}}
    tok_cfg = {"mode": "train", "vocab_size": 300, "pattern": "gpt2", "special_tokens": [SEP], "min_frequency": 1,
               "workers": 1, "max_train_bytes": None}
    prepared = cache.prepare_data(data_cfg, tok_cfg, tmp_path / "c")
    [s] = held_out_sets(prepared, data_cfg, tmp_path / "c")
    tok = prepared.tokenizer
    assert s.prefix == "test/wiki" and s.tokens.tolist() == [*tok.encode(extra.read_text()), tok.special_tokens[SEP]]
    assert s.meta["n_bytes"] == len(extra.read_bytes())
    assert s.source["sha256"] == hashlib.sha256(extra.read_bytes()).hexdigest()
    mtime = {p: p.stat().st_mtime_ns for p in (tmp_path / "c").rglob("eval.bin")}
    assert len(mtime) == 1
    held_out_sets(prepared, data_cfg, tmp_path / "c")  # again: read from the cache, not written
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "c").rglob("eval.bin")} == mtime


# -- bad values: one line, before any data is read -----------------------------------------------------------------

TEXT = ["data=text", f"data.paths=[{__file__}]"]
REFUSED = [
    (["data.test_fraction=0.1"], "data.test_fraction: a test split holds out whole documents"),  # embedded: stream
    (["data.split_by=documents", "data.test_fraction=1.5"], "data.test_fraction: must be a number in [0, 1)"),
    (["data.split_by=documents", "data.test_fraction=-0.1"], "data.test_fraction: must be a number in [0, 1)"),
    (["data.split_by=documents", "data.val_fraction=0.5", "data.test_fraction=0.5"],
     "data.test_fraction: data.val_fraction + data.test_fraction must be < 1"),
    (["data.test_max_tokens=0"], "data.test_max_tokens: must be an integer >= 1"),
    ([*TEXT, "data.doc_separator=''"], "data.doc_separator: must be one line of text"),
    (["+data.extra_eval.wikitext2=../nowhere/wikitext2_raw_test.txt"],
     "data.extra_eval.wikitext2: no file '../nowhere/wikitext2_raw_test.txt'"),
    ([*TEXT, "+data.extra_eval.x=/nonexistent.txt"], "data.extra_eval.x: no file '/nonexistent.txt'"),
    (["+data.extra_eval._x=README.md"], "data.extra_eval: name '_x' must be letters"),
    (["data.extra_eval.x=README.md"], "data.extra_eval.x: unknown key; add it to the mapping with a +"),
    (["data=tinystories", "data.test_fraction=0.1"], "data.test_fraction: the test documents come from data.split"),
]


@pytest.mark.parametrize("multirun", [False, True])
@pytest.mark.parametrize("overrides,message", REFUSED, ids=[" ".join(o) for o, _ in REFUSED])
def test_bad_held_out_values_are_one_line_before_any_data(overrides, message, multirun, tmp_path, monkeypatch):
    def fail(*a, **k):
        raise AssertionError("data was read before the config error")

    monkeypatch.setattr("experiments.data.corpus.load_corpus", fail)
    monkeypatch.setattr("tokenizer.datasets_source.hub_reachable", lambda timeout=3.0: True)
    monkeypatch.setattr("tokenizer.datasets_source.check_dataset", lambda *a, **k: None)
    where = f"hydra.sweep.dir={tmp_path}/s" if multirun else f"hydra.run.dir={tmp_path}/r"
    with pytest.raises(ConfigError) as e:
        precheck([*(["-m"] if multirun else []), "logger=disabled", f"data.cache_dir={tmp_path}/c", where, *overrides,
                  *(["seed=1,2"] if multirun else [])])
    msg = str(e.value)
    assert msg.startswith(message) and "\n" not in msg, msg
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_cli_refuses_a_missing_extra_corpus_with_exit_2(train_cli, tmp_path):
    ran = train_cli("model=tiny", "+data.extra_eval.wikitext2=../nowhere/wikitext2_raw_test.txt",
                    f"hydra.run.dir={tmp_path}/r")
    assert ran.returncode == 2
    err = ran.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("config error: data.extra_eval.wikitext2: no file"), ran.stderr
    assert "WikiText-2" in err[0] and "Traceback" not in ran.stderr
    assert not (tmp_path / "r").exists()


def test_good_held_out_values_pass(tmp_path):
    precheck(["logger=disabled", f"data.cache_dir={tmp_path}/c", f"hydra.run.dir={tmp_path}/r", *TEXT,
              f"data.doc_separator='{SEP}'", "data.split_by=documents", "data.test_fraction=0.1",
              "data.test_max_tokens=4096", f"+data.extra_eval.self={__file__}"])  # returns: nothing refused
