"""The interpreter as a command printed for the user should name it, so that the command works as printed.

    f"compare by hand: {python_command()} -m experiments.compare {sweep}"

`python` when the `python` on PATH is this interpreter (an activated venv: the README's `source .venv/bin/activate`),
else this interpreter's path, relative to the current dir when it lies below it (`.venv/bin/python` after `make
demo`, which runs the venv's Python without activating it: a plain `python` there is the system's, without torch).
Not handled: a PATH that changes between printing and running (the command is right for the shell that ran this one).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path


def python_command() -> str:
    """`python`, or the path of sys.executable (relative below the cwd), shell-quoted."""
    exe = sys.executable
    if not exe:
        return "python"
    found = shutil.which("python")
    # the bin dirs, not only the files: a venv's python is a symlink to the base interpreter, which lacks its packages
    if found and Path(found).parent.resolve() == Path(exe).parent.resolve() \
            and Path(found).resolve() == Path(exe).resolve():
        return "python"
    path = Path(os.path.abspath(exe))
    try:
        shown = str(path.relative_to(Path.cwd()))
    except ValueError:
        shown = str(path)
    return shlex.quote(shown)
