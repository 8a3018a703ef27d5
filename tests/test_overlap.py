"""Which rows sit inside other rows: the hashed-window lookup gives exactly what listing
every run of words gives, and a long row costs its length, not its length cubed."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from edgekd.overlap import contained

Row = tuple[str, ...]


def runs(row: Row) -> set[Row]:
    """Every contiguous run of words: the definition, n(n+1)/2 of them."""
    return {row[i:j] for i in range(len(row)) for j in range(i + 1, len(row) + 1)}


def inside_another(rows: list[Row]) -> list[bool]:
    return [any(r != o and r in runs(o) for o in rows) for r in rows]


def inside_any(queries: list[Row], containers: list[Row]) -> list[bool]:
    every = set().union(*map(runs, containers)) if containers else set()
    return [q in every for q in queries]


# Two or three words only: runs repeat and overlap, so anchors collide on purpose.
ROWS = st.lists(st.lists(st.sampled_from("abc"), max_size=9).map(tuple), max_size=12)


@settings(max_examples=300, deadline=None)
@given(rows=ROWS)
def test_contained_same_matches_listing_every_run(rows):
    distinct = list(dict.fromkeys(rows))
    assert contained(distinct, distinct, same=True) == inside_another(distinct)


@settings(max_examples=300, deadline=None)
@given(queries=ROWS, containers=ROWS)
def test_contained_in_others_matches_listing_every_run(queries, containers):
    assert contained(queries, containers) == inside_any(queries, containers)


def test_contained_finds_a_run_deep_inside_a_long_row_without_listing_its_runs():
    # 20,000 words: listing its runs would be 200M tuples (~70 GB); the lookup holds a
    # few arrays of 20,000 entries.
    long = tuple(f"w{i % 997}" for i in range(20_000))
    queries = [long[12_345:12_400], long[5:6], ("w1", "w3"), long, ()]
    # tracemalloc's peak, not the process's lifetime peak RSS (in a worker that loaded
    # torch before, that reads ~0 growth until the blow-up passes it).
    tracemalloc.start()
    try:
        assert contained(queries, [long]) == [True, True, False, True, False]
        assert contained([long, long[:10]], [long, long[:10]], same=True) == [False, True]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, peak  # the listing needs gigabytes


def test_contained_never_trusts_a_hash_alone(monkeypatch):
    # Every window hashing alike: answers must still come from comparing the words.
    import numpy as np

    from edgekd import overlap

    monkeypatch.setattr(
        overlap._Arena, "keys", lambda self, at, length: np.zeros(len(at), dtype=np.uint64)
    )
    rows = [("a", "b"), ("b", "a"), ("a", "b", "c"), ("c",)]
    assert contained(rows, rows, same=True) == inside_another(rows)


def test_contained_anchors_each_row_on_its_rarest_window(monkeypatch):
    # Rows from one template share their first words: anchored there, each of n rows
    # was checked against all n (n² candidates); on its rarest window, against itself.
    import random

    from edgekd import overlap

    rng = random.Random(0)
    head = ("classify", "the", "sentiment", ":")
    rows = list(
        dict.fromkeys(
            head + tuple(f"w{rng.randrange(5000)}" for _ in range(15)) for _ in range(2000)
        )
    )
    checked = []
    inside = overlap._inside
    monkeypatch.setattr(
        overlap,
        "_inside",
        lambda ask, q, box, at, *rest: checked.append(len(at)) or inside(ask, q, box, at, *rest),
    )
    assert contained(rows, rows, same=True) == [False] * len(rows)
    assert sum(checked) < 3 * len(rows), sum(checked)  # ~1 per row, never ~n per row
