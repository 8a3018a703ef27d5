"""Active labelling (`augment.order`) against the seeded order: the same number of
teacher-labelled variants, the same epochs, edgekd's own scout, labelers and loop.

    python benchmarks/active.py --task sst2 [--rows 20000] [--epochs 8] [--seeds 0 1 2]
        [--orders uncertain uncertain-per-text]

A time budget that cannot label every candidate variant labels a prefix of them; this
benchmark fixes that prefix's size (`--rows`, the `augment.max_rows` a budget would
choose) and compares which rows fill it. The task's teacher and data are those of
`benchmarks/tasks.py` (runs/bench-tasks/TASK; made when absent). The candidates are the
default augmentation of the training texts (tang, `n_iter: auto`). For each seed and
each order (seeded, then each of `--orders`), the default BiLSTM is prepared from that
seed, the scout orders the candidates (`edgekd.distill.active.scout_order`), the
teacher labels the first `--rows` of them with the default runtime (auto) through
the logit cache (the training and evaluation rows once per seed: the calibration
sample, drawn from the candidates in their seeded order, is the same for every arm), and
`train_student` trains `--epochs` epochs on the training rows plus those variants. No
selection split: every arm keeps its last epoch. Scored every epoch on the task's
evaluation split (accuracy, or MCC × 100 on CoLA; recorded, nothing chosen by it).
Reported per arm: the last epoch's score and the mean of the last half of the epochs,
per seed and as medians over seeds; the scout's seconds.

Whether the order pays under a real budget, where the scout's seconds are spent
instead of labelling or training, is benchmarks/levers.py's question
(`--lever augment.order=uncertain`).

Writes benchmarks/results/active_TASK.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import levers
import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
import tasks

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="sst2", choices=list(tasks.TASKS))
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--orders", nargs="+", default=["uncertain", "uncertain-per-text"])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    rows = smoke.at_most(args.rows, 200)
    epochs = smoke.at_most(args.epochs, 1)
    seeds = args.seeds[: smoke.at_most(len(args.seeds), 1)]

    import torch

    from edgekd.config import AugmentConfig, DataConfig, DistillConfig
    from edgekd.data import Split, align_labels, load_task
    from edgekd.distill.active import SCOUT_ROWS, scout_order
    from edgekd.distill.labeling import AugmentedPlan, augmented_texts, teacher_labels
    from edgekd.distill.losses import NO_LABEL
    from edgekd.distill.teacher import at_trained_length, load_teacher, teacher_label_names
    from edgekd.distill.trainer import build_extras, train_student
    from edgekd.distill.transfer import TakenColumn
    from edgekd.exporters.teacher import OnnxLabelers
    from edgekd.students.base import predict_logits
    from edgekd.students.bilstm import BiLSTMStudent

    teacher_dir, data = levers.teacher_and_data(args.task)
    split_name, metric = tasks.TASKS[args.task]
    # The scored split is read as the task's evaluation split (CLINC150's test).
    on = DataConfig(spec=str(data), dev_split="test" if split_name == "test" else None)
    task = load_task(on.model_copy(update={"max_train": smoke.rows(None)}))
    model, ttok = load_teacher(str(teacher_dir))
    names = teacher_label_names(model.config)
    task = align_labels(task, names)
    train, scored = task.train, task.dev
    gold = np.array(scored.labels)
    arms = ["seeded", *args.orders]
    results: list[dict[str, Any]] = []
    cache = tempfile.mkdtemp(prefix="edgekd-active-")
    # Labelled at the length the teacher trained at, as a default distill labels.
    base = at_trained_length(DistillConfig(
        teacher=str(teacher_dir), epochs=epochs, selection_rows=0, cache_dir=cache,
        data=on,
    ))  # fmt: skip
    candidates, sources = augmented_texts(base, list(train.texts), ttok)
    teacher_score = None
    # The student a default distill would train on this many texts (its auto options).
    from edgekd.students.tokenizer import is_wordpiece

    default_options = BiLSTMStudent.for_task({}, len(train), is_wordpiece(ttok))
    for seed in seeds:
        for arm in arms:
            augment = AugmentConfig(order=arm, max_rows=rows)
            cfg = base.model_copy(update={"seed": seed, "augment": augment})
            torch.manual_seed(seed)
            student, tok = BiLSTMStudent.prepare(
                default_options, list(train.texts) + list(candidates), len(names), model, ttok
            )
            t = time.perf_counter()
            order = scout_order(cfg, student, tok, train.texts, train.labels, candidates, sources)
            scout_s = time.perf_counter() - t
            ordered = TakenColumn(candidates, order)
            t = time.perf_counter()
            # As the stage labels them: every candidate offered (the calibration sample is
            # drawn from all of them), the plan's prefix labelled; "dev" is labelled fp32.
            splits = {"train": train.texts, "dev": scored.texts, "augmented": ordered}
            logits, _, _ = teacher_labels(
                cfg, splits, model, ttok, names, OnnxLabelers, AugmentedPlan(limit=rows)
            )
            label_s = time.perf_counter() - t
            extra = ordered.head(len(logits["augmented"]))
            teacher_score = tasks.score(metric, logits["dev"].argmax(1), gold)
            transfer = Split(
                list(train.texts) + list(extra), list(train.labels) + [NO_LABEL] * len(extra)
            )
            train_logits = np.concatenate([logits["train"], logits["augmented"]])
            extras = build_extras(cfg, student, tok, model, ttok, extra.sources, len(train))
            t = time.perf_counter()
            fit = train_student(
                cfg, student, tok, transfer, train_logits, Split([], []), scored,
                logits["dev"], extras,
            )  # fmt: skip
            train_s = time.perf_counter() - t
            # dev_accuracy is the recorded split's accuracy; MCC needs the predictions, so
            # CoLA's curve is the accuracy's and its last epoch is scored again below.
            curve = [h["dev_accuracy"] for h in fit["history"]]
            last = tasks.score(
                metric, predict_logits(student, tok, tok.ids(list(scored.texts))).argmax(1), gold
            )
            half = curve[len(curve) // 2 :]
            distinct = len(set(extra.sources.tolist()))
            # What the order picked: shorter rows, or more masked words, than a uniform draw?
            picked = list(extra)
            mask = getattr(ttok, "mask_token", None) or "[MASK]"
            words = statistics.mean(len(str(r).split()) for r in picked) if picked else 0.0
            masked = sum(str(r).count(mask) for r in picked) / max(1, len(picked))
            results.append(
                {
                    "arm": arm, "seed": seed, "curve": curve, "last": last,
                    "late_mean": statistics.mean(half), "scout_s": round(scout_s, 1),
                    "label_s": round(label_s, 1), "train_s": round(train_s, 1),
                    "texts_varied": distinct, "mean_words": round(words, 2),
                    "masks_per_row": round(masked, 3),
                }
            )  # fmt: skip
            print(
                f"seed {seed} {arm}: last {last:.4f}, late mean {statistics.mean(half):.4f}, "
                f"scout {scout_s:.0f} s, {distinct:,} texts varied",
                flush=True,
            )

    summary = {  # per arm, each figure's median over seeds
        arm: {
            f"{key}_median": statistics.median(r[key] for r in results if r["arm"] == arm)
            for key in ("last", "late_mean", "scout_s")
        }
        for arm in arms
    }
    meta = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "revision": tasks.revision(), "task": args.task, "metric": metric,
        "train_rows": len(train), "candidates": len(candidates), "labelled": rows,
        "epochs": epochs, "seeds": seeds, "teacher_score": teacher_score, "smoke": smoke.SMOKE,
        "scout_rows": SCOUT_ROWS,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"active_{args.task}"
    (args.out / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": results}, indent=2) + "\n"
    )
    what = "MCC × 100" if metric == "mcc" else "accuracy"
    lines = [
        f"# Which variants the teacher labels: scout orders against the seeded one ({args.task})",
        "",
        f"{meta['machine']}; revision {meta['revision']}; {len(train):,} training rows, "
        f"{rows:,} of {len(candidates):,} candidate variants labelled, {epochs} epochs, the "
        f"default BiLSTM; the scout trains on {SCOUT_ROWS:,} rows; teacher {split_name} "
        f"{what} {teacher_score:.4f}. The student's "
        f"{split_name} {what} at its last epoch (late: the accuracy's mean over the last "
        "half of the epochs); label s: the teacher's seconds on the training, evaluation and "
        "picked rows (the run's first arm of a seed labels the training rows too); texts "
        "varied: training texts with a variant in the labelled rows; words and [MASK]s per "
        "picked row.",
        "",
        "| order | seed | last | late mean | scout s | label s | texts varied | words / row | "
        "masks / row |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['arm']} | {r['seed']} | {r['last']:.4f} | {r['late_mean']:.4f} | "
            f"{r['scout_s']:.0f} | {r['label_s']:.0f} | {r['texts_varied']:,} | "
            f"{r['mean_words']:.1f} | {r['masks_per_row']:.2f} |"
            for r in results
        ),
        "",
        "| order | median last | median late mean | median scout s |",
        "|---|---|---|---|",
        *(
            f"| {arm} | {s['last_median']:.4f} | {s['late_mean_median']:.4f} | "
            f"{s['scout_s_median']:.0f} |"
            for arm, s in summary.items()
        ),
        "",
    ]
    (args.out / f"{stem}.md").write_text(smoke.markdown("\n".join(lines)))
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
