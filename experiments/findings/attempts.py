"""A finding's sweep wall clock across attempts, kept in its finding.json so that no attempt goes uncounted.

    with Attempt(sweep_dir, meta) as attempt:   # counts this attempt, folds in a killed earlier one, beats
        rc, wall = run_sweep(argv)              # (finding.json rewritten every HEARTBEAT_S seconds meanwhile)
        attempt.close(rc, wall)                 # its seconds added to wall_s, finding.json written
    meta = settled(meta)                        # --from-sweep: an attempt still open was killed; count it

finding.json keys this module owns:
    wall_s    seconds of every attempt added: closed ones as measured, killed ones up to their last heartbeat
    attempts  attempts started (stopped, failed or killed ones included)
    killed    [{"since", "wall_s", "source"}]: attempts that ended without this command seeing it (SIGKILL, the
              machine or the session going away); each counted up to its last heartbeat, at most HEARTBEAT_S short
    running   {"since", "wall_s", "source"} while an attempt runs (its heartbeat); never left in a closed file
An attempt a findings command killed before this module (no `running` entry) left no trace and is not counted;
`source` says how a killed attempt's seconds were measured ("heartbeat" unless a person reconstructed them and
said from what). Not handled: two findings commands on one sweep dir at once (the later one's heartbeat wins).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

HEARTBEAT_S = 60.0
HEARTBEAT = "heartbeat"


def settled(meta: dict[str, Any]) -> dict[str, Any]:
    """meta with an open attempt (`running`, left by a killed command) moved into `killed` and its seconds into
    wall_s; meta itself is not changed."""
    out = dict(meta)
    running = out.pop("running", None)
    if running:
        out["killed"] = [*out.get("killed", []), running]
        out["wall_s"] = float(out.get("wall_s") or 0.0) + float(running.get("wall_s") or 0.0)
    return out


class Attempt:
    """One attempt at a sweep: counted in meta["attempts"] when it starts, its elapsed seconds written to
    finding.json every `every` seconds until close() (or the end of the `with` block) adds them to wall_s."""

    def __init__(self, sweep_dir: Path, meta: dict[str, Any], every: float | None = None):
        self.path, self.every = Path(sweep_dir) / "finding.json", every or HEARTBEAT_S
        self.meta = settled(meta)
        self.meta["attempts"] = int(self.meta.get("attempts") or 0) + 1
        self.t0 = time.perf_counter()
        self.meta["running"] = {"since": time.strftime("%Y-%m-%d_%H-%M-%S"), "wall_s": 0.0, "source": HEARTBEAT}
        self._stop, self._lock = threading.Event(), threading.Lock()
        self._thread = threading.Thread(target=self._beat, name="findings-heartbeat", daemon=True)

    def __enter__(self) -> "Attempt":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._write()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_beating()

    def close(self, rc: int, wall: float) -> dict[str, Any]:
        """The attempt ended with exit status rc after wall seconds: its seconds join wall_s; the meta written."""
        self._stop_beating()
        with self._lock:
            self.meta.pop("running", None)
            self.meta.update({"train_rc": rc, "wall_s": float(self.meta.get("wall_s") or 0.0) + wall})
            self._write()
        return self.meta

    def _stop_beating(self) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            with self._lock:
                if "running" in self.meta:
                    self.meta["running"]["wall_s"] = time.perf_counter() - self.t0
                    self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")  # a kill mid-write leaves the previous file whole
        tmp.write_text(json.dumps(self.meta, indent=2, default=str) + "\n")
        tmp.replace(self.path)


def killed_text(meta: dict[str, Any]) -> str:
    """"" when no attempt was killed, else e.g. "; 1 of them killed without notice (...), counted up to its last
    heartbeat (at most 60 s short)", naming how each killed attempt not measured by the heartbeat was counted."""
    killed = meta.get("killed") or []
    if not killed:
        return ""
    beats = sum(1 for k in killed if k.get("source", HEARTBEAT) == HEARTBEAT)
    parts = ([f"{beats if len(killed) > 1 else ''} counted up to {'its' if beats == 1 else 'their'} last heartbeat "
              f"(at most {HEARTBEAT_S:.0f} s short)".lstrip()] if beats else [])
    parts += [f"one counted as {k['source']}" for k in killed if k.get("source", HEARTBEAT) != HEARTBEAT]
    return f"; {len(killed)} of them killed without notice (the machine or the session went away): " + ", ".join(parts)
