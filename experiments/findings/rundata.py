"""A finding's runs as data: the one owner of docs/findings/<name>/data.json, from which its doc is built.

    data = export(sweep_dir, by=f.by, meta=meta, extra=extra)   # a finished sweep dir -> the data (a dict)
    write(data, path); data = load(path, name)                   # the file (load: DataError, one line)
    materialize(data, dir)                                       # a sweep dir again, as experiments.compare reads it
    dumps(export(materialize(data, d))) == dumps(data)           # the round trip

Format (version 1; JSON as Python's json writes it, so a diverged run's NaN / Infinity appear as those tokens):
    {"format": "archlab-finding-data", "version": 1, "name": the finding,
     "by": its group keys (experiments.compare --by),
     "curve": {"max_points", "round_digits", "keys", "points": the key patterns kept as curves and as points}: how
              the curves were cut (curve_data.py),
     "meta": the sweep's finding.json as the findings command recorded it (the command, launcher, wall time and
             attempts, the setup check at run time and when judged, the data used with its sha256, provenance.py's
             record, "generated"), less what the doc build derives from the runs again (DERIVED),
     "extra": the finding's own measurement's result, or null,
     "tuning": the sweep's tuning.json as it is (every field), or null for an untuned sweep,
     "config": the flat config keys every run shares with the same value; "summary": the same for summary.json,
     "runs": [one per run dir, in experiments.compare's order:
        {"dir": its dir name, "arm": its --by values, "seed", "lr" (the tuned key, else optim.lr), "phase" (from
         tuning.json: a run listed in "runs" is "tuning", in "confirm_runs" "confirm", in "finals" "final", in any
         other list of runs that list's name less "_runs"; an untuned sweep's runs are "final"; null: in none),
         "status",
         "config": its flat config keys that are not in the shared config (null: the run wrote none),
         "summary": its summary.json keys not in the shared summary (null: no summary.json), every metric it holds
                    (final and best val, test, tokens, wall_time_s, device, num_threads, extrap, ...) but RUN_LOCAL,
         "curve": its metrics.jsonl cut to a few dozen points per kind (curve_data.py)}]}
arm, seed, lr, phase and status are read again from config, summary and tuning.json by export (they say what a run
is at a glance); materialize writes config.yaml (nested), summary.json, metrics.jsonl, tuning.json and finding.json
(meta with "by", "extra", "curve_keys" and "curve_points") and nothing else.
Not handled: checkpoints, tokenizers, wandb files and logs (not data); runs outside the sweep dir.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.curve_data import CURVE_KEYS, MAX_POINTS, POINT_KEYS, ROUND_DIGITS, decimate, expand

FORMAT = "archlab-finding-data"
VERSION = 1
DATA_NAME = "data.json"
RUN_LOCAL = ("run_dir", "overrides")  # summary keys not kept: a machine path; the overrides the config holds
# finding.json keys the doc build computes from the runs again (judge.py, from_data.py): never in the data
DERIVED = ("by", "config", "budget_text", "device", "verdict", "key_number", "doc", "tuning", "protocol", "seen",
           "cost", "pipeline", "threads", "extra", "curve_keys", "curve_points", "running")
PHASES = {"runs": "tuning", "finals": "final", "confirm_runs": "confirm"}  # tuning.json's lists of runs -> phase
FIGURE_KEYS = {"grad_norm_per_layer.png": (r"grad_norm/layer_\d+",)}  # curve keys a report figure needs beyond CURVE_KEYS
LR_KEY = "optim.lr"


class DataError(ValueError):
    """A data file that cannot be used as asked; the message is one line."""


def curve_keys(figures: Sequence[str] = ()) -> list[str]:
    """CURVE_KEYS plus the keys the finding's figures draw (FIGURE_KEYS)."""
    return [*CURVE_KEYS, *(k for f in figures for k in FIGURE_KEYS.get(f, ()))]


def _plain(obj: Any) -> Any:
    """obj as JSON gives it back (tuples -> lists, numpy scalars -> numbers, anything else -> str)."""
    from experiments.rundir.layout import to_json

    def default(v: Any) -> Any:
        try:
            return to_json(v)
        except TypeError:
            return str(v)

    return json.loads(json.dumps(obj, default=default))


def _shared(rows: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The keys every row holds with one value (rows that are None left out); {} for no rows."""
    present = [r for r in rows if r is not None]
    if not present:
        return {}
    first = present[0]
    return {k: v for k, v in sorted(first.items())
            if all(k in r and json.dumps(r[k], sort_keys=True) == json.dumps(v, sort_keys=True) for r in present[1:])}


def _diff(row: dict[str, Any] | None, shared: dict[str, Any]) -> dict[str, Any] | None:
    return None if row is None else {k: v for k, v in sorted(row.items()) if k not in shared}


def _phases(tuning: dict[str, Any] | None) -> dict[str, str]:
    """{run dir: phase} from every list of runs in tuning.json."""
    out: dict[str, str] = {}
    for field, value in (tuning or {}).items():
        if isinstance(value, list) and value and all(isinstance(r, dict) and "run_dir" in r for r in value):
            for r in value:
                out.setdefault(str(r["run_dir"]), PHASES.get(field, field.removesuffix("_runs")))
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def export(sweep_dir: str | Path, by: Sequence[str] | None = None, meta: dict[str, Any] | None = None,
           extra: Any = None, keys: Sequence[str] | None = None, points: Sequence[str] | None = None
           ) -> dict[str, Any]:
    """The data of the sweep in sweep_dir (module docstring). by / meta / extra / keys / points default to what the
    sweep's finding.json holds ("by", itself, "extra", "curve_keys", "curve_points"), else CURVE_KEYS / POINT_KEYS."""
    from experiments.compare.runs import discover_runs
    from experiments.rundir.layout import RunDir

    sweep_dir = Path(sweep_dir)
    recorded = _read_json(sweep_dir / "finding.json") or {}
    by = list(recorded.get("by") or [] if by is None else by)
    meta = recorded if meta is None else meta
    extra = recorded.get("extra") if extra is None and "extra" in recorded else extra
    keys = list(recorded.get("curve_keys") or CURVE_KEYS if keys is None else keys)
    points = list(recorded.get("curve_points") or POINT_KEYS if points is None else points)
    tuning = _read_json(sweep_dir / "tuning.json")
    phases = _phases(tuning)
    lr_key = (tuning or {}).get("key") or LR_KEY
    runs = []
    for path in discover_runs([sweep_dir]):
        rd = RunDir(path)
        config = rd.read_config()
        summary = rd.read_summary()
        flat = None if config is None else _flat(config)
        summary = None if summary is None else {k: v for k, v in summary.items() if k not in RUN_LOCAL}
        runs.append((path.relative_to(sweep_dir.resolve()).as_posix(), flat, summary, rd.read_metrics()))
    config_base = _shared([r[1] for r in runs])
    summary_base = _shared([r[2] for r in runs])
    rows = []
    for name, flat, summary, lines in runs:
        cfg, summ = flat or {}, summary or {}
        rows.append({"dir": name, "arm": {k: cfg[k] for k in by if k in cfg},
                     "seed": summ.get("seed", cfg.get("seed")), "lr": cfg.get(lr_key),
                     "phase": phases.get(name) if tuning else "final", "status": summ.get("status") or "running",
                     "config": _diff(flat, config_base), "summary": _diff(summary, summary_base),
                     "curve": decimate(lines, keys, points)})
    return _plain({"format": FORMAT, "version": VERSION, "name": (meta or {}).get("name"), "by": by,
                   "curve": {"max_points": MAX_POINTS, "round_digits": ROUND_DIGITS, "keys": keys, "points": points},
                   "meta": {k: v for k, v in (meta or {}).items() if k not in DERIVED}, "extra": extra,
                   "tuning": tuning, "config": config_base, "summary": summary_base, "runs": rows})


def _flat(config: dict[str, Any]) -> dict[str, Any]:
    from experiments.rundir.tracking import flatten_config

    return dict(sorted(flatten_config(config).items()))


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """A flat config (dotted keys) as the nested mapping config.yaml holds."""
    out: dict[str, Any] = {}
    for key in sorted(flat):
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = flat[key]
    return out


def materialize(data: dict[str, Any], out_dir: str | Path) -> Path:
    """Write the data as a sweep dir under out_dir (created; must not hold files already): one dir per run
    (config.yaml, summary.json, metrics.jsonl), tuning.json, finding.json. Returns out_dir."""
    import yaml

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if any(out_dir.iterdir()):
        raise DataError(f"{out_dir} is not empty: the data is materialized into a new dir only")
    for run in data["runs"]:
        d = out_dir / run["dir"]
        d.mkdir(parents=True)
        if run["config"] is not None:
            (d / "config.yaml").write_text(yaml.safe_dump(_nested({**data["config"], **run["config"]}),
                                                          sort_keys=False))
        if run["summary"] is not None:
            summary = {**data["summary"], **run["summary"]}
            (d / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        (d / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in expand(run["curve"])))
    if data.get("tuning") is not None:
        (out_dir / "tuning.json").write_text(json.dumps(data["tuning"], indent=2) + "\n")
    finding = {**data["meta"], "by": data["by"], "extra": data["extra"], "curve_keys": data["curve"]["keys"],
               "curve_points": data["curve"]["points"]}
    (out_dir / "finding.json").write_text(json.dumps(finding, indent=2) + "\n")
    return out_dir


def dumps(data: dict[str, Any]) -> str:
    """The data file's text: one top-level key a line, one run a line (a rerun's diff reads run by run)."""
    def one(v: Any) -> str:
        return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

    head = [f"{one(k)}:{one(v)}" for k, v in data.items() if k != "runs"]
    runs = ",\n".join(one(r) for r in data.get("runs", []))
    return "{" + ",\n".join([*head, f'"runs":[\n{runs}\n]']) + "}\n"


def write(data: dict[str, Any], path: str | Path) -> Path:
    """dumps(data) into path (its dir created), atomically."""
    from tokenizer.outputs import atomic_write

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(data)
    atomic_write(path, lambda f: f.write(text), binary=False)
    return path


def load(path: str | Path, name: str | None = None) -> dict[str, Any]:
    """The data in `path`, checked: its format and version, and (with `name`) that it is that finding's;
    DataError (one line) otherwise. Reads nothing else and writes nothing."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"no data file {path}" + (f" for {name}" if name else "")) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"{path} is not readable as JSON ({type(e).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"{path} is not a finding's data file (no \"format\": \"{FORMAT}\")")
    if data.get("version") != VERSION:
        raise DataError(f"{path} is data version {data.get('version')!r}; this code reads version {VERSION} only")
    if name is not None and data.get("name") != name:
        raise DataError(f"{path} holds the data of finding {data.get('name')!r}, not {name!r}")
    problem = _problem(data)
    if problem:
        raise DataError(f"{path}: {problem}")
    return data


def _problem(data: dict[str, Any]) -> str | None:
    """What makes a version-1 document unusable, None when nothing does."""
    shapes = {"by": list, "curve": dict, "meta": dict, "config": dict, "summary": dict, "runs": list}
    for key, kind in shapes.items():
        if not isinstance(data.get(key), kind):
            return f"\"{key}\" is missing or not a JSON {'array' if kind is list else 'object'}"
    if not all(isinstance(data["curve"].get(k), list) for k in ("keys", "points")):
        return "\"curve\" lacks its \"keys\" or \"points\" list"
    if not data["runs"]:
        return "it holds no run"
    for i, run in enumerate(data["runs"]):
        if not isinstance(run, dict) or not isinstance(run.get("dir"), str) or not run["dir"] or \
                run["dir"].startswith(("/", "..")) or ".." in Path(run["dir"]).parts:
            return f"run {i} has no usable \"dir\" (a relative path inside the sweep)"
        for key in ("config", "summary"):
            if run.get(key) is not None and not isinstance(run[key], dict):
                return f"run {run['dir']}: \"{key}\" is not an object or null"
        if not isinstance(run.get("curve"), dict):
            return f"run {run['dir']}: \"curve\" is not an object"
    if data.get("tuning") is not None and not isinstance(data["tuning"], dict):
        return "\"tuning\" is not an object or null"
    return None
