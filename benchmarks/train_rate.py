"""Training rows/s of the default BiLSTM at several batch sizes, and what each buys per
epoch: the same rows, edgekd's own training loop, the arms interleaved.

    python benchmarks/train_rate.py [--rows 20000] [--epochs 2] [--repeats 2]
        [--batch-sizes 50 100 200] [--lr 0.001]

A seeded sample of `--rows` SST-2 training rows (no augmentation) is labelled once by
the reference teacher in PyTorch; then, per repeat, the default BiLSTM student (seeded
by the repeat) is trained `--epochs` epochs by `train_student` at each batch size in
turn (A B C, A B C, ...), with the same learning rate unless `--lr-scale sqrt` scales it
by √(batch / 50). No selection split; dev is scored after every epoch (recorded,
choosing nothing). Reported per batch size: the epochs' training rows/s (median over
every epoch of every repeat), its ratio to the first batch size's, and dev accuracy
after the last epoch (median over repeats).

A screen, not a lever: a larger batch steps on more rows a second but takes fewer
steps an epoch, so whether it pays under a time budget is `distill_default.py --lever
"batch_size=100 lr=0.0014"`'s question.

Writes benchmarks/results/train_rate.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import cpu, revision

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TEACHER = SHARED / "models" / "sst2-minilm-teacher"
DATA = SHARED / "data" / "sst2"
BASE_BATCH = 50  # the default `batch_size`, which `--lr` belongs to


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[50, 100, 200])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-scale", choices=["none", "sqrt"], default="none")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    rows = smoke.rows(args.rows) or args.rows
    epochs = smoke.at_most(args.epochs, 1)
    repeats = smoke.at_most(args.repeats, 1)

    import torch

    from edgekd.config import DataConfig, DistillConfig
    from edgekd.data import Split, load_task
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.distill.trainer import build_extras, train_student
    from edgekd.students.bilstm import BiLSTMStudent

    task = load_task(DataConfig(spec=str(DATA)))
    pick = random.Random(0).sample(range(len(task.train)), min(rows, len(task.train)))
    train = Split([task.train.texts[i] for i in pick], [task.train.labels[i] for i in pick])
    dev = task.dev
    model, ttok = load_teacher(str(TEACHER))
    model = model.float().eval()
    logits = teacher_logits(model, ttok, list(train.texts))
    dev_logits = teacher_logits(model, ttok, list(dev.texts))
    teacher_dev = float((dev_logits.argmax(1) == np.array(dev.labels)).mean())

    def lr_of(batch: int) -> float:
        # Adam's step size for a batch k× larger: √k, the usual rule for adaptive optimisers.
        return args.lr * (math.sqrt(batch / BASE_BATCH) if args.lr_scale == "sqrt" else 1.0)

    runs: list[dict[str, Any]] = []
    # The student a default distill would train on this many texts (its auto options).
    from edgekd.students.tokenizer import is_wordpiece

    default_options = BiLSTMStudent.for_task({}, len(train), is_wordpiece(ttok))
    with tempfile.TemporaryDirectory() as cache:
        for repeat in range(repeats):
            for batch in args.batch_sizes:
                cfg = DistillConfig(
                    teacher=str(TEACHER), epochs=epochs, selection_rows=0, cache_dir=cache,
                    batch_size=batch, lr=lr_of(batch), seed=repeat, time_budget=None,
                )  # fmt: skip
                torch.manual_seed(repeat)
                student, tok = BiLSTMStudent.prepare(
                    default_options, list(train.texts), 2, model, ttok
                )
                extras = build_extras(
                    cfg, student, tok, model, ttok, np.zeros(0, np.int64), len(train)
                )
                started = time.perf_counter()
                fit = train_student(
                    cfg, student, tok, train, logits, Split([], []), dev, dev_logits, extras
                )
                wall = time.perf_counter() - started
                history = fit["history"]
                runs.append(
                    {
                        "batch_size": batch, "lr": lr_of(batch), "repeat": repeat,
                        "epoch_s": [h["train_seconds"] for h in history],
                        "dev_by_epoch": [h["dev_accuracy"] for h in history],
                        "steps_per_epoch": history[0]["steps"], "wall_s": round(wall, 2),
                    }
                )  # fmt: skip
                rates = [round(len(train) / s) for s in runs[-1]["epoch_s"]]
                print(f"batch {batch}, repeat {repeat}: {rates} rows/s, dev "
                      f"{runs[-1]['dev_by_epoch'][-1]:.4f}", flush=True)  # fmt: skip

    summary: dict[str, dict[str, float]] = {}
    for batch in args.batch_sizes:
        mine = [r for r in runs if r["batch_size"] == batch]
        epoch_s = statistics.median(s for r in mine for s in r["epoch_s"])
        summary[str(batch)] = {
            "rows_per_s": len(train) / epoch_s,
            "steps_per_epoch": mine[0]["steps_per_epoch"],
            "dev_last_median": statistics.median(r["dev_by_epoch"][-1] for r in mine),
        }
    first = summary[str(args.batch_sizes[0])]["rows_per_s"]
    meta = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "cpu": cpu(), "revision": revision(), "rows": len(train), "epochs": epochs,
        "repeats": repeats, "lr": args.lr, "lr_scale": args.lr_scale,
        "teacher_dev": teacher_dev, "smoke": smoke.SMOKE,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "train_rate.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": runs}, indent=2) + "\n"
    )
    lines = [
        "# Training rows/s by batch size (SST-2, the default BiLSTM)",
        "",
        f"{meta['machine']}, {meta['cpu']}; revision {meta['revision']}; {len(train):,} "
        f"training rows (seeded sample, no augmentation), {epochs} epochs × {repeats} "
        f"repeats per batch size, interleaved; lr {args.lr:g} (scaled: {args.lr_scale}); "
        f"teacher dev {teacher_dev:.4f}.",
        "",
        "| batch size | steps / epoch | training rows/s | × the first | dev after the last "
        "epoch (median) |",
        "|---|---|---|---|---|",
        *(
            f"| {batch} | {s['steps_per_epoch']:,} | {s['rows_per_s']:,.0f} | "
            f"{s['rows_per_s'] / first:.2f}× | {s['dev_last_median']:.4f} |"
            for batch, s in summary.items()
        ),
        "",
    ]
    (args.out / "train_rate.md").write_text(smoke.markdown("\n".join(lines)))


if __name__ == "__main__":
    main()
