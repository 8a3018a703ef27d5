"""Training while the teacher labels: the early passes.

Under a time budget the teacher labels the augmented rows chunk by chunk, which took
~46% of a default SST-2 run on 2 cores (359 of 780 s), and the student could only
start once the last chunk was in. The two scale differently with cores: labelling
runs one single-thread onnxruntime session per core (1,448 rows/s on 2, 789 on 1), while
a BiLSTM step gains little from a second thread. So while the teacher labels on one
core fewer, the student trains on the other, on the rows already labelled. In the
default SST-2 run (`python benchmarks/distill_default.py --tasks sst2`, d402108) the
passes stepped on ~2,190 rows/s on their one thread, as fast as the 2-thread epochs had
run alone (2,186-2,258), while the teacher labelled 442 rows/s where it had labelled
828 alone: ~1.5× the work of taking turns. It is still off by default (`overlap`):
the student is bound by distinct rows, and on one core the teacher labelled 156-213k
of SST-2's ~223k variants where alone it labels 180-223k; the 3-seed median fell from
0.8750 to 0.8704 through the bundle (docs/benchmarks/distillation.md).

Each early pass covers the training rows and the augmented rows labelled when it
starts (whole chunks), in length-bucketed batches shuffled from (seed, pass); the
pass under way when the last chunk arrives stops at its step. The epochs then start
from these weights, with the whole transfer set. The passes run are written to the
resolved config (`early_passes`: augmented rows, steps), and a run given them
replays them on the same rows, without a budget and after labelling: the same seed
gives the same student.

Only the plain loop overlaps (`overlaps`): one process with a core to spare, a teacher
runtime other than torch, one teacher, and a loss on the logits alone (no training-time
method, intermediate-layer loss, token states or per-epoch schedule, which read more
than the logits or change with the epoch). `auto` still labels under 20,000 rows
with torch (`AUTO_MIN_ROWS`): those share torch's threads with the passes, for the
seconds they take.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from edgekd.config import DistillConfig
from edgekd.data import bucketed_batches
from edgekd.errors import EdgeKDError
from edgekd.progress import console
from edgekd.students.base import Student
from edgekd.students.tokenizer import StudentTokenizer

# Early passes take their batch order from (seed, EARLY_SEED + pass): apart from the
# epochs' (seed, epoch) orders, which count from 1.
EARLY_SEED = 1_000_000
# Seconds the passes wait between looks at a labelling that has no training logits
# yet: a guard against a busy loop, not a timing anything depends on.
POLL_S = 0.05


class LabelFeed:
    """Logits as the labelling thread makes them, read by the early passes; and the
    cores labelling may use meanwhile. Every method is safe from either thread."""

    def __init__(self, cores: int) -> None:
        self.cores = cores
        self._lock = threading.Lock()
        self._splits: dict[str, np.ndarray] = {}
        self._chunks: list[np.ndarray] = []
        self._rows = 0
        self.training = threading.Event()  # the early passes run: labelling leaves a core
        self.done = threading.Event()  # labelling ended (every chunk in, or it failed)
        self.stop = threading.Event()  # the passes failed: label no further chunk
        self.trained_rows = 0  # rows the early passes stepped on (their count, not distinct)
        self.trained_s = 0.0  # and the seconds those steps took

    def put(self, split: str, logits: np.ndarray) -> None:
        """A whole split's logits (train, dev, selection)."""
        with self._lock:
            self._splits[split] = logits

    def put_chunk(self, logits: np.ndarray) -> None:
        """The next chunk of augmented rows' logits, in order."""
        with self._lock:
            self._chunks.append(logits)
            self._rows += len(logits)

    def split(self, name: str) -> np.ndarray | None:
        with self._lock:
            return self._splits.get(name)

    def augmented_rows(self) -> int:
        with self._lock:
            return self._rows

    def augmented(self, rows: int) -> np.ndarray:
        """Logits of the first `rows` augmented rows (at most those labelled)."""
        with self._lock:
            chunks = list(self._chunks)
        if not chunks:
            return np.zeros((0, 0), np.float32)
        return np.concatenate(chunks)[:rows]

    def workers(self) -> int:
        """Labelling sessions to run now: one core fewer while the passes train."""
        if self.training.is_set() and not self.done.is_set():
            return max(1, self.cores - 1)
        return self.cores

    def early_rate(self) -> float:
        """Rows per second the early passes have trained at (0 before any step)."""
        return self.trained_rows / self.trained_s if self.trained_s > 0 else 0.0

    def trained_by(self, seconds: float) -> float:
        """Rows the early passes will have stepped on `seconds` from now, at their pace."""
        return self.trained_rows + self.early_rate() * seconds


def overlaps(cfg: DistillConfig, processes: int, cores: int) -> bool:
    """Whether this run trains early passes while its teacher labels: asked for
    (`overlap`, under a time budget, passes not given), one process with a core to
    spare, a teacher runtime other than torch (whose threads the student would share;
    `auto` still picks torch for a small set, module docstring), one teacher, and a
    loss that reads the logits alone."""
    from edgekd.distill.augment import methods_of_stage
    from edgekd.distill.trainer import build_loss

    methods = cfg.augment.listed
    return (
        cfg.overlap
        and cfg.time_budget is not None
        and cfg.early_passes is None
        and processes == 1
        and cores >= 2
        and cfg.teacher_runtime != "torch"
        and not cfg.extra_teachers
        and not cfg.token_states
        and cfg.intermediate is None
        and not cfg.schedules
        and build_loss(cfg).min_epochs == 0  # annealing's first epochs are another loss
        and len(methods_of_stage(methods, "text")) == len(methods)
    )


def run_labelling(feed: LabelFeed, label: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """`label()` on a thread of its own; its result (or the exception it raised) lands
    in the returned list, and `feed.done` is set when it ends either way."""
    out: list[Any] = []

    def work() -> None:
        try:
            out.append(label())
        except BaseException as e:  # handed to the main thread, which re-raises it
            out.append(e)
        finally:
            feed.done.set()

    thread = threading.Thread(target=work, name="edgekd-labelling", daemon=True)
    thread.start()
    return thread, out


def early_passes(
    cfg: DistillConfig,
    model: Student,
    tok: StudentTokenizer,
    texts: Sequence[Any],
    labels: Sequence[int],
    n_train: int,
    feed: LabelFeed | None = None,
    replay: Sequence[tuple[int, int]] | None = None,
    train_logits: np.ndarray | None = None,
    augmented_logits: np.ndarray | None = None,
    timer: Callable[[], float] = time.perf_counter,
) -> list[tuple[int, int]]:
    """Train `model` in place on the transfer rows labelled so far; returns the passes
    run, each (augmented rows it covered, optimiser steps).

    `texts`, `labels`: every candidate transfer row, the `n_train` training rows first.
    With a `feed` (a labelling thread fills it): a pass starts on what is labelled,
    and the passes end when `feed.done` is set, mid-pass. With `replay` (and the
    logits, `train_logits` then `augmented_logits`): exactly those passes."""
    from accelerate import Accelerator

    from edgekd.distill.losses import NO_LABEL
    from edgekd.distill.trainer import (
        build_loss,
        make_optimiser,
        on_cpu_only,
        optimiser_step,
        training_precision,
    )
    from edgekd.threads import exact_layer_norms, exact_softmax

    if (feed is None) == (replay is None):
        raise ValueError("early_passes takes a feed or a replay, not both")
    if feed is not None:
        # Labelling keeps every core until there is something to train on: the training
        # split is its first (61,399 SST-2 rows, 74 s on one core when it did not).
        while feed.split("train") is None and not feed.done.is_set():
            time.sleep(POLL_S)
        train_logits = feed.split("train")
        if train_logits is None or feed.done.is_set():
            return []  # labelling ended first (or failed): nothing to overlap
        feed.training.set()
    assert train_logits is not None
    ids = tok.packed_ids(list(texts))
    lengths = ids.lengths()
    gold = torch.tensor([*labels[:n_train], *[NO_LABEL] * (len(texts) - n_train)])
    exact_layer_norms(model)
    model.train()
    params = list(model.parameters())
    loss_fn = build_loss(cfg)
    loss_fn.start_epoch(1)
    accelerator = Accelerator(cpu=on_cpu_only())
    device = next(model.parameters()).device.type  # where the passes' steps run
    lr = cfg.lr or model.default_lr
    optim = make_optimiser(params, lr, cfg.weight_decay)
    passes: list[tuple[int, int]] = []
    before = torch.get_num_threads()
    if feed is not None:
        torch.set_num_threads(max(1, feed.cores - feed.workers()))
    try:
        for p in range(len(replay) if replay is not None else 1 << 30):
            if replay is not None:
                rows, steps = replay[p]
                labelled = train_logits[:0] if augmented_logits is None else augmented_logits
                soft = np.concatenate([train_logits, labelled[:rows]])
            else:
                assert feed is not None
                if feed.done.is_set():
                    break
                rows, steps = feed.augmented_rows(), -1
                soft = (
                    train_logits
                    if not rows
                    else np.concatenate([train_logits, feed.augmented(rows)])
                )
            if len(soft) != n_train + rows:  # a config's passes over rows this run lacks
                raise EdgeKDError(
                    f"early_passes[{p}] covers {rows:,} augmented rows; this run has "
                    f"{len(soft) - n_train:,}: drop early_passes or restore augment.max_rows"
                )
            targets = torch.from_numpy(np.ascontiguousarray(soft, np.float32))
            order = random.Random(cfg.seed * 100_003 + EARLY_SEED + p)
            batches = bucketed_batches(lengths[: n_train + rows].tolist(), cfg.batch_size, order)
            started, done = timer(), 0
            for batch in batches:
                if done == steps or (feed is not None and feed.done.is_set()):
                    break
                enc = {k: torch.from_numpy(v) for k, v in tok.pad([ids[i] for i in batch]).items()}
                with exact_softmax():
                    with training_precision(cfg.precision, device):  # the forward, as the loop's
                        logits = model(**enc)
                    loss = loss_fn(logits.float(), targets[batch], gold[batch])
                optimiser_step(accelerator, loss, optim, params, cfg.grad_clip, lr, None, model)
                done += 1
                if feed is not None:
                    feed.trained_rows += len(batch)
            if feed is not None:
                feed.trained_s += timer() - started
            if done == 0:
                break
            passes.append((rows, done))
            console.print(
                f"early pass {p + 1}: {n_train + rows:,} rows ({rows:,} augmented), "
                f"{done:,} of {len(batches):,} steps, {timer() - started:.1f} s"
            )
    finally:
        torch.set_num_threads(before)
        if feed is not None:
            feed.training.clear()
    return passes
