"""Benchmark archlab's EncoderDecoder against Hugging Face's same-shape seq2seq model: CPU training steps.

Not a test: prints markdown tables with ratios. The peer is HF `BartForConditionalGeneration` (default
`--family bart`), whose shape is ours exactly: post-LN, learned positions, biases everywhere, an embedding
LayerNorm in both stacks, tied embeddings, tanh GELU: `activation_function="gelu_pytorch_tanh"` (`--hf-gelu`),
the same fused `F.gelu(approximate="tanh")` kernel ours calls. (HF's `gelu_new` computes the same function from
~8 elementwise ops and is slower; BART's default erf GELU has no counterpart here.) Ours is `arch.convert.from_hf(hf)`: the same weights, so the
models compute the same function (max |Δlogits| is checked and printed before timing). The only differences:
HF's position tables have 2 never-read rows per stack, and its final_logits_bias is a buffer where ours is a
parameter (lm_head.bias), which also puts our loss on the unfused path; the row `logits_bias=false` is the same
model without that bias (logits bias dropped, fused chunked cross-entropy). `--family t5` times HF T5 v1.0
(pre-RMSNorm, relative buckets, ReLU, no biases) the same way against `from_hf` of it.

One step = forward + loss + backward + `torch.optim.AdamW(lr=1e-4, weight_decay=0.1)` step, fp32, dropout 0,
on a fixed batch of right-padded sources (lengths uniform in [S/2, S], `attention_mask` / `src_mask`) and
targets (labels -100 past each row's length). Ours runs `model.loss(src, tgt_in, labels, src_mask=mask)`; HF
runs `F.cross_entropy(logits, labels)` on `model(input_ids, attention_mask, decoder_input_ids).logits`. Steps
are interleaved model by model (background load hits every model alike), warm-up steps are not timed, and the
timed steps come in `--repeats` rounds. Ratio = HF median step time / ours (> 1: we are faster), from wall
time (median and min) and from process CPU time (all threads; preemption by other processes does not inflate
it, so it is the steadiest view on a shared machine), overall and per round.

    python bench/bench_encdec.py                                  # d_model 256, 3+3 layers, batch 16 x 64/64
    python bench/bench_encdec.py --quick                          # 1 warm-up, 2 rounds of 3 steps
    taskset -c 1 python bench/bench_encdec.py --threads 1         # one core
    python bench/bench_encdec.py --family t5 --hf sdpa,eager
    python bench/bench_encdec.py --hf-gelu gelu_new              # HF's composite tanh GELU
    python bench/bench_encdec.py --profile                       # where the time goes, ours vs HF
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arch import EncDecConfig, build_model, count_params, flops_per_token  # noqa: E402
from arch.convert import from_hf  # noqa: E402
from bench.timing import timed_train_step  # noqa: E402

PAD = 1  # source pad id (any: the mask does the masking)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", choices=("bart", "t5"), default="bart")
    p.add_argument("--quick", action="store_true", help="1 warm-up, 2 rounds of 3 timed steps")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--enc-layers", type=int, default=3)
    p.add_argument("--dec-layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=None, help="default 4 x d_model")
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--src-len", type=int, default=64)
    p.add_argument("--tgt-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--no-pad", action="store_true", help="full-length rows, no attention mask")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per model; default 3 (1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per model per round; default 10 (3)")
    p.add_argument("--repeats", type=int, default=None, help="rounds of timed steps; default 3 (2 with --quick)")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads; default os.cpu_count()")
    p.add_argument("--hf", default="sdpa", help="comma list of HF attn_implementation (sdpa, eager)")
    p.add_argument("--hf-gelu", default="gelu_pytorch_tanh", help="BART's activation_function: gelu_pytorch_tanh "
                   "(one fused kernel, as ours) or gelu_new (the same function from elementwise ops)")
    p.add_argument("--no-unbiased", action="store_true", help="skip the logits_bias=false (fused loss) row")
    p.add_argument("--profile", action="store_true", help="only print torch.profiler top ops of one step each")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args(argv)
    a.d_ff = a.d_ff or 4 * a.d_model
    a.warmup = a.warmup if a.warmup is not None else (1 if a.quick else 3)
    a.steps = a.steps or (3 if a.quick else 10)
    a.repeats = a.repeats or (2 if a.quick else 3)
    a.threads = a.threads or os.cpu_count()
    return a


# ---------------------------------------------------------------------------------------------- models


def hf_model(args: argparse.Namespace, impl: str) -> torch.nn.Module:
    """The HF peer, seeded: every call with the same args builds the same weights."""
    import transformers

    torch.manual_seed(0)
    if args.family == "bart":
        cfg = transformers.BartConfig(
            vocab_size=args.vocab, d_model=args.d_model, encoder_layers=args.enc_layers,
            decoder_layers=args.dec_layers, encoder_attention_heads=args.heads, decoder_attention_heads=args.heads,
            encoder_ffn_dim=args.d_ff, decoder_ffn_dim=args.d_ff,
            max_position_embeddings=max(args.src_len, args.tgt_len),
            activation_function=args.hf_gelu, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            pad_token_id=PAD, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None,
            attn_implementation=impl,
        )  # fmt: skip
        model = transformers.BartForConditionalGeneration(cfg)
    else:
        cfg = transformers.T5Config(
            vocab_size=args.vocab, d_model=args.d_model, d_kv=args.d_model // args.heads, d_ff=args.d_ff,
            num_layers=args.enc_layers, num_decoder_layers=args.dec_layers, num_heads=args.heads,
            feed_forward_proj="relu", dropout_rate=0.0, pad_token_id=0, decoder_start_token_id=0, eos_token_id=1,
            attn_implementation=impl,
        )  # fmt: skip
        model = transformers.T5ForConditionalGeneration(cfg)
    assert model.config._attn_implementation == impl, model.config._attn_implementation
    return model


def without_logits_bias(model: torch.nn.Module) -> torch.nn.Module:
    """The same EncoderDecoder with logits_bias=False (so model.loss takes the fused chunked path)."""
    cfg = EncDecConfig.from_dict({**model.cfg.to_dict(), "logits_bias": False})
    plain = build_model(cfg)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.bias"}
    plain.load_state_dict(state)
    return plain


def make_batch(args: argparse.Namespace) -> dict[str, torch.Tensor]:
    B, S, T, V = args.batch, args.src_len, args.tgt_len, args.vocab
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, V, (B, S), generator=g)
    tgt = torch.randint(3, V, (B, T + 1), generator=g)
    labels = tgt[:, 1:].clone()
    if args.no_pad:
        return {"src": src, "mask": None, "tgt_in": tgt[:, :-1], "labels": labels}
    src_len = torch.randint(S // 2, S + 1, (B,), generator=g)
    tgt_len = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = torch.arange(S)[None, :] < src_len[:, None]  # (B, S) True at tokens
    src[~mask] = PAD
    labels[torch.arange(T)[None, :] >= tgt_len[:, None]] = -100  # padded targets: ignored by both losses
    return {"src": src, "mask": mask, "tgt_in": tgt[:, :-1], "labels": labels}


class Runner:
    """One model + its AdamW; `step()` runs forward + loss + backward + optimizer step."""

    def __init__(self, name: str, model: torch.nn.Module, is_hf: bool, batch: dict[str, torch.Tensor]):
        self.name, self.model, self.is_hf, self.batch = name, model.train(), is_hf, batch
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        self.times: list[list[float]] = []  # wall seconds per timed step, one list per round
        self.cpu_times: list[list[float]] = []  # process CPU seconds (all threads) per timed step
        self.params = sum(p.numel() for p in model.parameters())

    def loss(self) -> torch.Tensor:
        b = self.batch
        if not self.is_hf:
            return self.model.loss(b["src"], b["tgt_in"], b["labels"], src_mask=b["mask"])  # what a trainer calls
        mask = None if b["mask"] is None else b["mask"].long()
        logits = self.model(input_ids=b["src"], attention_mask=mask, decoder_input_ids=b["tgt_in"]).logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), b["labels"].view(-1), ignore_index=-100)

    def step(self) -> tuple[float, float]:
        """One training step; returns (wall seconds, process CPU seconds)."""
        return timed_train_step(self.loss, self.opt)


@torch.no_grad()
def logits_gap(ours: torch.nn.Module, hf: torch.nn.Module, batch: dict[str, torch.Tensor]) -> float:
    mask = batch["mask"]
    want = hf.eval()(input_ids=batch["src"], attention_mask=None if mask is None else mask.long(),
                     decoder_input_ids=batch["tgt_in"]).logits
    got = ours.eval()(batch["src"], batch["tgt_in"], src_mask=mask)
    return (got - want).abs().max().item()


def profile(runners: list[Runner]) -> int:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    for r in runners:
        r.step()
        r.step()
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            r.step()
        print(f"\n### profile: {r.name}\n")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    return 0


# ---------------------------------------------------------------------------------------------- main


def _ratio(ref: list[float], mine: list[float], how=statistics.median) -> float:
    return how(ref) / how(mine)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# bench_encdec ({args.family}): torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}, "
          f"affinity {sorted(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'}, "
          f"load average {load:.2f} at start")  # fmt: skip
    print(f"shape: d_model {args.d_model}, {args.enc_layers}+{args.dec_layers} layers, {args.heads} heads, d_ff "
          f"{args.d_ff}, vocab {args.vocab}, batch {args.batch} x src {args.src_len} / tgt {args.tgt_len}"
          f"{'' if args.no_pad else ' (right-padded, lengths in [len/2, len])'}; {args.warmup} warm-up + "
          f"{args.repeats} rounds x {args.steps} timed steps per model, interleaved"
          f"{'; HF activation_function ' + args.hf_gelu if args.family == 'bart' else ''}\n")  # fmt: skip

    batch = make_batch(args)
    impls = [s for s in args.hf.split(",") if s]
    hfs = {impl: hf_model(args, impl) for impl in impls}
    ours = from_hf(hfs[impls[0]])
    gap = logits_gap(ours, hfs[impls[0]], batch)
    print(f"from_hf check: max |Δlogits| ours vs HF ({impls[0]}), eval mode, this batch: {gap:.2e}")
    runners = [Runner(f"archlab (from_hf{', logits bias, unfused loss' if ours.cfg.logits_bias else ''})", ours,
                      False, batch)]
    if ours.cfg.logits_bias and not args.no_unbiased:
        runners.append(Runner("archlab, logits_bias=false (fused loss)", without_logits_bias(ours), False, batch))
    name = {"bart": "BartForConditionalGeneration", "t5": "T5ForConditionalGeneration"}[args.family]
    runners += [Runner(f"HF {name} ({impl})", m, True, batch) for impl, m in hfs.items()]
    cfg = ours.cfg
    if args.profile:
        return profile(runners)
    print(f"params: ours {count_params(cfg):,} (closed form) | " + " | ".join(f"{r.name}: {r.params:,}"
                                                                           for r in runners) + "\n")

    for _ in range(args.warmup):
        for r in runners:
            r.step()
    for _ in range(args.repeats):
        for r in runners:
            r.times.append([])
            r.cpu_times.append([])
        for _ in range(args.steps):  # interleaved: background load hits every model alike
            for r in runners:
                wall, cpu = r.step()
                r.times[-1].append(wall)
                r.cpu_times[-1].append(cpu)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    ref = runners[len(runners) - len(hfs)]  # the first HF runner
    flat = {r.name: ([t for rd in r.times for t in rd], [t for rd in r.cpu_times for t in rd]) for r in runners}
    fpt = flops_per_token(cfg, seq_len=args.tgt_len, src_len=args.src_len)  # per target token, full length
    tokens = args.batch * args.tgt_len
    print(f"load average at end: {load_end:.2f}; FLOPs per step (full-length rows, flops_per_token x B x T): "
          f"{fpt * tokens / 1e9:.1f} G\n")
    print(f"| model | params | step ms median (min) | vs {ref.name.removeprefix('HF ')}: median (min) | "
          f"CPU s/step | vs HF (CPU) | per round (wall / CPU) | GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    rows = []
    ref_wall, ref_cpu = flat[ref.name]
    for r in runners:
        wall, cpu = flat[r.name]
        rounds = ", ".join(f"{_ratio(rw, w):.2f}/{_ratio(rc, c):.2f}" for rw, w, rc, c in
                           zip(ref.times, r.times, ref.cpu_times, r.cpu_times))
        row = {"model": r.name, "params": r.params, "step_ms_median": 1e3 * statistics.median(wall),
               "step_ms_min": 1e3 * min(wall), "cpu_s_median": statistics.median(cpu),
               "ratio_median": _ratio(ref_wall, wall), "ratio_min": _ratio(ref_wall, wall, min),
               "ratio_cpu": _ratio(ref_cpu, cpu), "rounds": rounds,
               "gflops_per_s": fpt * tokens / statistics.median(wall) / 1e9}  # fmt: skip
        rows.append(row)
        print(f"| {r.name} | {r.params:,} | {row['step_ms_median']:.0f} ({row['step_ms_min']:.0f}) | "
              f"{row['ratio_median']:.2f}x ({row['ratio_min']:.2f}x) | {row['cpu_s_median']:.3f} | "
              f"{row['ratio_cpu']:.2f}x | {rounds} | {row['gflops_per_s']:.1f} |")  # fmt: skip
    if args.json:
        result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                  "torch": torch.__version__, "threads": torch.get_num_threads(), "logits_gap": gap,
                  "load_start": load, "load_end": load_end, "train": rows}  # fmt: skip
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
