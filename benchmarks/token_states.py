"""Token-state distillation (`token_states`) against logits alone: the same rows, the
same epochs, the same seed, edgekd's own training loop.

    python benchmarks/token_states.py [--rows 20000] [--epochs 8] [--seeds 0 1 2] [--k 32]

A seeded sample of `--rows` SST-2 training rows (no augmentation, so the rows are the
only difference a budget could not hide) is labelled once by the reference teacher in
PyTorch, recording each row's last-layer token states on the top `--k` principal
components (`edgekd.distill.states`). For each seed, the default BiLSTM student is
trained `--epochs` epochs by `train_student` twice: on the logits alone, and with
`TokenStateLoss` (weight 1) beside them. No selection split: both keep the last
epoch. Scored every epoch on the 872 dev rows (recorded, as distill does; nothing is
chosen by them). Reported per arm: the last epoch's dev accuracy and the mean of the
last half of the epochs (an epoch's score swings ~0.5 points), per seed and as the
median over seeds; and the epochs' seconds.

This measures the lever where it is cleanest; whether it pays under the default time
budget, with augmented rows and the labelling it costs, is benchmarks/levers.py's
question (`--lever token_states=32`).

Writes benchmarks/results/token_states.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import revision  # the stamp every benchmark writes

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TEACHER = SHARED / "models" / "sst2-minilm-teacher"
DATA = SHARED / "data" / "sst2"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    rows = smoke.rows(args.rows) or args.rows
    epochs = smoke.at_most(args.epochs, 1)
    seeds = args.seeds[: smoke.at_most(len(args.seeds), 1)]
    k = smoke.at_most(args.k, 4)

    import tempfile

    import torch

    from edgekd.config import DataConfig, DistillConfig
    from edgekd.data import Split, load_task
    from edgekd.distill.cache import teacher_fingerprint
    from edgekd.distill.labeling import state_sink
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.distill.trainer import build_extras, train_student
    from edgekd.students.bilstm import BiLSTMStudent

    task = load_task(DataConfig(spec=str(DATA)))
    pick = random.Random(0).sample(range(len(task.train)), min(rows, len(task.train)))
    train = Split([task.train.texts[i] for i in pick], [task.train.labels[i] for i in pick])
    dev = task.dev
    model, ttok = load_teacher(str(TEACHER))
    model = model.float().eval()
    with tempfile.TemporaryDirectory() as cache:
        base = DistillConfig(
            teacher=str(TEACHER), token_states=k, epochs=epochs, selection_rows=0,
            cache_dir=cache,
        )  # fmt: skip
        started = time.perf_counter()
        sink = state_sink(base, teacher_fingerprint(str(TEACHER), model), model, ttok, train.texts)
        logits = teacher_logits(model, ttok, list(train.texts), sink=sink)
        states = sink.states_of(list(train.texts))
        dev_logits = teacher_logits(model, ttok, list(dev.texts))
        label_s = time.perf_counter() - started
    teacher_dev = float((dev_logits.argmax(1) == np.array(dev.labels)).mean())

    results: list[dict[str, Any]] = []
    # The student a default distill would train on this many texts (its auto options).
    from edgekd.students.tokenizer import is_wordpiece

    default_options = BiLSTMStudent.for_task({}, len(train), is_wordpiece(ttok))
    for seed in seeds:
        for arm, with_states in (("logits", False), ("logits + token states", True)):
            cfg = base.model_copy(update={"seed": seed, "token_states": k if with_states else 0})
            torch.manual_seed(seed)
            student, tok = BiLSTMStudent.prepare(default_options, list(train.texts), 2, model, ttok)
            extras = build_extras(
                cfg, student, tok, model, ttok, np.zeros(0, np.int64), len(train),
                states=states if with_states else None,
            )  # fmt: skip
            t = time.perf_counter()
            fit = train_student(
                cfg, student, tok, train, logits, Split([], []), dev, dev_logits, extras
            )
            seconds = time.perf_counter() - t
            curve = [h["dev_accuracy"] for h in fit["history"]]
            half = curve[len(curve) // 2 :]
            results.append(
                {
                    "arm": arm, "seed": seed, "dev_by_epoch": curve, "last": curve[-1],
                    "late_mean": statistics.mean(half), "epoch_s": seconds / len(curve),
                }
            )  # fmt: skip
            print(f"seed {seed} {arm}: last {curve[-1]:.4f}, late mean {statistics.mean(half):.4f}")

    arms = ["logits", "logits + token states"]
    summary = {  # per arm, each figure's median over seeds
        arm: {
            f"{key}_median": statistics.median(r[key] for r in results if r["arm"] == arm)
            for key in ("last", "late_mean", "epoch_s")
        }
        for arm in arms
    }
    meta = {
        "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
        "revision": revision(), "rows": len(train), "epochs": epochs, "seeds": seeds, "k": k,
        "teacher_dev": teacher_dev, "labelling_s": round(label_s, 1),
        "smoke": smoke.SMOKE,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "token_states.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": results}, indent=2) + "\n"
    )
    lines = [
        "# Token states beside the logits, same rows and epochs (SST-2)",
        "",
        f"{meta['machine']}; revision {meta['revision']}; {len(train):,} training rows (seeded "
        f"sample, no augmentation), {epochs} epochs, k = {k}, the default BiLSTM; teacher dev "
        f"{teacher_dev:.4f}; labelling with states {label_s:.0f} s. Dev accuracy of the "
        "epoch's weights (the last is kept; late = mean of the last half of the epochs).",
        "",
        "| arm | seed | last | late mean | s / epoch |",
        "|---|---|---|---|---|",
        *(
            f"| {r['arm']} | {r['seed']} | {r['last']:.4f} | {r['late_mean']:.4f} | "
            f"{r['epoch_s']:.1f} |"
            for r in results
        ),
        "",
        "| arm | median last | median late mean | median s / epoch |",
        "|---|---|---|---|",
        *(
            f"| {arm} | {s['last_median']:.4f} | {s['late_mean_median']:.4f} | "
            f"{s['epoch_s_median']:.1f} |"
            for arm, s in summary.items()
        ),
        "",
    ]
    (args.out / "token_states.md").write_text(smoke.markdown("\n".join(lines)))


if __name__ == "__main__":
    main()
