"""`--time-budget MINUTES`: the run sizes itself to finish in time.

A distill run spends its time on three things that grow with the transfer set:
labelling each augmented row once (teacher), and training on every row once per
epoch (student). Both rates are measured in the run, not assumed: training on probe
steps of the prepared student before the teacher labels anything, labelling on the
rows it labels. Augmented rows are then labelled chunk by chunk while
`MIN_EPOCHS` epochs over the larger set still fit; the time left after labelling
buys more epochs (up to `epochs`). So a larger budget first buys data, then
epochs: more distinct teacher-labelled rows help a student more than more passes
over the same rows (Tang et al. 2019, §4.3: accuracy grows with the augmented
set's size).

The plan is a pure function of the measured rates; what it chose is written to the
metrics (`time_plan`) and the resolved config (`epochs`, `augment.max_rows`), so
rerunning that config reproduces the student without a budget.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch

from edgekd.artifacts import TimePlan
from edgekd.config import DistillConfig
from edgekd.data import bucketed_batches
from edgekd.students.base import Student
from edgekd.students.tokenizer import StudentTokenizer

# Epochs the augmented set must leave room for: fewer passes over a larger set
# under-train it; past these, extra time goes to epochs.
MIN_EPOCHS = 3
# Held back for what follows training: per-epoch scoring, final scoring, saving
# (seconds; BiLSTM on SST-2 ≈ 3 s per epoch plus 10 s).
RESERVE_S = 20.0
PROBE_S = 3.0  # seconds of probe steps: ~50 BiLSTM batches of 50 rows on 2 cores
# Rows sampled for the probe, per batch: 256 × 50 = 12,800 rows (~0.3 s to tokenize),
# enough for full one-length batches of most lengths a long transfer set holds.
PROBE_ROWS_PER_BATCH = 256
MIN_FULL_BATCHES = 8  # fewer: time every batch (a small set's epochs are part-full too)


class Clock:
    """Seconds since the run started, against its budget."""

    def __init__(self, minutes: float, start: float | None = None) -> None:
        self.budget_s = 60.0 * minutes
        self.start = time.perf_counter() if start is None else start

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def probe_train_rate(
    cfg: DistillConfig,
    model: Student,
    tok: StudentTokenizer,
    texts: Sequence[Any],
    num_labels: int,
    seconds: float = PROBE_S,
) -> float:
    """Training rows per second of `model` on `texts`, from optimiser steps on a
    throwaway copy (targets are zeros: the cost of a step does not depend on them).
    Batches are length-bucketed like the real loop's, from a seeded sample. The
    probe's random draws (dropout) leave no trace on the run's generators.

    Each thread count the training loop's `ThreadGovernor` may run is timed for its
    share of `seconds`, and the rate is the governor's pace at those speeds
    (`ThreadGovernor.pace`: the fastest count, but for the one window in ten it re-times
    the other). One probe at all cores read 32 rows/s beside a busy neighbour (every
    parallel region waiting on a parked thread) where the epochs, on 1 thread, then ran
    at ~1,700: the plan labelled 16k of 91k rows and trained 1 epoch of its 13 minutes."""
    from edgekd.threads import ThreadGovernor, thread_counts

    counts = thread_counts()
    before = torch.get_num_threads()
    rates = []
    try:
        for threads in counts:
            torch.set_num_threads(threads)
            with torch.random.fork_rng():
                rates.append(_probe(cfg, model, tok, texts, num_labels, seconds / len(counts)))
    finally:
        torch.set_num_threads(before)
    return ThreadGovernor.pace(rates)


def _probe(
    cfg: DistillConfig,
    model: Student,
    tok: StudentTokenizer,
    texts: Sequence[Any],
    num_labels: int,
    seconds: float,
    timer: Callable[[], float] = time.perf_counter,
) -> float:
    """Rows per second of real training steps on a copy of `model`: the run's loss
    (`build_loss`), its exact softmax and layer norms, and its update
    (`trainer.optimiser_step`: the clip, Adam, the weight average). Teacher logits are
    zeros and every row is augmented (no gold label): a step's cost depends on neither."""
    from accelerate import Accelerator

    from edgekd.distill.losses import NO_LABEL
    from edgekd.distill.trainer import (
        build_loss,
        make_optimiser,
        on_cpu_only,
        optimiser_step,
        training_precision,
        weight_average,
    )
    from edgekd.threads import exact_layer_norms, exact_softmax

    probe = copy.deepcopy(model).train()
    device = next(probe.parameters()).device.type  # where the probe's steps run
    exact_layer_norms(probe)
    params = list(probe.parameters())
    # With `token_states`, each real step also maps the student's token states onto the
    # teacher's k components (`TokenStateLoss`): SST-2's epochs took 9% longer with it.
    head = None
    if cfg.token_states and "token_states" in getattr(model, "capabilities", ()):
        width = cast(Any, model).token_width(model.config)  # a TableStudent's
        head = torch.nn.Linear(width, cfg.token_states)
        params += list(head.parameters())
    loss_fn = build_loss(cfg)
    # Not prepared: the probe's steps are this process's alone, and backward and the
    # clip are the loop's own (`clip_gradients` reads the accelerator's device).
    accelerator = Accelerator(cpu=on_cpu_only())
    lr = cfg.lr or model.default_lr
    optim = make_optimiser(params, lr, cfg.weight_decay)
    # Each real step also updates the weight average: so does a probe step (it costs
    # ~3.6% of a BiLSTM step, measured side by side).
    averaged = weight_average(probe, cfg.ema, 1000)
    rng = random.Random(cfg.seed)
    sample = rng.sample(range(len(texts)), min(len(texts), PROBE_ROWS_PER_BATCH * cfg.batch_size))
    ids = tok.ids([texts[i] for i in sample])
    lengths = [tok.length(x) for x in ids]
    batches = probe_batches(lengths, cfg.batch_size, rng)
    rows, spent, started = 0, 0.0, timer()
    every_rows, every_spent = 0, 0.0  # warm-up steps included, for tiny data
    timed: list[tuple[int, int, float]] = []  # (rows, padded tokens, seconds) per step
    for n, batch in enumerate(batches):
        t = timer()
        enc = {k: torch.from_numpy(v) for k, v in tok.pad([ids[i] for i in batch]).items()}
        targets = torch.zeros(len(batch), num_labels)
        gold = torch.full((len(batch),), NO_LABEL)
        with exact_softmax():
            # The loop's precision, on the loop's terms: the student's forward alone.
            with training_precision(cfg.precision, device):
                out = probe(**enc) if head is None else probe(**enc, return_hidden=True)
            if head is None:
                loss = loss_fn(out.float(), targets, gold)
            else:
                logits, hidden = out
                loss = (
                    loss_fn(logits.float(), targets, gold) + head(hidden[-1].float()).pow(2).mean()
                )
        optimiser_step(accelerator, loss, optim, params, cfg.grad_clip, lr, averaged, probe)
        loss.item()  # the loop's running loss: a sync point on an accelerator
        took = timer() - t
        every_rows, every_spent = every_rows + len(batch), every_spent + took
        if n >= 2:  # the first steps allocate: not the steady rate
            rows, spent = rows + len(batch), spent + took
            timed.append((len(batch), len(batch) * max(lengths[i] for i in batch), took))
        if timer() - started > seconds and n >= 5:
            break
    if spent <= 0:  # under 3 batches (a few rows): their time, warm-up and all
        rows, spent = every_rows, every_spent
    modelled = epoch_rate(timed, lengths, cfg.batch_size, len(texts) / len(sample))
    if modelled is not None:
        return modelled
    # A rate, never infinity: a clock too coarse to see a step still saw a microsecond.
    return rows / max(spent, 1e-6) if rows else 1.0


def epoch_rate(
    timed: Sequence[tuple[int, int, float]],
    lengths: Sequence[int],
    batch_size: int,
    scale: float = 1.0,
) -> float | None:
    """Rows per second of an epoch over `scale` times the rows of `lengths` (a sample),
    from the probe's timed steps `(rows, padded tokens, seconds)`: a step costs
    `a + b · tokens` (least squares), and the epoch's steps are its one-length batches
    (each length's last one part-full). None when the steps cannot tell `a` from `b`
    (fewer than 4, or too alike in tokens) or the fit is not a cost (a < 0 or b <= 0).

    The probe times only full batches, and in a sample of ~13k rows those are the
    common, short lengths: on 30,000 SST-2 training rows its batches held 9.9 tokens a
    row where the epoch's held 12.7, and it read 3,884 rows/s for an epoch that ran at
    3,251 (1.19×); the fitted rate read 3,172-3,201 (0.98×). A BiLSTM step is linear in
    its length (one recurrence per token), so the fit carries to the long rows the probe
    could not fill a batch with."""
    if len(timed) < 4 or not lengths:
        return None
    x = np.array([t for _, t, _ in timed], dtype=np.float64)
    y = np.array([s for _, _, s in timed], dtype=np.float64)
    if x.std() < 0.05 * x.mean():  # one length (or nearly): a and b are not separable
        return None
    b, a = np.polyfit(x, y, 1)
    if a < 0 or b <= 0:
        return None
    seconds = sum(
        math.ceil(count * scale / batch_size) * a + b * length * count * scale
        for length, count in Counter(lengths).items()
    )
    return len(lengths) * scale / seconds


def probe_batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """The probe's batches: one-length batches as an epoch's, but only full ones when
    there are enough. A sample of a few thousand rows spread over ~60 lengths leaves
    most one-length batches part-full, and small batches cost more per row: on SST-2
    with 40 variants per sentence, probes on every batch read 1,621 rows/s where the
    epochs (nearly all of 247k rows in full batches) ran at 2,227, and the plan left
    3 of its 13 minutes unused."""
    batches = bucketed_batches(lengths, batch_size, rng)
    full = [b for b in batches if len(b) == batch_size]
    return full if len(full) >= MIN_FULL_BATCHES else batches


def augmented_room(
    clock: Clock,
    n_train: int,
    train_rate: float,
    min_epochs: int,
    reserve_s: float = RESERVE_S,
    trained: Callable[[float], float] | None = None,
) -> Callable[[int, float], bool]:
    """`room(rows, label_s)`: whether growing the augmented set to `rows` rows, at
    `label_s` seconds of labelling, still leaves `min_epochs` epochs over the
    whole transfer set (`n_train` + rows) within the budget. `trained(label_s)`: rows
    the student will have stepped on by then while the teacher labelled (the early
    passes, `edgekd.distill.early`), which count towards those epochs; but one whole
    epoch over the set is always left (the loop trains at least one: without it a
    3-minute run that counted its passes labelled to the end, then ran 25 s over)."""

    def room(rows: int, label_s: float) -> bool:
        epoch = n_train + rows
        owed = min_epochs * epoch - (trained(label_s) if trained else 0.0)
        train_s = max(owed, epoch) / train_rate
        return clock.elapsed() + label_s + train_s + reserve_s <= clock.budget_s

    return room


def plan_epochs(left_s: float, rows: int, train_rate: float, max_epochs: int) -> int:
    """Whole epochs over `rows` rows that fit in `left_s` seconds, 1..max_epochs."""
    if not math.isfinite(train_rate):  # an unmeasured rate fits every epoch
        return max(1, max_epochs)
    fit = int(max(left_s, 0.0) * train_rate / max(rows, 1))
    return max(1, min(max_epochs, fit))


def make_plan(
    clock: Clock,
    cfg: DistillConfig,
    train_rate: float,
    label_rate: float | None,
    n_train: int,
    candidates: int,
    kept: int,
) -> TimePlan:
    """The epochs that fit after labelling, and the record of the whole choice."""
    left = clock.left() - RESERVE_S
    rows = n_train + kept
    epochs = plan_epochs(left, rows, train_rate, cfg.max_epochs)
    planned = clock.elapsed() + epochs * rows / train_rate + RESERVE_S
    cap = cfg.augment.max_rows
    if kept < min(candidates, cap if cap is not None else candidates):
        why = (
            f"{kept:,} of {candidates:,} augmented rows: more would leave under "
            f"{min(MIN_EPOCHS, cfg.max_epochs)} epochs in the budget"
        )
    elif epochs < cfg.max_epochs:
        of = f" of {cfg.epochs}" if cfg.epochs is not None else ""
        why = f"every augmented row; {epochs}{of} epochs fit the budget"
    else:
        why = "everything fits: every augmented row, every epoch"
    if planned > clock.budget_s * 1.02:
        why += f" (over budget: ~{planned / 60:.1f} min; a larger --time-budget fits it)"
    return TimePlan(
        budget_s=round(clock.budget_s, 1),
        train_rows_per_s=round(train_rate, 1),
        label_rows_per_s=None if label_rate is None else round(label_rate, 1),
        augmented_candidates=candidates,
        augmented_rows=kept,
        epochs=epochs,
        planned_s=round(planned, 1),
        why=why,
    )


def planned_config(cfg: DistillConfig, plan: TimePlan) -> DistillConfig:
    """`cfg` with the plan's choice as plain fields: what the run trains with."""
    augment = cfg.augment.model_copy(
        update={"max_rows": plan.augmented_rows if plan.augmented_candidates else None}
    )
    # A rerun's part of an epoch was the last run's clock, not this one's.
    update = {
        "epochs": plan.epochs,
        "augment": augment,
        "last_epoch_steps": None,
        "cooldown_from": None,
        "cooldown_to": None,
    }
    return cfg.model_copy(update=update)


def describe(plan: TimePlan) -> str:
    label = f", labelling {plan.label_rows_per_s:,.0f} rows/s" if plan.label_rows_per_s else ""
    return (
        f"time budget {plan.budget_s / 60:.1f} min: {plan.augmented_rows:,} augmented rows, "
        f"{plan.epochs} epochs (training {plan.train_rows_per_s:,.0f} rows/s{label}); "
        f"{plan.why}"
    )
