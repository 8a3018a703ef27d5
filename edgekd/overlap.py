"""Which rows are contiguous runs of words inside other rows, in memory linear in the
total number of words.

The selection split (`edgekd.data.carve_selection`) needs two answers: which rows no
other row contains (a phrase dataset's whole sentences), and which training rows sit
inside a held-out row. Listing every run of every row answers both, but an n-word row
has n(n+1)/2 runs of ~n/3 words: a 1,287-word review alone is 828k tuples, 2.8 GB.

Here each window of words has a polynomial hash under two primes near 2^31, read in
O(1) from prefix sums, so a query row is looked up, not enumerated: the positions
where its first (up to) `ANCHOR` words occur are found by binary search in a sorted
array of all anchors, each candidate's whole window is compared by hash, and the one
that matches is compared word by word, so a hash collision can never make a false
answer. Memory: a few 8-byte arrays per word in the rows (SST-2: 67k rows, 0.7M words,
~40 MB); time: one sort per anchor length plus the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Two primes below 2^31: a residue times a residue stays below 2^62, inside uint64,
# and a pair of residues packs into one uint64 key (31 + 31 bits).
PRIMES = (2_147_483_647, 2_147_483_629)
BASES = (911_382_323, 972_663_749)
ANCHOR = 4  # words of a query looked up directly; longer queries check each candidate
CHUNK = 1 << 16  # candidates compared per step, so one common anchor stays cheap


def _powers(base: int, prime: int, n: int) -> np.ndarray:
    """base^k mod prime for k in [0, n), without an n-step Python loop: a block of
    1,024 small powers times one power per block (n/1,024 steps)."""
    block = 1024
    small = np.empty(block, dtype=np.uint64)
    acc = 1
    for k in range(block):
        small[k] = acc
        acc = acc * base % prime
    step, blocks = acc, -(-n // block)  # base^1024
    big = np.empty(blocks, dtype=np.uint64)
    acc = 1
    for j in range(blocks):
        big[j] = acc
        acc = acc * step % prime
    return ((big[:, None] * small[None, :]) % np.uint64(prime)).reshape(-1)[:n]


class _Arena:
    """Rows as word ids laid end to end, with what makes any window's hash O(1)."""

    def __init__(self, rows: Sequence[tuple[str, ...]], vocab: dict[str, int]) -> None:
        self.lengths = np.array([len(r) for r in rows], dtype=np.int64)
        self.starts = np.zeros(len(rows), dtype=np.int64)
        np.cumsum(self.lengths[:-1], out=self.starts[1:])
        total = int(self.lengths.sum())
        self.ids = np.fromiter(
            (vocab.setdefault(w, len(vocab) + 1) for r in rows for w in r),
            dtype=np.uint64,
            count=total,
        )
        # The row each word belongs to, and where that row ends.
        self.row_of = np.repeat(np.arange(len(rows), dtype=np.int64), self.lengths)
        self.end_of = (self.starts + self.lengths)[self.row_of]
        self.prefix, self.inverse = [], []
        for base, prime in zip(BASES, PRIMES, strict=True):
            p = np.uint64(prime)
            powers = _powers(base, prime, total + 1)
            # Terms are < 2^31 and there are < 2^32 of them: the running sum fits uint64.
            terms = (self.ids % p) * powers[:total] % p
            self.prefix.append(np.concatenate([[np.uint64(0)], np.cumsum(terms, dtype=np.uint64)]))
            self.inverse.append(_powers(pow(base, prime - 2, prime), prime, total + 1))

    def keys(self, at: np.ndarray, length: np.ndarray | int) -> np.ndarray:
        """One uint64 per window (start `at`, `length` words), equal for equal windows
        wherever they sit: the windowed sum times base^-start, per prime, packed."""
        out = np.zeros(len(at), dtype=np.uint64)
        for prefix, inverse, prime in zip(self.prefix, self.inverse, PRIMES, strict=True):
            p = np.uint64(prime)
            h = (prefix[at + length] - prefix[at]) % p * inverse[at] % p
            out = (out << np.uint64(31)) | h
        return out


def contained(
    queries: Sequence[tuple[str, ...]],
    containers: Sequence[tuple[str, ...]],
    same: bool = False,
) -> list[bool]:
    """For each query, whether it is a contiguous run of words of some container.

    `same=True` means `queries` *are* `containers` (distinct rows): a row is not
    counted as inside itself, so the answer is "inside another row". An empty query is
    inside nothing."""
    vocab: dict[str, int] = {}
    box = _Arena(containers, vocab)
    ask = box if same else _Arena(queries, vocab)
    out = [False] * len(queries)
    if not len(box.ids) or not len(ask.ids):
        return out
    for k in range(1, ANCHOR + 1):
        # Queries anchored by k words: those of exactly k words, or (k = ANCHOR) longer.
        lengths = ask.lengths
        which = np.flatnonzero((lengths == k) | ((lengths > k) & (k == ANCHOR)))
        if not len(which):
            continue
        where = np.flatnonzero(box.end_of - np.arange(len(box.ids)) >= k)  # windows in a row
        anchors = box.keys(where, k)
        order = np.argsort(anchors, kind="stable")
        anchors, where = anchors[order], where[order]
        # Each query's rarest k-word window anchors it: rows from one template share
        # their first words, and anchoring on those checked every row against every
        # other (4,000 such rows took 0.7 s, 67,000 would take minutes).
        fits = ask.end_of - np.arange(len(ask.ids)) >= k  # a k-word window starts here
        mine = np.flatnonzero(np.isin(ask.row_of, which) & fits)
        keys = ask.keys(mine, k)
        lo = np.searchsorted(anchors, keys, side="left")
        hi = np.searchsorted(anchors, keys, side="right")
        rows = ask.row_of[mine]
        best = np.lexsort((hi - lo, rows))  # by row, then fewest matches first
        rows, first = np.unique(rows[best], return_index=True)
        pick = best[first]
        offsets = mine[pick] - ask.starts[rows]
        for q, offset, a, b in zip(
            rows.tolist(), offsets.tolist(), lo[pick].tolist(), hi[pick].tolist(), strict=True
        ):
            if b > a:
                out[q] = _inside(ask, q, box, where[a:b], offset, same)
    return out


def _inside(ask: _Arena, q: int, box: _Arena, at: np.ndarray, offset: int, same: bool) -> bool:
    """Whether query `q` is a window of `box`, given `at`: where the query's anchor (its
    window at `offset`) occurs there."""
    start, length = int(ask.starts[q]), int(ask.lengths[q])
    words = ask.ids[start : start + length]
    key = ask.keys(np.array([start]), length)[0]
    for c in range(0, len(at), CHUNK):
        found = at[c : c + CHUNK]
        pos = found - offset  # where the query would start
        inside = (pos >= box.starts[box.row_of[found]]) & (pos + length <= box.end_of[found])
        pos = pos[inside]
        if same:
            pos = pos[box.row_of[pos] != q]
        for p in pos[box.keys(pos, length) == key].tolist():
            if np.array_equal(box.ids[p : p + length], words):  # never trust a hash alone
                return True
    return False
