"""Minimax selection of augmented rows: Minimax-kNN (Kamalloo et al. 2021, "Not Far
Away, Not So Close: Sample Efficient Nearest Neighbour Data Augmentation via
MiniMax", arXiv:2105.13608; methods.md files it as Minimax-kNN-KD, Rashid et al.).

Every training text has a pool of augmented candidates (its variants from the
text augmenters). Before each epoch the current student scores every candidate
and, per source text, the k candidates with the largest divergence
KL(σ(z_t) ‖ σ(z_s)) join that epoch's transfer set: the student trains where it
disagrees with the teacher most (the "max" step), then minimises its loss there
(the "min" step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import Field

from edgekd.config import StrictModel
from edgekd.distill.methods import MethodRun, TrainingMethod
from edgekd.errors import EdgeKDError

if TYPE_CHECKING:
    from edgekd.config import DistillConfig


def kl_rows(teacher: np.ndarray, student: np.ndarray) -> np.ndarray:
    """KL(σ(teacher) ‖ σ(student)) per row, in nats."""

    def log_softmax(z: np.ndarray) -> np.ndarray:
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    log_t, log_s = log_softmax(teacher.astype(np.float64)), log_softmax(student.astype(np.float64))
    return (np.exp(log_t) * (log_t - log_s)).sum(axis=1)


class MinimaxOptions(StrictModel):
    k: int = Field(2, ge=1, description="Candidates kept per text each epoch, most divergent.")


class MinimaxSelector(TrainingMethod):
    """Picks, per source text, the `k` candidates the student gets most wrong."""

    stage: ClassVar[str] = "select"  # chooses among augmented rows, once per epoch
    selects: ClassVar[bool] = True
    Config = MinimaxOptions

    @classmethod
    def check(cls, cfg: DistillConfig, student_cls: Any, options: MinimaxOptions) -> None:
        from edgekd.distill.augment import methods_of_stage

        if not methods_of_stage(cfg.augment.listed, "text"):
            raise EdgeKDError(
                "minimax selects among augmented variants; add a text augmenter, "
                "e.g. --augment tang,minimax"
            )

    @classmethod
    def build(cls, options: MinimaxOptions, run: MethodRun) -> MinimaxSelector:
        return cls(np.array(run.sources, dtype=np.int64), options.k)

    def __init__(self, sources: np.ndarray, k: int) -> None:
        if k < 1:
            raise ValueError(f"minimax_k must be >= 1, got {k}")
        self.sources = np.asarray(sources)
        self.k = k
        counts = np.bincount(self.sources) if len(self.sources) else np.zeros(0, dtype=int)
        self.n_selected = int(np.minimum(counts, k).sum())

    def select(self, teacher: np.ndarray, student: np.ndarray) -> np.ndarray:
        """Indices (into the candidates) of this epoch's picks, in candidate order."""
        div = kl_rows(teacher, student)
        # Sort by source, then by divergence, largest first; the stable sort breaks
        # ties by candidate order, so the pick is a function of the logits alone.
        order = np.lexsort((-div, self.sources))
        srt = self.sources[order]
        starts = np.r_[0, np.flatnonzero(np.diff(srt)) + 1]
        rank = np.arange(len(srt)) - np.repeat(starts, np.diff(np.r_[starts, len(srt)]))
        return np.sort(order[rank < self.k])
