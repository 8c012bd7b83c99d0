"""Progress that suits where the output goes: a tqdm bar on a terminal, plain periodic lines in a log.

    with progress_bar(True, total=n, desc="merge", unit="merge") as bar:
        bar.update(1)
        bar.set_postfix(loss="3.21")      # shown on the bar, or at the end of the next line

On a terminal (the stream is a tty) this is tqdm. Otherwise (a log file, a pipe, a Hydra/joblib job) there is no
carriage-return clutter: one line when the work starts, then one line at most every `interval` seconds
(env ARCHLAB_PROGRESS_INTERVAL, default 30), and one at the end, e.g.
`merge: 1200/9744 merge (12%), 410 merge/s, eta 0:00:21`. `show=False` returns a bar that does nothing.
Used by the BPE trainer, the training loop and the demo (experiments/ imports it from here: one implementation).
Not handled: nested bars in line mode (each prints its own lines).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO


class NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix(self, refresh: bool = True, **kwargs: Any) -> None:
        pass

    def write(self, text: str) -> None:
        """A message line between progress lines (tqdm.write's role)."""
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class LineProgress(NoBar):
    """Plain progress lines: at the start, every `interval` seconds, at the end."""

    def __init__(self, *, total: int | float | None = None, desc: str = "", unit: str = "it", initial: int = 0,
                 stream: TextIO | None = None, interval: float | None = None, clock=time.monotonic) -> None:
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.stream = stream or sys.stderr
        self.interval = float(os.environ.get("ARCHLAB_PROGRESS_INTERVAL", 30)) if interval is None else interval
        self.clock = clock
        self.start = self.last = clock()
        self.start_n = initial
        self.postfix = ""
        self.closed = False
        self.last_line = None
        self._emit()

    def line(self) -> str:
        elapsed = self.clock() - self.start
        rate = (self.n - self.start_n) / elapsed if elapsed > 0 else 0.0
        done = f"{self.n}/{int(self.total)}" if self.total else f"{self.n}"
        parts = [f"{self.desc}: {done} {self.unit}" if self.desc else f"{done} {self.unit}"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        if rate > 0:
            parts.append(f"{rate:.3g} {self.unit}/s")
            if self.total and self.n < self.total:
                parts.append(f"eta {_duration((self.total - self.n) / rate)}")
        if self.postfix:
            parts.append(self.postfix)
        return ", ".join(parts)

    def _emit(self, unless_same: bool = False) -> None:
        line = self.line()
        if not (unless_same and line == self.last_line):
            self.stream.write(line + "\n")
            self.stream.flush()
        self.last, self.last_line = self.clock(), line

    def write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.clock() - self.last >= self.interval:
            self._emit()

    def set_postfix(self, refresh: bool = True, **kwargs: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kwargs.items())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._emit(unless_same=True)  # the end, unless the last line already said exactly this


def progress_bar(show: bool, *, stream: TextIO | None = None, **kwargs: Any):
    """tqdm on a terminal, LineProgress otherwise, NoBar when `show` is false (see the module docstring)."""
    if not show:
        return NoBar()
    stream = stream or sys.stderr
    if getattr(stream, "isatty", lambda: False)():
        from tqdm import tqdm  # on a terminal only: tokenizer/ itself needs no more than regex

        return tqdm(file=stream, **kwargs)
    keep = {k: kwargs[k] for k in ("total", "desc", "unit", "initial", "interval") if k in kwargs}
    return LineProgress(stream=stream, **keep)
