"""`augment.order`: which augmented variants the teacher labels first (issue 31, item 4).

A run labels a prefix of its candidate variants: all of them when the budget affords
it, else as many as `augment.max_rows` or the time budget allow. In the `seeded` order
that prefix is a uniform sample. In the `uncertain` orders a *scout* chooses: a copy of
the prepared student (its teacher-started table and all), trained on the training
rows' gold labels, scores every candidate; the variants whose two largest
logits are closest (the scout's least sure calls) go first, where the teacher's answer
teaches the student most (uncertainty sampling, Lewis & Gale 1994). The scout costs
`SCOUT_ROWS` training rows and one forward pass over the candidates (SST-2: 100k rows
to train, ~115k to score), and is then dropped: the
student itself starts from its untouched initial weights.

- `uncertain`: every candidate by its gap, smallest first.
- `uncertain-per-text`: each training text's least sure variant first (those by gap),
  then each text's second, and so on: the prefix stays spread over the texts as the
  seeded one is, but picks within each text.

The scout is seeded by `seed` and trained with the thread-count exact softmax and
clipping of the training loop, so the order, and the prefix a cap keeps, is the same on
a rerun: the resolved config (`augment.max_rows`) reruns to the same transfer set.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgekd.config import DistillConfig
from edgekd.data import bucketed_batches
from edgekd.students.base import Student, predict_logits
from edgekd.students.tokenizer import StudentTokenizer


def logit_gaps(logits: np.ndarray) -> np.ndarray:
    """Per row, its largest logit minus its second largest (≥ 0; 0: a tie). One
    label: every gap is 0 (nothing to be unsure between)."""
    if logits.shape[1] < 2:
        return np.zeros(len(logits), np.float32)
    top2 = np.partition(logits, -2, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]).astype(np.float32)


def uncertain_order(gaps: np.ndarray, sources: np.ndarray | None = None) -> np.ndarray:
    """Candidate indices, least sure first. With `sources` (the training text of each
    candidate), round by round: every text's least sure variant, then every text's
    second, ...; within a round, by gap. Ties keep the candidates' own (seeded) order."""
    gaps = np.asarray(gaps, np.float64)
    if sources is None:
        return np.argsort(gaps, kind="stable")
    sources = np.asarray(sources, np.int64)
    by_text = np.lexsort((gaps, sources))  # per text, least sure first
    srt = sources[by_text]
    starts = np.r_[0, np.flatnonzero(np.diff(srt)) + 1]
    rank = np.empty(len(gaps), np.int64)  # each candidate's place within its text
    rank[by_text] = np.arange(len(srt)) - np.repeat(starts, np.diff(np.r_[starts, len(srt)]))
    return np.lexsort((gaps, rank))


def train_scout(
    cfg: DistillConfig,
    student: Student,
    tok: StudentTokenizer,
    texts: Sequence[Any],
    labels: Sequence[int],
    rows: int | None = None,
) -> Student:
    """A copy of `student` after `SCOUT_ROWS` rows of cross-entropy on `texts`' gold
    `labels` (epoch after epoch, the last cut short; Adam at the student's learning
    rate, the run's batch size and gradient clipping), on CPU. Its thread count
    follows the load as the training loop's does (`ThreadGovernor`: beside a busy
    neighbour 2 threads crawl at 1-6% of their quiet speed), with the same
    thread-count exact softmax, layer norms and clipping, so every count gives the
    same scout. The run's random generators are left as they were, and its thread
    count is given back."""
    import torch

    from edgekd.threads import (
        ThreadGovernor,
        core_share,
        exact_clip_grad_norm_,
        exact_layer_norms,
        exact_softmax,
        torch_threads,
    )

    rows = SCOUT_ROWS if rows is None else rows
    scout = copy.deepcopy(student).train()
    exact_layer_norms(scout)  # a BERT student's; a BiLSTM has none
    params = [p for p in scout.parameters() if p.requires_grad]
    optim = torch.optim.Adam(params, lr=cfg.lr or student.default_lr)
    ids = tok.ids(list(texts))
    gold = torch.tensor(list(labels), dtype=torch.long)
    with torch.random.fork_rng(devices=[]), torch_threads(torch.get_num_threads()):
        torch.manual_seed(cfg.seed)
        rng = random.Random(cfg.seed)
        governor = ThreadGovernor(core_share())
        lengths, seen = [tok.length(x) for x in ids], 0
        while ids and seen < rows:
            for batch in bucketed_batches(lengths, cfg.batch_size, rng):
                enc = {k: torch.from_numpy(v) for k, v in tok.pad([ids[i] for i in batch]).items()}
                with exact_softmax():
                    loss = torch.nn.functional.cross_entropy(scout(**enc), gold[batch])
                loss.backward()
                exact_clip_grad_norm_(params, cfg.grad_clip)
                optim.step()
                optim.zero_grad()
                governor.step(len(batch))
                seen += len(batch)
                if seen >= rows:
                    break
    return scout.eval()


# Rows the scout trains on, whatever the task's size: one epoch of CLINC150 cut to 10
# rows per label (1,500 rows over 150 labels) leaves a scout that knows next to nothing
# (the student's own first epoch, on 21,500 rows, scored 0.10). 100,000 rows are 1.5
# epochs of SST-2's 67,000 and under 0.1 epoch of a million-row task; on CLINC150-10
# the scout took 22 s on 2 cores, scoring included. (Its order still lost there, 1.8
# points against 2.3 after one epoch: its least sure rows are the shortest.)
SCOUT_ROWS = 100_000
# Candidates scored at a time: their ids and logits, not a million rows', are held.
SCORE_ROWS = 50_000


def scout_order(
    cfg: DistillConfig,
    student: Student,
    tok: StudentTokenizer,
    texts: Sequence[Any],
    labels: Sequence[int],
    candidates: Sequence[Any],
    sources: np.ndarray,
) -> np.ndarray:
    """The order, by `cfg.augment.order`, in which the teacher labels `candidates`
    (variants of `texts`; `sources[i]`: the text candidate i came from)."""
    order = cfg.augment.order
    if order == "seeded" or not len(candidates):
        return np.arange(len(candidates))
    labelled = [(t, y) for t, y in zip(texts, labels, strict=True) if y >= 0]
    scout = train_scout(cfg, student, tok, [t for t, _ in labelled], [y for _, y in labelled])
    gaps = np.concatenate(
        [
            logit_gaps(predict_logits(scout, tok, tok.ids(list(candidates[a : a + SCORE_ROWS]))))
            for a in range(0, len(candidates), SCORE_ROWS)
        ]
    )
    return uncertain_order(gaps, sources if order == "uncertain-per-text" else None)
