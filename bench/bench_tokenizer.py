"""Benchmark archlab's BPE trainer and encoder against Hugging Face `tokenizers` and `tiktoken`.

Not a test: prints markdown tables with ratios (ours / reference). Parts:

1. training wall time and peak RSS, ours vs HF `tokenizers` (BpeTrainer; GPT-2 split regex + ByteLevel), on the
   ~1 MB / ~10 MB / ~126 MB corpora of shared/data/bench, same vocab size, special token and thread/worker count.
   Every run is a fresh subprocess; peak RSS is that process tree's `ru_maxrss` from `os.wait4` (the largest
   single process: for ours, the main process; worker processes are reported separately in the JSON line).
   Also CS336's corpus.en at vocab 500.
2. encode throughput (MB/s, one process) of `Tokenizer.encode_ordinary` vs a `tiktoken.Encoding` built from the
   same ranks (ids are checked equal).
3. the slow reference trainer (tests/tokenizer/reference_train.py) vs ours on tinyshakespeare, vocab 2000
   (merges are checked equal).

    python bench/bench_tokenizer.py                      # everything (the 126 MB run takes minutes)
    python bench/bench_tokenizer.py --quick              # 1 MB + corpus.en + encode, no reference trainer
    python bench/bench_tokenizer.py --sizes 1mb,10mb --parts train
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EOT = "<|endoftext|>"
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
BENCH_FILES = ["eltec_eng_novels.txt", "gutenberg_novels_dhmit.txt", "sotu_addresses.txt",
               "wikitext2_raw_test.txt", "tinystories_v1_train_head.txt", "tinystories_v1_train_head_lowercase.txt"]
SIZES = {  # name -> files under bench/
    "1mb": ["wikitext2_raw_test.txt"],  # 1.3 MB; tinystories_v1_train_head (0.9 MB) cannot reach vocab 10k
    "10mb": ["sotu_addresses.txt"],
    "126mb": BENCH_FILES,
}


# ---------------------------------------------------------------- child processes (one training run each)


def child_train(trainer: str, files: list[str], vocab_size: int, workers: int) -> dict:
    """Runs in a fresh process: train once, return timings (imports excluded)."""
    import resource

    if trainer == "ours":
        sys.path.insert(0, str(REPO))
        from tokenizer import train_bpe

        t0 = time.perf_counter()
        tok = train_bpe(files, vocab_size, [EOT], workers=workers, progress=False)
        wall = time.perf_counter() - t0
        reached = tok.vocab_size
    elif trainer == "hf":
        from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(GPT2_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        bpe_trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        t0 = time.perf_counter()
        tok.train(files, bpe_trainer)
        wall = time.perf_counter() - t0
        reached = tok.get_vocab_size()
    else:
        raise ValueError(f"unknown trainer {trainer!r}")
    return {
        "trainer": trainer, "wall_s": wall, "vocab_size": reached,
        "self_maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "workers_maxrss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def run_child(trainer: str, files: list[Path], vocab_size: int, workers: int) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(workers), TOKENIZERS_PARALLELISM="true")
    cmd = [sys.executable, __file__, "_child", trainer, str(vocab_size), str(workers), *map(str, files)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{trainer} training failed (exit {proc.returncode})")
    result = json.loads(out.strip().splitlines()[-1])
    result["tree_maxrss_mb"] = usage.ru_maxrss / 1024  # the largest process of the child's tree
    return result


# ---------------------------------------------------------------- parts


def bench_train(data: Path, sizes: list[str], vocab_size: int, workers: int, repeats: int) -> None:
    print(f"\n### Training: ours vs HF tokenizers (vocab {vocab_size}, {workers} workers/threads, "
          f"best of {repeats}; peak RSS of the largest process)\n")
    print("| corpus | MB | ours s | HF s | time ratio | ours peak MB | HF peak MB | RSS ratio | ours workers MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases = [("corpus.en", [data / "cs336" / "corpus.en"], 500)]
    cases += [(size, [data / "bench" / f for f in SIZES[size]], vocab_size) for size in sizes]
    for name, files, vs in cases:
        mb = sum(f.stat().st_size for f in files) / 1e6
        runs = {}
        for trainer in ("ours", "hf"):
            results = [run_child(trainer, files, vs, workers) for _ in range(repeats)]
            best = min(results, key=lambda r: r["wall_s"])
            best["tree_maxrss_mb"] = max(r["tree_maxrss_mb"] for r in results)
            runs[trainer] = best
            print(f"<!-- {name} {json.dumps(best)} -->", file=sys.stderr)
        o, h = runs["ours"], runs["hf"]
        print(f"| {name} (vocab {vs}) | {mb:.1f} | {o['wall_s']:.2f} | {h['wall_s']:.2f} | "
              f"{o['wall_s'] / h['wall_s']:.2f}x | {o['self_maxrss_mb']:.0f} | {h['tree_maxrss_mb']:.0f} | "
              f"{o['self_maxrss_mb'] / h['tree_maxrss_mb']:.2f}x | {o['workers_maxrss_mb']:.0f} |", flush=True)


def bench_encode(data: Path, vocab_size: int, repeats: int) -> None:
    import tiktoken

    sys.path.insert(0, str(REPO))
    from tokenizer import Tokenizer, train_bpe

    trained = train_bpe([data / "bench" / "wikitext2_raw_test.txt"], vocab_size, [EOT], progress=False)
    files = [data / "bench" / "wikitext2_raw_test.txt", data / "bench" / "tinystories_v1_train_head.txt"]
    text = "".join(f.read_text(encoding="utf-8") for f in files)
    mb = len(text.encode("utf-8")) / 1e6
    special_ids = set(trained.special_tokens.values())
    ranks: dict[bytes, int] = {}  # tiktoken merges by rank; our ids are in merge order, so rank = id
    for i, token in sorted(trained.vocab.items()):
        if i not in special_ids:
            ranks.setdefault(token, i)
    enc = tiktoken.Encoding(name="archlab-bench", pat_str=trained.pattern, mergeable_ranks=ranks, special_tokens={})

    def best_time(make, run) -> tuple[float, list[int]]:
        """Best wall time of run(make()) over `repeats`, excluding make() (a fresh encoder each repeat)."""
        best, out = float("inf"), None
        for _ in range(repeats):
            obj = make()
            t0 = time.perf_counter()
            out = run(obj)
            best = min(best, time.perf_counter() - t0)
        return best, out

    def fresh() -> Tokenizer:
        return Tokenizer(trained.merges, special_tokens=[EOT])

    warm = fresh()
    warm.encode_ordinary(text)
    sotu = (data / "bench" / "sotu_addresses.txt").read_text(encoding="utf-8")
    sotu_mb = len(sotu.encode("utf-8")) / 1e6
    cases = [  # (label, MB, text, our encoder factory): ours is always timed against tiktoken on the same text
        (f"{mb:.1f} MB wikitext2 + tinystories, fresh `Tokenizer` (empty pre-token cache)", mb, text, fresh),
        (f"{sotu_mb:.1f} MB sotu_addresses, fresh `Tokenizer` (cache fills during the pass)", sotu_mb, sotu, fresh),
        (f"{mb:.1f} MB wikitext2 + tinystories, warm cache (second pass)", mb, text, lambda: warm),
    ]
    print(f"\n### Encode throughput, one process (vocab {vocab_size}, best of {repeats})\n")
    print("| text | archlab MB/s | tiktoken MB/s | ratio to tiktoken | ids equal |")
    print("|---|---:|---:|---:|---|")
    for label, size, txt, make in cases:
        ours_s, ours_ids = best_time(make, lambda tok, txt=txt: tok.encode_ordinary(txt))
        tik_s, tik_ids = best_time(lambda: enc, lambda e, txt=txt: e.encode_ordinary(txt))
        same = "yes" if ours_ids == tik_ids else "NO"
        print(f"| {label} | {size / ours_s:.2f} | {size / tik_s:.2f} | {tik_s / ours_s:.2f}x | {same} |", flush=True)


def bench_reference(data: Path, vocab_size: int) -> None:
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "tests" / "tokenizer"))
    from reference_train import reference_train

    from tokenizer import train_bpe

    path = data / "tinyshakespeare.txt"
    text = path.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    ours = train_bpe([path], vocab_size, [EOT], workers=1, progress=False)
    ours_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = reference_train([text], vocab_size, [EOT])
    ref_s = time.perf_counter() - t0
    same = "yes" if ref == ours.merges else "NO"
    print(f"\n### Slow reference trainer vs ours (tinyshakespeare, vocab {vocab_size}, 1 worker)\n")
    print("| trainer | s | ratio | merges equal |")
    print("|---|---:|---:|---|")
    print(f"| reference (recount every merge) | {ref_s:.1f} | {ref_s / ours_s:.0f}x | {same} |")
    print(f"| archlab `train_bpe` | {ours_s:.2f} | 1x | |", flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_child":
        trainer, vocab_size, workers, *files = argv[1:]
        print(json.dumps(child_train(trainer, files, int(vocab_size), int(workers))))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data", help="shared/data directory")
    p.add_argument("--sizes", default="1mb,10mb,126mb", help=f"comma list of {','.join(SIZES)}")
    p.add_argument("--parts", default="train,encode,reference", help="comma list of train,encode,reference")
    p.add_argument("--vocab-size", type=int, default=10_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1, help="runs per case (best time is reported)")
    p.add_argument("--quick", action="store_true", help="1mb only, no reference trainer")
    args = p.parse_args(argv)
    if not args.data.is_dir():
        p.error(f"data directory not found: {args.data} (pass --data)")
    sizes = ["1mb"] if args.quick else [s for s in args.sizes.split(",") if s]
    parts = [x for x in args.parts.split(",") if x]
    if args.quick:
        parts = [x for x in parts if x != "reference"]
    unknown = [s for s in sizes if s not in SIZES] + [x for x in parts if x not in ("train", "encode", "reference")]
    if unknown:
        p.error(f"unknown size/part {unknown}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if "train" in parts:
        bench_train(args.data, sizes, args.vocab_size, args.workers, args.repeats)
    if "encode" in parts:
        bench_encode(args.data, args.vocab_size, max(args.repeats, 2))
    if "reference" in parts:
        bench_reference(args.data, 2000)


if __name__ == "__main__":
    main()
