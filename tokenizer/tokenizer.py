"""`Tokenizer`: a byte-level BPE tokenizer (merges + vocab + special tokens + split pattern).

API names follow tiktoken (`encode`, `encode_ordinary`, `decode`, `decode_bytes`, `allowed_special`,
`disallowed_special`) and HF tokenizers (`token_to_id`, `id_to_token`, `vocab_size`).

    tok = Tokenizer(merges=[(b"a", b"b")], special_tokens=["<|endoftext|>"])
    tok.encode("abc<|endoftext|>", allowed_special="all")   # [256, 99, 257]
    tok.decode([256, 99])                                    # "abc"

Id layout when `vocab` is None: ids 0..255 are the single bytes (id = byte value), id 256 + i is merges[i]
joined, then the special tokens in the order given. An explicit `vocab` (GPT-2's, where byte ids are not the
byte values) is taken as is.

Handled: special tokens with tiktoken's allowed/disallowed semantics, any unicode text (a lone surrogate is
encoded as U+FFFD, as in tiktoken), a bounded pre-token cache, streaming (`encode_iterable`, `encode_file`),
parallel `encode_batch`. Not handled: normalisation, byte-fallback/unk tokens (not needed: every byte is a
token), merges across pre-token boundaries, and pre-tokenizing raw bytes that are not text
(`encode_bytes_piece` merges such bytes as one piece).

Beside it, in modules of their own that never import this one: the special-token rules (`specials.py`), the
saved file (`serialize.py`), other tools' formats (`formats.py`) and streaming (`stream.py`). The methods here
that reach them (`save`, `load`, `from_gpt2_files`, `export_*`, `encode_iterable`, `encode_file`) are thin.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain

from tokenizer import formats, serialize, stream
from tokenizer.bpe_encode import fix_surrogates, merge_cache, merge_ids
from tokenizer.pretokenize import PATTERNS, resolve_pattern, split_special, splitter
from tokenizer.specials import AllowedSpecial, DisallowedSpecial, assign_special_ids, check_disallowed, special_sets
from tokenizer.workers import WorkerPool

# encode_batch: below this many characters in total, a process pool costs more than it saves.
PARALLEL_MIN_CHARS = 1 << 20


class Tokenizer:
    """Byte-level BPE. Build with `Tokenizer(merges, ...)`, `train_bpe(...)`, `Tokenizer.load(path)` or
    `Tokenizer.from_gpt2_files(...)`."""

    def __init__(
        self,
        merges: Sequence[tuple[bytes, bytes]],
        vocab: Mapping[int, bytes] | None = None,
        special_tokens: Sequence[str] | Mapping[str, int] = (),
        pattern: str = "gpt2",
    ):
        self._pattern = resolve_pattern(pattern)
        self._merges: list[tuple[bytes, bytes]] = [(bytes(a), bytes(b)) for a, b in merges]
        default = default_vocab(self._merges)
        base = default if vocab is None else {int(i): bytes(t) for i, t in vocab.items()}
        self._default_layout = base == default  # then the saved file needs no vocab
        self._base = base  # non-special tokens, id -> bytes
        self._specials = assign_special_ids(special_tokens, base)  # str -> id
        self._decoder: dict[int, bytes] = {**base, **{i: s.encode("utf-8") for s, i in self._specials.items()}}

        self._token_id: dict[bytes, int] = {}  # bytes -> id (the lowest id when the vocab repeats a byte string)
        for i in sorted(base):
            self._token_id.setdefault(base[i], i)
        missing = [b for b in range(256) if bytes([b]) not in self._token_id]
        if missing:
            raise ValueError(f"vocab lacks {len(missing)} single-byte tokens (e.g. byte {missing[0]}); byte-level BPE needs all 256")
        self._byte_ids = [self._token_id[bytes([b])] for b in range(256)]
        self._identity_bytes = self._byte_ids == list(range(256))

        self._pair_rank: dict[tuple[int, int], int] = {}  # (left id, right id) -> merge rank
        self._rank_id: list[int] = []  # merge rank -> merged id
        known = {bytes([b]) for b in range(256)}
        for rank, (a, b) in enumerate(self._merges):
            if a not in known or b not in known:
                raise ValueError(f"merge {rank} ({a!r}, {b!r}) uses a token that no earlier merge produced")
            merged = self._token_id.get(a + b)
            if merged is None:
                raise ValueError(f"merge {rank} ({a!r}, {b!r}) produces {a + b!r}, which is not in the vocab")
            self._pair_rank.setdefault((self._token_id[a], self._token_id[b]), rank)
            self._rank_id.append(merged)
            known.add(a + b)

        self._findall = splitter(self._pattern)  # == the pattern's regex findall; faster for gpt2/gpt4
        self._cache = merge_cache(self._pair_rank, self._rank_id, self._byte_ids)  # pre-token -> ids, bounded
        self._fingerprint: str | None = None

    # ------------------------------------------------------------------ properties
    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges in merge order (a copy)."""
        return list(self._merges)

    @property
    def vocab(self) -> dict[int, bytes]:
        """id -> bytes for every token, special tokens included (a copy)."""
        return dict(self._decoder)

    @property
    def special_tokens(self) -> dict[str, int]:
        """special token text -> id (a copy)."""
        return dict(self._specials)

    @property
    def pattern(self) -> str:
        """The split regex (a registry name given to the constructor is resolved to its regex)."""
        return self._pattern

    @property
    def pattern_name(self) -> str | None:
        """The registry name of `pattern` ("gpt2", "gpt4"), or None for a custom regex."""
        return next((name for name, pat in PATTERNS.items() if pat == self._pattern), None)

    @property
    def vocab_size(self) -> int:
        """Number of ids: max id + 1 (= len(vocab) for the usual dense layout)."""
        return max(self._decoder) + 1

    def token_to_id(self, token: str | bytes) -> int | None:
        """Id of a special token (str) or of a token's bytes (str is UTF-8 encoded); None if absent."""
        if isinstance(token, str):
            if token in self._specials:
                return self._specials[token]
            token = token.encode("utf-8")
        return self._token_id.get(token)

    def id_to_token(self, id: int) -> bytes:
        """The bytes of one token (a special token's UTF-8 text). Raises ValueError on an unknown id."""
        try:
            return self._decoder[id]
        except KeyError:
            raise ValueError(f"unknown token id {id!r} (vocab_size {self.vocab_size})") from None

    # ------------------------------------------------------------------ encoding
    def encode_bytes_piece(self, data: bytes) -> list[int]:
        """Apply the merges to arbitrary bytes as ONE pre-token (no splitting, no specials).

        Useful for token bytes that are not valid UTF-8, e.g. `encode_bytes_piece(tok.id_to_token(i)) == [i]`.
        """
        ids = [self._byte_ids[b] for b in data]
        return merge_ids(ids, self._pair_rank, self._rank_id)

    def encode_ordinary(self, text: str) -> list[int]:
        """Encode `text`, treating special-token text as ordinary text.

        >>> Tokenizer([]).encode_ordinary("hi")
        [104, 105]
        """
        # hot path: split (pretokenize.splitter), then one C-level dict lookup per pre-token (misses: the merge loop)
        try:
            text.encode("utf-8")
        except AttributeError:
            raise TypeError(f"encode needs a str, got {type(text).__name__}") from None
        except UnicodeEncodeError:
            text = fix_surrogates(text)  # lone surrogates are not valid text: U+FFFD, as tiktoken does
        return self.encode_pretokens(self._findall(text))

    def encode_pretokens(self, pretokens: Iterable[str]) -> list[int]:
        """Ids of text already cut into pre-tokens (by `pretokenize.splitter(tok.pattern)`): each one is merged on
        its own (no splitting, no special tokens). Streaming (`stream.py`) encodes up to a safe cut with it."""
        return list(chain.from_iterable(map(self._cache.__getitem__, pretokens)))

    def encode(
        self,
        text: str,
        *,
        allowed_special: AllowedSpecial = frozenset(),
        disallowed_special: DisallowedSpecial = "all",
    ) -> list[int]:
        """Encode `text` with tiktoken's special-token semantics.

        Special-token text in `allowed_special` ("all" = every special token) becomes its special id.
        Special-token text in `disallowed_special` ("all" = every special token not allowed) raises ValueError;
        pass `disallowed_special=()` to encode it as ordinary text instead.
        """
        allowed, disallowed = special_sets(self._specials, allowed_special, disallowed_special)
        if disallowed:
            check_disallowed(text, disallowed)
        if not allowed:
            return self.encode_ordinary(text)
        out: list[int] = []
        for piece, is_special in split_special(text, allowed):
            if is_special:
                out.append(self._specials[piece])
            else:
                out.extend(self.encode_ordinary(piece))
        return out

    def encode_batch(
        self,
        texts: Sequence[str],
        *,
        allowed_special: AllowedSpecial = frozenset(),
        disallowed_special: DisallowedSpecial = "all",
        num_workers: int | None = None,
        min_parallel_chars: int = PARALLEL_MIN_CHARS,
    ) -> list[list[int]]:
        """Encode many texts; same result as `[encode(t) for t in texts]`.

        Uses a process pool (`num_workers`, default os.cpu_count()) when the batch holds at least
        `min_parallel_chars` characters and more than one worker is available; sequential otherwise.
        """
        texts = list(texts)
        kwargs = {"allowed_special": allowed_special, "disallowed_special": disallowed_special}
        workers = min(num_workers or os.cpu_count() or 1, len(texts))
        if workers <= 1 or sum(map(len, texts)) < min_parallel_chars:
            return [self.encode(t, **kwargs) for t in texts]
        size = max(1, len(texts) // (workers * 4))
        chunks = ((texts[i:i + size],) for i in range(0, len(texts), size))
        out: list[list[list[int]]] = [[] for _ in range(0, len(texts), size)]
        # each worker rebuilds the tokenizer once from its canonical dict (never pickled per task)
        with WorkerPool(workers, initializer=_init_worker, initargs=(self.to_dict(), kwargs)) as pool:
            for i, rows in pool.imap_unordered(_encode_texts_in_worker, chunks):
                out[i] = rows
        return [ids for rows in out for ids in rows]

    def encode_iterable(
        self,
        texts: Iterable[str],
        *,
        allowed_special: AllowedSpecial = frozenset(),
        disallowed_special: DisallowedSpecial = "all",
    ) -> Iterator[int]:
        """Stream ids for text arriving in chunks (e.g. an open file); memory stays bounded by the chunk size.

        The ids equal `encode("".join(texts), ...)`: chunk boundaries never change the result.
        """
        return chain.from_iterable(stream.encode_chunks(self, texts, allowed_special, disallowed_special))

    def encode_file(
        self,
        path: str | os.PathLike,
        out: str | os.PathLike,
        *,
        allowed_special: AllowedSpecial = "all",
        disallowed_special: DisallowedSpecial = (),
    ) -> dict:
        """Stream a UTF-8 text file into a token file: a raw little-endian `.bin` of ids + a JSON sidecar
        `out + ".json"` (the format of `tokenizer/tokenfile.py`, written by its `write_tokens`; n_bytes = the UTF-8
        bytes of the text encoded). An existing `out` is replaced (the `bpe` CLI refuses without --force).

        dtype is uint16 when every id fits (vocab_size <= 65536), else uint32; read it back with
        `tokenfile.read_tokens(out, expect_fingerprint=tok.fingerprint())`. Special-token text in the file becomes special ids by
        default (corpora separate documents with <|endoftext|>). Returns the sidecar dict.
        """
        return stream.encode_file(
            self, path, out, allowed_special=allowed_special, disallowed_special=disallowed_special
        )

    # ------------------------------------------------------------------ decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """ids -> the exact bytes (lossless)."""
        try:
            return b"".join(map(self._decoder.__getitem__, ids))
        except KeyError as e:
            raise ValueError(f"unknown token id {e.args[0]!r} (vocab_size {self.vocab_size})") from None
        except TypeError as e:
            raise ValueError(f"token ids must be ints ({e})") from None

    def decode(self, ids: Iterable[int], errors: str = "replace") -> str:
        """ids -> text. Lossy by default: bytes that are not valid UTF-8 (e.g. a cut multi-byte character)
        become U+FFFD; pass errors="strict" to raise instead."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    # ------------------------------------------------------------------ persistence and formats
    def to_dict(self) -> dict:
        """The canonical JSON-able form (what `save` writes)."""
        vocab = None if self._default_layout else self._base  # None: the file needs no vocab
        return serialize.to_dict(self._merges, vocab, self._specials, self._pattern)

    @classmethod
    def _from_dict(cls, d: object, source: str = "tokenizer dict") -> Tokenizer:
        """Check and build from `to_dict`'s form; every refusal is a serialize.TokenizerFileError (a ValueError)
        that starts with `source` (e.g. the file)."""
        merges, vocab, specials, pattern = serialize.from_dict(d, source)
        try:
            return cls(merges, vocab=vocab, special_tokens=specials, pattern=pattern)
        except ValueError as e:
            raise serialize.TokenizerFileError(f"{source}: {e}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the versioned JSON file (a directory path gets `tokenizer.json` inside it)."""
        serialize.save(self.to_dict(), path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Read a file written by `save` (or a directory holding `tokenizer.json`); serialize.TokenizerFileError (a
        ValueError, one line naming the file) if it is missing, unreadable or invalid."""
        path = serialize.resolve_path(path)
        return cls._from_dict(serialize.load(path), source=str(path))

    def fingerprint(self) -> str:
        """sha256 (hex) of the canonical saved JSON; equal tokenizers have equal fingerprints."""
        if self._fingerprint is None:
            canonical = serialize.canonical_json(self.to_dict())
            self._fingerprint = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        return self._fingerprint

    @classmethod
    def from_gpt2_files(
        cls,
        vocab_json: str | os.PathLike,
        merges_txt: str | os.PathLike,
        special_tokens: Sequence[str] = ("<|endoftext|>",),
        pattern: str = "gpt2",
    ) -> Tokenizer:
        """Load GPT-2's `vocab.json` + `merges.txt` (byte-to-unicode form); ids equal tiktoken's "gpt2"."""
        merges, vocab, specials = formats.read_gpt2_files(vocab_json, merges_txt, special_tokens)
        return cls(merges, vocab=vocab, special_tokens=specials, pattern=pattern)

    def export_hf(self, path: str | os.PathLike) -> None:
        """Write a Hugging Face `tokenizer.json` that `tokenizers.Tokenizer.from_file` reads, with equal ids."""
        formats.export_hf(self, path)

    def export_tiktoken(self, path: str | os.PathLike) -> None:
        """Write a `.tiktoken` ranks file (base64 token, space, rank per line) for `tiktoken.Encoding`."""
        formats.export_tiktoken(self, path)

    # ------------------------------------------------------------------ python protocol
    def __getstate__(self) -> dict:  # pickle (process pools) via the canonical dict, never the cache
        return self.to_dict()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(Tokenizer._from_dict(state).__dict__)

    def __repr__(self) -> str:
        pattern = self.pattern_name or "custom"
        return f"Tokenizer(vocab_size={self.vocab_size}, merges={len(self._merges)}, special_tokens={list(self._specials)}, pattern={pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and self.to_dict() == other.to_dict()

    __hash__ = None  # mutable-looking value type; use fingerprint() as a key


def default_vocab(merges: Sequence[tuple[bytes, bytes]]) -> dict[int, bytes]:
    """The trained layout: ids 0..255 are the bytes, 256 + i is merges[i] joined.

    >>> default_vocab([(b"a", b"b")])[256]
    b'ab'
    """
    vocab = {i: bytes([i]) for i in range(256)}  # id -> bytes
    for i, (a, b) in enumerate(merges):
        vocab[256 + i] = a + b
    return vocab


_worker_state: tuple[Tokenizer, dict] | None = None  # set in each encode_batch worker process


def _init_worker(state: dict, kwargs: dict) -> None:
    global _worker_state
    _worker_state = (Tokenizer._from_dict(state), kwargs)


def _encode_in_worker(text: str) -> list[int]:
    tok, kwargs = _worker_state
    return tok.encode(text, **kwargs)


def _encode_texts_in_worker(texts: list[str]) -> list[list[int]]:
    return [_encode_in_worker(t) for t in texts]
