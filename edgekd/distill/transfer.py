"""Augmented rows on disk: an Arrow IPC file, memory-mapped.

A transfer set grows with its augmentation: Tang et al.'s 20 variants of SST-2's
6.9k sentences are 115k rows, of a million-row corpus 20 million. Held as Python
strings each row costs ~100-200 B of heap (a `str` object is 49 B plus its
characters, plus a list slot, plus the set that deduplicates them), so peak memory
would grow with the augmentation. Here the variants are written to disk as they are
generated, deduplicated by an 8-byte digest (`seen` costs ~70 B per row while
generating, then is freed), and read back through a memory map: the pages are the
kernel's to drop, and a row becomes a Python string only while a chunk of it is
tokenized, labelled or batched.

The file lives in edgekd's cache (beside the teacher logits), named by what it
depends on (the training texts and the augmentation config), so a rerun or a
resumed run reads it instead of generating again.
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.distill.cache import row_bytes

# Rows per Arrow record batch, and per chunk when a column is iterated or permuted:
# ~4 MB of SST-2 text at a time.
BATCH_ROWS = 65_536


def digest(text: Any) -> int:
    """An 8-byte digest of a text or a pair: stable across processes (Python's `hash`
    of a str is salted per process), so deduplication never depends on the run.
    Two distinct rows share a digest with probability ~n²/2⁶⁵: ~3e-6 at 10M rows."""
    return int.from_bytes(hashlib.blake2b(row_bytes(text), digest_size=8).digest(), "little")


class Joinable(Sequence[Any]):
    """`a + b` joins without copying (`Chained`), whichever side is a plain list."""

    def __add__(self, other: Sequence[Any]) -> Chained:
        return Chained([self, other])

    def __radd__(self, other: Sequence[Any]) -> Chained:
        return Chained([other, self])


class TextColumn(Joinable):
    """Texts (or sentence pairs) with the index of the training text each came from,
    read from an Arrow IPC file through a memory map. Indexing gives a row, slicing a
    list of rows (only that slice becomes Python strings), `head(n)` a prefix view."""

    def __init__(self, path: str | Path, table: Any = None) -> None:
        import pyarrow as pa

        self.path = Path(path)
        if table is None:
            table = pa.ipc.open_file(pa.memory_map(str(self.path), "r")).read_all()
        self.table = table
        self._a = table.column("text")  # KeyError when a file lacks a column
        self._b = table.column("text_b") if "text_b" in table.column_names else None
        self._sources = table.column("source")

    @classmethod
    def read(cls, path: Path) -> TextColumn | None:
        """The column at `path`, or None when there is none or it does not read back
        (a file cut short by a crash: it is only a cache, so it is made again)."""
        import pyarrow as pa

        if not path.is_file():
            return None
        try:
            return cls(path)
        except (OSError, KeyError, pa.ArrowException):
            return None

    @classmethod
    def empty(cls) -> TextColumn:
        """No rows (a run without text augmentation), nothing on disk."""
        import pyarrow as pa

        table = pa.table(
            {"text": pa.array([], pa.large_string()), "source": pa.array([], pa.int32())}
        )
        return cls("", table)

    @property
    def sources(self) -> np.ndarray:
        """Per row, the index of the training text it is a variant of (int32)."""
        return np.asarray(self._sources.to_numpy(), dtype=np.int32)

    def head(self, n: int) -> TextColumn:
        """The first `n` rows, sharing this column's map."""
        return TextColumn(self.path, self.table.slice(0, max(0, min(n, len(self)))))

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            n = max(0, stop - start)
            a = self._a.slice(start, n).to_pylist()
            if self._b is None:
                return a
            return list(zip(a, self._b.slice(start, n).to_pylist(), strict=True))
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        i = int(i) % n
        a = self._a[i].as_py()
        return a if self._b is None else (a, self._b[i].as_py())

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), BATCH_ROWS):
            yield from self[start : start + BATCH_ROWS]


class TakenColumn(Joinable):
    """`column`'s rows in `order` (indices into it), read through the column's map a
    slice at a time: a reordering of a million candidate rows costs 8 bytes a row, not
    the rows. `head(n)` and `sources` follow the order, as a `TextColumn`'s do."""

    def __init__(self, column: TextColumn, order: np.ndarray) -> None:
        self.column, self.order = column, np.asarray(order, np.int64)

    @property
    def sources(self) -> np.ndarray:
        return self.column.sources[self.order]

    def head(self, n: int) -> TakenColumn:
        return TakenColumn(self.column, self.order[: max(0, n)])

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            idx = np.ascontiguousarray(self.order[i])  # a step slice is a strided view
            return TextColumn(self.column.path, self.column.table.take(idx))[:]
        return self.column[int(self.order[i])]

    def __iter__(self) -> Iterator[Any]:
        for start in range(0, len(self), BATCH_ROWS):
            yield from self[start : start + BATCH_ROWS]


class Chained(Joinable):
    """Sequences end to end without copying them (training texts + augmented rows)."""

    def __init__(self, parts: Sequence[Sequence[Any]]) -> None:
        self.parts: list[Sequence[Any]] = [
            q for p in parts for q in (p.parts if isinstance(p, Chained) else [p])
        ]
        self.starts = np.cumsum([0] + [len(p) for p in self.parts]).tolist()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            out: list[Any] = []
            for part, first in zip(self.parts, self.starts, strict=False):
                a, b = max(start - first, 0), min(stop - first, len(part))
                if a < b:
                    out.extend(part[a:b])
            return out
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        i = int(i) % n
        k = bisect.bisect_right(self.starts, i) - 1
        return self.parts[k][i - self.starts[k]]

    def __iter__(self) -> Iterator[Any]:
        for part in self.parts:
            yield from part


def write_column(path: Path, rows: Iterable[tuple[Any, int]], pairs: bool) -> int:
    """Write (text or pair, source index) rows to an Arrow IPC file at `path`, through
    a temp file renamed at the end (a killed run leaves no half file under the name).
    Returns the number of rows."""
    import pyarrow as pa

    fields = [pa.field("text", pa.large_string())]
    if pairs:
        fields.append(pa.field("text_b", pa.large_string()))
    schema = pa.schema([*fields, pa.field("source", pa.int32())])
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            batch: list[tuple[Any, int]] = []

            def flush() -> None:
                texts = [t for t, _ in batch]
                columns = [[t[0] for t in texts], [t[1] for t in texts]] if pairs else [texts]
                arrays = [pa.array(c, pa.large_string()) for c in columns]
                arrays.append(pa.array([s for _, s in batch], pa.int32()))
                writer.write_batch(pa.record_batch(arrays, schema=schema))
                batch.clear()

            for row in rows:
                batch.append(row)
                n += 1
                if len(batch) == BATCH_ROWS:
                    flush()
            if batch or n == 0:
                flush()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def permute(column: TextColumn, order: np.ndarray, path: Path) -> None:
    """Write `column`'s rows in `order` to `path`, `BATCH_ROWS` at a time."""
    pairs = "text_b" in column.table.column_names

    def rows() -> Iterator[tuple[Any, int]]:
        sources = column.sources
        for a in range(0, len(order), BATCH_ROWS):
            idx = order[a : a + BATCH_ROWS]
            taken = column.table.take(idx)
            texts = TextColumn(column.path, taken)[:]
            yield from zip(texts, sources[idx].tolist(), strict=True)

    write_column(path, rows(), pairs)
