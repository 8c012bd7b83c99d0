"""Faults on the data side: two processes sharing the cache, entries left damaged by a crash, a full or read-only
disk under the cache, token files whose ids do not fit the tokenizer. Each is one line (a ConfigError / a
TokenFileError) and leaves no cache entry that a later run would take as valid."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from experiments.config.errors import ConfigError
from experiments.data.cache import get_token_data, get_tokenizer
from experiments.data.corpus import Corpus
from tokenizer.tokenfile import write_tokens

from .conftest import PYTHON, REPO
from .small_fs import remount, temp_leftovers, tmpfs

# ------------------------------------------------------------------------------------------ the cache lock

HOLD = """
import sys, time
if {block_fcntl}:
    sys.modules["fcntl"] = None  # a platform without fcntl (Windows)
from pathlib import Path
from experiments.data.cache import file_lock
lock, log, role = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
def say(what):
    with log.open("a") as f:
        f.write(f"{{role}} {{what}} {{time.monotonic()}}\\n")
def seen(what):
    return what in log.read_text() if log.exists() else False
say("ready")
# the first takes the lock once both are ready; the second asks for it while the first holds it
while not (seen("second ready") if role == "first" else seen("first in")):
    time.sleep(0.01)
with file_lock(lock):
    say("in")
    time.sleep(1.0 if role == "first" else 0)
    say("out")
"""


@pytest.mark.parametrize("block_fcntl", [False, True], ids=["fcntl", "no_fcntl"])
def test_the_cache_lock_excludes_a_second_process_on_every_platform(tmp_path, block_fcntl):
    script = HOLD.format(block_fcntl=block_fcntl)
    lock, log = tmp_path / "locks" / ".entry.lock", tmp_path / "log.txt"
    procs = [subprocess.Popen([PYTHON, "-c", script, str(lock), str(log), role], cwd=REPO) for role in ("first", "second")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    events = [line.split()[:2] for line in log.read_text().splitlines() if "ready" not in line]
    # the holds never overlap: the second enters only after the first left
    assert events == [["first", "in"], ["first", "out"], ["second", "in"], ["second", "out"]], events


# ------------------------------------------------------------------------------------------ entries left damaged

TOK = {"mode": "train", "vocab_size": 300, "pattern": "gpt2", "special_tokens": ["<|endoftext|>"], "min_frequency": 1,
       "workers": 1, "max_train_bytes": None}


@pytest.fixture(scope="module")
def corpus():
    from tokenizer.corpus import embedded_documents

    docs = embedded_documents()[:4]
    return Corpus("t", docs[:3], docs[3:])


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The tokenizer fingerprint and token ids of `corpus`, from a cache nothing ever damaged."""
    root = tmp_path_factory.mktemp("reference_cache")
    tok, _ = get_tokenizer(corpus, TOK, root)
    data = get_token_data(corpus, tok, root)
    return {"fingerprint": tok.fingerprint(), "train": np.array(data.train), "val": np.array(data.val)}


def _fill(corpus, root):
    tok, _ = get_tokenizer(corpus, TOK, root)
    get_token_data(corpus, tok, root)
    return tok


def _damage(path: Path, how: str, fraction: float) -> None:
    raw = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(raw[: int(len(raw) * fraction)])
    elif how == "zeros":  # a crash after the rename, before the data reached the disk: a hole of zeros
        path.write_bytes(b"\0" * len(raw))
    else:  # garbage of another length
        path.write_bytes(os.urandom(max(1, int(len(raw) * fraction))))


def _same_tokenizer(path: Path, reference) -> bool:
    from tokenizer import Tokenizer

    try:
        return Tokenizer.load(path).fingerprint() == reference["fingerprint"]
    except ValueError:
        return False


HOW = st.sampled_from(["empty", "truncated", "zeros", "garbage"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=HOW, fraction=st.floats(0.0, 0.999))
def test_a_damaged_cached_tokenizer_is_rebuilt(corpus, reference, tmp_path, how, fraction):
    root = tmp_path / os.urandom(4).hex()
    _fill(corpus, root)
    [entry] = [p for p in (root / "tokenizers").glob("*.json") if not p.name.endswith(".meta.json")]
    _damage(entry, how, fraction)
    still_whole = _same_tokenizer(entry, reference)  # e.g. only the final newline cut off
    tok, info = get_tokenizer(corpus, TOK, root)
    assert info["cached"] is still_whole and tok.fingerprint() == reference["fingerprint"]
    assert get_tokenizer(corpus, TOK, root)[1]["cached"] is True  # the rebuilt entry is whole again


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(split=st.sampled_from(["train", "val"]), part=st.sampled_from(["bin", "sidecar"]), how=HOW,
       fraction=st.floats(0.0, 0.999))
def test_a_damaged_token_cache_entry_is_rebuilt(corpus, reference, tmp_path, split, part, how, fraction):
    # zeros in place of the ids keep the size the sidecar promises: write_tokens's fsync before the rename is what
    # rules that crash out (test_token_files_reach_the_disk_before_their_names_appear)
    assume(not (part == "bin" and how == "zeros"))
    root = tmp_path / os.urandom(4).hex()
    tok = _fill(corpus, root)
    [entry] = [p for p in (root / "tokens").iterdir() if p.is_dir()]
    _damage(entry / (f"{split}.bin" if part == "bin" else f"{split}.bin.json"), how, fraction)
    data = get_token_data(corpus, tok, root)
    assert np.array_equal(data.train, reference["train"]) and np.array_equal(data.val, reference["val"])


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc/self/fd")
def test_token_files_reach_the_disk_before_their_names_appear(tmp_path, monkeypatch):
    synced, replaced = set(), []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src, dst):
        replaced.append((str(src), str(dst), str(src) in synced))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_tokens(tmp_path / "a.bin", [[1, 2, 3]], vocab_size=300, fingerprint="f" * 64)
    assert sorted(Path(dst).name for _, dst, _ in replaced) == ["a.bin", "a.bin.json"]
    assert all(was_synced for _, _, was_synced in replaced), replaced


# ------------------------------------------------------------------------------------------ a full or read-only disk


def _check_one_line(e: pytest.ExceptionInfo, under: Path, reason: str) -> None:
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("data.cache_dir: cannot write ") and str(under) in msg, msg
    assert reason in msg, msg


def _only_whole_entries(root: Path, reference) -> None:
    """Every entry a later run would take as valid is whole and right; no temp file outlived its writer."""
    from tokenizer import Tokenizer

    assert temp_leftovers(root) == []
    for path in (root / "tokenizers").glob("*.json"):
        if not path.name.endswith(".meta.json"):
            assert Tokenizer.load(path).fingerprint() == reference["fingerprint"]
    for entry in (root / "tokens").glob("*/"):
        for split in ("train", "val"):
            ids = np.fromfile(entry / f"{split}.bin", dtype="<u2")
            assert np.array_equal(ids, reference[split]) and (entry / f"{split}.bin.json").is_file()


@pytest.mark.parametrize("size_kb", [4, 8, 12, 24, 36, 40])  # fails at: meta, tokenizer, train ids, ..., val sidecar
def test_a_full_disk_under_the_cache_is_one_line_and_a_later_run_rebuilds(corpus, reference, tmp_path, size_kb):
    with tmpfs(tmp_path / "disk", f"size={size_kb}k") as disk:
        with pytest.raises(ConfigError) as e:
            _fill(corpus, disk)
        _check_one_line(e, disk, "No space left on device")
        _only_whole_entries(disk, reference)
        remount(disk, "rw,size=1m")  # space freed: the same call now completes the cache
        tok, _ = get_tokenizer(corpus, TOK, disk)
        data = get_token_data(corpus, tok, disk)
        assert tok.fingerprint() == reference["fingerprint"]
        assert np.array_equal(data.train, reference["train"]) and np.array_equal(data.val, reference["val"])


@pytest.mark.parametrize("where", ["tokenizer", "tokens"])
def test_a_failed_cache_write_is_one_line_and_leaves_no_entry(corpus, reference, tmp_path, monkeypatch, where):
    # the same fault without a small filesystem: the write call at its place of use fails with ENOSPC midway
    import experiments.data.cache as cache

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_write = cache.write_tokens

    def write_half(out, chunks, **kw):
        def then_full():
            yield next(iter(chunks))
            full()

        return real_write(out, then_full(), **kw)

    if where == "tokenizer":
        monkeypatch.setattr(cache.Tokenizer, "save", full)
    else:
        monkeypatch.setattr(cache, "write_tokens", write_half)
    root = tmp_path / "cache"
    with pytest.raises(ConfigError) as e:
        _fill(corpus, root)
    _check_one_line(e, root, "No space left on device")
    _only_whole_entries(root, reference)
    monkeypatch.undo()
    tok = _fill(corpus, root)
    assert np.array_equal(get_token_data(corpus, tok, root).train, reference["train"])


@pytest.mark.parametrize("which", ["cache_dir", "HOME"])
def test_a_read_only_cache_dir_or_home_is_one_line(corpus, tmp_path, monkeypatch, which):
    with tmpfs(tmp_path / "ro", "ro,size=64k") as ro:
        if which == "HOME":
            monkeypatch.setenv("HOME", str(ro))
        cache_dir = "~/.cache/archlab" if which == "HOME" else ro / "cache"
        with pytest.raises(ConfigError) as e:
            _fill(corpus, cache_dir)
        _check_one_line(e, ro, "Read-only file system")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_cache_dir_that_cannot_be_created_is_one_line(corpus):
    with pytest.raises(ConfigError) as e:
        _fill(corpus, "/proc/self/archlab_cache")
    _check_one_line(e, Path("/proc/self/archlab_cache"), "No such file or directory")


def test_a_read_only_cache_that_holds_the_entries_is_read(corpus, reference, tmp_path):
    with tmpfs(tmp_path / "shared", "size=1m") as shared:
        _fill(corpus, shared)
        remount(shared, "ro")
        tok, info = get_tokenizer(corpus, TOK, shared)
        data = get_token_data(corpus, tok, shared)
        assert info["cached"] is True and np.array_equal(data.train, reference["train"])
