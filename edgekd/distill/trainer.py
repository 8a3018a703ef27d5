"""`edgekd distill`: teacher logits (cached) → student trained to match them.

The loop runs under Hugging Face accelerate, one process by default, so
`accelerate launch --multi_gpu --num_processes 2 -m edgekd distill ...` scales it
out (on a machine without a GPU the processes meet over gloo: `on_cpu_only`); the
main process labels, and every choice made from a clock is the main's (`main_choice`).

Accuracy on the selection split (held out of the training rows,
`edgekd.data.carve_selection`) picks the epoch (`keeps_later`) and stops early
(`patience`); dev accuracy is recorded each epoch and never read to decide anything.
"""

from __future__ import annotations

import copy
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np
import torch

from edgekd.config import DistillConfig
from edgekd.data import Split, bucketed_batches
from edgekd.distill.cooldown import StepPlan, stale_end
from edgekd.distill.methods import (
    MethodRun,
    Step,
    TrainingMethod,
    build_methods,
    methods_state,
)
from edgekd.distill.states import TokenStates
from edgekd.errors import EdgeKDError
from edgekd.progress import console, progress_bar
from edgekd.registry import LAYER_LOSSES, LOSSES, STUDENTS
from edgekd.students.base import Student, predict_logits
from edgekd.students.tokenizer import StudentTokenizer


def build_loss(cfg: DistillConfig) -> Any:
    """The configured loss, checked against the epochs and schedules it is given."""
    cls = LOSSES.get(cfg.loss.name)
    options = LOSSES.options(cfg.loss, "loss")
    loss = cls(ce_weight=cfg.ce_weight, temperature=cfg.temperature, **options.model_dump())
    for name in cfg.schedules:
        if name not in ("temperature", "ce_weight"):
            raise EdgeKDError(
                f"schedule for {name!r}: only temperature and ce_weight can be scheduled"
            )
    if cfg.max_epochs < loss.min_epochs:
        raise EdgeKDError(
            f"loss {cfg.loss.name!r} needs at least {loss.min_epochs} epochs "
            f"(got {cfg.max_epochs}); raise --epochs"
        )
    return loss


def lr_factor(step: int, total: int, warmup: int, decay: str) -> float:
    """Multiplier of the base learning rate before optimiser step `step` (0-based) of
    `total`: linear warm-up over `warmup` steps, then constant, linear or cosine
    down towards 0. A pure function of the step, so a resumed run follows the same
    curve with no scheduler state to save."""
    if step < warmup:
        return (step + 1) / warmup
    if decay in ("none", "cooldown"):  # a cool-down is the run's `StepPlan`, not the step's
        return 1.0
    done = (step - warmup) / max(total - warmup, 1)  # 0 → 1 over the decay
    if decay == "linear":
        return 1.0 - done
    return 0.5 * (1.0 + math.cos(math.pi * done))


class Extras:
    """What a run adds to the plain loop: an online teacher for intermediate-layer
    losses and for methods that read it, and the training-time methods
    (`edgekd.distill.methods`: MixKD, MATE-KD, minimax, early exit, a user's own)."""

    def __init__(
        self,
        teacher: Any = None,
        teacher_tokenizer: Any = None,
        layer_loss: Any = None,
        methods: list[TrainingMethod] | None = None,
        n_original: int = 0,
    ) -> None:
        self.teacher, self.teacher_tokenizer = teacher, teacher_tokenizer
        self.layer_loss, self.n_original = layer_loss, n_original
        self.methods = methods or []

    @property
    def selector(self) -> TrainingMethod | None:
        """The method that picks each epoch's augmented rows (`listed_methods` allows one)."""
        return next((m for m in self.methods if m.selects), None)


def train_student(
    cfg: DistillConfig,
    model: Student,
    tok: StudentTokenizer,
    train: Split,
    train_logits: np.ndarray,
    select: Split,
    dev: Split,
    dev_logits: np.ndarray,
    extras: Extras | None = None,
    checkpoint: Path | None = None,
    seconds_left: Callable[[], float] | None = None,
    until_plateau: bool = False,
    extend_to: int | None = None,
    warm_start: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Fit `model` in place to `train_logits`; keep the epoch that scores best on
    `select` (or the last one when `select` is empty). `dev` is only recorded.

    `seconds_left` (a time budget): after each epoch, when another epoch, as long as
    the last one took, would end past it, training goes on for the part of an epoch
    that fits (`part_of_epoch`; `last_epoch_steps`) or stops (`cut_for_time`: the
    epochs run). The plan's rate comes from a few seconds of probe steps; this check
    holds the budget when the epochs run slower than the probe read.
    `until_plateau` (epochs the budget bought, not the user's): training also stops
    once the training loss falls by under `PLATEAU_GAIN` over `patience` epochs
    (`plateaued`; also `cut_for_time`, so the resolved config reruns to it).
    `extend_to` (with `seconds_left`): `cfg.epochs` is a forecast from the probe, and
    while the clock has room for another epoch the run trains it, up to `extend_to`
    epochs (the distill stage records the epochs run in the resolved config). A probe
    that under-read the pace once left 17% of an SST-2 budget unused: 2 epochs planned
    at 2,370 rows/s, run at ~2,600, and 132 s of 780 left when they were done.

    Rows of `train` labelled NO_LABEL (augmented text) get the distillation term only.
    With `checkpoint`, each finished epoch is saved there and a matching checkpoint
    found there is resumed (`distill.checkpoint`), with the end the interrupted run had
    projected (`seconds_left` is then the clock of what its budget had left, which the
    checkpoint records). `warm_start()` trains `model` in
    place before the first epoch (a config's early passes), unless a checkpoint is
    resumed: its weights come after it.
    """
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from edgekd.distill import checkpoint as ckpt
    from edgekd.distill.layers import hf_features, student_features

    extras = extras or Extras()
    set_seed(cfg.seed)
    loss_fn = build_loss(cfg)
    accelerator = Accelerator(cpu=on_cpu_only())
    processes = accelerator.num_processes
    # Packed (4 B per token): the transfer set's ids stay small at any augmentation.
    train_ids = tok.packed_ids(train.texts)
    train_lengths = train_ids.lengths()
    # Read only by predict_logits, whose `ids: list` is narrower than its use: it takes
    # their len and rows by index, which PackedRows gives.
    dev_ids = cast(list[Any], tok.packed_ids(dev.texts))
    select_ids = cast(list[Any], tok.packed_ids(select.texts))
    labels = torch.tensor(train.labels)
    soft = torch.from_numpy(train_logits)
    layer_loss, methods, selector = extras.layer_loss, extras.methods, extras.selector
    teacher = extras.teacher
    # The teacher reads the student's own ids when they share a vocabulary (BERT
    # students): then hidden states and attention line up token by token.
    same_ids = teacher is not None and tok.tokenizer.get_vocab() == dict(
        extras.teacher_tokenizer.get_vocab()
    )
    # Training slots → rows. Without minimax every row is one slot; with it, the
    # augmented slots are refilled each epoch with that epoch's picks.
    n_orig = extras.n_original if selector is not None else len(train_ids)
    slots = np.arange(n_orig + (selector.n_selected if selector is not None else 0))

    def collate(idx: list[int]) -> dict[str, Any]:
        rows = [int(slots[i]) for i in idx]
        enc = {k: torch.from_numpy(v) for k, v in tok.pad([train_ids[i] for i in rows]).items()}
        batch: dict[str, Any] = {**enc, "teacher": soft[rows], "labels": labels[rows]}
        batch["rows"] = torch.tensor(rows)
        if layer_loss is not None and not same_ids:
            t_enc = extras.teacher_tokenizer(
                [train.texts[i] for i in rows],
                truncation=True,
                max_length=cfg.teacher_max_length,
                padding=True,
                return_tensors="pt",
            )
            batch.update({f"t_{k}": v for k, v in t_enc.items()})
        return batch

    def epoch_batches(epoch: int) -> list[list[int]]:
        # Length-bucketed, reshuffled each epoch from (seed, epoch): less padding for
        # the packed LSTM and the online teacher; each process takes its share of every
        # batch (`split_between`).
        lengths = train_lengths[slots].tolist()
        rng = random.Random(cfg.seed * 100_003 + epoch)
        return split_between(bucketed_batches(lengths, cfg.batch_size, rng), processes)

    # The dataset is the epoch's list of batches, refilled in place before each epoch
    # (its length never changes); accelerate shards it across processes.
    batches = epoch_batches(1)
    # A map-style dataset is anything with len and index (torch's docs), but torch's
    # annotation asks for a `Dataset` subclass, which a list is not.
    loader: torch.utils.data.DataLoader[list[int]] = torch.utils.data.DataLoader(
        batches,  # type: ignore[arg-type]
        batch_size=1,
        shuffle=False,
        collate_fn=lambda b: collate(b[0]),
    )
    from edgekd.threads import exact_layer_norms, exact_softmax

    # Same weights on any thread count (`edgekd.threads`); parameters are kept, not copied.
    for trained in (model, layer_loss):
        if trained is not None:
            exact_layer_norms(trained)
    trainable = list(model.parameters()) + (
        list(layer_loss.parameters()) if layer_loss is not None else []
    )
    trainable += [p for method in extras.methods for p in method.parameters()]
    lr = cfg.lr or model.default_lr
    optim = make_optimiser(trainable, lr, cfg.weight_decay)
    model, optim, loader = accelerator.prepare(model, optim, loader)
    if teacher is not None:
        teacher.to(accelerator.device).eval()
    if layer_loss is not None:
        layer_loss.to(accelerator.device)
    dev_gold = np.array(dev.labels)
    select_gold = np.array(select.labels)
    dev_teacher = dev_logits.argmax(1)
    # TinyBERT's first stage trains hidden layers only: its epochs cannot be the best.
    first_scored = 1 + (layer_loss.stage_epochs if layer_loss is not None else 0)
    min_epochs = max(loss_fn.min_epochs, first_scored)

    unwrapped_student = accelerator.unwrap_model(model)
    wants_features = any(m.needs_features for m in methods)

    def step_loss(batch: dict[str, Any], epoch: int) -> torch.Tensor:
        teacher_logits = batch.pop("teacher")
        gold = batch.pop("labels")
        rows = batch.pop("rows")
        t_batch = {k[2:]: batch.pop(k) for k in list(batch) if k.startswith("t_")}
        w_layer, w_pred = layer_loss.weights(epoch) if layer_loss is not None else (0.0, 1.0)
        s_feat = None
        # `precision` covers the student's forward (and so its backward) alone: its
        # outputs come back in fp32, and the teacher, the losses and the methods' terms
        # (which may run models of their own) are computed in fp32 as without it.
        with training_precision(cfg.precision, accelerator.device.type):
            if w_layer > 0 or (w_pred > 0 and wants_features):
                attention = w_layer > 0 and layer_loss.needs_attention
                s_feat = student_features(model, batch, attention)
            else:
                logits = model(**batch)
        if s_feat is not None:
            s_feat = s_feat.float()
            logits = s_feat.logits
        logits = logits.float()
        loss = logits.new_zeros(())
        if w_layer > 0:
            with torch.no_grad():
                t_feat = hf_features(teacher, t_batch if t_batch else batch, attention)
            loss = loss + w_layer * layer_loss(s_feat, t_feat)
        if w_pred > 0:
            loss = loss + w_pred * loss_fn(logits, teacher_logits, gold)
            # The methods' terms join the prediction stage (not TinyBERT's layers-only one).
            step = Step(
                model, unwrapped_student, batch, logits, gold, epoch,
                texts=lambda: [train.texts[i] for i in rows.tolist()], features=s_feat,
                rows=rows,
            )  # fmt: skip
            for method in methods:
                term = method.loss(step)
                if term is not None:
                    loss = loss + term
        return loss

    # What a checkpoint holds beyond the student: trainable layer-loss projections, the
    # weight average, and each method's own state; and what it must match: this config
    # and these rows.
    kept = methods_state(methods)
    for module in kept.modules.values():  # on the student's device, as the layer loss is
        module.to(accelerator.device)
    modules: dict[str, torch.nn.Module] = dict(kept.modules)
    if layer_loss is not None:
        modules["layer_loss"] = layer_loss
    averaged = weight_average(accelerator.unwrap_model(model), cfg.ema, len(loader))
    if averaged is not None:
        modules["ema"] = averaged
    # The epochs' average starts as a copy (epoch 1 then replaces it whole).
    over_epochs = None
    if cfg.epoch_average is not None:
        over_epochs = copy.deepcopy(
            averaged.module if averaged is not None else accelerator.unwrap_model(model)
        )
        modules["epoch_average"] = over_epochs
    generators, torch_generators = kept.generators, kept.torch_generators
    match = ckpt.fingerprint(cfg.model_dump(mode="json"), train.texts, train.labels)
    resume = ckpt.Resume()
    if checkpoint is not None:
        resume = ckpt.load(
            checkpoint, match, accelerator.unwrap_model(model), optim, modules, generators,
            torch_generators=torch_generators, check=lambda r: check_history(r, len(select)),
        )  # fmt: skip
    if warm_start is not None and resume.epoch == 0:
        # Training that comes before the epochs (a config's early passes), unless a
        # checkpoint holds epochs trained after it. The averages start from its weights.
        warm_start()
        if averaged is not None:
            averaged = weight_average(accelerator.unwrap_model(model), cfg.ema, len(loader))
            modules["ema"] = averaged
        if over_epochs is not None:
            over_epochs = copy.deepcopy(
                averaged.module if averaged is not None else accelerator.unwrap_model(model)
            )
            modules["epoch_average"] = over_epochs
    best_acc, best_epoch, best_state, history = (
        resume.best_acc,
        resume.best_epoch,
        resume.best_state,
        resume.history,
    )
    from edgekd.threads import ThreadGovernor, available_cores

    # Epochs the loop may run: the config's, or more where the clock buys them. The
    # schedule spans the config's (the stage extends only a rate with no schedule).
    cap = max(cfg.max_epochs, extend_to or 0)
    # The schedule spans every planned epoch; an early stop simply ends it sooner.
    total_steps = cfg.max_epochs * len(loader)
    warmup_steps = int(cfg.warmup_ratio * total_steps)
    # All of its cores when quiet (its share under `accelerate launch`: processes
    # splitting 2 cores get one each), one when another process is busy.
    governor = ThreadGovernor(max(1, available_cores() // processes))
    if governor.note:
        console.print(governor.note)
    cut_for_time: int | None = None
    # Steps of the last epoch when only part of it is trained: the config's (a rerun of
    # a budget's cut), or what the clock leaves room for (`part_of_epoch`).
    part_steps = cfg.last_epoch_steps
    # A checkpoint written after the last epoch (its output never saved) trains none.
    last = resume.epoch if resume.final is not None else cap
    per_epoch = len(loader)
    # The steps the config allows: every epoch, or a rerun's part of the last.
    end_cap = (cap - 1) * per_epoch + (part_steps or per_epoch)
    # The end the interrupted run had projected (a part of its next epoch, as its clock
    # left room for; a cool-down's end): the resumed one's too, until its clock moves
    # it. Within what this run allows, as a crafted checkpoint may say anything.
    resumed_end = (
        resume.final is None
        and resume.last is not None
        and resume.epoch < resume.last <= cap
        and (resume.part_steps or 0) <= per_epoch
        and (resume.last - 1) * per_epoch + (resume.part_steps or per_epoch) <= end_cap
    )
    if resumed_end:
        last, part_steps = cast(int, resume.last), resume.part_steps
    # `lr_decay: cooldown`: the rate stays constant until the run knows where it ends,
    # then falls linearly to 0 over its last `cooldown` share of steps. The plan is the
    # config's (a rerun), the checkpoint's (a resumed run), or made as the run goes.
    cooling = cfg.lr_decay == "cooldown"
    plan = StepPlan(0, cfg.cooldown_from, cfg.cooldown_to)
    if cooling and cfg.cooldown_from is None and history:
        plan = StepPlan(0, *history[-1].get("cooldown", (None, None)))
    stop_at = end_cap

    def plan_the_end(done: int, end: int, stale: str) -> str:
        """Start the cool-down when due (`cooldown_start`), from step `done` with the
        run's end projected at `end`; set the epochs left to train. Returns why it
        started, or ""."""
        nonlocal last, part_steps, stop_at
        why = ""
        if plan.decay_from is None:
            if stale:
                end = min(end, stale_end(done, cfg.cooldown))
            start = cooldown_start(done, end, per_epoch, cfg.cooldown, now=bool(stale))
            if start is not None and end > start:
                plan.cool_down(start, end)
                why = stale or f"the last {cfg.cooldown:.0%} of the {end:,} steps that fit"
        stop_at = min(end, plan.decay_to if plan.decay_to is not None else end)
        if stop_at > done:
            last, part_steps = ends_at(stop_at, per_epoch)
        return why

    with progress_bar() as bar:
        job = bar.add_task("distill", total=cfg.max_epochs * len(loader), rate="")
        bar.update(job, advance=resume.epoch * len(loader))
        if resume.final in ("time", "plateau", "cooldown"):
            cut_for_time = resume.epoch
        elif cooling:
            # The end as projected: the interrupted run's, a rerun's cool-down's, or a
            # new run's forecast (a run of few epochs cools down within its first).
            end = min(end_cap, cfg.max_epochs * per_epoch)
            if resumed_end:
                end = (last - 1) * per_epoch + (part_steps or per_epoch)
            elif plan.decay_from is not None:
                end = end_cap
            plan_the_end(resume.epoch * per_epoch, end, "")
        # `last` may grow as the run goes (a cool-down planned past the budget's forecast
        # of epochs trains to its end), so the loop reads it after every epoch: a
        # `range` fixed at the start stopped such a run at the forecast, before or during
        # its cool-down (a 30-minute SST-2 run at the plan's 4 of ~4.5 epochs, the rate
        # 41% of the way down, 7% of its minutes unused).
        epoch = resume.epoch
        while epoch < last:
            epoch += 1
            loss_fn.start_epoch(epoch)
            for name, schedule in cfg.schedules.items():
                setattr(loss_fn, name, schedule.value(epoch, cfg.max_epochs))
            if selector is not None:
                pool = predict_logits(accelerator.unwrap_model(model), tok, train_ids[n_orig:])
                slots[n_orig:] = n_orig + selector.select(train_logits[n_orig:], pool)
            if epoch > 1 or selector is not None:
                batches[:] = epoch_batches(epoch)
            if epoch > cfg.max_epochs:  # past the forecast: the bar grows with the run
                bar.update(job, total=epoch * len(loader))
            model.train()
            total, count, epoch_start = 0.0, 0, time.perf_counter()
            steps = part_steps if part_steps is not None and epoch == last else len(loader)
            for i, batch in enumerate(loader):
                if i == steps:
                    break
                with exact_softmax():  # the same bits on any thread count
                    loss = step_loss(batch, epoch)
                step = (epoch - 1) * len(loader) + i
                rate = lr * lr_factor(step, total_steps, warmup_steps, cfg.lr_decay)
                optimiser_step(
                    accelerator, loss, optim, trainable, cfg.grad_clip,
                    rate * plan.factor(step), averaged, unwrapped_student,
                )  # fmt: skip
                governor.step(len(batch["input_ids"]))
                total, count = total + loss.item(), count + 1
                bar.update(job, advance=1, rate=f"epoch {epoch} loss {total / count:.4f}")
            # The steps' own seconds, scoring left out: the pace a time budget's probe
            # predicted (`time_plan.train_rows_per_s` against transfer_rows ÷ this).
            train_s = time.perf_counter() - epoch_start
            # The epoch's own weights, and those it is scored by and kept as if it is the
            # best: the same, or the epochs' average (each epoch's own then recorded too).
            own = averaged.module if averaged is not None else accelerator.unwrap_model(model)
            student, extra = own, {}
            # It averages the epochs that can be kept: TinyBERT's first stage trains no
            # classifier, so its epochs would weigh in an untrained head. A part of an
            # epoch (a budget's last) weighs as a whole one: its weights trained longest.
            if over_epochs is not None and epoch >= first_scored:
                nth = epoch - first_scored + 1
                average_epoch(over_epochs, own, nth, cast(int, cfg.epoch_average))
                student = over_epochs
                extra["epoch_dev_accuracy"] = accuracy(own, tok, dev_ids, dev_gold)
                if len(select):
                    extra["epoch_selection_accuracy"] = accuracy(own, tok, select_ids, select_gold)
            pred = predict_logits(student, tok, dev_ids).argmax(1)
            acc = accuracy(student, tok, select_ids, select_gold) if len(select) else None
            history.append(
                {
                    "epoch": epoch,
                    "train_loss": total / max(count, 1),
                    "steps": count,
                    **({"selection_accuracy": acc} if acc is not None else {}),
                    "dev_accuracy": float((pred == dev_gold).mean()),
                    "dev_agreement": float((pred == dev_teacher).mean()),
                    **extra,
                    "temperature": loss_fn.temperature,
                    "ce_weight": loss_fn.ce_weight,
                    "transfer_rows": len(slots),
                    "train_seconds": round(train_s, 3),
                }
            )
            # One line per epoch: progress bars do not render in CI logs or under nohup.
            chosen_by = f"selection accuracy {acc:.4f}, " if acc is not None else ""
            console.print(
                f"epoch {epoch}: train loss {total / max(count, 1):.4f}, {chosen_by}"
                f"dev accuracy {history[-1]['dev_accuracy']:.4f} (reported, never used), "
                f"{time.perf_counter() - epoch_start:.1f} s"
            )
            stop = False
            if epoch >= first_scored:
                # With no selection rows, every epoch improves on the last (kept: the last).
                if acc is None or keeps_later(acc, best_acc, len(select)):
                    best_acc, best_epoch = (best_acc if acc is None else max(acc, best_acc)), epoch
                    best_state = copy.deepcopy(student.state_dict())
                elif epoch - best_epoch >= cfg.patience and epoch >= min_epochs:
                    stop = True
            # Whether this epoch is the last, decided before the checkpoint records it.
            final, why = ("early stop" if stop else None), ""
            # Losses of the last stage only: annealing's first epochs are another loss.
            losses = [h["train_loss"] for h in history[min_epochs:]]
            if cooling:
                final, why = None, ""
                trained = (epoch - 1) * per_epoch + count
                stale = ""
                if stop:
                    stale = f"{cfg.patience} epochs below the kept one beyond noise"
                elif until_plateau and plateaued(losses, cfg.patience):
                    stale = (
                        f"the training loss fell under {PLATEAU_GAIN:.0%} over "
                        f"{cfg.patience} epochs"
                    )
                if trained >= stop_at:
                    final = "cooldown" if plan.decay_to == trained else "time"
                    why = (
                        f"cool-down done: the learning rate reached 0 at step {trained:,}"
                        if final == "cooldown"
                        else f"time budget: stopping after step {trained:,}"
                    )
                else:
                    end = end_cap
                    if seconds_left is not None:  # the steps that fit at this epoch's pace
                        took, left = time.perf_counter() - epoch_start, seconds_left()
                        end = min(end, trained + steps_that_fit(took, left, count))
                    # Every process plans from the main one's clock and losses.
                    end, stale = main_choice((end, stale))
                    started = plan_the_end(trained, end, stale)
                    if started:
                        console.print(
                            f"cool-down: the learning rate falls to 0 over steps "
                            f"{plan.decay_from:,}-{plan.decay_to:,} ({started})"
                        )
                    if stop_at <= trained:
                        final, why = "time", f"time budget: stopping after epoch {epoch}"
                history[-1]["cooldown"] = [plan.decay_from, plan.decay_to]
            elif final is None and epoch == last and count < len(loader):
                final = "time"  # the part of an epoch the clock left room for (or a rerun's)
                why = (
                    f"epoch {epoch}: {count:,} of its {len(loader):,} steps, as the time left held"
                )
            elif final is None and seconds_left is not None and epoch < cap:
                took, left = time.perf_counter() - epoch_start, seconds_left()
                if main_choice(took > left):  # every process stops at the same point
                    part = main_choice(part_of_epoch(took, left, len(loader)))
                    if part is None:
                        final = "time"
                        why = (
                            f"time budget: epoch {epoch + 1} would take ~{took:.0f} s of the "
                            f"{max(left, 0):.0f} s left; stopping after epoch {epoch}"
                        )
                    else:  # one more epoch, in part
                        last, part_steps = epoch + 1, part
            flat = not cooling and until_plateau and epoch < cap and plateaued(losses, cfg.patience)
            if final is None and main_choice(flat):  # every process stops at the same epoch
                final = "plateau"
                why = (
                    f"plateau: the training loss fell under {PLATEAU_GAIN:.0%} over "
                    f"{cfg.patience} epochs (or under {PLATEAU_FLOOR:g}); stopping after "
                    f"epoch {epoch}"
                )
            if final == "early stop":
                why = (
                    f"early stop: {cfg.patience} epochs below the kept one beyond noise "
                    f"(kept epoch {best_epoch}, selection accuracy "
                    f"{history[best_epoch - 1]['selection_accuracy']:.4f})"
                )
            if checkpoint is not None and accelerator.is_main_process:
                done = ckpt.Resume(
                    epoch, best_acc, best_epoch, best_state, history, final,
                    budget_left_s=None if seconds_left is None else seconds_left(),
                    last=last, part_steps=part_steps,
                )  # fmt: skip
                ckpt.save(
                    checkpoint, match, accelerator.unwrap_model(model), optim, done, modules,
                    generators, torch_generators=torch_generators,
                )  # fmt: skip
            if final is not None:
                if final != "early stop":  # the epochs run are the choice (resolved config)
                    cut_for_time = epoch
                console.print(why)
                break
    governor.close()
    unwrapped = accelerator.unwrap_model(model)
    if best_state is None:
        raise EdgeKDError(
            f"no epoch after the first stage ({first_scored - 1} epochs); raise --epochs"
        )
    unwrapped.load_state_dict(best_state)
    unwrapped.eval()
    # A history from before `steps` was recorded had whole epochs.
    last_steps = history[-1].get("steps", len(loader))
    end_of_run = (len(history) - 1) * per_epoch + last_steps
    # The kept epoch's own score (best_acc is the highest seen, the rule's reference).
    chosen = (
        {"selection_accuracy": history[best_epoch - 1]["selection_accuracy"]} if len(select) else {}
    )
    return {
        "best_epoch": best_epoch,
        "epochs_run": len(history),
        "history": history,
        "cut_for_time": cut_for_time,
        # The last epoch's steps when it was trained in part (the resolved config's).
        "last_epoch_steps": last_steps if last_steps < len(loader) else None,
        "processes": processes,
        # The cool-down as trained (one that never started: at the run's end), so the
        # resolved config reruns to the same rates.
        "cooldown": (
            (plan.decay_from, plan.decay_to)
            if plan.decay_from is not None
            else (end_of_run, end_of_run + 1)
        )
        if cooling
        else None,
        **chosen,
    }


T = TypeVar("T")

# The least share of an epoch worth training when no whole one fits the time left: a
# smaller part moves the weights little (the weight average spans a quarter epoch) and
# costs its scoring all the same.
MIN_PART_OF_EPOCH = 0.1


def cooldown_start(done: int, end: int, per_epoch: int, share: float, now: bool) -> int | None:
    """The step a cool-down over the last `share` of `end` steps starts at, seen at step
    `done`, when it starts before the plan is looked at again (the next epoch's end,
    `done + per_epoch`): at once when its point has passed, or `now`. None: not yet.
    10 epochs of 100 steps, share 0.2: the cool-down starts at step 800, planned at the
    end of epoch 8 (800 < 800 + 100), not at the end of epoch 7 (800 ≥ 700 + 100)."""
    start = math.ceil((1.0 - share) * end)
    if now:
        return done
    return max(done, start) if start < done + per_epoch else None


def ends_at(stop: int, per_epoch: int) -> tuple[int, int | None]:
    """(the last epoch, its steps or None for all of them) of a run ending at step
    `stop`: 1,050 steps at 100 a epoch end 50 steps into epoch 11."""
    last = math.ceil(stop / per_epoch)
    part = stop - (last - 1) * per_epoch
    return last, (None if part == per_epoch else part)


def steps_that_fit(took_s: float, left_s: float, steps: int) -> int:
    """Steps that fit in `left_s` seconds at the pace of `steps` steps in `took_s`
    (an epoch's, its scoring included): 2,300 steps in 40 s, 29 s left → 1,667."""
    return int(max(left_s, 0.0) / max(took_s, 1e-9) * steps)


def part_of_epoch(took_s: float, left_s: float, steps: int) -> int | None:
    """Steps of the next epoch that fit in `left_s` seconds at the last epoch's pace
    (`took_s` for `steps` steps, its scoring included, so the part's scoring fits
    too), or None when that is under `MIN_PART_OF_EPOCH` of an epoch. SST-2 at 5
    minutes: a 40 s epoch, 29 s left → 72% of the next epoch, where stopping left 15%
    of the budget unused."""
    fit = steps_that_fit(took_s, left_s, steps)
    if fit >= steps:  # a whole epoch fits: not a part (the caller asked for one)
        fit = steps - 1
    return fit if fit >= max(1, math.ceil(MIN_PART_OF_EPOCH * steps)) else None


def accuracy(model: Student, tok: StudentTokenizer, ids: list[Any], gold: np.ndarray) -> float:
    """`model`'s share of `gold` labels on the rows `ids`."""
    return float((predict_logits(model, tok, ids).argmax(1) == gold).mean())


def average_epoch(average: torch.nn.Module, weights: torch.nn.Module, epoch: int, eta: int) -> None:
    """Fold epoch `epoch`'s `weights` into `average`, the polynomial-decay average of
    the epochs so far (Shamir & Zhang 2013, eq. 4): a_e = (1 − f) a_(e−1) + f w_e with
    f = (η+1)/(e+η), so epoch 1 replaces the average whole and epoch i ends up weighing
    ∝ i·(i+1)···(i+η−1). η=0: the uniform mean; η=1, 4 epochs: 1:2:3:4 / 10. Floating
    parameters only, like the weight average (integer buffers stay as copied)."""
    share = (eta + 1) / (epoch + eta)
    with torch.no_grad():
        for mean, new in zip(average.parameters(), weights.parameters(), strict=True):
            mean.mul_(1.0 - share).add_(new.detach(), alpha=share)


def split_between(batches: list[list[int]], processes: int) -> list[list[int]]:
    """Each batch cut into `processes` parts, in order: accelerate hands the k-th list
    item to process k mod `processes`, so each step's `batch_size` rows are shared out
    and the gradients averaged over them. The steps, the batch and the learning rate
    stay those of one process (the same student within noise), not a batch
    `processes`× larger in fewer steps: that trained 3 points lower after one SST-2
    epoch (0.8154 vs 0.8452 dev). A batch smaller than `processes` goes whole to each
    (identical gradients average to themselves)."""
    if processes == 1:
        return batches
    return [
        part
        for batch in batches
        for part in (
            [batch[i::processes] for i in range(processes)]
            if len(batch) >= processes
            else [batch] * processes
        )
    ]


def check_history(resume: Any, n_select: int) -> None:
    """Raise ValueError unless a checkpoint's epochs are what this loop reads back: one
    record per epoch trained, each with its loss and dev score (and its step count, once
    recorded), and the kept epoch among them with its selection score when there are
    selection rows. (`checkpoint._plain_record` has checked the values' types.)"""

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    history, epoch, best = resume.history, resume.epoch, resume.best_epoch
    if len(history) != epoch or best > epoch:
        raise ValueError(f"{len(history)} epoch records for epoch {epoch}, best {best}")
    for record in history:
        if not (number(record.get("train_loss")) and number(record.get("dev_accuracy"))):
            raise ValueError("an epoch record without its loss or dev score")
        steps = record.get("steps", 1)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"an epoch record of {steps!r} steps")
    if best and n_select and not number(history[best - 1].get("selection_accuracy")):
        raise ValueError("the kept epoch has no selection score")


def make_optimiser(trainable: list[Any], lr: float, weight_decay: float) -> torch.optim.Adam:
    """The training loop's optimiser (and the time budget's probe's: the same kernel).
    The fused kernel updates every tensor in one pass: ~3 ms less per BiLSTM step on 2
    cores than the per-tensor loop torch uses on CPU by default."""
    return torch.optim.Adam(trainable, lr=lr, weight_decay=weight_decay, fused=True)


def optimiser_step(
    accelerator: Any,
    loss: torch.Tensor,
    optim: torch.optim.Optimizer,
    trainable: list[Any],
    grad_clip: float,
    lr: float,
    averaged: Any,
    model: torch.nn.Module,
) -> None:
    """One update from `loss` at learning rate `lr`: backward, the clip, Adam, and the
    weight average (`averaged`, of `model`'s weights, or None). Every training step
    makes it, and so does each of the time budget's probe steps
    (`edgekd.distill.timebudget`): when the probe made its own, simpler step (no clip,
    a stand-in loss, no exact softmax) it read 10-55% faster than the epochs then ran,
    and over-filled the plan."""
    accelerator.backward(loss)
    clip_gradients(accelerator, trainable, grad_clip)
    for group in optim.param_groups:
        group["lr"] = lr
    optim.step()
    optim.zero_grad()
    if averaged is not None:
        averaged.update_parameters(model)


def training_precision(precision: str, device_type: str) -> Any:
    """The context a training step's forward pass runs in: nothing for fp32; for bf16,
    autocast, under which matrix products and the LSTM run in bf16 while the weights,
    their gradients and Adam's moments stay fp32 (so no loss scaling, unlike fp16)."""
    import contextlib

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16)


def native_bf16() -> bool:
    """Whether this machine computes bf16 natively: a CUDA device that does (not by
    emulation, as a V100 or T4 would), or an x86 CPU with AVX512-BF16 or AMX. Elsewhere
    bf16 is emulated, slower than fp32. (Arm CPUs with bf16 read False: torch's probes
    are x86's; not measured there.)"""
    if not on_cpu_only():
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch built without these probes
        return False


def check_precision(precision: str) -> None:
    """Refuse bf16 where it is emulated (`native_bf16`): there it runs slower than fp32,
    the opposite of what it was asked for. The distill and teacher stages' one rule."""
    if precision == "bf16" and not native_bf16():
        raise EdgeKDError(
            "precision bf16: this machine has no native bf16 (a CPU with AVX512-BF16 or AMX, "
            "or a GPU with bf16), where it runs slower than fp32; use precision=fp32"
        )


def clip_gradients(accelerator: Any, parameters: list[Any], max_norm: float) -> None:
    """Clip the gradients' 2-norm to `max_norm`: thread-count exact on CPU in fp32
    (`edgekd.threads.exact_clip_grad_norm_`); elsewhere accelerate's own, which first
    unscales fp16 gradients and hands FSDP/DeepSpeed their clippers."""
    from edgekd.threads import exact_clip_grad_norm_

    if accelerator.device.type == "cpu" and accelerator.mixed_precision == "no":
        exact_clip_grad_norm_(parameters, max_norm)
    else:
        accelerator.clip_grad_norm_(parameters, max_norm)


def on_cpu_only() -> bool:
    """Whether this machine has no CUDA device. accelerate then needs `cpu=True` to
    join the processes `accelerate launch` or `torchrun` start (over gloo, its
    MULTI_CPU); without it each process trains alone on the whole set."""
    return not torch.cuda.is_available()


def main_choice(value: T) -> T:
    """The main process's `value`, on every process (under `accelerate launch`; alone,
    `value` itself). For choices made from clocks and measured rates, which differ
    between processes: the transfer set's size, the epochs, when to stop. Processes
    that chose differently would train on different rows and wait forever on each
    other's gradients."""
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]  # type: ignore[no-any-return]


# The least fall of the training loss over `patience` epochs for budget-bought epochs to
# go on: 3% over 3 epochs. CLINC150 at 10 rows per class (mse, 90k transfer rows): the
# loss fell 4.5% over epochs 9-12 while dev accuracy had stopped rising at ~0.846 after
# epoch 9; with 19k rows, 2% over epochs 27-30 at dev ~0.844. Without it a 160-row toy
# task given 13 minutes trained 200 epochs (2.8 minutes) to the dev accuracy 4 reach.
PLATEAU_GAIN = 0.03
# A loss this small has nothing left to teach, whatever its relative fall (a student
# matching its teacher's logits to ~0.01 has the teacher's argmax on every row).
PLATEAU_FLOOR = 1e-4


def plateaued(losses: list[float], patience: int, gain: float = PLATEAU_GAIN) -> bool:
    """Whether the last loss is above (1 − `gain`) × the loss `patience` epochs before,
    or under `PLATEAU_FLOOR`."""
    if len(losses) <= patience:
        return False
    return losses[-1] < PLATEAU_FLOOR or losses[-1] > (1.0 - gain) * losses[-1 - patience]


def keeps_later(acc: float, best: float, n: int, errors: float = 1.0) -> bool:
    """Whether an epoch scoring `acc` on `n` selection rows replaces the kept one, the
    best so far at `best`: unless it is worse by more than the standard error of
    `best` (the one-standard-error rule, turned to favour more training). 500 rows at
    0.88 measure ±√(0.88·0.12/500) = ±1.45 points: SST-2 runs swung 1.6 points on dev
    between epochs whose selection scores differed by 0.2-1.0, so a smaller gap is
    noise, and the later weights, trained longer and averaged, are the better bet.
    `errors`: how many standard errors count as noise."""
    if best < 0:  # nothing kept yet
        return True
    return acc >= best - errors * math.sqrt(best * (1.0 - best) / max(n, 1))


def weight_average(model: torch.nn.Module, horizon: float | None, steps_per_epoch: int) -> Any:
    """An exponential moving average of `model`'s weights over about `horizon` epochs,
    or None. The decay per step is set from the epoch's length, so the horizon means
    the same on 500 rows as on 500,000: 3,500 steps an epoch and a horizon of 0.25 give
    1 − 1/875 ≈ 0.99886 (a step's weight halves every ~600 steps)."""
    if horizon is None:
        return None
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    decay = 1.0 - 1.0 / max(horizon * steps_per_epoch, 1.0)
    # Parameters only: buffers (BERT's integer position ids) are constant and stay as
    # copied; averaging integers would round them.
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))


def preflight(cfg: DistillConfig) -> None:
    """Every check that needs no data or teacher, so a bad config fails at once. (Each
    component's options were validated when `cfg` was built.) Under TAKD, the
    assistant's run's and the student's run's, so neither fails after the other trained."""
    from edgekd.distill.augment import methods_of_stage

    if cfg.assistant is not None:
        preflight(cfg.assistant_config())
        cfg = cfg.model_copy(update={"assistant": None})
    build_loss(cfg)  # the loss's epochs and schedules
    check_precision(cfg.precision)
    check_methods(cfg, STUDENTS.get(cfg.student.name))
    if cfg.augment.order != "seeded" and not methods_of_stage(cfg.augment.listed, "text"):
        raise EdgeKDError(
            f"augment.order {cfg.augment.order!r} orders augmented variants, and no text "
            "augmenter makes any; add one (e.g. --augment tang) or drop augment.order"
        )


def check_teacher_vocabulary(cfg: DistillConfig, teacher_tokenizer: Any) -> None:
    """Refuse, once the teacher's tokenizer is known and before any row is augmented or
    labelled, what reads a WordPiece vocabulary it lacks: an augmenter that reads the
    teacher's pieces (`neighbour`), or a student's `extra_pieces`."""
    from edgekd.distill.augment import teacher_vocab_readers
    from edgekd.students.tokenizer import is_wordpiece

    if is_wordpiece(teacher_tokenizer):
        return
    readers = teacher_vocab_readers(cfg.augment)
    if readers:
        raise EdgeKDError(
            f"--augment {','.join(readers)} draws words from a WordPiece teacher's "
            "vocabulary, and this teacher's tokenizer is not WordPiece: choose other "
            "--augment methods"
        )
    if cfg.student.options.get("extra_pieces") not in (None, 0, "auto"):  # auto: 0 here
        raise EdgeKDError(
            "student option extra_pieces keeps a WordPiece teacher's pieces, and this "
            "teacher's tokenizer is not WordPiece: set student.options.extra_pieces=0"
        )


def check_methods(cfg: DistillConfig, student_cls: Any) -> None:
    """Refuse combinations that cannot work, before any data is read: each listed
    training-time method's own `check`, then the intermediate loss's."""
    from edgekd.distill.methods import check_methods as check_listed

    check_listed(cfg, student_cls)
    if cfg.intermediate is None:
        return
    name = cfg.intermediate.name
    if "hidden_states" not in student_cls.capabilities:
        raise EdgeKDError(
            f"intermediate loss {name!r} needs a transformer student; use --student bert"
        )
    layer_cls = LAYER_LOSSES.get(name)
    options = LAYER_LOSSES.options(cfg.intermediate, "intermediate")
    stages = options.stage_epochs
    stages = layer_cls.default_stage_epochs if stages is None else stages
    if cfg.max_epochs <= stages:
        raise EdgeKDError(
            f"{name} trains {stages} intermediate-only epochs first; raise --epochs above {stages}"
        )


def build_extras(
    cfg: DistillConfig,
    student: Student,
    tok: StudentTokenizer,
    teacher: Any,
    teacher_tok: Any,
    sources: np.ndarray,
    n_original: int,
    pairs: bool = False,
    states: TokenStates | None = None,
) -> Extras:
    """The online teacher, layer loss and training-time methods the config asks for
    (`states`: the transfer rows' teacher token states, for `token_states`)."""
    extras = Extras(teacher_tokenizer=teacher_tok, n_original=n_original)
    if cfg.intermediate is not None:
        from edgekd.distill.layers import encoder_shape

        s_layers, s_width = encoder_shape(student)
        t_layers, t_width = encoder_shape(teacher)
        name = cfg.intermediate.name
        layer_cls = LAYER_LOSSES.get(name)
        if layer_cls.same_tokens and tok.tokenizer.get_vocab() != dict(teacher_tok.get_vocab()):
            raise EdgeKDError(
                f"{name} compares tokens position by position; the student "
                "must read the teacher's vocabulary (the bert student does)"
            )
        options = LAYER_LOSSES.options(cfg.intermediate, "intermediate")
        try:
            extras.layer_loss = layer_cls(
                s_layers, t_layers, s_width, t_width, **options.model_dump()
            )
            extras.layer_loss.check_models(student, teacher)
        except ValueError as e:  # e.g. more student layers than the teacher has
            raise EdgeKDError(f"intermediate {name!r}: {e}; fix intermediate.options") from None
        extras.teacher = teacher
    run = MethodRun(cfg, student, tok, teacher, teacher_tok, sources, n_original, pairs, states)
    extras.methods = build_methods(run)
    if any(type(m).needs_teacher for m in extras.methods):
        extras.teacher = teacher
    return extras
