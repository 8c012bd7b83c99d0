"""tokenizer=load: the tokenizer file a run names is read and checked with the config, before any data is read.

    check_tokenizer_file(path)   # experiments.config.check.validate; ConfigError: tokenizer.path='...' could not be
                                 # loaded: <file>: special token '<|endoftext|>' has id 1099511627776: token ids ...

The check is the loader's own (tokenizer.Tokenizer.load: a missing, unreadable, corrupt or truncated file, invalid
merges, ids that are not integers or not below 2**32: tokenizer/serialize.py), through the function the run's data
step reads it with (experiments.data.cache.load_tokenizer), so a bad file is one `config error:` line and exit 2
before a corpus is read or Hydra makes a dir. A file that passed once in this process is not read again until its
size or mtime changes (precheck and train() each validate the config).
Not handled: a file replaced between this check and the run's data step (that step refuses it in the same words);
a valid file whose ids are sparse (a special token at 2**31 means 2**31 embedding rows; the model is not sized here).
"""

from __future__ import annotations

from pathlib import Path

from experiments.data.cache import load_tokenizer
from tokenizer.serialize import resolve_path

_PASSED: set[tuple[str, int, int, int]] = set()  # (file, inode, size, mtime_ns) of files that loaded


def _key(path: Path) -> tuple[str, int, int, int] | None:
    try:
        file = resolve_path(path)
        st = file.stat()
    except OSError:
        return None
    return str(file.resolve()), st.st_ino, st.st_size, st.st_mtime_ns


def check_tokenizer_file(path: Path) -> None:
    """`path` (a tokenizer .json, or a `bpe train --out` dir) loads as a tokenizer; else one ConfigError."""
    key = _key(path)
    if key is not None and key in _PASSED:
        return
    load_tokenizer({"path": str(path)})
    if key is not None:
        _PASSED.add(key)
