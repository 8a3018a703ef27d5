"""The epochs' weight average (`epoch_average`) against each epoch's own weights, in
the same runs: what the default student ships with it, and what it would have shipped
without.

    python benchmarks/epoch_average.py [--task sst2] [--eta 1] [--seeds 0 1 2]
        [--budget 13] [--set FIELD=VALUE ...]

The task's teacher and data: SST-2's and CoLA's of benchmarks/distill_default.py,
the others' of benchmarks/tasks.py (as benchmarks/levers.py reads them). Per seed,
benchmarks/distill_default.py's commands (cold cache; distill, export
--int8, bundle, the bundle scored on dev) with `-s epoch_average=ETA` under
`--time-budget BUDGET`. A run with the average scores both weights after every epoch,
on the selection split and on dev (`epoch_selection_accuracy`, `epoch_dev_accuracy`
in its history), and its training steps are those of a run without it (the average
is never trained on). So each seed is a paired comparison: the epoch the run keeps by
its selection rule (`keeps_later` and `patience`) replayed over the epochs' own
scores, against the average it kept; both as PyTorch dev accuracy, and the average's
bundle too. The replay cannot see epochs a run without the average would have trained
after an early stop it did not make here. Under a budget the epochs end by the clock,
which the average's own scoring (~1 s an epoch on SST-2) also spends: a run without it
might fit a little more of an epoch.

Writes benchmarks/results/epoch_average_<task>.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
from pathlib import Path

import smoke  # benchmarks/ is on the path of its own scripts
import tasks
from distill_default import (
    REPO,
    RUNS,
    one_run,
    revision,
    slug,
    task_teacher,
    teacher_scores,
)
from levers import teacher_and_data


def kept_epoch(selection: list[float], rows: int, patience: int) -> int:
    """The epoch (1-based) the trainer's rule keeps from these selection scores on
    `rows` held-out rows: each later one within a standard error of the best replaces
    it; `patience` epochs below it end the run (the default loss, mse, sets no least
    number of epochs)."""
    from edgekd.distill.trainer import keeps_later

    best, kept = -1.0, 0
    for epoch, acc in enumerate(selection, 1):
        if keeps_later(acc, best, rows):
            best, kept = max(acc, best), epoch
        elif epoch - kept >= patience:
            break
    return kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--task", default="sst2", choices=list(tasks.TASKS))
    p.add_argument("--eta", type=int, default=1)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=13.0, help="Minutes (the default's).")
    p.add_argument(
        "--set", action="append", default=[], metavar="FIELD=VALUE",
        help="Another distill setting in every run (both arms), e.g. augment.n_iter=40.",
    )  # fmt: skip
    args = p.parse_args()
    seeds = args.seeds[: smoke.at_most(len(args.seeds), 1)]
    shared = args.shared.resolve()
    env = dict(os.environ)
    RUNS.mkdir(parents=True, exist_ok=True)
    from edgekd.config import DistillConfig

    patience = DistillConfig(teacher="-").patience
    if args.task in ("sst2", "cola"):  # distill_default.py's teachers
        data, teacher = shared / "data" / args.task, task_teacher(args.task, shared, env)
    else:  # tasks.py's, as levers.py reads them
        teacher, data = teacher_and_data(args.task)
    t_scores, _ = teacher_scores(teacher, data)
    rows = []
    for seed in seeds:
        run = one_run(
            args.task, teacher, data, seed, env, args.budget,
            settings=(f"epoch_average={args.eta}", *args.set),
        )  # fmt: skip
        history = run["history"]
        scores = [h["epoch_selection_accuracy"] for h in history]
        own = kept_epoch(scores, run["n_selection"], patience)
        rows.append(
            {
                "seed": seed,
                "epochs_run": run["epochs_run"],
                "average_epoch": run["best_epoch"],
                "average_dev": history[run["best_epoch"] - 1]["dev_accuracy"],
                "average_bundle": run["student"]["accuracy"],
                "own_epoch": own,
                "own_dev": history[own - 1]["epoch_dev_accuracy"],
                "own_dev_by_epoch": [h["epoch_dev_accuracy"] for h in history],
                "average_dev_by_epoch": [h["dev_accuracy"] for h in history],
                "revision": run["revision"],
            }
        )
        print(f"seed {seed}: own {rows[-1]['own_dev']:.4f}, average {rows[-1]['average_dev']:.4f}")
    med = statistics.median
    summary = {
        key: med(r[key] for r in rows)
        for key in ("own_dev", "average_dev", "average_bundle", "epochs_run")
    }
    meta = {
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "revision": revision(), "task": args.task, "eta": args.eta, "budget_min": args.budget,
        "settings": args.set,
        "teacher": t_scores, "smoke": smoke.SMOKE,
    }  # fmt: skip
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    # One file per task and set of other settings: each is its own comparison.
    stem = f"epoch_average_{args.task}" + "".join(f"_{slug(setting)}" for setting in args.set)
    (out / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=2) + "\n"
    )
    teacher_acc = t_scores["accuracy"]
    lines = [
        f"# The epochs' average (η = {args.eta}) against each epoch's own weights ({args.task})",
        "",
        f"{meta['machine']}; revision {meta['revision']}; `edgekd distill --student bilstm "
        f"--time-budget {args.budget:g} -s epoch_average={args.eta}"
        + "".join(f" -s {setting}" for setting in args.set)
        + "`, cold cache; teacher dev "
        f"{teacher_acc:.4f}. Paired: the same run's steps, scored both ways after every "
        "epoch; each kept by the selection rule over its own selection scores. Dev accuracy "
        "in PyTorch; the average's int8 bundle beside it.",
        "",
        "| seed | epochs | own: kept epoch | own: dev | average: kept epoch | average: dev | "
        "average: bundle |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['seed']} | {r['epochs_run']} | {r['own_epoch']} | {r['own_dev']:.4f} | "
            f"{r['average_epoch']} | {r['average_dev']:.4f} | {r['average_bundle']:.4f} |"
            for r in rows
        ),
        f"| median | {summary['epochs_run']:g} | | {summary['own_dev']:.4f} "
        f"({summary['own_dev'] / teacher_acc:.1%}) | | {summary['average_dev']:.4f} "
        f"({summary['average_dev'] / teacher_acc:.1%}) | {summary['average_bundle']:.4f} "
        f"({summary['average_bundle'] / teacher_acc:.1%}) |",
        "",
    ]
    (out / f"{stem}.md").write_text(smoke.markdown("\n".join(lines)))


if __name__ == "__main__":
    main()
