"""The run dir: its layout and file formats (the one owner), checkpoints, and tracking (local files + wandb).

    layout.py      RunDir: which files a run writes, reading and writing them atomically
    checkpoint.py  weights (safetensors) and training state: save, load, last / best
    tracking.py    metrics.jsonl and summary.json, mirrored to wandb when asked
    lock.py        RunDirLock: one writer per run dir (a second process is refused in one line)
    snapshot.py    DirSnapshot: a dir as it was (bytes, modes, mtimes), put back after a run that never started
"""
