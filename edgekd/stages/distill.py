"""The distill stage: a teacher and a config in, a student folder out.

`distill(cfg, out_dir)` owns `out_dir`: it checks the folder before any data loads,
labels the transfer set with the teacher (through the logit cache), trains the
student (resuming a killed run from its checkpoint) and writes the student,
`config.yaml` (resolved) and `metrics.json`, all at once or not at all.
"""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from edgekd.artifacts import CONFIG, DistillMetrics, TaskShape
from edgekd.config import (
    SMALL_TASK_TEXTS,
    DistillConfig,
    EarlyPass,
    load_yaml,
    positions_of,
    save_config,
    teacher_positions,
    validate,
)
from edgekd.data import Split, Text, align_labels, carve_selection, load_task, varied_rows
from edgekd.distill import checkpoint as ckpt
from edgekd.distill.active import scout_order
from edgekd.distill.checkpoint import checkpoint_dir, discard_checkpoint
from edgekd.distill.early import LabelFeed, early_passes, overlaps, run_labelling
from edgekd.distill.labeling import (
    ALONE,
    AugmentedPlan,
    augmented_texts,
    process_group,
    teacher_labels,
)
from edgekd.distill.losses import NO_LABEL
from edgekd.distill.states import TokenStates
from edgekd.distill.teacher import at_trained_length, load_teacher, teacher_label_names
from edgekd.distill.timebudget import (
    MIN_EPOCHS,
    RESERVE_S,
    Clock,
    augmented_room,
    describe,
    make_plan,
    planned_config,
    probe_train_rate,
)
from edgekd.distill.trainer import (
    build_extras,
    check_teacher_vocabulary,
    main_choice,
    on_cpu_only,
    preflight,
    train_student,
)
from edgekd.distill.transfer import TakenColumn, TextColumn
from edgekd.errors import EdgeKDError
from edgekd.exporters.teacher import OnnxLabelers
from edgekd.io import atomic_dir, check_not_input, check_output, config_inputs
from edgekd.progress import console, shown
from edgekd.registry import STUDENTS
from edgekd.students.base import predict_logits, save_student
from edgekd.students.tokenizer import is_wordpiece
from edgekd.threads import core_share
from edgekd.yardstick import tfidf_baseline


def run_takd(cfg: DistillConfig, out_dir: str | Path, overwrite: bool = False) -> DistillMetrics:
    """Teacher-assistant KD (Mirzadeh et al. 2020, "Improved Knowledge Distillation via
    Teacher Assistant", arXiv:1902.03393): two runs from one config.

    Run 1 distils the teacher into the assistant (`cfg.assistant` overrides any field:
    student, intermediate, epochs...); run 2 distils the assistant
    into the configured student. The folder holds the student, its config (with the
    `assistant` section) and the assistant in `assistant/`. In the metrics,
    `teacher_accuracy` is the original teacher's and `agreement` is with the assistant.
    """
    import os

    preflight(cfg)  # both runs' checks, before the first
    a_cfg = cfg.assistant_config()
    if "hidden_states" not in STUDENTS.get(a_cfg.student.name).capabilities:
        raise EdgeKDError(
            f"assistant student {a_cfg.student.name!r} cannot teach (it is no HF classifier); "
            "use an assistant with student: bert"
        )
    with atomic_dir(out_dir, overwrite) as tmp:
        console.print(f"TAKD run 1/2: {shown(cfg.teacher)} → assistant ({a_cfg.student.name})")
        a_metrics = distill(a_cfg, tmp / "assistant")
        console.print(f"TAKD run 2/2: assistant → student ({cfg.student.name})")
        s_cfg = cfg.model_copy(update={"assistant": None, "teacher": str(tmp / "assistant")})
        student = distill(s_cfg, tmp / "student")
        for item in (tmp / "student").iterdir():
            os.replace(item, tmp / item.name)
        shutil.rmtree(tmp / "student")
        metrics = student.model_copy(
            update=dict(
                teacher=cfg.teacher,
                assistant_accuracy=student.teacher_accuracy,
                teacher_accuracy=a_metrics.teacher_accuracy,
                assistant=cfg.assistant,
            )
        )
        save_config(takd_resolved(cfg, tmp / CONFIG, tmp / "assistant" / CONFIG), tmp / CONFIG)
        metrics.write(tmp)
    return metrics


def resumed_clock(clock: Clock, left_s: float | None) -> Clock | None:
    """The clock of a run resumed from a checkpoint that had `left_s` seconds of its
    budget left (less the loop's reserve): those seconds, counted from this run's start,
    so its own start-up spends them too and the two runs together spend about the
    minutes granted (plus the part of an epoch the kill cut off). None when the
    checkpoint holds none (an older one): the run trains the plan's epochs."""
    if left_s is None:
        return None
    # Never more than a new run's (the budget less the reserve), whatever the file says;
    # never below nothing.
    left_s = min(max(left_s, 0.0), clock.budget_s - RESERVE_S)
    console.print(f"time budget: {left_s:.0f} s left at the checkpoint, spent by this run")
    return Clock((left_s + RESERVE_S) / 60.0, start=clock.start)


def takd_resolved(cfg: DistillConfig, student: Path, assistant: Path) -> DistillConfig:
    """One config that reruns both TAKD runs: the student run's resolved fields (its
    epochs, variants, rows, learning rate: what the budget chose) with the original
    teacher, and in `assistant` every field where the assistant's resolved run differs
    from them, so {**top, **top.assistant} is the assistant run's resolved config."""
    top, helper = load_yaml(student), load_yaml(assistant)  # both written by this run
    top["teacher"] = cfg.teacher  # not the temporary folder the assistant sat in
    top["assistant"] = {k: v for k, v in helper.items() if k != "assistant" and top.get(k) != v}
    return validate(DistillConfig, top, "resolved TAKD config")


def distill(cfg: DistillConfig, out_dir: str | Path, overwrite: bool = False) -> DistillMetrics:
    """Distil `cfg.teacher` into a student folder at `out_dir`; return its metrics.
    `overwrite`: write beside files in `out_dir` that edgekd did not write (kept)."""
    check_output(out_dir, overwrite)  # before the teacher labels anything
    # The teachers, data, generator, tokenizers (the assistant's too): never written over.
    check_not_input(out_dir, config_inputs(cfg.model_dump()))
    cfg = at_trained_length(cfg)  # before TAKD, whose assistant run inherits it
    if cfg.assistant is not None:
        return run_takd(cfg, out_dir, overwrite)
    preflight(cfg)
    if cfg.time_budget is None:  # no budget to choose the epochs: the default, recorded
        cfg = cfg.model_copy(update={"epochs": cfg.max_epochs})
    # The budget counts from here: loading and augmenting spend it too.
    clock = Clock(cfg.time_budget) if cfg.time_budget is not None else None
    # Under a budget the epochs the clock affords are trained, more or fewer than the
    # plan's forecast, and the resolved config states the epochs run. Not with a schedule
    # over the planned epochs (decay, warm-up, per-epoch values): other epochs would
    # rerun a different schedule.
    schedule_free = (
        cfg.lr_decay in ("none", "cooldown") and cfg.warmup_ratio == 0 and not cfg.schedules
    )
    # Epochs the budget chooses (unset) may also end at a plateau (`until_plateau`).
    bought_epochs = clock is not None and cfg.epochs is None and schedule_free
    # The plan's epochs are a forecast: the loop trains more while the clock has room, up
    # to `--epochs` (unset: `BUDGET_MAX_EPOCHS`). Read before the plan (or a resumed
    # run's) replaces the epochs with its forecast.
    extend_to = cfg.max_epochs if clock is not None and schedule_free else None
    torch.manual_seed(cfg.seed)
    seconds: dict[str, float] = {}
    t = time.perf_counter()
    task = load_task(cfg.data)
    teacher, teacher_tok = load_teacher(cfg.teacher)
    check_teacher_vocabulary(cfg, teacher_tok)  # before the rows are augmented or labelled
    if teacher_positions(cfg.teacher) is None:  # a hub teacher: its positions known now
        positions = positions_of(teacher.config.to_dict())
        try:
            if positions is not None:
                cfg = cfg.model_copy(deep=True)  # the caller's config stays as given
                cfg.fit_teacher_positions(cfg.teacher, positions)
        except ValueError as e:
            raise EdgeKDError(str(e)) from None
    task = align_labels(task, teacher_label_names(teacher.config))
    # The rows that choose the epoch: held out of training, so dev chooses nothing.
    train, select, overlap = carve_selection(task.train, cfg.selection_rows, cfg.seed)
    # Variants per text (`n_iter: auto`) and methods (`methods: auto`) from the rows there
    # are, those varied, and the teacher's vocabulary, recorded as what ran.
    picked = varied_rows(train.texts, cfg.augment.sources)
    shape = TaskShape.of(
        train.labels, task.num_labels, len(select), cfg.augment, cfg.time_budget, len(picked)
    )
    wordpiece = is_wordpiece(teacher_tok)
    augment = cfg.augment.resolved(len(train), cfg.time_budget, wordpiece, len(picked))
    console.print(f"data: {shape.describe()}")
    if cfg.augment.methods == "auto":
        console.print(cfg.augment.describe_auto(len(train), wordpiece))
    options = STUDENTS.get(cfg.student.name).for_task(cfg.student.options, len(train), wordpiece)
    if options != cfg.student.options:
        chosen = {k: v for k, v in options.items() if cfg.student.options.get(k) != v}
        console.print(
            "student: " + ", ".join(f"{k} {v}" for k, v in chosen.items()) + " (auto, "
            + ("a small task)" if len(train) < SMALL_TASK_TEXTS else "not a small task)")
        )  # fmt: skip
    student_cfg = cfg.student.model_copy(update={"options": options})
    cfg = cfg.model_copy(update={"augment": augment, "student": student_cfg})
    seconds["load"] = time.perf_counter() - t

    from accelerate import PartialState

    state = PartialState(cpu=on_cpu_only())
    # The yardstick on the same rows (seconds; inside the budget, which plans around it).
    t = time.perf_counter()
    tfidf = tfidf_baseline(train, task.dev) if state.is_main_process else None
    seconds["tfidf"] = time.perf_counter() - t
    if tfidf is not None:
        grams = "" if tfidf.analyzer == "word" else " (character n-grams: no row holds a word)"
        console.print(f"yardstick: TF-IDF + LR dev accuracy {tfidf.accuracy:.4f}{grams}")
    t = time.perf_counter()
    extra: TextColumn | TakenColumn
    extra, sources = augmented_texts(cfg, train.texts, teacher_tok, teacher, picked)
    seconds["augment"] = time.perf_counter() - t

    # The student's vocabulary comes from every candidate row, kept or not, so a cap on
    # the augmented rows (set, or chosen by the budget) never changes it.
    t = time.perf_counter()
    try:
        student, tok = STUDENTS.get(cfg.student.name).prepare(
            cfg.student.options, train.texts + extra, task.num_labels, teacher, teacher_tok
        )
    except ValueError as e:  # options that fit the config model but not this teacher
        raise EdgeKDError(
            f"student {cfg.student.name!r}: {str(e).splitlines()[0]}; fix student.options"
        ) from None
    seconds["prepare_student"] = time.perf_counter() - t
    capped = clock is not None or cfg.augment.max_rows is not None
    if cfg.augment.order != "seeded" and len(extra) and capped:
        # Before labelling: the scout picks which variants the teacher labels first (with
        # no cap every one is labelled, and the order would only cost the scout's time).
        # One order for every process (the main's): each labels its share of the rows.
        t = time.perf_counter()
        order = process_group(state).decided(
            lambda: scout_order(cfg, student, tok, train.texts, train.labels, extra, sources)
        )
        extra = TakenColumn(extra, order)
        sources = extra.sources
        seconds["scout"] = time.perf_counter() - t
        console.print(
            f"scout: {len(extra):,} variants ordered {cfg.augment.order} "
            f"in {seconds['scout']:.0f} s"
        )

    checkpoint = checkpoint_dir(out_dir)
    plan = AugmentedPlan(limit=cfg.augment.max_rows)
    train_rate = None
    feed = None
    if clock is not None:
        resumed = ckpt.planned_fields(checkpoint, cfg)
        if resumed is not None:  # an interrupted run's plan: resume it, do not re-plan
            cfg = cfg.model_copy(update=resumed)
            plan = AugmentedPlan(limit=cfg.augment.max_rows)
            clock = resumed_clock(clock, ckpt.budget_left(checkpoint))
        else:
            train_rate = probe_train_rate(cfg, student, tok, train.texts + extra, task.num_labels)
            if len(extra) and overlaps(cfg, state.num_processes, core_share()):
                feed = LabelFeed(core_share())
            room = augmented_room(
                clock, len(train), train_rate, min(MIN_EPOCHS, cfg.max_epochs),
                trained=feed.trained_by if feed is not None else None,
            )  # fmt: skip
            plan = AugmentedPlan(limit=cfg.augment.max_rows, room=room, feed=feed)

    t = time.perf_counter()
    # The selection rows are labelled too: the teacher's agreement there is reported.
    splits: dict[str, Sequence[Any]] = {"train": train.texts, "dev": task.dev.texts}
    if len(select):
        splits["selection"] = select.texts
    if extra:
        splits["augmented"] = extra
    # Under `accelerate launch`, every process labels a share of the rows the cache lacks
    # and gets every process's logits back; the main alone reads and writes the cache, and
    # its clock decides how many augmented rows fit, so all train on one transfer set.
    states: dict[str, TokenStates] = {}  # with `token_states`: the training rows'
    passes: list[tuple[int, int]] = []
    passes_rng = torch.get_rng_state()  # labelling draws none; the early passes start here
    if feed is None:
        logits, hits, runtime = teacher_labels(
            cfg, splits, teacher, teacher_tok, task.label_names, OnnxLabelers, plan,
            process_group(state), states,
        )  # fmt: skip
    else:  # the student trains on what is labelled while the teacher labels the rest
        runtimes = functools.partial(OnnxLabelers, workers=feed.workers)
        thread, result = run_labelling(
            feed,
            lambda: teacher_labels(
                cfg, splits, teacher, teacher_tok, task.label_names, runtimes, plan, ALONE, states
            ),
        )
        t_early = time.perf_counter()
        try:
            passes = early_passes(
                cfg, student, tok, train.texts + extra, train.labels, len(train), feed=feed
            )
        except BaseException:
            feed.stop.set()  # no further chunk: the run is ending
            raise
        seconds["early_passes"] = time.perf_counter() - t_early
        thread.join()
        if isinstance(result[0], BaseException):
            raise result[0]
        logits, hits, runtime = result[0]
    kept = len(logits["augmented"]) if extra else 0
    dev_logits = logits["dev"]
    seconds["teacher_logits"] = time.perf_counter() - t
    candidates = len(extra)
    extra, sources = extra.head(kept), sources[:kept]
    time_plan = None
    if clock is None:  # a resumed run whose checkpoint holds no clock: the plan's epochs
        extend_to = None
    if clock is not None and train_rate is not None:
        # A second probe, now that labelling is done, on the rows kept: the epochs are
        # planned at the rate measured just before they run (the first probe, taken
        # before labelling, read 804 rows/s where the epochs then ran at 1,022).
        train_rate = probe_train_rate(cfg, student, tok, train.texts + extra, task.num_labels)
        time_plan = main_choice(
            make_plan(
                clock, cfg, train_rate, runtime.get("rows_per_s"), len(train), candidates, kept
            )
        )
        cfg = planned_config(cfg, time_plan)
        console.print(describe(time_plan))
    # Augmented rows carry soft logits only: their gold label is NO_LABEL. The texts are a
    # Chained, not a list (augmented rows stay memory-mapped): the training loop reads a
    # split's texts by len, index, slice and iteration only, all of which it gives.
    transfer = Split(cast(list[Text], train.texts + extra), train.labels + [NO_LABEL] * len(extra))
    train_logits = np.concatenate([logits["train"], logits.get("augmented", logits["train"][:0])])
    if feed is not None:  # the passes run are part of the student: its config reruns them
        done = [EarlyPass(augmented_rows=r, steps=n) for r, n in passes]
        cfg = cfg.model_copy(update={"early_passes": done})
    warm_start = None
    if feed is None and cfg.early_passes:  # a config that records them: the same passes

        def warm_start() -> None:
            # From the generator state the recording run's passes started from (they
            # drew dropout masks from it), back to the loop's after them.
            t, loop_rng = time.perf_counter(), torch.get_rng_state()
            torch.set_rng_state(passes_rng)
            early_passes(
                cfg, student, tok, transfer.texts, transfer.labels, len(train),
                replay=[(p.augmented_rows, p.steps) for p in cfg.early_passes or []],
                train_logits=logits["train"], augmented_logits=logits.get("augmented"),
            )  # fmt: skip
            torch.set_rng_state(loop_rng)
            seconds["early_passes"] = time.perf_counter() - t

    t = time.perf_counter()
    pairs = not isinstance(train.texts[0], str)
    transfer_states = None
    if "train" in states:  # in transfer order: the training rows, then the augmented
        parts = [states["train"], *([states["augmented"]] if "augmented" in states else [])]
        transfer_states = TokenStates.concat(parts, cfg.token_states)
    extras = build_extras(
        cfg, student, tok, teacher, teacher_tok, sources, len(train), pairs, transfer_states
    )
    if extras.teacher is None:
        del teacher  # not needed past this point; free its memory
    seconds["prepare_student"] += time.perf_counter() - t

    t = time.perf_counter()
    # Every process resumes from the checkpoint (they must agree on the epoch and the
    # weights); only the main one writes it.
    fit = train_student(
        cfg,
        student,
        tok,
        transfer,
        train_logits,
        select,
        task.dev,
        dev_logits,
        extras,
        checkpoint,
        seconds_left=None if clock is None else lambda: clock.left() - RESERVE_S,
        until_plateau=bought_epochs,
        extend_to=extend_to,
        warm_start=warm_start,
    )
    seconds["train"] = time.perf_counter() - t
    cut, part = fit.pop("cut_for_time"), fit.pop("last_epoch_steps")
    # Epochs trained past the plan's (the clock had room, or a resumed checkpoint had
    # them) are the choice too, however they ended (the clock, an early stop, the cap).
    if cut is None and fit["epochs_run"] > cfg.max_epochs:
        cut = fit["epochs_run"]
    cooldown = fit.pop("cooldown")
    if cut is not None:  # the epochs actually run are the choice: the config reruns to them
        cfg = cfg.model_copy(update={"epochs": cut, "last_epoch_steps": part})
        if time_plan is not None:
            time_plan = time_plan.model_copy(update={"cut_after": cut, "last_epoch_steps": part})
    if cooldown is not None:  # and so are the steps its learning rate fell over
        cfg = cfg.model_copy(update={"cooldown_from": cooldown[0], "cooldown_to": cooldown[1]})

    t = time.perf_counter()
    pred = predict_logits(student, tok, tok.ids(task.dev.texts)).argmax(1)
    gold, teacher_pred = np.array(task.dev.labels), dev_logits.argmax(1)
    seconds["eval"] = time.perf_counter() - t

    metrics = DistillMetrics(
        **{
            "teacher": cfg.teacher,
            "extra_teachers": cfg.extra_teachers,
            "teacher_runtime": runtime,
            "student": cfg.student.name,
            "teacher_accuracy": float((teacher_pred == gold).mean()),
            "student_accuracy": float((pred == gold).mean()),
            "agreement": float((pred == teacher_pred).mean()),
            **(
                {
                    "teacher_selection_accuracy": float(
                        (logits["selection"].argmax(1) == np.array(select.labels)).mean()
                    )
                }
                if "selection" in logits
                else {}
            ),
            **student.params(),
            "init": student.init_notes,
            "lr": cfg.lr or student.default_lr,
            "intermediate": cfg.intermediate.name if cfg.intermediate else None,
            "vocab_size": tok.vocab_size,
            "n_train": len(train),
            "n_selection": len(select),
            "n_overlap_dropped": overlap,
            "n_augmented": len(extra),
            "n_dev": len(task.dev),
            "time_plan": time_plan,
            "tfidf": tfidf,
            "task_shape": shape,
            "labels": task.label_names,
            "cache_hits": hits,
            "seconds": {k: round(v, 2) for k, v in seconds.items()},
            **fit,
            "data_notes": task.notes,
        }
    )
    if not state.is_main_process:
        return metrics  # one writer: the main process
    with atomic_dir(out_dir, overwrite) as tmp:
        save_student(tmp, student, tok, task.label_names)
        # The resolved config: the learning rate the student's default gave, not "unset";
        # the budget's choice as plain fields and no budget, so it reruns to this student.
        resolved = {"lr": cfg.lr or student.default_lr, "time_budget": None}
        save_config(cfg.model_copy(update=resolved), tmp / CONFIG)
        metrics.write(tmp)
    discard_checkpoint(out_dir)  # the run is done: nothing to resume
    return metrics
