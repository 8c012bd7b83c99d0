"""Chunked file reading for BPE training: chunks must never cut a pre-token, a special token or a UTF-8
character, and training on a file bigger than the chunk size must equal training on the text in memory."""

from __future__ import annotations

import os
from pathlib import Path
import warnings

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tokenizer.reference_train import reference_pretoken_counts, reference_train
from tokenizer import train_bpe, train_bpe_from_iterator
from tokenizer.corpus import embedded_documents
from tokenizer.pretoken_counts import _SAFE_CUT, iter_file_texts, replaced_count, safe_cut
from tokenizer.pretokenize import resolve_pattern

EOT = "<|endoftext|>"
MAX_EXAMPLES = int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "60"))
# Characters that stress the gpt2/gpt4 rules: contractions, digit groups, whitespace runs, \r\n, punctuation
# followed by newlines, multi-byte letters and symbols.
PIECES = list("ab Z1 2\n\r\t.,'!é日😀。") + ["'s", "'ll", "'ve", "'re", "  ", "\n\n", ".\n", "123456", EOT]


def chunks_of(path, pattern: str, specials: list[str], chunk_bytes: int) -> list[str]:
    return list(iter_file_texts([path], resolve_pattern(pattern), specials, chunk_bytes))


@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.lists(st.sampled_from(PIECES), max_size=300).map("".join),
       chunk_bytes=st.integers(1, 40), pattern=st.sampled_from(["gpt2", "gpt4"]),
       specials=st.sampled_from([[], [EOT]]))
def test_chunks_never_cut_a_pretoken(tmp_path, text, chunk_bytes, pattern, specials):
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8", newline="")
    chunks = chunks_of(path, pattern, specials, chunk_bytes)
    assert "".join(chunks) == text
    assert all(chunks)
    assert reference_pretoken_counts(chunks, specials, pattern) == reference_pretoken_counts([text], specials, pattern)


@settings(max_examples=MAX_EXAMPLES * 3, deadline=None)
@given(text=st.lists(st.sampled_from(PIECES[:-1]), max_size=60).map("".join), pattern=st.sampled_from(["gpt2", "gpt4"]))
def test_every_candidate_cut_point_is_safe(text, pattern):
    """Not only the cut that iter_file_texts picks (the last one): every place the cut rule allows."""
    regex_pattern = resolve_pattern(pattern)
    whole = regex.findall(regex_pattern, text)
    for m in _SAFE_CUT.finditer(text):
        i = m.start()
        assert regex.findall(regex_pattern, text[:i]) + regex.findall(regex_pattern, text[i:]) == whole, (text, i)


def test_chunking_actually_cuts(tmp_path):
    """The property test above is vacuous if nothing is ever cut: check that cuts do happen."""
    text = "one two three\nfour five" * 50
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    chunks = chunks_of(path, "gpt2", [], 64)
    assert len(chunks) > 10 and "".join(chunks) == text
    path.write_text(text.replace("\n", EOT), encoding="utf-8")
    cut_at_specials = chunks_of(path, r"\S+\s*", [EOT], 64)  # a custom pattern is cut only at specials
    assert len(cut_at_specials) > 10 and all(c.startswith(EOT) for c in cut_at_specials[1:])


def test_cut_points():
    gpt2 = resolve_pattern("gpt2")
    assert safe_cut("ab\n" + EOT + "cd", gpt2, [EOT]) == 3  # before the last special
    assert safe_cut("hello world", gpt2, []) == 5  # between a letter and " w"
    assert safe_cut("x9\nb", gpt2, []) == 3  # right after a newline between two non-spaces
    assert safe_cut("a.\nb", gpt2, []) == 3  # gpt4 makes ".\n" one pre-token: the cut is after it
    assert safe_cut("a \nb", gpt2, []) == 0  # gpt2 would make " \n" one pre-token at the end of a chunk
    assert safe_cut("a\r\nb", gpt2, []) == 0
    assert safe_cut("a\n\nb", gpt2, []) == 0
    assert safe_cut("   ", gpt2, []) == 0
    # A special that may continue past the chunk end (here "<|a|>" could be "<|a|><|b|>") is not a cut point.
    assert safe_cut("xx<|a|>", gpt2, ["<|a|>", "<|a|><|b|>"]) == 0
    assert safe_cut("xx<|a|>" + "y" * 10, gpt2, ["<|a|>", "<|a|><|b|>"]) == 2
    # Custom patterns are cut at special tokens only.
    assert safe_cut("hello world", r"\S+\s*", []) == 0
    assert safe_cut("hello<|a|> world", r"\S+\s*", ["<|a|>"]) == 5


def test_overlapping_special_tokens_across_chunks(tmp_path):
    specials = ["<|a|>", "<|a|><|b|>", "ab", "bc"]
    text = "xabcy<|a|><|b|>z<|a|>w abc<|a|><|b|><|a|>" * 20
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    for chunk_bytes in (1, 3, 7, 16):
        chunks = chunks_of(path, "gpt2", specials, chunk_bytes)
        assert "".join(chunks) == text
        expected = reference_pretoken_counts([text], specials, "gpt2")
        assert reference_pretoken_counts(chunks, specials, "gpt2") == expected


def test_text_without_spaces_is_cut_after_newlines(tmp_path):
    text = "日本語のテキスト。\n日本語です、はい。\n" * 200
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    for pattern in ("gpt2", "gpt4"):
        chunks = chunks_of(path, pattern, [], 256)
        assert len(chunks) > 10 and "".join(chunks) == text
        assert reference_pretoken_counts(chunks, [], pattern) == reference_pretoken_counts([text], [], pattern)


def test_long_stretch_without_cut_points_is_one_chunk(tmp_path):
    text = "x" * 50_000 + "\n\n" + "y" * 50_000
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    assert chunks_of(path, "gpt2", [EOT], 100) == [text]


def test_custom_pattern_without_specials_is_one_chunk(tmp_path):
    text = "hello world " * 100
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    assert chunks_of(path, r"\S+\s*", [], 64) == [text]


def test_multibyte_characters_split_across_reads(tmp_path):
    text = "é日😀a" * 200
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    before = replaced_count()
    for chunk_bytes in (1, 2, 3, 5, 7):
        assert "".join(chunks_of(path, "gpt2", [], chunk_bytes)) == text
    assert replaced_count() == before  # no spurious replacements at read boundaries


def test_invalid_utf8_across_reads(tmp_path):
    raw = (b"ok \xe2\x82 bad\xff \xf0\x9f\x98\x80 \xc3" + b"\xa9x ") * 30
    path = tmp_path / "t.bin"
    path.write_bytes(raw)
    expected = raw.decode("utf-8", errors="replace")
    for chunk_bytes in (1, 3, 8):
        before = replaced_count()
        assert "".join(chunks_of(path, "gpt2", [], chunk_bytes)) == expected
        assert replaced_count() - before == 60  # "\xe2\x82" and "\xff" per repeat


@pytest.mark.parametrize("pattern,specials", [("gpt2", [EOT]), ("gpt4", []), (r"\w+|\W", [EOT])])
def test_training_on_a_file_larger_than_the_chunk_size(tmp_path, pattern, specials):
    docs = embedded_documents()[:8]
    text = EOT.join(docs)
    path = tmp_path / "c.txt"
    path.write_text(text, encoding="utf-8")
    assert len(text) > 20 * 1024
    chunked = train_bpe([path], 330, specials, pattern, workers=2, progress=False, chunk_bytes=1024)
    in_memory = train_bpe_from_iterator([text], 330, specials, pattern, workers=1, progress=False)
    assert chunked.merges == in_memory.merges
    assert chunked.merges == reference_train([text], 330, specials, pattern)


def test_progress_bars_do_not_change_results(tmp_path, capsys):
    path = tmp_path / "c.txt"
    path.write_text("hello world " * 100, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        shown = train_bpe([path], 270, progress=True, workers=1)
        hidden = train_bpe([path], 270, progress=False, workers=1)
    assert "merge" in capsys.readouterr().err
    assert shown.merges == hidden.merges


def test_one_long_string_is_cut_for_the_workers():
    from tokenizer.pretoken_counts import batch_texts

    text = EOT.join(embedded_documents()[:8])
    gpt2 = resolve_pattern("gpt2")
    batches = list(batch_texts([text, "short"], gpt2, [EOT], 1024))
    pieces = [p for b in batches for p in b]
    assert len(batches) > 10 and "".join(pieces[:-1]) == text and pieces[-1] == "short"
    assert reference_pretoken_counts(pieces, [EOT], "gpt2") == reference_pretoken_counts([text, "short"], [EOT], "gpt2")
    tok = train_bpe_from_iterator([text], 330, [EOT], workers=2, progress=False, chunk_bytes=1024)
    assert tok.merges == train_bpe_from_iterator([text], 330, [EOT], workers=1, progress=False).merges


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4", r"\w+|\W"])
def test_long_pieces_are_pretokenized_in_slices(monkeypatch, pattern):
    from tokenizer import pretoken_counts

    monkeypatch.setattr(pretoken_counts, "SLICE_CHARS", 300)
    text = EOT.join(embedded_documents()[:4]) + "日本語。\n" * 100
    got = pretoken_counts.count_texts([text], resolve_pattern(pattern), [EOT])
    expected = reference_pretoken_counts([text], [EOT], pattern)
    assert {k.encode(): v for k, v in got.items()} == expected



def _dispositions(*_args, **_kwargs):
    """What a worker does on SIGTERM, SIGINT, SIGUSR1 (run inside the pool, in place of the real task)."""
    import signal
    from collections import Counter

    def name(h):
        return {signal.SIG_DFL: "default", signal.SIG_IGN: "ignore"}.get(h, "python")

    return Counter({f"{s}={name(signal.getsignal(getattr(signal, s)))}": 1 for s in ("SIGTERM", "SIGINT", "SIGUSR1")})


EXPECTED = {"SIGTERM=default", "SIGINT=ignore", "SIGUSR1=ignore"}



@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGUSR1"), reason="POSIX signals")
@pytest.mark.parametrize("call", ["count_batches", "encode_batch"])
def test_pool_workers_do_not_inherit_the_callers_signal_handlers(monkeypatch, call):
    """A forked worker inherits its caller's Python handlers. A caller that handles SIGTERM itself (a training
    run's "stop after this step", experiments/run/interrupt.py) would make its workers survive the SIGTERM with which
    `Pool.terminate` shuts them down, and the call would never return (seen in the suite). Each worker must start
    with SIGTERM's default action and ignore SIGINT/SIGUSR1, whatever the caller installed."""
    import signal

    from tokenizer import pretoken_counts
    from tokenizer import tokenizer as tokenizer_mod

    text = EOT.join(embedded_documents()[:8])
    tok = train_bpe_from_iterator([text], 300, [EOT], workers=1, progress=False)
    sigs = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    previous = {sig: signal.signal(sig, lambda *a: None) for sig in sigs}  # what StopRequest does during a run
    try:
        if call == "count_batches":
            monkeypatch.setattr(pretoken_counts, "count_texts", _dispositions)
            batches = list(pretoken_counts.batch_texts([text], resolve_pattern("gpt2"), [EOT], 1024))
            assert len(batches) >= pretoken_counts.MIN_POOL_TASKS  # so that a pool is used
            got = set(pretoken_counts.count_batches(batches, resolve_pattern("gpt2"), [EOT], workers=2))
        else:
            monkeypatch.setattr(tokenizer_mod, "_encode_in_worker", _dispositions_list)
            rows = tok.encode_batch(["a", "b", "c", "d"], num_workers=2, min_parallel_chars=1)
            got = {k for row in rows for k in row}
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert got == EXPECTED


def _dispositions_list(_text):
    return sorted(_dispositions())
