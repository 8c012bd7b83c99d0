"""The BPE merge loop: learn merges from deduplicated pre-token counts, with incremental pair counts.

Input is `{pre-token bytes: count}` (see `tokenizer.pretoken_counts`); each distinct pre-token ("word") is a list
of token ids, starting as its bytes. Per merge, only the words that contain the chosen pair are rewritten, and
only the pairs next to each occurrence change: merging (a, b) into t in `x a b y` removes (x, a), (a, b), (b, y)
and adds (x, t), (t, y), each weighted by the word's count.

* `pair_counts[(a, b)]` is the number of adjacent (a, b) occurrences, weighted by word count.
* `where[(a, b)]` lists the words that contained (a, b) at some point, each once: an adjacency (a, b) first
  appears when the newer of a and b is created, so each list is built in one pass. An entry may be stale (the
  word no longer has the pair); such a word is simply found to have no occurrence.
* A lazy max-heap holds upper bounds: merging (a, b) only lowers the counts of pairs that already existed and
  creates pairs that contain the new token, which are pushed once per merge. A popped entry whose count is out
  of date is pushed back with its current count, so the first up-to-date entry popped is the true maximum.

Tie-break (total, so results never depend on dict or heap order): highest count, then the lexicographically
greatest pair of byte strings, i.e. max over `(count, bytes_a, bytes_b)`. Heap keys are `(-count, inv(a), inv(b))`
where `inv` is an order-reversing string encoding of bytes (see `_inverted`), because bytes cannot be negated.

Not handled here: pre-tokenization and special tokens (the caller removes specials before counting).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping

from tokenizer.stop import check as check_stop

_INVERT = {x: chr(256 - x) for x in range(256)}
_END = chr(257)  # sorts above every inverted byte, so a prefix sorts after its extensions


def _inverted(b: bytes) -> str:
    """Order-reversing key: b1 < b2  <=>  _inverted(b1) > _inverted(b2) (prefixes included).

    >>> _inverted(b"ab") > _inverted(b"abc") > _inverted(b"b")
    True
    """
    return "".join(_INVERT[x] for x in b) + _END


def learn_merges(word_counts: Mapping[bytes, int] | Iterable[tuple[bytes, int]], n_merges: int,
                 min_frequency: int = 1, on_merge: Callable[[int], None] | None = None) -> list[tuple[bytes, bytes]]:
    """Up to `n_merges` merges, in order; fewer if no pair with count >= max(min_frequency, 1) is left.
    `word_counts`: {distinct pre-token: count}, or its items (e.g. a generator that drains a big dict).

    >>> learn_merges({b"aaabdaaabac": 1}, 3)
    [(b'a', b'a'), (b'aa', b'a'), (b'aaa', b'b')]
    """
    token_bytes: list[bytes] = [bytes([i]) for i in range(256)]  # id -> bytes
    inv: list[str] = [_inverted(b) for b in token_bytes]  # id -> heap tie-break key
    words: list[list[int]] = []  # distinct pre-tokens as token ids
    counts: list[int] = []  # words[i] occurs counts[i] times
    for w, c in word_counts.items() if isinstance(word_counts, Mapping) else word_counts:
        words.append(list(w))
        counts.append(c)

    pair_counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], list[int]] = {}
    for wi, (w, c) in enumerate(zip(words, counts)):
        for pair in zip(w, w[1:]):
            pair_counts[pair] = pair_counts.get(pair, 0) + c
            lst = where.get(pair)
            if lst is None:
                where[pair] = [wi]
            elif lst[-1] != wi:
                lst.append(wi)

    heap = [(-n, inv[a], inv[b], a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)
    threshold = max(1, min_frequency)
    merges: list[tuple[bytes, bytes]] = []
    heappush, heappop = heapq.heappush, heapq.heappop

    while len(merges) < n_merges and heap:
        check_stop()  # a Ctrl-C whose raise was dropped (tokenizer/stop.py)
        neg, _, _, a, b = heappop(heap)
        current = pair_counts.get((a, b), 0)
        if current != -neg:  # stale upper bound: re-queue with the true count
            if current > 0:
                heappush(heap, (-current, inv[a], inv[b], a, b))
            continue
        if current < threshold:
            break  # the true maximum is below the threshold

        new = len(token_bytes)
        token_bytes.append(token_bytes[a] + token_bytes[b])
        inv.append(_inverted(token_bytes[new]))
        merges.append((token_bytes[a], token_bytes[b]))
        created: list[tuple[int, int]] = []  # pairs containing `new`, pushed once at the end
        removed: list[tuple[int, int]] = []  # per word: pairs lost, and pairs gained
        added: list[tuple[int, int]] = []

        for wi in where.pop((a, b)):
            w = words[wi]
            n_w = len(w)
            c = counts[wi]
            out: list[int] = []
            done = 0  # w[:done] has been rewritten into out
            i = 0
            while True:
                try:
                    i = w.index(a, i, n_w - 1)  # an occurrence of (a, b) starts at i <= n_w - 2
                except ValueError:
                    break
                if w[i + 1] != b:
                    i += 1
                    continue
                out.extend(w[done:i])
                if out:
                    left = out[-1]
                    if done != i:  # else (b, a) was already removed as the previous right pair
                        removed.append((left, a))
                    added.append((left, new))
                if i + 2 < n_w:
                    right = w[i + 2]
                    removed.append((b, right))
                    if not (right == a and i + 3 < n_w and w[i + 3] == b):  # else the next one adds (new, new)
                        added.append((new, right))
                out.append(new)
                i += 2
                done = i
            if done:
                out.extend(w[done:])
                words[wi] = out
                for pair in removed:
                    n = pair_counts[pair] - c
                    if n:
                        pair_counts[pair] = n
                    else:  # the pair is gone from every word: drop its index too (heap entries go stale)
                        del pair_counts[pair]
                        where.pop(pair, None)
                for pair in added:
                    pair_counts[pair] = pair_counts.get(pair, 0) + c
                    lst = where.get(pair)
                    if lst is None:
                        where[pair] = [wi]
                        created.append(pair)
                    elif lst[-1] != wi:
                        lst.append(wi)
                removed.clear()
                added.clear()
            # done == 0: a stale index entry, the word no longer contains (a, b)

        pair_counts.pop((a, b), None)  # every occurrence is merged now (the count is not kept up to date above)
        for pair in created:
            n = pair_counts.get(pair, 0)
            if n:
                heappush(heap, (-n, inv[pair[0]], inv[pair[1]], pair[0], pair[1]))
        if len(heap) > 2 * len(pair_counts) + 1000:  # mostly stale entries: rebuild, to bound memory
            heap = [(-n, inv[a], inv[b], a, b) for (a, b), n in pair_counts.items()]
            heapq.heapify(heap)
        if on_merge is not None:
            on_merge(len(merges))
    return merges

