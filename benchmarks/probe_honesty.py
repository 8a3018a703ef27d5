"""The time budget's training probe against the epochs it planned: does it read true?

    python benchmarks/probe_honesty.py [--tasks sst2 clinc150-10] [--budget 5] [--seeds 0]

A budgeted run (`edgekd distill --time-budget M`) plans its transfer set and epochs
from a training rate it measures on a few seconds of probe steps
(`edgekd.distill.timebudget.probe_train_rate`) before and after labelling. A probe that
reads fast over-fills the plan: more rows labelled than `MIN_EPOCHS` epochs then fit,
and the check after each epoch cuts it (issue 31 measured 10-55% optimism). For each
task and seed: `edgekd distill --student bilstm --time-budget M --seed N` from a cold
teacher-logit cache (teacher and data of `benchmarks/tasks.py`, made when absent), then
from its metrics: the probe's rate (`time_plan.train_rows_per_s`, the probe after
labelling, which planned the epochs), each whole epoch's rate (its transfer rows ÷ the
seconds of its steps, `train_seconds`: scoring left out), the ratio probe ÷ median
epoch (1.00 is honest; above, optimistic), the epochs planned against those run, and
the wall clock as a share of the budget. About M + 1 minutes per run.

Rows of earlier runs (another revision, task or seed) are kept in
benchmarks/results/probe_honesty.json, each naming the revision it measured, so a
fix is measured as rows before and after it. EDGEKD_BENCH_SMOKE=1: a wiring check on
the smallest work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import levers  # benchmarks/ is on the path of its own scripts
import smoke
import tasks

REPO = Path(__file__).resolve().parents[1]
RUNS = smoke.runs_dir(REPO / "runs" / "bench-probe")


def one_run(task: str, seed: int, budget: float) -> dict[str, Any]:
    from edgekd.artifacts import DistillMetrics

    teacher, data = levers.teacher_and_data(task)
    folder = RUNS / task / f"seed{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cache = Path(tempfile.mkdtemp(prefix="edgekd-cold-"))
    env = {**os.environ, "EDGEKD_CACHE": str(cache)}
    rows = ["--max-train", str(smoke.ROWS), *smoke.distill_args()] if smoke.SMOKE else []
    try:
        minutes = levers.edgekd(
            ["distill", "--student", "bilstm", "--teacher", str(teacher), "--data", str(data),
             "--out", str(folder / "student"), "--seed", str(seed), "--time-budget",
             str(budget), *rows],
            env, folder / "distill.log",
        )  # fmt: skip
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    metrics = DistillMetrics.read(folder / "student")
    plan = metrics.time_plan
    if plan is None:
        raise SystemExit(f"{folder / 'student'}: no time plan in its metrics")
    history = getattr(metrics, "history", [])
    whole = max((h["steps"] for h in history), default=0)
    epochs = [
        h["transfer_rows"] / h["train_seconds"]
        for h in history
        if h["steps"] == whole and h.get("train_seconds")
    ]
    epoch_rate = statistics.median(epochs) if epochs else None
    return {
        "task": task,
        "seed": seed,
        "budget_min": budget,
        "probe_rows_per_s": plan.train_rows_per_s,
        "epoch_rows_per_s": [round(r, 1) for r in epochs],
        "probe_over_epochs": round(plan.train_rows_per_s / epoch_rate, 3) if epoch_rate else None,
        "planned_epochs": plan.epochs,
        "epochs_run": len(history),
        "last_epoch_steps": f"{history[-1]['steps']} of {whole}" if history else None,
        "cut_after": plan.cut_after,
        "augmented_rows": plan.augmented_rows,
        "augmented_candidates": plan.augmented_candidates,
        "wall_share": round(minutes / budget, 3),
        "revision": tasks.revision(),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    md = [
        "# The time budget's training probe against the epochs it planned (2 cores)",
        "",
        "`edgekd distill --student bilstm --time-budget M` from a cold teacher-logit cache. "
        "Probe: the rate the epochs were planned at (`time_plan.train_rows_per_s`); epochs: "
        "each whole epoch's transfer rows ÷ the seconds of its steps. probe ÷ epochs above "
        "1 is optimism: the plan labels rows its epochs then have no time for.",
        "",
        "| task | revision | seed | budget | probe rows/s | whole epochs, rows/s | probe ÷ "
        "epochs | epochs planned → run | augmented rows | wall ÷ budget |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['probe_over_epochs']:.2f}" if r["probe_over_epochs"] else "–"
        run = f"{r['planned_epochs']} → {r['epochs_run']}"
        if r["cut_after"] is not None:
            run += f" (cut after {r['cut_after']})"
        md.append(
            f"| {r['task']} | {r['revision']} | {r['seed']} | {r['budget_min']:g} min | "
            f"{r['probe_rows_per_s']:,.0f} | "
            f"{' / '.join(f'{x:,.0f}' for x in r['epoch_rows_per_s']) or '–'} | {ratio} | "
            f"{run} | {r['augmented_rows']:,} of {r['augmented_candidates']:,} | "
            f"{r['wall_share']:.0%} |"
        )
    return smoke.markdown("\n".join(md) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["sst2", "clinc150-10"], choices=list(tasks.TASKS))
    p.add_argument("--budget", type=float, default=5.0, help="Minutes per distill run.")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    budget = smoke.pick(args.budget, smoke.BUDGET_MIN)
    seeds = args.seeds[: smoke.REPEATS] if smoke.SMOKE else args.seeds
    path = args.out / "probe_honesty.json"
    kept: list[dict[str, Any]] = []
    if path.is_file() and not smoke.SMOKE:
        kept = json.loads(path.read_text()).get("rows", [])
    rows = [one_run(task, seed, budget) for task in args.tasks for seed in seeds]
    new = {(r["task"], r["seed"], r["revision"]) for r in rows}
    rows = [r for r in kept if (r["task"], r["seed"], r["revision"]) not in new] + rows
    rows.sort(key=lambda r: (r["task"], r["seed"]))
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"smoke": smoke.SMOKE, "cores": os.cpu_count(), "python": sys.version.split()[0]}
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (args.out / "probe_honesty.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
