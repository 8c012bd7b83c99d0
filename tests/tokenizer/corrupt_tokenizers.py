"""A table of corrupt tokenizer files, one per way a file can be wrong, with the words its refusal must contain.

    write_corrupt(tmp_path) -> {name: (path, expected words)}

Built from a small valid file (hand_tokenizer: 256 bytes + 7 merges + 2 special tokens, ids 263 and 264) by
changing one thing each; the expected words are written here by hand, not taken from the loader. Used by the
loader's test, `bpe encode` and `python -m experiments.train tokenizer=load tokenizer.path=...`.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.tokenizer.tokenizers_for_tests import EOT, hand_tokenizer
from tokenizer.formats import bytes_to_unicode

RANGE = "token ids must be below 2**32"
INVALID_ID = "invalid id"
NOT_INT = "is not a non-negative integer"
CORRUPT = "corrupt or truncated"


def _tables() -> dict[str, tuple[str | bytes, str]]:
    good = hand_tokenizer().to_dict()
    u = bytes_to_unicode()
    bytes_vocab = {str(b): u[b] for b in range(256)}  # an explicit vocab: the 256 bytes, no merges
    explicit = {**good, "merges": [], "special_tokens": {}, "vocab": bytes_vocab}

    def j(**changes) -> str:
        return json.dumps({**good, **changes})

    raw_good = json.dumps(good)
    return {
        # ids out of range: token files hold uint32 ids
        "special id 2**40": (j(special_tokens={EOT: 2**40}), RANGE),
        "special id 2**32": (j(special_tokens={EOT: 2**32}), RANGE),
        "vocab id 2**40": (json.dumps({**explicit, "vocab": {**bytes_vocab, str(2**40): u[97] + u[98]}}), RANGE),
        "vocab id 9999999999": (json.dumps({**explicit, "vocab": {**bytes_vocab, "9999999999": u[97]}}), RANGE),
        "vocab id of 5000 digits": (json.dumps({**explicit, "vocab": {**bytes_vocab, "7" * 5000: u[97]}}), RANGE),
        # ids that are not plain non-negative integers
        "special id -1": (j(special_tokens={EOT: -1}), INVALID_ID),
        "special id 263.0": (j(special_tokens={EOT: 263.0}), INVALID_ID),
        "special id true": (j(special_tokens={EOT: True}), INVALID_ID),
        "special id '263'": (j(special_tokens={EOT: "263"}), INVALID_ID),
        "special id null": (j(special_tokens={EOT: None}), INVALID_ID),
        "special id NaN": (raw_good.replace('"<|endoftext|>": 263', '"<|endoftext|>": NaN'), INVALID_ID),
        "special id of 5000 digits": (raw_good.replace(": 263", ": 1" + "0" * 4999), CORRUPT),
        "vocab id '01'": (json.dumps({**explicit, "vocab": {**bytes_vocab, "0256": u[97] + u[98]}}), NOT_INT),
        "vocab id 'x'": (json.dumps({**explicit, "vocab": {**bytes_vocab, "x": u[97]}}), NOT_INT),
        "vocab id '\u00b2'": (json.dumps({**explicit, "vocab": {**bytes_vocab, "\u00b2": u[97]}}), NOT_INT),
        # ids that clash
        "special id of a regular token": (j(special_tokens={EOT: 97}), "which a regular token already uses"),
        "two specials share an id": (j(special_tokens={EOT: 263, "<|pad|>": 263}), "share an id"),
        "empty special token": (j(special_tokens={"": 263}), "empty string"),
        "vocab lacks byte 7": (json.dumps({**explicit, "vocab": {k: v for k, v in bytes_vocab.items() if k != "7"}}),
                               "single-byte tokens"),
        # bad merges
        "merge of three tokens": (j(merges=["a b c"]), "not two tokens"),
        "merge not a string": (j(merges=[7]), "not two tokens"),
        "merge of an unknown token": (j(merges=["ab c"]), "no earlier merge produced"),
        "merge result not in the vocab": (json.dumps({**explicit, "merges": ["a b"]}), "not in the vocab"),
        "merge token not byte-to-unicode": (j(merges=["\u4e00 b"]), "byte-to-unicode form"),
        # patterns, fields, format
        "invalid split regex": (j(pattern="(["), "invalid split pattern"),
        "unknown pattern name": (j(pattern="gpt9"), "unknown pattern"),
        "merges missing": (json.dumps({k: v for k, v in good.items() if k != "merges"}), "'merges'"),
        "special_tokens a list": (j(special_tokens=[EOT]), "'special_tokens'"),
        "version 99": (j(version=99), "unsupported tokenizer file version"),
        "version true": (j(version=True), "unsupported tokenizer file version"),
        "other format": (j(format="something"), "not an archlab tokenizer file"),
        "Hugging Face file": (json.dumps({"model": {}, "added_tokens": []}), "Hugging Face"),
        "a JSON list": ("[1, 2]", "expected a JSON object"),
        "truncated": (raw_good[: len(raw_good) // 2], CORRUPT),
        "empty file": ("", CORRUPT),
        "nested 100000 deep": ("[" * 100_000 + "]" * 100_000, "nested too deep"),
        "not UTF-8": (b"\x80\x81 not utf-8", "not UTF-8"),
    }


CASES = sorted(_tables())


def write_corrupt(directory: Path) -> dict[str, tuple[Path, str]]:
    """Every corrupt file written under `directory`: {name: (path, words its refusal must contain)}."""
    directory.mkdir(parents=True, exist_ok=True)
    out = {}
    for i, (name, (content, words)) in enumerate(sorted(_tables().items())):
        path = directory / f"corrupt{i:02d}.json"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        out[name] = (path, words)
    return out
