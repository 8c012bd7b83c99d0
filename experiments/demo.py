"""`make demo`: train a BPE tokenizer on the embedded corpus, run a small position-encoding sweep, build its report.

    python -m experiments.demo                    # 4 position encodings x 3 seeds, tiny model, CPU
    python -m experiments.demo --quick            # 2 encodings x 1 seed x 50k tokens: seconds, no intervals
    python -m experiments.demo --out runs/demo --pos learned,rope,alibi --seeds 0,1 --jobs 2

Everything runs offline on the embedded corpus (tokenizer.corpus). The runs are the same as
`python -m experiments.train -m experiment=demo` (conf/experiment/demo.yaml) and land in
`multirun/demo/<time>/<i>_model.pos=<kind>,seed=<s>/` (seed-major; no `,seed=` with one seed), so
`python -m experiments.compare <that dir>` works on them too (the last line prints that command with the
interpreter that ran the demo, `.venv/bin/python` under `make demo`, so it works as printed outside the venv).
Three seeds per encoding give the report's differences paired 95% intervals; with one seed (--quick, --seeds 0) it
says so before the sweep.
Runs go `--jobs` at a time (default: 2 on a machine with >= 2 cores), each with cpu_count / jobs torch threads.
The tokenizer comes from the shared cache (ARCHLAB_CACHE or ~/.cache/archlab), so a second demo skips training it.
stdout holds the results (tokenizer stats, one line per run, the report's headline and path); stderr only
warnings, and on a terminal the progress bars (tokenizer training, the sweep), which a log or a pipe does not get.
Not handled: GPUs in parallel jobs (each job takes the default device), wandb (pass --wandb for offline logging).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from experiments.compare import build_report
from experiments.compare.headline import read_headline
from experiments.config.check import to_plain, validate
from experiments.config.compose import compose_config
from experiments.config.errors import ConfigError
from experiments.data.cache import get_token_data, get_tokenizer
from experiments.data.corpus import load_corpus
from experiments.python_command import python_command
from experiments.rundir.layout import RunStatus, RunSummary
from experiments.run.budget import max_steps_cap
from experiments.run.train import train
from tokenizer.progress import progress_bar

QUICK = {"pos": "learned,rope", "seeds": "0", "tokens": 50_000, "extra": ["train.eval_interval=20", "train.eval_batches=5",
                                                            "train.extrap_max_tokens=4096"]}


def sweep_defaults() -> tuple[str, str]:
    """(encodings, seeds) of conf/experiment/demo.yaml's sweep: 4 encodings x 3 seeds, the fewest seeds whose paired
    t-intervals (2 df) resolve the demo's larger differences in about a minute of a 2-core CPU."""
    params = compose_config(["experiment=demo"], return_hydra_config=True).hydra.sweeper.params
    return str(params["model/pos"]), str(params["seed"])


def _run_one(overrides: list[str]) -> dict[str, Any]:
    """One sweep point in a worker process (top level so the spawn pool can pickle it)."""
    return train(compose_config(overrides))


def tokenizer_stats(cache_dir: str, vocab_size: int) -> dict[str, Any]:
    """Train (or fetch from the cache) the demo's tokenizer on the embedded corpus and measure it."""
    c = to_plain(compose_config(["experiment=demo", f"data.cache_dir='{cache_dir}'", f"tokenizer.vocab_size={vocab_size}"]))
    t0 = time.perf_counter()
    corpus = load_corpus(c["data"])
    tok, info = get_tokenizer(corpus, c["tokenizer"], cache_dir, progress=sys.stderr.isatty())
    data = get_token_data(corpus, tok, cache_dir)
    ids = range(256, tok.vocab_size)
    longest = sorted((tok.decode_bytes([i]) for i in ids if i not in tok.special_tokens.values()), key=len, reverse=True)
    return {"vocab_size": tok.vocab_size, "merges": len(tok.merges), "cached": info["cached"],
            "train_seconds": info["train_seconds"], "seconds": time.perf_counter() - t0, "path": info["path"],
            "corpus": corpus.name, "train_bytes": data.meta["train_bytes"], "train_tokens": data.meta["train_tokens"],
            "val_bytes_per_token": data.bytes_per_token, "longest": longest[:10]}


def print_tokenizer_stats(s: dict[str, Any]) -> None:
    how = f"cached, trained earlier in {s['train_seconds']:.1f}s" if s["cached"] else f"trained in {s['train_seconds']:.1f}s"
    print(f"tokenizer: byte-level BPE on the embedded corpus ({s['corpus']}, {s['train_bytes'] / 1e6:.2f} MB of training text)")
    print(f"  vocab size      {s['vocab_size']} (256 bytes + {s['merges']} merges + special tokens)  [{how}]")
    print(f"  bytes/token     {s['train_bytes'] / s['train_tokens']:.2f} on the training split, "
          f"{s['val_bytes_per_token']:.2f} on validation")
    print("  longest tokens  " + ", ".join(repr(b.decode("utf-8", errors="replace")) for b in s["longest"]))
    print(f"  saved at        {s['path']}")


def say(bar: Any, line: str) -> None:
    """A result line on stdout; above the progress bar when there is one (tqdm on a terminal: stderr)."""
    if hasattr(bar, "fp"):  # tqdm: clears its bar, prints, redraws
        bar.write(line, file=sys.stdout)
    else:
        print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="sweep directory (default multirun/demo/<time>)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK['pos']} only, {QUICK['tokens']:,} tokens each")
    p.add_argument("--pos", default=None, help="comma-separated position encodings (default: conf/experiment/demo.yaml)")
    p.add_argument("--tokens", type=int, default=None, help="training tokens per run (default: conf/experiment/demo.yaml)")
    p.add_argument("--seeds", default=None, help="comma-separated seeds, each run with every encoding (default: "
                                                 f"conf/experiment/demo.yaml; --quick: {QUICK['seeds']})")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="runs in parallel")
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--cache-dir", default=os.environ.get("ARCHLAB_CACHE", "~/.cache/archlab"))
    p.add_argument("--wandb", action="store_true", help="log to wandb in offline mode (default: local files only)")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run, e.g. model.norm=post")
    args = p.parse_args(argv)
    args.cache_dir = str(Path(args.cache_dir).expanduser())  # Hydra's override grammar has no `~`


    pos_default, seeds_default = (QUICK["pos"], QUICK["seeds"]) if args.quick else sweep_defaults()
    pos = (args.pos or pos_default).split(",")
    try:
        seeds = [int(x) for x in (args.seeds or seeds_default).split(",")]
    except ValueError:
        print(f"config error: --seeds: comma-separated integers, got {args.seeds!r}", file=sys.stderr)
        return 2
    out = args.out or Path("multirun") / "demo" / time.strftime("%Y-%m-%d_%H-%M-%S")
    # seed-major (as conf/experiment/demo.yaml's sweep), so the encodings of one seed finish together; the dir names
    # are Hydra's (`seed=` only when several seeds are swept)
    runs = [(kind, seed) for seed in seeds for kind in pos]
    labels = [f"model.pos={kind}" + (f",seed={seed}" if len(seeds) > 1 else "") for kind, seed in runs]
    run_dirs = [out / f"{i}_{label}" for i, label in enumerate(labels)]
    jobs = max(1, min(args.jobs, len(runs)))
    threads = max(1, (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) // jobs)
    common = ["experiment=demo", f"data.cache_dir='{args.cache_dir}'",
              f"tokenizer.vocab_size={args.vocab_size}", "logger=wandb" if args.wandb else "logger=disabled",
              "train.progress=false", f"train.num_threads={threads}"]
    if args.quick:
        common += [f"train.tokens={QUICK['tokens']}", *QUICK["extra"]]
    if args.tokens:
        common.append(f"train.tokens={args.tokens}")
    common += args.overrides
    points = [[*common, f"model/pos={kind}", f"seed={seed}", f"train.run_dir='{d}'"] for (kind, seed), d in zip(runs, run_dirs)]
    try:
        max_steps_cap()  # ARCHLAB_MAX_STEPS, when set, must be an integer >= 1
        for overrides in points:  # every config error before any work
            validate(compose_config(overrides))
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # Hydra's own errors (unknown option / key)
        print(f"config error: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    print_tokenizer_stats(tokenizer_stats(args.cache_dir, args.vocab_size))
    print(f"\nsweep: {len(pos)} position encodings ({', '.join(pos)}) x {len(seeds)} seed{'s' * (len(seeds) > 1)}, "
          f"tiny model, {jobs} at a time -> {out}/", flush=True)
    if len(seeds) < 2:
        print("  one seed per encoding: the report's differences have no confidence interval (n=1); "
              "--seeds 0,1,2 gives each one", flush=True)


    summaries: dict[str, dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(_run_one, overrides): label for label, overrides in zip(labels, points)}
        with progress_bar(sys.stderr.isatty(), total=len(futures), unit="run", desc="demo sweep", interval=0) as bar:
            for fut in as_completed(futures):
                kind = futures[fut]
                try:
                    s = fut.result()
                except Exception as e:  # one failed run does not hide the others
                    s = RunSummary(RunStatus.FAILED, error=f"{type(e).__name__}: {e}").to_dict()
                summaries[kind] = s
                loss = s.get("final_val_loss")
                say(bar, f"  {kind:<18} {s['status']:<9} val/loss {loss:.4f}  ({s.get('wall_time_s', 0):.0f}s, "
                         f"{s.get('tokens', 0):,} tokens)" if isinstance(loss, float) else f"  {kind:<11} {s['status']} {s.get('error', '')}")
                bar.update(1)

    print(f"\nruns: {out}/  ({time.perf_counter() - t0:.0f}s in all)")
    try:
        report = build_report([str(d) for d in run_dirs if (d / "summary.json").exists()], out / "report", by=["model.pos.kind"])
        print(*read_headline(report), f"report: {report}", sep="\n")  # which group won, by how much, how sure
    except Exception as e:  # the runs are still there; say how to build the report by hand
        print(f"report not built ({type(e).__name__}: {e}); run dirs:")
        for d in run_dirs:
            print(f"  {d}")
    print(f"compare by hand: {python_command()} -m experiments.compare {out}")
    return 0 if all(s.get("status") == RunStatus.COMPLETED for s in summaries.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
