"""Output-path safety for the `bpe` commands that write (train, encode, convert): the one place that decides
whether an output may be written, and that turns a failed write into one line naming the USER's path.

    check_not_input(out, [src, tok_file], flag="--out")      # out (or out.json) is an input, also via a symlink
    check_inside_not_input(out_dir, inputs)                   # out_dir is, or contains, an input
    check_new(out, force=args.force)                          # exists and no --force -> refused
    with writing(out): write_tokens(out, ...)                 # OSError on a temp file / parent -> "cannot write OUT"
    with atomic_output(out) as tmp: write(tmp)                # the one atomic file write of the repo
    atomic_write(out, lambda f: f.write(text), binary=False)  # the same, through an open file (fsync'd)
    with atomic_directory(out_dir) as tmp: fill(tmp)          # the one atomic directory write of the repo
    with atomic_directory(out_dir, into=True) as tmp: fill(tmp)   # the same, its files moved into an existing dir

Rules (docs/tokenizer.md, "Outputs and --force"): a command writes only its own named files, each atomically
(temp file beside it + rename), never deletes anything else; `--force` only lets it replace those files; an
output that is one of its inputs is refused even with --force. Not handled: two hard links to one file under
different names when one of them does not exist yet (nothing to compare), races with other processes.
The atomic writers live here because tokenizer/ cannot import experiments/; experiments/ uses them for every file
and directory it writes (summary.json, reports, checkpoints, cache entries, exports). What they write gets the mode a
plain open() / mkdir() would give under the umask (mkstemp / mkdtemp / safetensors alone make 0600 / 0700).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from tokenizer.stop import check as check_stop


class OutputError(ValueError):
    """An output that must not be written (one line naming the user's path)."""


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """True when `a` and `b` name one file: the same inode if both exist, else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _inside(path: Path, directory: Path) -> bool:
    path, directory = path.resolve(), directory.resolve()
    return path == directory or directory in path.parents


def check_not_input(out: Path, inputs: Iterable[Path | None], *, flag: str = "--out", sidecar: Path | None = None) -> None:
    """Refuse an output (or its `sidecar`) that is one of the `inputs` (None entries, e.g. stdin, are skipped)."""
    for inp in inputs:
        if inp is None:
            continue
        for target in (out, sidecar):
            if target is not None and same_file(target, inp):
                what = "" if target == out else f" (its sidecar {target})"
                raise OutputError(f"{flag} {out}{what} is the input {inp}; write to another path")


def check_inside_not_input(out_dir: Path, inputs: Iterable[Path], *, flag: str = "--out") -> None:
    """Refuse an output directory that is, or contains, one of the inputs."""
    for inp in inputs:
        if _inside(inp, out_dir):
            raise OutputError(f"{flag} {out_dir} holds the input {inp}; write the tokenizer to another directory")


def check_new(out: Path, *, force: bool, also: Iterable[Path] = ()) -> None:
    """Refuse an existing `out` (or one of the `also` companions, e.g. its sidecar) unless `force`."""
    if out.is_dir():
        raise OutputError(f"{out} is a directory; give a file name")
    if force:
        return
    for p in (out, *also):
        if p.exists() or p.is_symlink():
            raise OutputError(f"{p} already exists; pass --force to replace it")


def default_mode(directory: bool = False) -> int:
    """The mode a plain open()/mkdir() would give under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


@contextmanager
def atomic_output(out: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `out` (`.{name}.*.tmp`, so `writing` names `out` in its errors) to write; when the
    block succeeds it gets the usual umask-based mode and replaces `out` atomically (os.replace), so a reader or a
    kill never sees half a file. On any failure the temp file is removed and `out` is left as it was."""
    out = Path(out)
    fd, tmp = tempfile.mkstemp(dir=out.parent if str(out.parent) else ".", prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        check_stop()  # a Ctrl-C whose raise was dropped (tokenizer/stop.py) stops it here, before `out` changes
        os.chmod(tmp, default_mode())  # mkstemp makes 0600
        os.replace(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[Any]], object], *, binary: bool) -> None:
    """Call `write(f)` on a temp file beside `path` (parents are created), flush and fsync it, then move it to
    `path` (atomic_output): a reader or a run killed at any instant sees the old file or the new one.
    Example: atomic_write(run_dir / "summary.json", lambda f: json.dump(summary, f), binary=False).
    Not handled: fsync of the directory entry itself.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp, open(tmp, "wb" if binary else "w") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _umask_modes(root: Path) -> None:
    """Give every file and dir below `root` (root included) the mode a plain open() / mkdir() would give: writers
    such as mkstemp, mkdtemp and safetensors make 0600 / 0700 whatever the umask."""
    os.chmod(root, default_mode(directory=True))
    for parent, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(parent, name), default_mode(directory=True))
        for name in files:
            os.chmod(os.path.join(parent, name), default_mode())


@contextmanager
def atomic_directory(out: str | os.PathLike, *, into: bool = False) -> Iterator[Path]:
    """Yield a new empty temp dir (`.{name}.*.tmp`) to fill. When the block succeeds, what it holds gets the
    umask's modes (_umask_modes) and:
      into=False: the temp dir, made beside `out`, takes `out`'s place (an `out` already there, e.g. a stale
        partial copy, is removed first), so a reader sees no directory or a complete one;
      into=True: the temp dir is made inside `out` (which must exist and keeps its other entries and its own mode)
        and each entry moves into `out` with one os.replace, replacing the entry of that name there.
    On any failure the temp dir is removed and `out` is left as it was. Not handled: readers of the old `out` while
    it is being replaced (into=False: the remove and the rename are two steps; into=True: a kill between two moves
    leaves some entries new and some old, each whole).
    """
    out = Path(out)
    parent = out if into else (out.parent if str(out.parent) else Path("."))
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        yield tmp
        check_stop()
        _umask_modes(tmp)
        if into:
            for entry in sorted(tmp.iterdir()):
                os.replace(entry, out / entry.name)
        else:
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only on failure (into=True: empty by now)


@contextmanager
def writing(out: Path) -> Iterator[None]:
    """Re-raise an OSError about `out`'s temp file, `out` itself or one of its parents as one line naming `out`.

    Errors about other files (an input that fails while being read) pass through unchanged.
    """
    try:
        yield
    except OSError as e:
        name = e.filename
        resolved_out = out.absolute()
        if not isinstance(name, (str, bytes, os.PathLike)) or _about_output(Path(os.fsdecode(name)).absolute(), resolved_out):
            reason = e.strerror or type(e).__name__
            raise OutputError(f"cannot write {out}: {reason}") from None
        raise


def _about_output(name: Path, out: Path) -> bool:
    # out, a parent of it, its sidecar, or a temp file beside it (`.{out.name}.*`, the writers' naming)
    same_dir = name.parent == out.parent and (name.name.startswith(f".{out.name}") or name.name == f"{out.name}.json")
    return name == out or name in out.parents or same_dir
