"""BPE training: golden CS336 merges, differential tests against the slow reference trainer, determinism,
input validation and edge cases. Chunked file reading is tested in test_train_chunks.py."""

from __future__ import annotations

import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tokenizer.reference_train import reference_train
from tokenizer import Tokenizer, train_bpe, train_bpe_from_iterator
from tokenizer.corpus import embedded_documents
from tokenizer.merge import learn_merges

EOT = "<|endoftext|>"
MAX_EXAMPLES = int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "40"))


def gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable encoding of bytes (openai/gpt-2 encoder.py `bytes_to_unicode`), written out here."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def decode_gpt2_token(token: str) -> bytes:
    inverse = {c: b for b, c in gpt2_bytes_to_unicode().items()}
    return bytes(inverse[c] for c in token)


def quiet_train(*args, **kwargs):
    kwargs.setdefault("progress", False)
    return train_bpe(*args, **kwargs)


def quiet_train_iter(*args, **kwargs):
    kwargs.setdefault("progress", False)
    return train_bpe_from_iterator(*args, **kwargs)


# ---------------------------------------------------------------- golden / reference


def test_bytes_to_unicode_table_is_a_bijection_onto_printables():
    table = gpt2_bytes_to_unicode()
    assert len(set(table.values())) == 256
    assert table[ord("a")] == "a" and table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ"


def test_golden_cs336_merges_and_vocab(shared_data):
    """CS336 assignment 1: corpus.en, vocab 500, <|endoftext|> -> the reference merges, exactly, in order."""
    cs = shared_data / "cs336"
    expected = [tuple(decode_gpt2_token(t) for t in line.rstrip("\n").split(" "))
                for line in (cs / "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines()]
    tok = quiet_train([cs / "corpus.en"], vocab_size=500, special_tokens=[EOT])
    assert isinstance(tok, Tokenizer)
    assert len(expected) == 243
    assert tok.merges == expected
    assert tok.vocab_size == 500
    assert tok.special_tokens == {EOT: 499}
    # The reference vocab uses other ids (special first), so compare the sets of token byte strings.
    ref_vocab = json.loads((cs / "train-bpe-reference-vocab.json").read_text(encoding="utf-8"))
    ref_tokens = {t.encode() if t == EOT else decode_gpt2_token(t) for t in ref_vocab}
    assert set(tok.vocab.values()) == ref_tokens


def test_wikipedia_aaabdaaabac():
    """Wikipedia's BPE example. Pairs of "aaabdaaabac": aa:4, ab:2, others 1 -> merge (a, a); the word becomes
    [aa, a, b, d, aa, a, b, a, c] (left to right, non-overlapping). Now (aa, a) and (a, b) both occur twice;
    the tie goes to the greater byte pair, (b"aa", b"a") > (b"a", b"b"). Then [aaa, b, d, aaa, b, a, c]:
    (aaa, b) occurs twice, every other pair once."""
    tok = quiet_train_iter(["aaabdaaabac"], vocab_size=259)
    assert tok.merges == [(b"a", b"a"), (b"aa", b"a"), (b"aaa", b"b")]
    assert tok.merges == reference_train(["aaabdaaabac"], 259)


def test_tie_break_prefers_lexicographically_greatest_pair():
    # Every pair below occurs exactly once: (b"z", b"a") is the greatest; then among the rest (b"y", b"a").
    assert learn_merges({b"ab": 1, b"za": 1, b"ya": 1}, 2) == [(b"z", b"a"), (b"y", b"a")]
    # A prefix sorts below its extension: after (b, c), (a, bc) and (a, b) occur once each; b"bc" > b"b".
    assert learn_merges({b"bc": 5, b"abc": 1, b"ab": 1}, 2) == [(b"b", b"c"), (b"a", b"bc")]
    # Higher count beats a greater pair.
    assert learn_merges({b"ab": 2, b"zz": 1}, 1) == [(b"a", b"b")]


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", r"\S+|\s+"])
@pytest.mark.parametrize("specials", [[], [EOT], [EOT, "<|a|>", "<|a|><|b|>"]])
def test_matches_reference_trainer(pattern, specials):
    docs = embedded_documents()[:3]
    texts = [docs[0] + EOT + docs[1][:3000] + "<|a|><|b|>x<|a|>y", docs[2][:5000] + "\n😀😀 naïve café 12345"]
    vocab_size = 256 + len(specials) + 150
    tok = quiet_train_iter(texts, vocab_size, specials, pattern=pattern, workers=1)
    assert tok.merges == reference_train(texts, vocab_size, specials, pattern)
    assert len(tok.merges) == 150


def test_matches_reference_on_shared_samples(shared_data):
    cs = shared_data / "cs336"
    for name, vocab_size in [("tinystories_sample.txt", 400), ("german.txt", 300), ("address.txt", 300)]:
        text = (cs / name).read_text(encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny files may not reach vocab_size
            tok = quiet_train([cs / name], vocab_size, [EOT], workers=1)
        assert tok.merges == reference_train([text], vocab_size, [EOT]), name


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.lists(st.sampled_from(list("ab cé😀\n'1.") + [EOT]), max_size=60).map("".join),
                      min_size=1, max_size=4),
       extra=st.integers(0, 40), pattern=st.sampled_from(["gpt2", "gpt4"]), min_frequency=st.integers(1, 3))
def test_matches_reference_hypothesis(texts, extra, pattern, min_frequency):
    vocab_size = 257 + extra
    expected = reference_train(texts, vocab_size, [EOT], pattern, min_frequency)
    if not any(t.replace(EOT, "") for t in texts):
        with pytest.raises(ValueError, match="corpus is empty"):
            quiet_train_iter(texts, vocab_size, [EOT], pattern=pattern, workers=1, min_frequency=min_frequency)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = quiet_train_iter(texts, vocab_size, [EOT], pattern=pattern, workers=1, min_frequency=min_frequency)
    assert tok.merges == expected


@settings(max_examples=MAX_EXAMPLES, deadline=None)
@given(words=st.dictionaries(st.one_of(st.binary(min_size=1, max_size=8),
                                        st.lists(st.sampled_from([b"a", b"b", b"\x00", b"\xff"]), min_size=1,
                                                 max_size=12).map(b"".join)),
                              st.integers(1, 5), min_size=1, max_size=12),
       n_merges=st.integers(0, 30))
def test_merge_loop_matches_reference_on_arbitrary_bytes(words, n_merges):
    """Arbitrary byte strings (not only UTF-8), so byte 0x00 / 0xff tie-breaks are exercised, and runs of few
    symbols ("aaaa", "abab"), where occurrences of a pair overlap or touch."""
    assert learn_merges(words, n_merges) == _reference_on_byte_words(words, n_merges)


def _reference_on_byte_words(words: dict[bytes, int], n_merges: int) -> list[tuple[bytes, bytes]]:
    """reference_train's loop on {word bytes: count} directly (the reference itself takes text)."""
    seqs = {tuple(bytes([b]) for b in w): n for w, n in words.items()}
    merges = []
    for _ in range(n_merges):
        counts: dict[tuple[bytes, bytes], int] = {}
        for seq, n in seqs.items():
            for p in zip(seq, seq[1:]):
                counts[p] = counts.get(p, 0) + n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        merges.append(best)
        new = {}
        for seq, n in seqs.items():
            out, i = [], 0
            while i < len(seq):
                if seq[i:i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(seq[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + n
        seqs = new
    return merges


# ---------------------------------------------------------------- determinism / equivalence


def test_workers_1_and_2_give_the_same_merges(tmp_path):
    text = EOT.join(embedded_documents()[:20])
    path = tmp_path / "c.txt"
    path.write_text(text, encoding="utf-8")
    one = quiet_train([path], 600, [EOT], workers=1, chunk_bytes=20_000)
    two = quiet_train([path], 600, [EOT], workers=2, chunk_bytes=20_000)
    assert one.merges == two.merges and len(one.merges) == 600 - 257
    it = quiet_train_iter(embedded_documents()[:20], 600, [EOT], workers=2, chunk_bytes=20_000)
    assert it.merges == one.merges


def test_file_and_iterator_training_agree(tmp_path):
    docs = embedded_documents()[:6]
    path = tmp_path / "c.txt"
    path.write_text(EOT.join(docs), encoding="utf-8")
    from_file = quiet_train([path], 500, [EOT], workers=1)
    from_iter = quiet_train_iter(iter(docs), 500, [EOT], workers=1)  # a generator, consumed once
    assert from_file.merges == from_iter.merges
    assert from_file == from_iter


def test_several_files_are_separate_documents(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("xy", encoding="utf-8")
    b.write_text("z", encoding="utf-8")
    tok = quiet_train([a, b], 257, workers=1)
    assert tok.merges == [(b"x", b"y")]  # joined as "xyz", the greater pair (y, z) would come first
    assert reference_train(["xyz"], 257) == [(b"y", b"z")]
    assert quiet_train_iter(["xy", "z"], 257).merges == tok.merges


def test_special_tokens_are_never_merged_or_counted():
    text = ("x" + EOT) * 200
    with pytest.warns(UserWarning, match="stopped at vocab size 257 of the requested 300"):
        tok = quiet_train_iter([text], 300, [EOT])
    assert all(b"endoftext" not in a + b and b"<|" not in a + b for a, b in tok.merges)
    assert tok.merges == []  # only single "x" pre-tokens are left: no pairs at all
    with pytest.warns(UserWarning, match="stopped at vocab size 266"):
        plain = quiet_train_iter([text], 300)  # without the special, its text is ordinary and gets merged
    assert any(b"endoftext" in a + b for a, b in plain.merges)


def test_result_is_a_usable_tokenizer():
    docs = embedded_documents()[:4]
    tok = quiet_train_iter(docs, 400, [EOT], pattern="gpt4")
    assert tok.vocab_size == 400 and tok.special_tokens == {EOT: 399}
    assert tok.pattern_name == "gpt4"
    text = docs[0][:500] + EOT + "tail"
    ids = tok.encode(text, allowed_special="all")
    assert tok.decode(ids) == text and 399 in ids
    assert len(ids) < len(text.encode())


# ---------------------------------------------------------------- stopping early, min_frequency


def test_min_frequency_stops_with_warning():
    """Pre-tokens "ab", " ab" x2, " cd" x2, " ef": (a, b) occurs 3 times; after it, no pair reaches 3."""
    texts = ["ab ab ab cd cd ef"]
    with pytest.warns(UserWarning, match=r"stopped at vocab size 257 of the requested 300.*at least 3 times"):
        tok = quiet_train_iter(texts, 300, min_frequency=3)
    assert tok.merges == [(b"a", b"b")]
    assert tok.merges == reference_train(texts, 300, [], "gpt2", 3)
    assert tok.vocab_size == 257
    assert len(quiet_train_iter(texts, 260, min_frequency=2).merges) == 4


def test_unreachable_vocab_size_warns_with_size_reached():
    with pytest.warns(UserWarning, match=r"stopped at vocab size 259 of the requested 1000: no pairs are left"):
        tok = quiet_train_iter(["abcd"], 1000)
    assert tok.merges == [(b"c", b"d"), (b"b", b"cd"), (b"a", b"bcd")]


def test_exact_vocab_size_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tok = quiet_train_iter(["abcd"], 259)
    assert len(tok.merges) == 3


# ---------------------------------------------------------------- bad input


def test_vocab_size_too_small():
    with pytest.raises(ValueError, match=r"vocab_size 256 is too small.*257"):
        quiet_train_iter(["abc"], 256, [EOT])
    with pytest.raises(ValueError, match="too small"):
        quiet_train_iter(["abc"], 100)
    assert quiet_train_iter(["abc"], 257, [EOT]).merges == []


@pytest.mark.parametrize("texts", [[], [""], ["", ""], [EOT, EOT + EOT]])
def test_empty_corpus(texts):
    with pytest.raises(ValueError, match="corpus is empty"):
        quiet_train_iter(texts, 300, [EOT])


def test_empty_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=f"corpus is empty.*{path.name}"):
        quiet_train([path], 300)


def test_missing_path_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        quiet_train([tmp_path / "nope.txt"], 300)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        quiet_train([tmp_path], 300)
    with pytest.raises(ValueError, match="no training files"):
        quiet_train([], 300)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown pattern 'gpt3'"):
        quiet_train_iter(["abc"], 300, pattern="gpt3")
    with pytest.raises(ValueError, match="invalid split pattern"):
        quiet_train_iter(["abc"], 300, pattern="(unclosed")
    with pytest.raises(ValueError, match="duplicate special"):
        quiet_train_iter(["abc"], 300, [EOT, EOT])
    with pytest.raises(ValueError, match="non-empty"):
        quiet_train_iter(["abc"], 300, [""])
    with pytest.raises(ValueError, match="workers"):
        quiet_train_iter(["abc"], 300, workers=0)
    with pytest.raises(ValueError, match="chunk_bytes"):
        quiet_train_iter(["abc"], 300, chunk_bytes=0)
    with pytest.raises(ValueError, match="min_frequency"):
        quiet_train_iter(["abc"], 300, min_frequency=-1)
    with pytest.raises(TypeError, match="not one string"):
        quiet_train_iter("abc", 300)
    with pytest.raises(TypeError, match="must be str"):
        quiet_train_iter([b"abc"], 300)


def test_invalid_utf8_is_replaced_and_counted(tmp_path):
    raw = b"caf\xc3\xa9 \xff\xfe abc \xe2\x82 abc abc \xf0\x9f\x98\x80 abc"  # 0xff, 0xfe, truncated 3-byte seq
    path = tmp_path / "bad.txt"
    path.write_bytes(raw)
    with pytest.warns(UserWarning, match=r"3 invalid UTF-8 sequence\(s\) in .*bad.txt were replaced by U\+FFFD"):
        tok = quiet_train([path], 270, workers=1)
    text = raw.decode("utf-8", errors="replace")
    assert text.count("\ufffd") == 3
    assert tok.merges == reference_train([text], 270)


def test_lone_surrogates_in_iterator_count_as_replacement_char():
    tok = quiet_train_iter(["a\ud800b a\ud800b"], 259, workers=1)
    assert tok.merges == reference_train(["a\ufffdb a\ufffdb"], 259)
    assert tok.merges[0] == (b"\xef", b"\xbf")  # U+FFFD is EF BF BD


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_surrogates_in_iterator_are_read_as_the_encoder_reads_them(pattern):
    # A valid surrogate pair is its character (as in Tokenizer.encode), not two U+FFFD; and the fix comes before
    # splitting: under gpt4, "\U0001d400" (a letter) joins the next letters, which two raw surrogates would not.
    pair, lone = "\ud83d\ude00", "\ud800"
    texts = [f"x{pair}{pair} \ud835\udc00bc \ud835\udc00bc {lone}y {pair}"] * 3
    fixed = [t.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for t in texts]
    assert fixed[0] == "x\U0001f600\U0001f600 \U0001d400bc \U0001d400bc \ufffdy \U0001f600"
    tok = quiet_train_iter(texts, 266, pattern=pattern, workers=1)
    assert tok.merges == reference_train(fixed, 266, pattern=pattern)
    assert tok.encode(texts[0]) == tok.encode(fixed[0])
