"""One distillation lever against the defaults, side by side, on a shared task.

    python benchmarks/levers.py --task clinc150-10 --lever lr_decay=cooldown
        [--seeds 0 1 2] [--also FIELD=VALUE ...]

For each seed, two runs of `edgekd distill --student bilstm --teacher T --data D --seed N`
(its default budget), each from a cold teacher-logit cache (a fresh $EDGEKD_CACHE), one
with the defaults and one with `-s LEVER`, in alternating order (A B, B A, ...) so a
machine that slows over the hour costs both arms alike; then `edgekd export --int8` of
each. The teacher and data are those of `benchmarks/tasks.py` for that task
(runs/bench-tasks/TASK, made by it when absent). Scored: the export's shipped model on
the task's dev split (accuracy; MCC × 100 for CoLA), as recorded in export.json, and
retention = student ÷ teacher on the same rows. Reported per arm: the median over
seeds, each seed's score, epochs run, augmented rows and distill minutes. Each `--also`
lever is one more arm beside the same defaults (A B C, C B A, ...): two levers for the
runs of three arms, not four.

A lever lands as a default only if it wins on the median, on more than one task
(issue 31); every measured lever stays in the table, kept or not. Rows of earlier runs
(other tasks or levers) are kept in benchmarks/results/levers.json, each naming the
revision it measured. EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts
import tasks

REPO = Path(__file__).resolve().parents[1]
RUNS = smoke.runs_dir(REPO / "runs" / "bench-levers")


def edgekd(args: list[str], env: dict[str, str], log: Path) -> float:
    """Run `edgekd ARGS`, its output in `log`; its wall minutes."""
    start = time.perf_counter()
    with log.open("w") as f:
        done = subprocess.run(
            [sys.executable, "-m", "edgekd", *args], env=env, stdout=f, stderr=subprocess.STDOUT
        )
    if done.returncode != 0:
        raise SystemExit(f"edgekd {' '.join(args)} exited {done.returncode}; see {log}")
    return round((time.perf_counter() - start) / 60, 2)


def one_run(task: str, arm: str, sets: list[str], seed: int, teacher: Path, data: Path) -> dict:
    from edgekd.artifacts import DistillMetrics, ExportReport

    folder = RUNS / task / arm.replace("/", "_") / f"seed{seed}"
    done = folder / "result.json"
    if done.is_file():  # an interrupted benchmark, or another lever's defaults arm
        kept = json.loads(done.read_text())
        if kept.get("revision") == tasks.revision() and not kept["revision"].endswith("-dirty"):
            return kept
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cache = Path(tempfile.mkdtemp(prefix="edgekd-cold-"))
    env = {**os.environ, "EDGEKD_CACHE": str(cache)}
    quick = (
        ["--time-budget", str(smoke.BUDGET_MIN), "--max-train", str(smoke.ROWS)]
        if smoke.SMOKE
        else []
    )
    student, export = folder / "student", folder / "export"
    try:
        minutes = edgekd(
            ["distill", "--student", "bilstm", "--teacher", str(teacher), "--data", str(data),
             "--out", str(student), "--seed", str(seed), *quick,
             *[x for s in sets for x in ("-s", s)]],
            env, folder / "distill.log",
        )  # fmt: skip
        edgekd(["export", str(student), "--int8", "--out", str(export)], env, folder / "export.log")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    report, metrics = ExportReport.read(export), DistillMetrics.read(student)
    shipped = report.models[report.shipped()]
    metric = tasks.TASKS[task][1]
    score = 100 * shipped.mcc if metric == "mcc" else shipped.accuracy
    teacher_score = teacher_dev(task, teacher, data)
    result = {
        "seed": seed,
        "score": score,
        "teacher": teacher_score,
        "retention": score / teacher_score if teacher_score else None,
        "epochs_run": metrics.epochs_run,
        "augmented_rows": metrics.n_augmented,
        "distill_minutes": minutes,
        "bytes": shipped.bytes,
        "revision": tasks.revision(),
    }
    done.write_text(json.dumps(result, indent=2))
    return result


_TEACHER: dict[str, float] = {}


def teacher_dev(task: str, teacher: Path, data: Path) -> float:
    """The teacher's dev score (MCC × 100 or accuracy), on the rows the export scored."""
    if task not in _TEACHER:
        from edgekd.config import DataConfig
        from edgekd.data import load_task
        from edgekd.distill.teacher import load_predictor

        rows = load_task(DataConfig(spec=str(data)))
        predictor = load_predictor(teacher)
        names = list(predictor.label_names)
        gold = [names.index(rows.label_names[y]) for y in rows.dev.labels]
        predicted = predictor.logits(list(rows.dev.texts)).argmax(1)
        _TEACHER[task] = tasks.score(tasks.TASKS[task][1], predicted, gold)
    return _TEACHER[task]


def teacher_and_data(task: str) -> tuple[Path, Path]:
    """The teacher `benchmarks/tasks.py` trained for `task`, and its data (made if absent)."""
    work = smoke.runs_dir(REPO / "runs" / "bench-tasks") / task
    work.mkdir(parents=True, exist_ok=True)  # a fresh checkout: tasks.py never ran here
    teacher = work / "teacher"
    data = tasks.task_data(task, work)
    if not (teacher / "metrics.json").is_file():
        budget = str(smoke.pick(15.0, smoke.BUDGET_MIN))
        rows = ["--max-train", str(smoke.ROWS)] if smoke.SMOKE else []
        edgekd(["teacher", "--data", str(data), "--out", str(teacher), "--time-budget", budget,
                *rows], dict(os.environ), work / "teacher.log")  # fmt: skip
    return teacher, data


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r.get(key) is not None]
        return statistics.median(values) if values else None

    return {
        "median_score": median("score"),
        "median_retention": median("retention"),
        "median_epochs": median("epochs_run"),
        "median_minutes": median("distill_minutes"),
        "scores": [round(r["score"], 4) for r in runs],
        "teacher": runs[0]["teacher"] if runs else None,
        "revision": runs[0]["revision"] if runs else None,
        "runs": runs,
    }


def markdown(rows: dict[str, Any]) -> str:
    md = [
        "# Levers against the defaults (2 cores, cold cache, default budget)",
        "",
        "`python benchmarks/levers.py --task TASK --lever FIELD=VALUE`: per seed, the "
        "default `edgekd distill --student bilstm` and the same with `-s FIELD=VALUE`, "
        "then `edgekd export --int8`; the shipped model's dev score (accuracy, or MCC × "
        "100 on CoLA), its median over seeds, and retention (÷ the teacher's dev score).",
        "",
        "| task | arm | seeds | median score | each seed | median retention | epochs | "
        "distill min | revision |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, row in rows.items():
        task, arm = key.split(" | ")[:2]
        retention = row["median_retention"]
        md.append(
            f"| {task} | {arm} | {len(row['runs'])} | {row['median_score']:.4f} | "
            f"{', '.join(f'{s:.4f}' for s in row['scores'])} | "
            f"{'' if retention is None else f'{100 * retention:.1f}%'} | "
            f"{row['median_epochs']:g} | {row['median_minutes']:.1f} | {row['revision']} |"
        )
    return "\n".join(md) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", required=True, choices=list(tasks.TASKS))
    p.add_argument("--lever", required=True, action="append", help="FIELD=VALUE (-s syntax).")
    p.add_argument(
        "--also",
        action="append",
        default=[],
        help="Another lever as an arm of its own, beside the same defaults (FIELD=VALUE).",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    seeds = args.seeds[: smoke.at_most(len(args.seeds), smoke.REPEATS)]
    teacher, data = teacher_and_data(args.task)
    arms = {"defaults": [], " + ".join(args.lever): list(args.lever)}
    arms.update({lever: [lever] for lever in args.also})
    if len(arms) != 2 + len(args.also):  # two arms of one name would share a run folder
        p.error("each --lever / --also arm must differ from the others")
    runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for i, seed in enumerate(seeds):
        order = list(arms) if i % 2 == 0 else list(arms)[::-1]
        for arm in order:
            runs[arm].append(one_run(args.task, arm, arms[arm], seed, teacher, data))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "levers.json"
    earlier = json.loads(path.read_text()).get("rows", {}) if path.is_file() else {}
    if smoke.SMOKE:
        earlier = {}
    # One row per (task, arm, revision): a new revision's defaults arm joins the table
    # beside the one earlier levers were measured against, never over it.
    ran = {arm: summary(runs[arm]) for arm in arms}
    rows = {
        **earlier,
        **{f"{args.task} | {arm} | {ran[arm]['revision']}": ran[arm] for arm in arms},
    }
    path.write_text(json.dumps({"smoke": smoke.SMOKE, "rows": rows}, indent=2))
    text = smoke.markdown(markdown(rows))
    (args.out / "levers.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
