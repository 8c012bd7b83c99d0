"""Progress output: tqdm on a terminal, plain periodic lines (no carriage returns) in a log."""

from __future__ import annotations

import io

from tokenizer.progress import LineProgress, NoBar, progress_bar


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lines_at_start_every_interval_and_at_the_end():
    out, clock = io.StringIO(), Clock()
    bar = LineProgress(total=100, desc="merge", unit="merge", stream=out, interval=10, clock=clock)
    for _ in range(100):
        clock.t += 0.5  # 2 merges/s
        bar.update(1)
    bar.set_postfix(loss="3.210")
    bar.close()
    bar.close()  # idempotent
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0] == "merge: 0/100 merge (0%)"
    # 50 s in 0.5 s ticks with a 10 s interval: lines at t = 10, 20, 30, 40, 50 (the last one is n=100)
    assert lines[1] == "merge: 20/100 merge (20%), 2 merge/s, eta 0:00:40"
    assert len(lines) == 1 + 5 + 1 and lines[-1] == "merge: 100/100 merge (100%), 2 merge/s, loss=3.210"


def test_choice_by_stream():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    from tqdm import tqdm

    assert isinstance(progress_bar(False, total=3), NoBar)
    assert isinstance(progress_bar(True, total=3, stream=io.StringIO(), leave=False), LineProgress)
    bar = progress_bar(True, total=3, stream=Tty(), leave=False)
    assert isinstance(bar, tqdm)
    bar.close()


def test_close_does_not_repeat_the_last_line():
    out, clock = io.StringIO(), Clock()
    bar = LineProgress(total=2, desc="demo", unit="run", stream=out, interval=0, clock=clock)
    clock.t = 1.0
    bar.update(1)
    bar.update(1)
    bar.close()
    assert out.getvalue().splitlines() == ["demo: 0/2 run (0%)", "demo: 1/2 run (50%), 1 run/s, eta 0:00:01",
                                           "demo: 2/2 run (100%), 2 run/s"]
