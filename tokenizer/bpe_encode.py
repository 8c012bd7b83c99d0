"""The hot path of encoding: the BPE merge loop for one pre-token, and the bounded pre-token cache.

`merge_ids` applies the merges to the byte ids of one pre-token: repeatedly merge the adjacent pair with the
lowest merge rank (leftmost on ties) until no adjacent pair has a rank, one merge at a time (exactly the
reference rule). Short pre-tokens keep a list of pair ranks and use C-level min()/index() per merge; long ones
use a heap over a linked list, so a 100 kB whitespace run costs O(n log n), not O(n^2).

`PretokenCache` maps pre-token text -> tuple of ids. Natural text is Zipfian, so a few thousand entries serve
most pre-tokens with one dict lookup. It is bounded (entries and piece length); when full it drops the oldest
half, so frequent pre-tokens are re-added at once. `merge_cache` (what `Tokenizer` uses) is a `PretokenCache`
whose `__missing__` is a merge loop tuned for the cold-cache case (`_packed_missing`); `piece_encoder` is the
same loop without the cache.

Not handled here: pre-tokenization and special tokens (see `tokenizer.tokenizer`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import islice, repeat
from operator import lshift, or_

# Pieces with more ids than this go to the heap merge; below it the plain loop is faster.
HEAP_THRESHOLD = 256


def merge_ids(ids: list[int], pair_rank: dict[tuple[int, int], int], rank_id: list[int]) -> list[int]:
    """Apply BPE merges to one pre-token's ids.

    pair_rank: (left id, right id) -> merge rank (its index in the merge list)
    rank_id:   merge rank -> id of the merged token

    >>> merge_ids([97, 97, 98], {(97, 97): 0, (256, 98): 1}, [256, 257])
    [257]
    """
    n = len(ids)
    if n < 2:
        return ids
    if n > HEAP_THRESHOLD:
        return _merge_heap(ids, pair_rank, rank_id)
    # ranks[i] = rank of the pair (ids[i], ids[i+1]); min() and index() run in C, so each merge is cheap
    get = pair_rank.get
    none = len(rank_id)  # "no merge": above every real rank
    ids = list(ids)
    ranks = list(map(get, zip(ids, ids[1:]), repeat(none)))
    while True:
        rank = min(ranks)
        if rank == none:
            return ids
        i = ranks.index(rank)  # leftmost pair with the lowest rank
        ids[i] = new = rank_id[rank]
        del ids[i + 1]
        del ranks[i]
        if i < len(ranks):
            ranks[i] = get((new, ids[i + 1]), none)
        elif not ranks:
            return ids
        if i:
            ranks[i - 1] = get((ids[i - 1], new), none)


def _merge_heap(ids: list[int], pair_rank: dict[tuple[int, int], int], rank_id: list[int]) -> list[int]:
    """Exact lowest-rank-leftmost-first merging in O(n log n): a heap of (rank, position) over a linked list."""
    n = len(ids)
    tok = list(ids)
    nxt = list(range(1, n + 1))  # nxt[i] == n: no right neighbour
    prv = list(range(-1, n - 1))
    alive = [True] * n
    get = pair_rank.get
    heap = []
    for i in range(n - 1):
        r = get((tok[i], tok[i + 1]))
        if r is not None:
            heap.append((r, i))
    heapq.heapify(heap)
    while heap:
        r, i = heapq.heappop(heap)
        if not alive[i]:
            continue
        j = nxt[i]
        if j >= n or get((tok[i], tok[j])) != r:
            continue  # stale entry: one side was merged since it was pushed
        tok[i] = rank_id[r]
        alive[j] = False
        k = nxt[j]
        nxt[i] = k
        if k < n:
            prv[k] = i
            r2 = get((tok[i], tok[k]))
            if r2 is not None:
                heapq.heappush(heap, (r2, i))
        p = prv[i]
        if p >= 0:
            r2 = get((tok[p], tok[i]))
            if r2 is not None:
                heapq.heappush(heap, (r2, p))
    return [tok[i] for i in range(n) if alive[i]]


def piece_encoder(
    pair_rank: dict[tuple[int, int], int], rank_id: list[int], byte_ids: list[int]
) -> Callable[[str], tuple[int, ...]]:
    """pre-token text -> tuple of ids (UTF-8 bytes -> byte ids -> `merge_ids`), as one fast function.

    Same result as `tuple(merge_ids([byte_ids[b] for b in text.encode()], pair_rank, rank_id))`.
    Lone surrogates (not valid text) are encoded as U+FFFD, as tiktoken does.
    """
    missing = _packed_missing(pair_rank, rank_id, byte_ids)
    return lambda piece: missing(None, piece)


def merge_cache(
    pair_rank: dict[tuple[int, int], int], rank_id: list[int], byte_ids: list[int], **kwargs
) -> PretokenCache:
    """A `PretokenCache` whose miss handler runs the merge loop itself (no extra call per miss); `encode_piece`
    is `piece_encoder(...)`. kwargs: maxsize, max_piece_len."""
    missing = _packed_missing(pair_rank, rank_id, byte_ids)
    cls = type("MergeCache", (PretokenCache,), {"__missing__": missing, "__slots__": ()})
    return cls(lambda piece: missing(None, piece), **kwargs)


def _packed_missing(pair_rank: dict[tuple[int, int], int], rank_id: list[int], byte_ids: list[int]):
    """The merge loop for short pieces, built for speed (the cold-cache cost of encoding is this loop):

    * a pair is one int key (left << shift | right) in a dict whose value packs the merge's rank and the merged
      id (rank << shift | id): no tuples are built, and the smallest value is the lowest rank;
    * byte ids come from bytes.translate when they are a permutation of 0..255 (GPT-2's), else from the bytes;
    * it is the cache's `__missing__(cache, piece)` itself (stores the result in `cache` unless it is None).
    """
    shift = max(max(rank_id, default=0), max(byte_ids)).bit_length()
    mask = (1 << shift) - 1
    packed = {(a << shift) | b: (r << shift) | rank_id[r] for (a, b), r in pair_rank.items()}
    none = len(rank_id) << shift | mask  # above every packed value
    get = packed.get
    if byte_ids == list(range(256)):
        table = None
    elif sorted(byte_ids) == list(range(256)):
        table = bytes(byte_ids)
    else:
        table = False

    def missing(cache: PretokenCache | None, piece: str) -> tuple[int, ...]:
        try:
            data = piece.encode("utf-8")
        except UnicodeEncodeError:
            data = fix_surrogates(piece).encode("utf-8")
        if table is False:
            ids = [byte_ids[b] for b in data]
        else:
            ids = list(data.translate(table)) if table else list(data)
        n = len(ids)
        if n < 2:
            out = tuple(ids)
        elif n > HEAP_THRESHOLD:
            out = tuple(_merge_heap(ids, pair_rank, rank_id))
        else:
            ranks = list(map(get, map(or_, map(lshift, ids, repeat(shift, n - 1)), islice(ids, 1, None)), repeat(none)))
            while True:
                v = min(ranks)
                if v == none:
                    out = tuple(ids)
                    break
                i = ranks.index(v)  # leftmost pair with the lowest rank
                ids[i] = new = v & mask
                del ids[i + 1]
                del ranks[i]
                if i < len(ranks):
                    ranks[i] = get((new << shift) | ids[i + 1], none)
                elif not ranks:
                    out = (new,)
                    break
                if i:
                    ranks[i - 1] = get((ids[i - 1] << shift) | new, none)
        if cache is not None and len(piece) <= cache.max_piece_len:
            if len(cache) >= cache.maxsize:
                cache._evict()
            cache[piece] = out
        return out

    return missing


def fix_surrogates(text: str) -> str:
    """Join valid surrogate pairs, replace lone surrogates by U+FFFD (tiktoken's rule); the encoder and the
    trainer both use it, so they see the same text.

    >>> fix_surrogates("\\ud83d\\ude00 \\ud83d") == "\\U0001f600 \\ufffd"
    True
    """
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class PretokenCache(dict):
    """pre-token text -> tuple of ids, computed on a miss by `encode_piece`; bounded.

    Use `cache[piece]` (a plain C dict lookup on a hit). Pieces longer than `max_piece_len` characters are
    encoded but not stored, so the cache's memory is bounded by about maxsize * max_piece_len characters.
    """

    def __init__(self, encode_piece: Callable[[str], tuple[int, ...]], maxsize: int = 1 << 16, max_piece_len: int = 64):
        super().__init__()
        self.encode_piece = encode_piece
        self.maxsize = maxsize
        self.max_piece_len = max_piece_len

    def __missing__(self, piece: str) -> tuple[int, ...]:
        ids = self.encode_piece(piece)
        if len(piece) <= self.max_piece_len:
            if len(self) >= self.maxsize:
                self._evict()
            self[piece] = ids
        return ids

    def _evict(self) -> None:
        """Drop the oldest half (dicts keep insertion order); frequent pieces come straight back."""
        for key in list(islice(iter(self), len(self) // 2 + 1)):
            del self[key]

    def __reduce__(self):  # never pickle the cache's contents or the bound method
        return (dict, ())
