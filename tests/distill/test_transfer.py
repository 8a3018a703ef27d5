"""Augmented rows on disk: the Arrow column reads back as the rows written, chains with
the training texts as one sequence, and gives the run the rows it had in memory."""

from __future__ import annotations

import random

import numpy as np
import pytest

from edgekd.config import DistillConfig
from edgekd.distill import transfer
from edgekd.distill.transfer import Chained, TextColumn, permute, write_column

ROWS = ["a b", "ç ü 中文", "", "the film", "x" * 300]
PAIRS = [("a", "b"), ("c d", "é"), ("", "f")]


def test_text_column_reads_back_rows_sources_and_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer, "BATCH_ROWS", 2)  # several record batches
    path = tmp_path / "rows.arrow"
    assert write_column(path, ((t, i * 7) for i, t in enumerate(ROWS)), pairs=False) == 5
    col = TextColumn(path)
    assert len(col) == 5 and list(col) == ROWS and col[:] == ROWS
    assert col[1] == ROWS[1] and col[-1] == ROWS[-1] and col[1:4] == ROWS[1:4]
    assert col[::2] == ROWS[::2] and col[3:100] == ROWS[3:]
    assert col.sources.tolist() == [0, 7, 14, 21, 28] and col.sources.dtype == np.int32
    head = col.head(2)
    assert list(head) == ROWS[:2] and head.sources.tolist() == [0, 7]
    with pytest.raises(IndexError):
        col[5]
    assert not list(tmp_path.glob(".*"))  # the temp file was renamed, none left


def test_text_column_keeps_pairs_as_tuples(tmp_path):
    path = tmp_path / "pairs.arrow"
    write_column(path, ((p, 0) for p in PAIRS), pairs=True)
    col = TextColumn(path)
    assert list(col) == PAIRS and col[1] == PAIRS[1] and col[0:2] == PAIRS[0:2]


def test_permute_writes_rows_in_the_given_order(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer, "BATCH_ROWS", 2)
    write_column(tmp_path / "a.arrow", ((t, i) for i, t in enumerate(ROWS)), pairs=False)
    order = np.array([4, 0, 3, 1, 2])
    permute(TextColumn(tmp_path / "a.arrow"), order, tmp_path / "b.arrow")
    out = TextColumn(tmp_path / "b.arrow")
    assert list(out) == [ROWS[i] for i in order] and out.sources.tolist() == order.tolist()


def test_chained_indexes_slices_and_samples_as_the_joined_list(tmp_path):
    write_column(tmp_path / "a.arrow", ((t, 0) for t in ROWS), pairs=False)
    train = ["t0", "t1", "t2"]
    joined = train + ROWS
    chain = train + TextColumn(tmp_path / "a.arrow")  # list + column: no copy
    assert isinstance(chain, Chained) and len(chain) == len(joined)
    assert list(chain) == joined and [chain[i] for i in range(-8, 8)] == joined + joined
    for a, b in [(0, 8), (2, 4), (3, 3), (1, 7), (5, 100)]:
        assert chain[a:b] == joined[a:b]
    # The calibration sample is drawn from a chain: the same draw as from the list.
    assert random.Random(3).sample(chain, 5) == random.Random(3).sample(joined, 5)
    assert list(Chained([chain, ["z"]])) == [*joined, "z"]


def test_damaged_column_reads_as_none(tmp_path):
    path = tmp_path / "cut.arrow"
    write_column(path, ((t, 0) for t in ROWS), pairs=False)
    path.write_bytes(path.read_bytes()[:40])
    assert TextColumn.read(path) is None and TextColumn.read(tmp_path / "none") is None
    import pyarrow as pa

    other = tmp_path / "other.arrow"  # an Arrow file, but not one of these columns
    with pa.OSFile(str(other), "wb") as sink, pa.ipc.new_file(sink, pa.schema([("x", pa.int8())])):
        pass
    assert TextColumn.read(other) is None


def cfg(**augment) -> DistillConfig:
    return DistillConfig(
        teacher="t",
        augment={"methods": [{"name": "mask", "options": {"p": 0.5}}], "n_iter": 6, **augment},
    )


TRAIN = [f"w{i} the film is good fun {i}" for i in range(40)] + ["a dull plot", "dull plot"]


def test_augmented_texts_equal_in_memory_generation_in_seeded_order():
    from edgekd.distill.augment import MaskAugmenter, generate_with_sources
    from edgekd.distill.labeling import augmented_texts

    c = cfg(sources="all")
    rows, sources = augmented_texts(c, TRAIN, None)
    made, made_sources = generate_with_sources(
        TRAIN, MaskAugmenter(p=0.5), c.augment.n_iter, c.augment.seed, known=TRAIN
    )
    order = random.Random(c.augment.seed).sample(range(len(made)), len(made))
    assert list(rows) == [made[i] for i in order]
    assert sources.tolist() == [made_sources[i] for i in order]


def test_augmented_texts_read_the_cache_on_a_rerun(monkeypatch):
    from edgekd.distill import augment
    from edgekd.distill.labeling import augmented_texts

    first, _ = augmented_texts(cfg(), TRAIN, None)

    def fail(*a, **k):
        raise AssertionError("generated again")

    monkeypatch.setattr(augment, "variants", fail)
    again, _ = augmented_texts(cfg(), TRAIN, None)
    assert again.path == first.path and list(again) == list(first)
    # Other training texts are another file.
    with pytest.raises(AssertionError, match="generated again"):
        augmented_texts(cfg(), [*TRAIN, "one more row"], None)


def test_augmented_texts_made_again_when_augmenter_code_differs(monkeypatch):
    from edgekd.distill import augment, labeling

    first, _ = labeling.augmented_texts(cfg(), TRAIN, None)
    monkeypatch.setattr(labeling, "augment_code", lambda: "an edited augment.py")
    made = []
    real = augment.variants
    monkeypatch.setattr(augment, "variants", lambda *a, **k: made.append(1) or real(*a, **k))
    again, _ = labeling.augmented_texts(cfg(), TRAIN, None)
    assert made and again.path != first.path and list(again) == list(first)


def test_augmented_texts_make_a_damaged_cache_again():
    from edgekd.distill.labeling import augmented_texts

    first, _ = augmented_texts(cfg(), TRAIN, None)
    rows = list(first)
    first.path.write_bytes(b"not arrow")
    again, _ = augmented_texts(cfg(), TRAIN, None)
    assert list(again) == rows


def test_augmented_texts_without_text_methods_are_empty():
    from edgekd.distill.labeling import augmented_texts

    rows, sources = augmented_texts(
        DistillConfig(teacher="t", augment={"methods": []}), TRAIN, None
    )
    assert len(rows) == 0 and not rows and len(sources) == 0
    assert list(TRAIN + rows) == TRAIN


def test_taken_column_reads_rows_sources_and_prefixes_in_its_order(tmp_path, monkeypatch):
    from edgekd.distill.transfer import TakenColumn

    monkeypatch.setattr(transfer, "BATCH_ROWS", 2)
    path = tmp_path / "rows.arrow"
    write_column(path, ((t, i * 7) for i, t in enumerate(ROWS)), pairs=False)
    order = np.array([3, 0, 4, 1, 2])
    col = TakenColumn(TextColumn(path), order)
    want = [ROWS[i] for i in order]
    assert len(col) == 5 and list(col) == want and col[:] == want and col[1:3] == want[1:3]
    assert col[0] == ROWS[3] and col[-1] == ROWS[2] and col[::2] == want[::2]
    assert col.sources.tolist() == [21, 0, 28, 7, 14]
    head = col.head(2)
    assert list(head) == want[:2] and head.sources.tolist() == [21, 0]
    assert list(["t"] + col) == ["t", *want]  # noqa: RUF005 (joins through __radd__)
    assert col[::-1] == want[::-1] and col[-2:] == want[-2:]
    assert col[3:1] == [] and col[10:20] == [] and list(col.head(0)) == []
    with pytest.raises(IndexError):
        col[5]
