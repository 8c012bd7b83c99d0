"""The command line of `python -m experiments.compare` (see docs/compare.md): parse, build, print the report's
headline (which group won, by how much, how sure: headline.py) and then the path of report.html.

Every user error is one line `compare: error: ...` on stderr with exit status 2, no traceback; a value out of its
range (`--smooth 1`, `--sesoi 0`) is refused by the parser, before any run is read.
Not handled here: anything the report does (report.py).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from experiments.compare.headline import read_headline
from experiments.compare.report import X_KEYS, build_report, check_out_dir
from experiments.compare.runs import Run, RunsError
from experiments.compare.wandb_pull import pull_runs
from tokenizer.cli_args import OneLineParser, UsageError, fail, float_in, non_empty, positive_float


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m experiments.compare",
                      description="Compare archlab runs grouped by config; writes an offline report.html.")
    p.add_argument("paths", nargs="*", type=non_empty, help="run dirs, sweep dirs (searched recursively) or globs")
    p.add_argument("--by", nargs="+", type=non_empty, metavar="KEY", help="dotted config keys to group by "
                   "(default: every key that differs between runs, except seeds and per-run noise)")
    p.add_argument("--metric", type=non_empty, default="val/loss",
                   help="metric for curves and final/best tables (default val/loss)")
    p.add_argument("--x", default="tokens", choices=X_KEYS, help="x axis of the curves (default tokens)")
    p.add_argument("--out", type=non_empty, help="output dir (default <common sweep dir>/report or ./report); a "
                   "rebuild deletes only the files its report_manifest.json lists")
    p.add_argument("--allow-mixed", action="store_true", help="allow runs of different experiments")
    p.add_argument("--baseline", type=non_empty, metavar="LABEL_OR_INDEX", help="the group every other group is "
                   "compared with: its label or 0-based index (default: the first group)")
    p.add_argument("--smooth", type=float_in(0, 1, high_open=True), default=0.0, metavar="ALPHA", help="EMA smoothing of the train-loss "
                   "curves in [0, 1), wandb's time-weighted EMA (default 0 = off)")
    p.add_argument("--sesoi", type=positive_float, metavar="DELTA", help="smallest difference of interest, in "
                   "--metric's units (e.g. 0.02 nats): the tables give the seeds per group 80%% power needs against "
                   "it (default: no such column)")
    p.add_argument("--analysis", action="store_true", help="add the Analysis section: attention entropy per layer "
                   "over training, and the logit lens and per-head attention entropy of each completed run's best "
                   "checkpoint (loads the weights; CPU)")
    p.add_argument("--wandb-group", type=non_empty,
                   help="also pull the runs of this wandb group (needs network + login)")
    p.add_argument("--wandb-project", type=non_empty,
                   help="wandb project (entity/project or project) for --wandb-group")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code (0 ok, 2 bad input)."""
    try:
        args = _parser().parse_args(argv)
    except UsageError as e:
        return fail("compare", e)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    try:
        runs: list[Run] = []
        if args.out is not None:
            check_out_dir(args.out, args.metric, args.analysis)  # before any run is read (wandb runs included)
        if args.wandb_group:
            runs = pull_runs(args.wandb_group, args.wandb_project)
        elif args.wandb_project:
            raise RunsError("--wandb-project needs --wandb-group")
        if not args.paths and not runs:
            raise RunsError("give at least one run dir, sweep dir or glob (or --wandb-group)")
        cmd = "python -m experiments.compare " + " ".join(argv if argv is not None else sys.argv[1:])
        report = build_report(args.paths, args.out, by=args.by, metric=args.metric, x=args.x,
                              allow_mixed=args.allow_mixed, runs=runs, command=cmd, baseline=args.baseline,
                              smooth=args.smooth, analysis=args.analysis, sesoi=args.sesoi)
    except RunsError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    for line in read_headline(report):
        print(line)
    print(report)
    return 0
