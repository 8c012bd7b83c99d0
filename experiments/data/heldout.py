"""The held-out sets a language-model run scores once, at its end: the corpus's test split and each extra corpus.

    sets = held_out_sets(prepared, data_cfg, cache_dir)   # [HeldOut("test", ...), HeldOut("test/wikitext2", ...)]
    sets[0].tokens, sets[0].bytes_per_token               # ids (memmap), UTF-8 bytes per token (for */bpb)
    inputs = with_held_out(prepared.inputs, sets)          # the data fingerprint covers the extra corpora too

* `test`: the documents `data.test_fraction` held out (experiments.data.documents; encoded with train and val into
  the corpus's token cache entry, experiments.data.cache). Metrics `test/loss`, `test/bpb`.
* `test/<name>`: each `data.extra_eval` entry `<name>: <path>`, a UTF-8 text file read whole as ONE document
  (special-token text in it is ordinary text; one `<|endoftext|>` after it, as after every document), encoded with
  the run's tokenizer, never trained on (neither the model nor the tokenizer sees it). Cached like the corpus:
  `<cache_dir>/tokens/<key>/eval.bin`, key = sha256 of the file's bytes and the tokenizer fingerprint, so a sweep
  encodes it once and an edited file is encoded again. Metrics `test/<name>/loss`, `test/<name>/bpb`.
Which windows are scored, and when: experiments.run.eval_lm.evaluate_held_out and experiments.run.tasks.LMTask.
The checks that need no reading (names, files exist): experiments.data.corpus.check_held_out.
Not handled: a `datasets` name as an extra corpus (write its text to a file: docs/experiments.md shows how), a test
split for data=tokens (token ids have no documents).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from experiments.config.data_schema import DataConfig, data_config
from experiments.data.cache import CACHE_VERSION, PreparedData, cache_key, cached_token_files
from experiments.data.corpus import extra_eval_paths

TEST = "test"  # the metric prefix of the test split; an extra corpus's is test/<name>


@dataclass
class HeldOut:
    """One held-out set: its metric prefix, token ids and sidecar (count, n_bytes), and where it came from."""

    prefix: str  # test | test/<name>
    tokens: np.ndarray
    meta: dict[str, Any]  # the token file's sidecar: count, n_bytes (UTF-8 bytes of the text, the eot not counted)
    source: dict[str, Any]  # test: {"split": "test"}; an extra corpus: {"path": ..., "sha256": ...} (of its bytes)

    @property
    def bytes_per_token(self) -> float:
        return self.meta["n_bytes"] / max(1, self.meta["count"])


def extra_corpus(name: str, path: Path, tok, cache_dir: str | os.PathLike) -> HeldOut:
    """data.extra_eval's `name: path` encoded with `tok` (cached by the file's sha256 and the tokenizer)."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    key = cache_key({"v": CACHE_VERSION, "eval_text": digest, "tokenizer": tok.fingerprint()})
    text = raw.decode("utf-8", errors="replace")
    _, read = cached_token_files(key, {"eval": [text]}, tok, cache_dir, lambda split: f"{path.name} ({digest[:16]})")
    tokens, meta = read["eval"]
    return HeldOut(f"{TEST}/{name}", tokens, meta, {"path": str(path), "sha256": digest})


def held_out_sets(prepared: PreparedData, data_cfg: DataConfig | dict[str, Any],
                  cache_dir: str | os.PathLike) -> list[HeldOut]:
    """The test split (when the corpus has one), then each data.extra_eval corpus in the order the config lists."""
    sets = []
    data = prepared.data
    if data.test is not None:
        sets.append(HeldOut(TEST, data.test, data.test_meta, {"split": TEST}))
    for name, path in extra_eval_paths(data_config(data_cfg)).items():
        sets.append(extra_corpus(name, path, prepared.tokenizer, cache_dir))
    return sets


def with_held_out(inputs: dict[str, str], sets: list[HeldOut]) -> dict[str, str]:
    """`inputs` (tokenizer and data fingerprints) with the extra corpora folded into the data's, so that a resume
    with other extra corpora is refused as other data; unchanged without extra corpora (the test split is already in
    the corpus's fingerprint)."""
    extra = [(s.prefix, s.source["sha256"]) for s in sets if "sha256" in s.source]
    if not extra:
        return inputs
    return {**inputs, "data": hashlib.sha256(repr([inputs.get("data"), extra]).encode()).hexdigest()}
