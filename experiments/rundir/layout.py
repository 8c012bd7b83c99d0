"""The run dir: the one owner of its layout, its file formats and the atomic write behind them.

    <run dir>/config.yaml      the fully resolved config (YAML)
    <run dir>/metrics.jsonl    one JSON object per line, appended as the run goes (a torn last line is skipped)
    <run dir>/summary.json     status + final numbers, replaced atomically (readers see old or new, never half)
    <run dir>/tokenizer.json   a copy of the run's tokenizer (the run is usable without the cache it came from)
    <run dir>/checkpoints/     step_<N>/{model.safetensors,state.pt}, best.safetensors (experiments/rundir/checkpoint.py)
    <run dir>/wandb/           offline wandb files, when wandb logged the run (+ wandb_run_id.txt, for resume)
    <run dir>/.hydra/          Hydra's own record of the composed config (Hydra writes it, not archlab)

Writers (the trainer, the tracker, the sweep callback) and readers (compare, the sweep callback, `load_run`) go
through this module instead of spelling file names or writing temp files themselves. The atomic write is the repo's
one, tokenizer.outputs.atomic_write (imported here for the writers that use it through this module): temp file
beside the target, fsync, rename; the file gets the mode a plain open() would give under the umask.

summary.json has one writer, `RunSummary` (its `status` one of `RunStatus`): `running` (written when the loop
starts; a run killed by SIGKILL keeps it), `completed`, `diverged` (non-finite loss/grad norm), `interrupted`
(Ctrl-C / SIGTERM, checkpoint saved; or a sweep stopped before the job began), `failed` (an exception or a config
error; `error` holds the reason). Readers (compare, findings) read the JSON dict, so runs from before load as they were.

Starting a run never replaces another run's files unless asked: `check_can_start` refuses a dir that already
holds any of the files a run writes, unless the caller resumes it (`train.resume=true`) or asked to replace it
(`train.overwrite=true`, which removes exactly the files a run writes and nothing else).
Two processes writing one run dir at once are prevented by experiments/rundir/lock.py (`.archlab.lock`, removed
when the run ends; not a run output).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from tokenizer.outputs import atomic_write  # the repo's one atomic file write (tokenizer/ cannot import us)

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CKPT_DIR = "checkpoints"
WANDB_DIR = "wandb"
WANDB_ID = "wandb_run_id.txt"
HYDRA_DIR = ".hydra"
TOKENIZER = "tokenizer.json"
# Everything a run writes into its dir (files and dirs); `overwrite` removes exactly these.
RUN_OUTPUTS = (CONFIG, METRICS, SUMMARY, TOKENIZER, CKPT_DIR, WANDB_DIR, WANDB_ID)
# A dir holding one of these is a run dir (compare, the sweep callback).
RUN_MARKERS = (SUMMARY, METRICS)



class RunStatus(StrEnum):
    """A run's status in summary.json; the members are the strings written (`RunStatus.COMPLETED == "completed"`)."""

    RUNNING = "running"          # written when the loop starts; a run killed by SIGKILL keeps it
    COMPLETED = "completed"      # trained for its whole budget
    DIVERGED = "diverged"        # a non-finite loss or grad norm: a result of the experiment, not a fault
    INTERRUPTED = "interrupted"  # Ctrl-C / SIGTERM (checkpoint saved), or a stopped sweep never started it
    FAILED = "failed"            # an exception or a config error; `error` says which
    REQUEUED = "requeued"        # a SLURM job warned of its time limit / preemption: checkpoint saved, job requeued
                                 # (it resumes by itself and then reads running, completed, ...)

    @classmethod
    def of(cls, value: object) -> RunStatus | None:
        """The status a summary's string names, None for anything else (an old or foreign summary)."""
        try:
            return cls(value)
        except ValueError:
            return None

    @property
    def has_result(self) -> bool:
        """completed | diverged: the run answered its question (a sweep or finding is judged on these)."""
        return self in (RunStatus.COMPLETED, RunStatus.DIVERGED)

    @property
    def ended_early(self) -> bool:
        """diverged | interrupted | failed: ended before its budget (never in compare's means; wandb exit code 1)."""
        return self in (RunStatus.DIVERGED, RunStatus.INTERRUPTED, RunStatus.FAILED)


class RunDirError(ValueError):
    """A run dir that cannot be used as asked; the message is one line that says what to do."""


# ---------------------------------------------------------------------------------------------------- JSON


def to_json(value: Any) -> Any:
    """json.dumps `default=` hook: numpy / torch scalars (anything with .item()), arrays, paths."""
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"value of type {type(value).__name__} is not JSON serializable")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """`obj` as indented JSON, written atomically."""

    def write(f) -> None:
        json.dump(obj, f, indent=2, default=to_json)
        f.write("\n")

    atomic_write(path, write, binary=False)


# ---------------------------------------------------------------------------------------------------- summary.json


@dataclass
class RunResults:
    """The numbers of a run that reached its training loop (the middle of summary.json)."""

    final_val_loss: float | None     # the last eval's val/loss (None: no eval yet)
    best_val_loss: float | None
    final_val_bpb: float | None      # bits per byte (None for seq2seq)
    best_val_bpb: float | None
    final_train_loss: float | None   # the last finite step's train/loss
    params: int
    non_embedding_params: int
    flops: float                     # training FLOPs so far (FLOPs per token x tokens)
    budget: str                      # what a sweep holds equal: flops | tokens | steps
    wall_time_s: float
    tokens_per_s: float | None
    mfu: float | None
    extrap: dict[str, float | None]  # extrap/<mode>/loss@<k>x of the last eval that measured it
    device: str
    world_size: int
    num_threads: int
    epochs: float | None = None      # passes over the train split so far (tokens / tokens a pass); None: seq2seq
    test: dict[str, float] | None = None        # test/loss, test/bpb, test/<name>/*: the final eval's (lm runs)
    evaluation: dict[str, Any] | None = None    # what the held-out sets were (experiments.run.tasks.held_out_record)


@dataclass
class RunSummary:
    """summary.json, the one writer of it (`RunDir.write_summary`). A job that never reached its loop (a refused
    config, a crash in setup, a sweep stopped before it) has no `results`: only who it is, the status and `error`.

    >>> RunSummary(RunStatus.FAILED, error="config error: ...", run_name="seed=1").to_dict()["status"]
    'failed'
    """

    status: RunStatus
    experiment: str | None = None
    run_name: str | None = None
    overrides: list[str] = field(default_factory=list)  # Hydra's job overrides, as typed
    seed: int | None = None
    steps: int = 0
    tokens: int = 0
    run_dir: str | None = None
    error: str | None = None              # why a run did not complete (failed / interrupted), one line
    diverged_at_step: int | None = None
    results: RunResults | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in the order summary.json has always had them."""
        if self.results is None:
            return {"status": str(self.status), "error": self.error, "experiment": self.experiment,
                    "run_name": self.run_name, "overrides": self.overrides, "seed": self.seed, "steps": self.steps,
                    "tokens": self.tokens, "run_dir": self.run_dir}
        r = self.results
        out = {"status": str(self.status), "experiment": self.experiment, "run_name": self.run_name,
               "overrides": self.overrides, "seed": self.seed, "final_val_loss": r.final_val_loss,
               "best_val_loss": r.best_val_loss, "final_val_bpb": r.final_val_bpb, "best_val_bpb": r.best_val_bpb,
               "final_train_loss": r.final_train_loss, "params": r.params, "non_embedding_params": r.non_embedding_params,
               "tokens": self.tokens, "steps": self.steps, "flops": r.flops, "budget": r.budget,
               "wall_time_s": r.wall_time_s, "tokens_per_s": r.tokens_per_s, "mfu": r.mfu, "extrap": r.extrap,
               "run_dir": self.run_dir, "device": r.device, "world_size": r.world_size, "num_threads": r.num_threads}
        if r.epochs is not None:  # LM runs (seq2seq and summaries written before epochs were counted have none)
            out["epochs"] = r.epochs
        for key in ("test", "evaluation"):  # only runs whose data holds out a test set (data.test_fraction, ...)
            if getattr(r, key):
                out[key] = getattr(r, key)
        if self.error is not None:
            out["error"] = self.error
        if self.diverged_at_step is not None:
            out["diverged_at_step"] = self.diverged_at_step
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        """Back from to_dict() (a summary of another format keeps the fields it shares; an unknown status stays a str)."""
        results = RunResults(**{f.name: d.get(f.name) for f in fields(RunResults)}) if "params" in d else None
        known = {f.name for f in fields(cls)} - {"status", "results"}
        status = d.get("status") or RunStatus.RUNNING
        return cls(status=RunStatus.of(status) or status, results=results,
                   **{k: v for k, v in d.items() if k in known})

    def with_status(self, status: RunStatus) -> RunSummary:
        return replace(self, status=status)


# ---------------------------------------------------------------------------------------------------- the layout


class RunDir:
    """Paths and readers/writers of one run dir. `RunDir(p).summary_path`, `.read_summary()`, ..."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CKPT_DIR

    @property
    def tokenizer_path(self) -> Path:
        return self.path / TOKENIZER

    @property
    def wandb_id_path(self) -> Path:
        return self.path / WANDB_ID

    @property
    def hydra_config_path(self) -> Path:
        return self.path / HYDRA_DIR / CONFIG

    # -- what is there

    def run_outputs(self) -> list[Path]:
        """The run-written files/dirs that exist now (RUN_OUTPUTS: config.yaml, metrics.jsonl, summary.json, ...)."""
        return [self.path / name for name in RUN_OUTPUTS if (self.path / name).exists()]

    def holds_run(self) -> bool:
        """True when a run has written anything here (a fresh Hydra dir holding only .hydra/ does not count)."""
        return bool(self.run_outputs())

    def is_run(self) -> bool:
        """A dir compare reads as a run: it holds summary.json or metrics.jsonl."""
        return any((self.path / m).is_file() for m in RUN_MARKERS)

    # -- readers (never raise on a half-written or missing file; a garbage summary reads as None)

    def read_summary(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.summary_path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def read_metrics(self) -> list[dict[str, Any]]:
        """All complete lines of metrics.jsonl, oldest first (torn or non-object lines are skipped)."""
        try:
            text = self.metrics_path.read_text()
        except OSError:
            return []
        rows = []
        for raw in text.splitlines():
            raw = raw.strip()
            if not raw:
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                rows.append(obj)
        return rows

    def read_config(self) -> dict[str, Any] | None:
        """config.yaml as a plain dict, else .hydra/config.yaml (interpolations resolved where possible), else None.

        Raises RunDirError for a file that is not YAML."""
        for candidate in (self.config_path, self.hydra_config_path):
            if not candidate.is_file():
                continue
            try:
                data = yaml.safe_load(candidate.read_text())
            except yaml.YAMLError as e:
                raise RunDirError(f"cannot parse {candidate}: {str(e).splitlines()[0]}") from None
            if candidate == self.hydra_config_path:
                try:
                    from omegaconf import OmegaConf  # only for this fallback: compare / findings stay without it

                    data = OmegaConf.to_container(OmegaConf.load(candidate), resolve=True)
                except Exception:  # noqa: BLE001 - ${hydra:...} outside Hydra: keep the raw values
                    pass
            return data if isinstance(data, dict) else {}
        return None

    # -- writers

    def write_config(self, config: dict[str, Any]) -> None:
        atomic_write(self.config_path, lambda f: yaml.safe_dump(config, f, sort_keys=False), binary=False)

    def write_summary(self, summary: RunSummary) -> None:
        """summary.json, replaced atomically (readers see the old one or the new one)."""
        atomic_write_json(self.summary_path, summary.to_dict())

    def append_metrics(self, row: dict[str, Any]) -> None:
        """One JSON line, flushed (not atomic: a kill mid-line leaves a torn last line that readers skip)."""
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.metrics_path, "a") as f:
            f.write(json.dumps(row, default=to_json) + "\n")

    def truncate_metrics(self, step: int) -> int:
        """Keep the complete lines with `step <= step` (rewritten atomically); returns how many were kept."""
        if not self.metrics_path.exists():
            return 0
        kept = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("step", -math.inf) <= step:
                kept.append(line)
        atomic_write(self.metrics_path, lambda f: f.write("".join(line + "\n" for line in kept)), binary=False)
        return len(kept)

    def remove_run_outputs(self) -> list[Path]:
        """Delete exactly the run-written files/dirs (RUN_OUTPUTS); anything else in the dir is kept."""
        removed = self.run_outputs()
        for p in removed:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
        return removed

    # -- starting a run

    def check_can_start(self, *, resume: bool, overwrite: bool) -> None:
        """Refuse to start a fresh run over another run's files (one-line RunDirError), unless resuming or overwriting.

        Also refuses a path that exists and is not a directory, and a dir that cannot be written. Does not delete
        anything: with `overwrite`, call `remove_run_outputs()` after this returns.
        """
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError(f"run dir {self.path} exists and is not a directory")
        if resume and overwrite:
            raise RunDirError("train.resume=true and train.overwrite=true contradict each other; pass one")
        if self.path.is_dir() and not os.access(self.path, os.W_OK | os.X_OK):
            raise RunDirError(f"run dir {self.path} is not writable")
        if not self.path.exists():
            parent = next((p for p in self.path.parents if p.exists()), None)
            if parent is not None and (not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK)):
                raise RunDirError(f"run dir {self.path} cannot be created: {parent} is not a writable directory")
        if resume or overwrite or not self.holds_run():
            return
        names = ", ".join(p.name for p in self.run_outputs())
        raise RunDirError(
            f"run dir {self.path} already holds a run ({names}); pass train.resume=true to continue it, "
            f"train.overwrite=true to replace it, or choose another dir"
        )


def is_run_dir(path: str | os.PathLike) -> bool:
    return RunDir(path).is_run()
