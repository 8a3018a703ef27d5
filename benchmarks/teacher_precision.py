"""`edgekd teacher` in fp32 and in bf16 (`-s precision=bf16`), side by side, per task:
steps a minute, epochs, kept step and the score on the task's evaluation split.

One command: `python benchmarks/teacher_precision.py` (needs ../shared/data; `--tasks
sst2` runs one, `--budget 15` is the teacher's default; about 65 minutes for the
default two tasks on 2 cores). For each task the two arms run one after the other, each
as its own child process with everything else default (the packaged all-MiniLM-L6-v2
base, `--time-budget BUDGET`), fp32 first, so their ratio is read inside one run (this
machine's speed drifts ~10% from day to day). The rate is steps over the whole stage's
minutes: loading, the linear probe and the scorings (every `eval_every` steps, so more
of them in the faster arm) are in it, and it understates the ratio of step times.
Scores as benchmarks/tasks.py's: CLINC150 on its test split, SST-2 and CoLA on dev
(CoLA as MCC × 100). bf16 runs only where the CPU computes it natively (AVX512-BF16 or
AMX); elsewhere edgekd refuses it, and this script runs the fp32 arm alone. A finished
arm (its folder, named by task, budget and precision, holds result.json) is not rerun:
delete the folder to measure it again beside a new one. Writes
benchmarks/results/teacher_precision.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts
from tasks import TASKS, measure, revision, score, task_data, task_names

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = ("fp32", "bf16")


def run_arm(task: str, precision: str, budget: float, work: Path) -> dict[str, Any]:
    """One `edgekd teacher` run, scored on the task's evaluation split."""
    from edgekd.config import DataConfig
    from edgekd.data import load_task
    from edgekd.distill.teacher import load_predictor

    folder = work / f"{task}-{budget:g}min-{precision}"
    done = folder / "result.json"
    if done.is_file():
        return dict(json.loads(done.read_text()))
    folder.mkdir(parents=True, exist_ok=True)
    data = task_data(task, work / task)
    split, metric = TASKS[task]
    max_train = smoke.rows(None)
    rows = ["--max-train", str(max_train)] if max_train else []
    started_at = revision()
    teacher = folder / "teacher"
    out = measure(
        [sys.executable, "-m", "edgekd", "teacher", "--data", str(data), "--out", str(teacher),
         "--time-budget", str(smoke.pick(budget, smoke.BUDGET_MIN)), "--overwrite",
         "-s", f"precision={precision}", *rows],
        folder / "teacher.log",
    )  # fmt: skip
    import yaml

    metrics = json.loads((teacher / "metrics.json").read_text())
    resolved = yaml.safe_load((teacher / "config.yaml").read_text())
    task_rows = load_task(DataConfig(spec=str(data), dev_split=split, max_train=max_train))
    predictor = load_predictor(teacher)
    logits = predictor.logits(list(task_rows.dev.texts))
    names = list(predictor.label_names)
    gold = [names.index(task_rows.label_names[y]) for y in task_rows.dev.labels]
    per_epoch = -(-int(metrics["n_train"]) // int(resolved["batch_size"]))
    out.update(
        score=score(metric, logits.argmax(1), gold),
        metric=metric,
        eval_split=split,
        steps=metrics["steps"],
        epochs=round(metrics["steps"] / per_epoch, 2),
        best_step=metrics["best_step"],
        dev_accuracy=metrics["dev_accuracy"],
        selection_accuracy=metrics.get("selection_accuracy"),
        # Steps a minute over the whole stage (loading, the probe and the scorings
        # included: the same work in both arms).
        steps_per_min=round(metrics["steps"] / max(out["minutes"], 1e-9), 1),
        precision_recorded=resolved["precision"],
        revision=started_at,
    )
    done.write_text(json.dumps(out, indent=2))
    return out


def markdown(results: dict[str, dict[str, Any]], budget: float) -> str:
    md = [
        f"# `edgekd teacher` in fp32 and bf16 ({budget:g}-minute budget, 2 cores)",
        "",
        "Each task's arms ran one after the other in one run; everything else default. "
        "Score: accuracy, or MCC × 100 (CoLA), on CLINC150's test split and the others' dev.",
        "",
        "| task | precision | score | steps | epochs | steps / min (whole stage) | × fp32 | "
        "kept step | minutes | peak RSS | revision |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, arms in results.items():
        fp32 = arms.get("fp32")
        for precision, r in arms.items():
            scale = 1.0 if r["metric"] == "mcc" else 100.0
            ratio = f"{r['steps_per_min'] / fp32['steps_per_min']:.2f}×" if fp32 else "-"
            md.append(
                f"| {task} | {precision} | {r['score'] * scale:.2f} | {r['steps']:,} | "
                f"{r['epochs']:.2f} | {r['steps_per_min']:.1f} | {ratio} | {r['best_step']:,} | "
                f"{r['minutes']:.1f} | {r['peak_rss_mib']:,} MiB | {r['revision']} |"
            )
    return "\n".join(md) + "\n"


def main() -> None:
    from edgekd.distill.trainer import native_bf16

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="clinc150,sst2", help="Comma-separated: " + ", ".join(TASKS))
    p.add_argument("--budget", type=float, default=15.0, help="Teacher minutes per arm.")
    p.add_argument(
        "--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-teacher-precision")
    )
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    names = task_names(args.tasks)
    precisions = [p for p in PRECISIONS if p == "fp32" or native_bf16()]
    if len(precisions) < len(PRECISIONS):
        print("no native bf16 on this machine: the fp32 arm alone", file=sys.stderr)
    results = {t: {p: run_arm(t, p, args.budget, args.work) for p in precisions} for t in names}
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"smoke": smoke.SMOKE, "budget_min": args.budget}
    (args.out / "teacher_precision.json").write_text(
        json.dumps({**meta, "tasks": results}, indent=2) + "\n"
    )
    md = smoke.markdown(markdown(results, args.budget))
    (args.out / "teacher_precision.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
