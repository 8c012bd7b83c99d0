"""tokenizer/stop.py: a stop request (SIGINT, SIGTERM) in a `stop_signals()` block is never lost (issue 31).

The lost Ctrl-C of `bpe encode`: SIGINT landed in regex's `Group.__del__`, Python printed "Exception ignored in ...",
and the command wrote its output and exited 0. Each case runs a small script in its own process (a signal to
itself, delivered at a known place), and checks how the block ended, what ran after the signal, and stderr.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

PRELUDE = """
import os, signal, sys
from pathlib import Path
from tokenizer.stop import Terminated, check, stop_signals
from tokenizer.outputs import atomic_output

class Finalized:
    def __init__(self, sig):
        self.sig = sig
    def __del__(self):  # the signal's handler runs in here, at a bytecode boundary of this loop
        os.kill(os.getpid(), self.sig)
        for _ in range(1000):
            pass

def ran(what):
    print(what, flush=True)

try:
    with stop_signals():
{body}
    ran("block ended")
except KeyboardInterrupt:
    ran("KeyboardInterrupt")
except Terminated:
    ran("Terminated")
"""


def run_block(body: str, tmp_path: Path, *, ignore_sigint: bool = False) -> tuple[list[str], str]:
    """Run `body` (lines of the `with stop_signals():` block) in a new interpreter; (stdout lines, stderr)."""
    script = PRELUDE.format(body=textwrap.indent(textwrap.dedent(body).strip(), " " * 8))
    if ignore_sigint:
        script = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n" + script
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out.txt")})
    assert p.returncode == 0, p.stderr
    return p.stdout.split(), p.stderr


@pytest.mark.parametrize("sig,raised", [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Terminated")],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_inside_a_finalizer_is_raised_at_the_next_check_and_nothing_is_printed(tmp_path, sig, raised):
    out, err = run_block(f"""
        Finalized({int(sig)})  # dropped at once: its __del__ runs, and the signal lands in it
        ran("after")
        check()
        ran("after-check")
    """, tmp_path)
    assert out == ["after", raised]
    assert "Exception ignored" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("sig,raised", [(signal.SIGINT, "KeyboardInterrupt"), (signal.SIGTERM, "Terminated")],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_elsewhere_is_raised_where_it_lands(tmp_path, sig, raised):
    out, _ = run_block(f"""
        os.kill(os.getpid(), {int(sig)})
        for _ in range(1000):
            pass
        ran("after")
    """, tmp_path)
    assert out == [raised]


def test_a_deferred_request_stops_an_atomic_output_before_it_is_written(tmp_path):
    out, err = run_block("""
        with atomic_output(os.environ["OUT"]) as tmp:
            tmp.write_text("written")
            Finalized(signal.SIGINT)
            ran("filled")
        ran("committed")
    """, tmp_path)
    assert out == ["filled", "KeyboardInterrupt"]
    assert list(tmp_path.iterdir()) == [], "the output (or its temp file) is there"
    assert "Traceback" not in err


def test_a_deferred_request_is_raised_when_the_block_ends(tmp_path):
    out, _ = run_block("""
        Finalized(signal.SIGINT)
        ran("work-done")
    """, tmp_path)
    assert out == ["work-done", "KeyboardInterrupt"]


def test_a_second_signal_keeps_the_first_ones_meaning(tmp_path):
    out, _ = run_block("""
        Finalized(signal.SIGTERM)
        Finalized(signal.SIGINT)
        check()
    """, tmp_path)
    assert out == ["Terminated"]


def test_an_inherited_ignored_sigint_stays_ignored(tmp_path):
    out, _ = run_block("""
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        check()
        ran("after")
    """, tmp_path, ignore_sigint=True)
    assert out == ["after", "block", "ended"]


def test_the_previous_handlers_are_back_after_the_block_and_check_is_quiet_outside_it(tmp_path):
    out, _ = run_block("""
        pass
    """, tmp_path)
    assert out == ["block", "ended"]
    script = ("import signal\nfrom tokenizer.stop import check, stop_signals\n"
              "mine = lambda s, f: None\nsignal.signal(signal.SIGTERM, mine)\n"
              "try:\n    with stop_signals():\n        raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    pass\n"
              "assert signal.getsignal(signal.SIGTERM) is mine\n"
              "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
              "check()\nprint('ok')\n")
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "ok", p.stderr
