"""What a run learns: a task turns the config into data, a model config, the cost of a step and eval metrics.

    task = TASKS[rc.task.kind](rc, is_main=..., progress=..., rank=0, world_size=1)  # task.kind: lm | seq2seq
    task.load(generator)                  # tokenizer + data; then task.tokenizer, .tokenizer_info, .sampler, .inputs
    task.epoch_tokens()                   # tokens one pass over the train split gives (the unit of `epochs`); None: seq2seq
    task.resume_at(batch)                 # a resumed run: the sampler's next micro-batch is number `batch`
    task.model_config()                   # arch.ModelConfig | arch.EncDecConfig, vocab_size from the tokenizer
    task.tokens_per_sequence()            # tokens one sequence adds to the `tokens` count
    task.flops_per_token(mcfg)            # training FLOPs per such token (6N + attention)
    task.evaluate(model, device, final)   # the val/* metrics of one eval; the final one adds test/* (lm)
    task.held_out_record()                # what the test sets were ({}: the run has none); for summary.json

LMTask (task=lm, the default): corpus -> tokenizer -> token memmaps, windows of train.n_ctx tokens (random
starts, or each once per epoch with train.sampler=epoch: experiments/data/epochs.py), next-token loss; evals give
val/loss, val/ppl, val/bpb, attention entropy and length extrapolation; the last eval (at the last step, never
before: nothing that selects sees them) adds test/loss, test/bpb on the test split (data.test_fraction) and
test/<name>/loss, test/<name>/bpb on each data.extra_eval corpus (experiments.data.heldout).
Seq2SeqTask (task=seq2seq): (source, target) pairs -> padded (src, tgt_in, tgt_out) batches for the
encoder-decoder; `tokens` counts decoder tokens; evals give loss, token accuracy and exact match per length.
Adding a task: a class with these members, one line in TASKS, a conf/task/<name>.yaml.
Not handled: mixing tasks in one run; train.sampler=epoch and train.max_epochs for seq2seq (refused).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any

import torch
from torch import nn

import arch
from experiments.config.errors import ConfigError
from experiments.config.model_schema import encdec_config, model_config
from experiments.config.schema import RunConfig
from experiments.data import cache  # via the module: tests patch cache.prepare_data
from experiments.data.corpus import WindowSampler
from experiments.data.epochs import EpochSampler
from experiments.data.heldout import HeldOut, held_out_sets, with_held_out
from experiments.data.pairs import PairBatcher, prepare_pairs
from experiments.run.eval_lm import evaluate_held_out, evaluate_model, held_out_starts, length_extrapolation
from experiments.run.eval_seq2seq import evaluate_seq2seq

log = logging.getLogger(__name__)


def tokenizer_dict(rc: RunConfig) -> dict[str, Any]:
    """The tokenizer group as the plain dict experiments.data's tokenizer side reads (mode, vocab_size, path, ...)."""
    return dataclasses.asdict(rc.tokenizer)


class LMTask:
    """task=lm: a decoder-only language model on a text corpus (next-token loss on windows of train.n_ctx)."""

    def __init__(self, rc: RunConfig, *, is_main: bool, progress: bool, rank: int = 0, world_size: int = 1) -> None:
        self.rc, self.tc, self.is_main, self.progress = rc, rc.train, is_main, progress
        self.rank, self.world_size = rank, world_size
        self.tokenizer: Any = None                 # tokenizer.Tokenizer, set by load()
        self.tokenizer_info: dict[str, Any] = {}   # {"path", "cached", "train_seconds", ...} of the cache entry
        self.sampler: WindowSampler | EpochSampler | None = None  # .next() -> (x, y), each (B, T) int64
        self.data: Any = None                      # experiments.data.cache.TokenData: .train / .val memmaps
        self.inputs: dict[str, str] = {}           # tokenizer and data fingerprints: a resume must find the same
        self.held_out: list[HeldOut] = []          # scored once, by the last eval: the test split, extra corpora
        self.split_record: dict[str, Any] = {}     # the corpus's split (experiments.data.documents)

    def load(self, generator: torch.Generator) -> None:
        """corpus -> tokenizer -> token memmaps (content-hash cached; ranks share the entries) -> window sampler."""
        prepared = cache.prepare_data(self.rc.data, tokenizer_dict(self.rc), self.rc.data.cache_dir,
                                      progress=self.progress)
        self.tokenizer, self.tokenizer_info, self.data = prepared.tokenizer, prepared.tokenizer_info, prepared.data
        self.held_out = held_out_sets(prepared, self.rc.data, self.rc.data.cache_dir)
        self.inputs, self.split_record = with_held_out(prepared.inputs, self.held_out), prepared.record
        if self.is_main:
            info = self.tokenizer_info
            log.info("corpus %s: %d train / %d val tokens, vocab %d (%s)", prepared.name, len(self.data.train),
                     len(self.data.val), self.tokenizer.vocab_size,
                     "cached" if info["cached"] else f"trained in {info['train_seconds']:.1f}s")
        T, B = self.tc.n_ctx, self.tc.batch_size
        if self.tc.sampler == "epoch":  # too short for a window / a global batch: ConfigError
            self.sampler = EpochSampler(self.data.train, T, B, self.rc.seed, self.rank, self.world_size)
        else:
            self.sampler = WindowSampler(self.data.train, T, B, generator)
        if len(self.data.val) < T + 1:  # before the model is built (a huge n_ctx must not cost an allocation first)
            raise ConfigError(f"the validation split has {len(self.data.val)} tokens, fewer than n_ctx + 1; "
                              f"raise data.val_fraction")
        for s in self.held_out:
            if len(s.tokens) < T + 1:
                key, what = (("data.test_fraction", "the test split") if s.prefix == "test" else
                             (f"data.extra_eval.{s.prefix[5:]}", s.source["path"]))
                raise ConfigError(f"{key}: {what} has {len(s.tokens)} tokens, fewer than n_ctx + 1 = {T + 1}; "
                                  f"hold out more text or lower train.n_ctx")

    def epoch_tokens(self) -> int:
        """Tokens one pass over the train split trains on: the split's length (random windows), or the windows the
        epoch sampler deals per epoch (its tail shorter than a global batch is skipped)."""
        if isinstance(self.sampler, EpochSampler):
            return self.sampler.tokens_per_epoch
        return len(self.data.train)

    def resume_at(self, batch: int) -> None:
        """The epoch sampler's position is its batch index; the random sampler's is the restored generator."""
        if isinstance(self.sampler, EpochSampler):
            self.sampler.seek(batch)

    def model_config(self) -> arch.ModelConfig:
        return model_config(self.rc.model, vocab_size=self.tokenizer.vocab_size)

    def tokens_per_sequence(self) -> int:
        return self.tc.n_ctx

    def flops_per_token(self, mcfg: arch.ModelConfig) -> float:
        return arch.flops_per_token(mcfg, seq_len=self.tc.n_ctx)

    def evaluate(self, model: nn.Module, device: torch.device, final: bool) -> dict[str, Any]:
        """val/loss, val/ppl, val/bpb, attention entropy; length extrapolation per train.extrap; at the final eval
        test/* on every held-out set."""
        tc, T = self.tc, self.tc.n_ctx
        row = evaluate_model(model, self.data.val, n_ctx=T, batch_size=tc.eval_batch_size,
                             max_batches=tc.eval_batches, bytes_per_token=self.data.bytes_per_token, device=device)
        if tc.extrap == "every_eval" or (tc.extrap == "end" and final):
            row.update(length_extrapolation(model, self.data.val, n_ctx=T, factors=tuple(tc.extrap_factors),
                                            max_tokens=tc.extrap_max_tokens, device=device,
                                            batch_size=tc.eval_batch_size))
        for s in self.held_out if final else ():
            row.update(evaluate_held_out(model, s.tokens, prefix=s.prefix, n_ctx=T, batch_size=tc.eval_batch_size,
                                         max_tokens=self.rc.data.test_max_tokens,
                                         bytes_per_token=s.bytes_per_token, device=device))
        return row

    def held_out_record(self) -> dict[str, Any]:
        """summary.json's `evaluation` ({} unless the data config holds out a test set or cuts documents): the
        corpus's split (counts, bytes, indices) and per held-out set its tokens, bytes, windows scored, source."""
        d = self.rc.data
        if not (self.held_out or getattr(d, "doc_separator", None)):
            return {}
        T, cap = self.tc.n_ctx, d.test_max_tokens
        sets = {s.prefix: {"tokens": int(s.meta["count"]), "bytes": int(s.meta["n_bytes"]),
                           "windows": len(held_out_starts(len(s.tokens), T, cap)), "n_ctx": T, **s.source}
                for s in self.held_out}
        return {"split": self.split_record, "test_max_tokens": cap, "sets": sets}


class Seq2SeqTask:
    """task=seq2seq: the encoder-decoder on (source, target) pairs, teacher-forced loss on the target."""

    def __init__(self, rc: RunConfig, *, is_main: bool, progress: bool, rank: int = 0, world_size: int = 1) -> None:
        if rc.train.sampler != "random" or rc.train.max_epochs is not None:  # before any data is read
            raise ConfigError("train.sampler / train.max_epochs: task=seq2seq draws its pairs at random; "
                              "keep train.sampler=random and train.max_epochs=null")
        self.rc, self.tc, self.is_main, self.progress = rc, rc.train, is_main, progress
        self.tokenizer: Any = None
        self.tokenizer_info: dict[str, Any] = {}
        self.sampler: PairBatcher | None = None  # .next() -> (src, tgt_in, tgt_out), each (B, longest) int64
        self.pairs: Any = None                   # experiments.data.pairs.PreparedPairs: .train / .test, pad/bos/eos
        self.inputs: dict[str, str] = {}         # tokenizer and data fingerprints: a resume must find the same

    def load(self, generator: torch.Generator) -> None:
        """pairs -> tokenizer -> ids -> a seeded random batcher of padded (src, tgt_in, tgt_out)."""
        p = prepare_pairs(self.rc.data, tokenizer_dict(self.rc), self.rc.data.cache_dir, progress=self.progress)
        self.pairs, self.tokenizer, self.tokenizer_info = p, p.tokenizer, p.tokenizer_info
        self.inputs = p.inputs
        if self.is_main:
            longest = max(max(map(len, rows)) for rows in (p.train.src, p.train.tgt_in, p.test.src, p.test.tgt_in))
            log.info("pairs %s: %d train / %d test, vocab %d, longest sequence %d tokens", p.name, len(p.train.src),
                     len(p.test.src), self.tokenizer.vocab_size, longest)
        self.sampler = PairBatcher(p.train, self.tc.batch_size, p.pad_id, generator)

    def epoch_tokens(self) -> None:
        return None  # epochs are not counted for pairs

    def resume_at(self, batch: int) -> None:
        """The batcher's position is the restored generator."""

    def model_config(self) -> arch.EncDecConfig:
        return encdec_config(self.rc.model, vocab_size=self.tokenizer.vocab_size, pad_id=self.pairs.pad_id)

    def tokens_per_sequence(self) -> int:
        """Decoder tokens: the mean target length (what the token budget counts for seq2seq)."""
        return max(1, round(self.pairs.mean_target_tokens))

    def flops_per_token(self, mcfg: arch.EncDecConfig) -> float:
        """FLOPs per decoder token, the encoder's work on a mean-length source included."""
        return arch.flops_per_token(mcfg, seq_len=self.tokens_per_sequence(),
                                    src_len=max(1, round(self.pairs.mean_source_tokens)))

    def evaluate(self, model: nn.Module, device: torch.device, final: bool) -> dict[str, Any]:
        """val/loss, val/ppl, val/token_acc, val/exact_match(@len{k}) on the test split: a sample of
        eval_batches x eval_batch_size pairs at intermediate evals, all of it at the last one."""
        tc, p = self.tc, self.pairs
        row = evaluate_seq2seq(model, p.test, pad_id=p.pad_id, bos_id=p.bos_id, eos_id=p.eos_id,
                               batch_size=tc.eval_batch_size, device=device, prefix="val",
                               max_pairs=None if final else tc.eval_batches * tc.eval_batch_size)
        return {**row, "val/ppl": math.exp(min(row["val/loss"], 700.0))}

    def held_out_record(self) -> dict[str, Any]:
        """No test sets beside the pairs' own test split (scored as val/*)."""
        return {}


Task = LMTask | Seq2SeqTask
TASKS: dict[str, type[LMTask] | type[Seq2SeqTask]] = {"lm": LMTask, "seq2seq": Seq2SeqTask}  # the `task` config value
