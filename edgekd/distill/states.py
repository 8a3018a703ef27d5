"""The teacher's per-token states, compressed, beside its logits (`token_states: k`).

A student that reads the teacher's own WordPiece pieces (the BiLSTM and CNN with
`vocab: wordpiece`, the default for a WordPiece teacher) sees the teacher's tokens
without [CLS]/[SEP]: student token j is teacher token j + 1, one to one. So each
labelled row can teach more than its C logits: the teacher's last-layer state of
every token, projected on the top `k` principal components of those states and
scaled to unit variance per component (`StateBasis`), is a target for a linear map
of the student's own token states (`edgekd.distill.methods.TokenStateLoss`).

Measured (benchmarks/token_states.py): 20,000 SST-2 rows, no augmentation, 8 epochs,
edgekd's own loop, 3 seeds: the last epoch's dev accuracy 0.8589 with k = 32 against
0.8429 with logits alone (median; higher on every seed), at 9% more seconds an epoch.

What is stored: per row, its tokens' k numbers in float16 (`TokenStates`, ragged:
2·k bytes a token; 32 components of SST-2's ~114,000 transfer rows of ~10 pieces
are ~73 MB), cached beside the logits under a key that names k and the basis.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.errors import EdgeKDError

# Tokens the principal components are fitted on: 20,000 of a seeded sample's tokens
# determine 32 directions of a 384-wide state well (SST-2: 74% of the variance).
BASIS_TOKENS = 20_000
BASIS_ROWS = 2_000  # rows labelled (fp32 teacher) to draw those tokens from
# The splits a student trains on: only their rows' states are kept.
STATE_SPLITS = ("train", "augmented")


@dataclass
class TokenStates:
    """Ragged per-token states of `len(self)` rows: row i's tokens are
    `flat[offsets[i]:offsets[i + 1]]`, `k` float16 numbers each."""

    flat: np.ndarray  # tokens × k, float16
    offsets: np.ndarray  # rows + 1, int64, from 0, non-decreasing

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def k(self) -> int:
        return int(self.flat.shape[1])

    @staticmethod
    def empty(k: int) -> TokenStates:
        return TokenStates(np.zeros((0, k), np.float16), np.zeros(1, np.int64))

    @staticmethod
    def of_rows(rows: Sequence[np.ndarray], k: int) -> TokenStates:
        """From one (tokens × k) array per row."""
        lengths = np.array([len(r) for r in rows], np.int64)
        flat = np.concatenate(list(rows)) if len(rows) else np.zeros((0, k))
        return TokenStates(flat.astype(np.float16).reshape(-1, k), np.r_[0, np.cumsum(lengths)])

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, rows: np.ndarray | Sequence[int]) -> TokenStates:
        """The states of `rows`, in that order (repeats allowed)."""
        rows = np.asarray(rows, np.int64)
        lengths = self.lengths()[rows]
        starts = self.offsets[rows]
        # Flat index of every token of every picked row: each row's start, then +0, +1...
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        flat = self.flat[np.repeat(starts, lengths) + within]
        return TokenStates(flat, np.r_[0, np.cumsum(lengths)].astype(np.int64))

    def head(self, n: int) -> TokenStates:
        return TokenStates(self.flat[: self.offsets[n]], self.offsets[: n + 1].copy())

    @staticmethod
    def concat(parts: Sequence[TokenStates], k: int) -> TokenStates:
        flats = [p.flat for p in parts]
        lengths = [p.lengths() for p in parts]
        flat = np.concatenate(flats) if flats else np.zeros((0, k), np.float16)
        ends = np.cumsum(np.concatenate(lengths)) if lengths else np.zeros(0, np.int64)
        return TokenStates(flat.reshape(-1, k), np.r_[0, ends].astype(np.int64))

    def padded(self, rows: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(targets rows × width × k float32, mask rows × width): each row's first
        `width` tokens' states, zeros and mask 0 past its end."""
        rows = np.asarray(rows, np.int64)
        lengths = np.minimum(self.lengths()[rows], width)
        which = np.repeat(np.arange(len(rows)), lengths)
        position = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out = np.zeros((len(rows), width, self.k), np.float32)
        mask = np.zeros((len(rows), width), np.float32)
        out[which, position] = self.flat[self.offsets[rows][which] + position]
        mask[which, position] = 1.0
        return out, mask

    def problem(self, rows: int, k: int) -> str | None:
        """Why these states cannot be `rows` rows of `k` components (None: they can)."""
        o = self.offsets
        if self.flat.dtype != np.float16 or self.flat.ndim != 2 or self.flat.shape[1] != k:
            return f"are {self.flat.shape} {self.flat.dtype}, not (?, {k}) float16"
        if o.dtype != np.int64 or o.ndim != 1 or len(o) != rows + 1:
            return f"have {len(o) - 1} rows, not {rows}"
        if o[0] != 0 or o[-1] != len(self.flat) or (np.diff(o) < 0).any():
            return "have offsets that do not cover their tokens in order"
        if not np.isfinite(self.flat).all():
            return "hold NaN or infinity"
        return None


@dataclass
class StateBasis:
    """The top `k` principal directions of the teacher's last-layer token states, and
    the mean and per-component scale that make each projection zero-mean, unit-variance
    (so k components weigh alike in the loss whatever their variance)."""

    mean: np.ndarray  # width
    components: np.ndarray  # width × k
    scale: np.ndarray  # k

    @property
    def k(self) -> int:
        return int(self.components.shape[1])

    @staticmethod
    def fit(tokens: np.ndarray, k: int) -> StateBasis:
        """From `tokens` (n × width) states; refused when there are fewer than k."""
        tokens = tokens.astype(np.float64)
        if len(tokens) < k or tokens.shape[1] < k:
            raise EdgeKDError(
                f"token_states {k}: the teacher gave {len(tokens)} tokens of width "
                f"{tokens.shape[1]} to fit {k} components on; lower token_states"
            )
        mean = tokens.mean(0)
        _, _, vt = np.linalg.svd(tokens - mean, full_matrices=False)
        components = np.ascontiguousarray(vt[:k].T)
        scale = ((tokens - mean) @ components).std(0)
        scale = np.where(scale > 0, scale, 1.0)
        f32 = np.float32
        return StateBasis(mean.astype(f32), components.astype(f32), scale.astype(f32))

    def project(self, states: np.ndarray) -> np.ndarray:
        """tokens × width → tokens × k (float16)."""
        return (((states - self.mean) @ self.components) / self.scale).astype(np.float16)

    def digest(self) -> str:
        h = hashlib.sha256()
        for a in (self.mean, self.components, self.scale):
            h.update(np.ascontiguousarray(a, np.float32).tobytes())
        return h.hexdigest()[:16]

    def save(self, path: Path) -> None:
        import os

        from safetensors.numpy import save_file

        # C order: safetensors writes an array's buffer as is, so a transposed view (the
        # SVD's components are one) would read back scrambled.
        arrays = {
            "mean": np.ascontiguousarray(self.mean),
            "components": np.ascontiguousarray(self.components),
            "scale": np.ascontiguousarray(self.scale),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")  # renamed over: never half a file
        save_file(arrays, str(tmp))
        os.replace(tmp, path)

    @staticmethod
    def load(path: Path, k: int, width: int) -> StateBasis | None:
        """The basis stored at `path`, or None: absent, unreadable or of another shape
        (it is only a cache)."""
        from safetensors.numpy import load_file

        try:
            a = load_file(str(path))
            basis = StateBasis(a["mean"], a["components"], a["scale"])
        except Exception:
            return None
        shapes = (basis.mean.shape, basis.components.shape, basis.scale.shape)
        if shapes != ((width,), (width, k), (k,)):
            return None
        arrays = (basis.mean, basis.components, basis.scale)
        if not all(x.dtype == np.float32 and np.isfinite(x).all() for x in arrays):
            return None
        return basis


def row_states(hidden: np.ndarray, input_ids: np.ndarray, special: set[int]) -> list[np.ndarray]:
    """Per row of a batch, the states of its tokens that are not special ([CLS], [SEP],
    [PAD]): batch × length × width → [tokens × width] per row, in token order."""
    keep = ~np.isin(input_ids, list(special))
    return [hidden[i][keep[i]] for i in range(len(hidden))]


class StateSink:
    """Collects each labelled text's projected token states while the labelers run, by
    text (duplicates are labelled once; the hybrid labeler's fp32 pass over close calls
    comes last and replaces the int8 states of those rows)."""

    def __init__(self, basis: StateBasis, special: set[int]) -> None:
        self.basis, self.special = basis, special
        self.rows: dict[Any, np.ndarray] = {}

    def record(self, texts: Sequence[Any], hidden: np.ndarray, input_ids: np.ndarray) -> None:
        for text, states in zip(texts, row_states(hidden, input_ids, self.special), strict=True):
            self.rows[text] = self.basis.project(states)

    def states_of(self, texts: Sequence[Any]) -> TokenStates:
        """The recorded states of `texts`, in order; every text must have been labelled."""
        missing = next((t for t in texts if t not in self.rows), None)
        if missing is not None:
            raise RuntimeError(f"no token states recorded for a labelled row: {missing!r:.60}")
        return TokenStates.of_rows([self.rows[t] for t in texts], self.basis.k)

    def forget(self, texts: Sequence[Any]) -> None:
        """Free what `texts` recorded (once their states are stored)."""
        for t in texts:
            self.rows.pop(t, None)
