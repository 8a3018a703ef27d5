"""The epochs' weight average (`epoch_average`) against each epoch's own weights, in
the same runs: what the default student ships with it, and what it would have shipped
without.

    python benchmarks/epoch_average.py [--task sst2] [--eta 1] [--seeds 0 1 2]
        [--budget 13]

Per seed, benchmarks/distill_default.py's commands (cold cache; distill, export
--int8, bundle, the bundle scored on dev) with `-s epoch_average=ETA` under
`--time-budget BUDGET`. A run with the average scores both weights after every epoch,
on the selection split and on dev (`epoch_selection_accuracy`, `epoch_dev_accuracy`
in its history), and its training steps are those of a run without it (the average
is never trained on). So each seed is a paired comparison: the epoch the run keeps by
its selection rule (`keeps_later` and `patience`) replayed over the epochs' own
scores, against the average it kept; both as PyTorch dev accuracy, and the average's
bundle too. The replay cannot see epochs a run without the average would have trained
after an early stop it did not make here; under a budget, epochs end by the clock.

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
from distill_default import REPO, RUNS, one_run, revision, task_teacher, teacher_scores


def kept_epoch(selection: list[float], patience: int) -> int:
    """The epoch (1-based) the trainer's rule keeps from these selection scores: each
    later one within a standard error of the best replaces it; `patience` epochs
    below it end the run."""
    from edgekd.distill.trainer import keeps_later

    best, kept = -1.0, 0
    n = 500  # the default selection rows
    for epoch, acc in enumerate(selection, 1):
        if keeps_later(acc, best, n):
            best, kept = max(acc, best), epoch
        elif epoch - kept >= patience:
            break
    return kept


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--task", default="sst2", choices=["sst2", "cola"])
    p.add_argument("--eta", type=int, default=1)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--budget", type=float, default=13.0, help="Minutes (the default's).")
    args = p.parse_args()
    seeds = args.seeds[: smoke.at_most(len(args.seeds), 1)]
    shared = args.shared.resolve()
    env = dict(os.environ)
    RUNS.mkdir(parents=True, exist_ok=True)
    from edgekd.config import DistillConfig

    patience = DistillConfig(teacher="-").patience
    data, teacher = shared / "data" / args.task, task_teacher(args.task, shared, env)
    t_scores, _ = teacher_scores(teacher, data)
    rows = []
    for seed in seeds:
        run = one_run(
            args.task, teacher, data, seed, env, args.budget,
            settings=(f"epoch_average={args.eta}",),
        )  # fmt: skip
        history = run["history"]
        own = kept_epoch([h["epoch_selection_accuracy"] for h in history], patience)
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
        "teacher": t_scores, "smoke": smoke.SMOKE,
    }  # fmt: skip
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    stem = f"epoch_average_{args.task}"
    (out / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "summary": summary, "runs": rows}, indent=2) + "\n"
    )
    teacher_acc = t_scores["accuracy"]
    lines = [
        f"# The epochs' average (η = {args.eta}) against each epoch's own weights ({args.task})",
        "",
        f"{meta['machine']}; revision {meta['revision']}; `edgekd distill --student bilstm "
        f"--time-budget {args.budget:g} -s epoch_average={args.eta}`, cold cache; teacher dev "
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
