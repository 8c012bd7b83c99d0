"""The comparison report, `python -m experiments.compare`: runs grouped by config, as one offline HTML report.

    python -m experiments.compare multirun/pos_encodings/2026-01-01_12-00-00 --by model.pos.kind
    python -m experiments.compare 'outputs/**/run_*' --metric val/bpb --x flops --out report/

    from experiments.compare import build_report
    html_path = build_report(["multirun/pos_encodings/2026-01-01_12-00-00"], out_dir=None, by=None)

One of the two apps of `experiments/` (the other, training runs and sweeps, is experiments/run/train.py and friends).
It reads only run dirs (through experiments/rundir/layout.py), so it works offline; `--wandb-group` pulls a wandb group
instead. Modules, one concept each:

    runs.py        find run dirs, read them into `Run` records (status, reason): read_run / read_runs
    grouping.py    group runs by the config keys that differ; labels and colours
    stats.py       the numbers: series, interpolation, mean ± std bands, EMA, per-group / per-run tables, budgets
    significance.py  t-intervals of a difference (paired by seed / Welch), verdict, Holm's correction, seeds needed
                   for 80% power against a stated smallest effect (--sesoi)
    pairwise.py    every pair of groups on the final metric, Holm-corrected, and the ranking
    headline.py    the report's first lines: which group won, by how much, how sure (read_headline)
    comparison.py  the pairwise view and every group against the baseline group, per metric: comparison.json
                   (scipy, imported on use)
    tuning.py      a tuned sweep (tuning.json): its final runs only, the tuned/untuned label, the tuning table;
                   basin.py draws its basin.png (final loss vs lr per arm)
    figures.py     which figures apply and their data;  plots.py  drawing them (matplotlib)
    coord.py       coord.png: the coordinate check of a sweep over d_model (act_rms per layer vs width)
    analysis.py    the Analysis section (--analysis): attention entropy over training, logit lens, per-head entropy
    tables.py      table model + number formatting;  markdown.py  report.md;  html.py  report.html
    outdir.py      the out dir: checks before any run is read, report_manifest.json (a rebuild deletes only its own files)
    report.py      build_report, tying the above together;  cli.py  the command line;  wandb_pull.py  runs from wandb

Importing this package is cheap: matplotlib and scipy are imported only when a report is built.
"""

from experiments.compare.cli import main
from experiments.compare.grouping import (
    MISSING,
    SHAPE_KEYS,
    Group,
    check_keys,
    default_group_keys,
    differing_keys,
    format_value,
    group_runs,
    is_noise_key,
    short_key,
)
from experiments.compare.report import X_KEYS, available_metrics, build_report, default_out_dir
from experiments.compare.runs import (
    EXCLUDED_STATUSES,
    Run,
    RunsError,
    check_single_experiment,
    discover_runs,
    flatten,
    natural_key,
    read_run,
    read_runs,
)
from experiments.compare.stats import (
    band,
    best_value,
    budgets,
    config_diff,
    count_label,
    ema,
    final_value,
    finite_prefix,
    higher_is_better,
    interpolate,
    mean_std,
    run_extrap,
    run_rows,
    series,
    stat_runs,
    summarize,
)


__all__ = [
    "EXCLUDED_STATUSES", "MISSING", "SHAPE_KEYS", "X_KEYS", "Group", "Run", "RunsError", "available_metrics", "band",
    "best_value", "budgets", "build_report", "check_keys", "check_single_experiment", "config_diff", "count_label",
    "default_group_keys", "default_out_dir", "differing_keys", "discover_runs", "ema", "final_value", "finite_prefix",
    "flatten", "format_value", "group_runs", "higher_is_better", "interpolate", "is_noise_key", "main", "mean_std",
    "natural_key", "read_run", "read_runs", "run_extrap", "run_rows", "series", "short_key", "stat_runs",
    "summarize",
]
