"""Every shared task, defaults only: TF-IDF + LR, a frozen-encoder probe, `edgekd
teacher`, and the int8 student of `edgekd distill --student bilstm` + `edgekd export
--int8`, side by side on each task's evaluation split.

One command: `python benchmarks/tasks.py` (needs ../shared/data; `--tasks clinc150`
runs one; clinc150-10 and clinc150-25 are CLINC150 with 10 and 25 training rows per
label, a seeded draw, scored on its whole test split; sst2-400, SST-2 with 400 per
label, scored on its whole dev split). For each task:
  tfidf:   `edgekd.yardstick.fit_tfidf` (the yardstick every distill run records) on
           all training rows;
  probe:   logistic regression (scikit-learn, C = 1) on the frozen packaged
           all-MiniLM-L6-v2's mean-pooled last layer (128 tokens), the encoder
           `edgekd teacher` starts from;
  teacher: `edgekd teacher --data D --time-budget 15` (everything else default);
  student: `edgekd distill --student bilstm --teacher T --data D` (its default budget,
           13 minutes) then `edgekd export --int8`; the model scored is the one the
           export ships (int8 unless its guard refused it);
  selection: the epoch distill kept (chosen on its held-out training rows) against the
           best epoch on the dev split distill reports (PyTorch, per epoch, never used
           to choose): what the selection rule costs where its split is small.
Each edgekd command runs as its own child process: its peak RSS is the child's
maximum resident set (`getrusage(RUSAGE_CHILDREN)` of a fresh wrapper per command),
its minutes the wall clock around it. Scores are on CLINC150's test split (its dev
split is what the runs report) and on the dev split of SST-2 and CoLA (no test
labels); CoLA's metric is the Matthews correlation × 100, the others' accuracy.
A task whose folder already holds a finished run is not rerun (delete
runs/bench-tasks/TASK to redo it). Writes benchmarks/results/tasks.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import revision  # the stamp every benchmark writes
from long_rows import WRAPPER  # a command's peak RSS, read by a fresh wrapper process

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
TASKS = {  # name → (evaluation split, metric)
    "clinc150": ("test", "accuracy"),
    "cola": ("dev", "mcc"),
    "sst2": ("dev", "accuracy"),
    "clinc150-10": ("test", "accuracy"),
    "clinc150-25": ("test", "accuracy"),
    # 800 training rows, the size of the issue's small task: its selection split is 80
    # rows (10%), where one row moves the selection accuracy by 1.25 points.
    "sst2-400": ("dev", "accuracy"),
}
# Small-data tasks: NAME-K is NAME's training rows cut to K per label (a seeded draw,
# written under the run's folder, never the repository), its dev and test kept whole.
PER_LABEL_SEED = 0


def task_data(name: str, work: Path) -> Path:
    """The task's data folder: ../shared/data/NAME, or a per-label cut of it."""
    source, _, per_label = name.partition("-")
    if not per_label:
        return SHARED / name
    import csv
    import random

    folder = work / "data"
    if (folder / "train.tsv").is_file():
        return folder
    with (SHARED / source / "train.tsv").open(newline="") as f:
        header, *rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    by_label: dict[str, list[list[str]]] = {}
    for row in rows:
        by_label.setdefault(row[header.index("label")], []).append(row)
    rng = random.Random(PER_LABEL_SEED)
    kept = [r for y in sorted(by_label) for r in rng.sample(by_label[y], int(per_label))]
    rng.shuffle(kept)
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("dev", "test"):
        if (SHARED / source / f"{split}.tsv").is_file():
            (folder / f"{split}.tsv").write_bytes((SHARED / source / f"{split}.tsv").read_bytes())
    # As read (tab-separated, no quoting: a text may hold a `"`), then renamed into
    # place, so a killed run never leaves a short file a rerun would take as done.
    part = folder / "train.tsv.part"
    part.write_text("".join("\t".join(row) + "\n" for row in [header, *kept]))
    part.replace(folder / "train.tsv")
    return folder


def score(metric: str, predicted: Any, gold: Any) -> float:
    """Accuracy, or the Matthews correlation × 100 (CoLA's metric)."""
    predicted, gold = np.asarray(predicted), np.asarray(gold)
    if metric == "accuracy":
        return float((predicted == gold).mean())
    from sklearn.metrics import matthews_corrcoef

    return 100.0 * float(matthews_corrcoef(gold, predicted))


def measure(cmd: list[str], log: Path) -> dict[str, Any]:
    start = time.perf_counter()
    with log.open("w") as f:
        done = subprocess.run(
            [sys.executable, "-c", WRAPPER, *cmd], stdout=subprocess.PIPE, stderr=f, text=True
        )
    kib, rc = done.stdout.split()[-2:]
    if int(rc) != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {rc}; see {log}")
    return {"peak_rss_mib": round(int(kib) / 1024), "minutes": _minutes(start)}


def frozen_probe(train: Any, test: Any, metric: str) -> dict[str, Any]:
    """LR on the packaged encoder's frozen mean-pooled vectors."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from transformers import AutoModel, AutoTokenizer

    from edgekd.config import DEFAULT_BASE
    from edgekd.distill.pooled import mean_pool
    from edgekd.distill.teacher import forward_rows, resolve_base
    from edgekd.students.base import model_device

    start = time.perf_counter()
    base = resolve_base(DEFAULT_BASE)
    tok, model = AutoTokenizer.from_pretrained(base), AutoModel.from_pretrained(base).eval()

    def vectors(texts: list[Any]) -> np.ndarray:
        def pooled(enc: Any, _rows: list[int]) -> torch.Tensor:
            return mean_pool(model(**enc).last_hidden_state, enc["attention_mask"])

        return forward_rows(
            pooled, tok, texts, model.config.hidden_size, max_length=128,
            device=model_device(model),
        )  # fmt: skip

    fit = LogisticRegression(max_iter=1000).fit(vectors(train.texts), train.labels)
    predicted = fit.predict(vectors(test.texts))
    return {"score": score(metric, predicted, test.labels), "minutes": _minutes(start)}


def _minutes(start: float) -> float:
    return round((time.perf_counter() - start) / 60, 2)


def run_task(name: str, work: Path, teacher_budget: float) -> dict[str, Any]:
    from edgekd.artifacts import ExportReport
    from edgekd.config import DataConfig
    from edgekd.data import load_task
    from edgekd.distill.teacher import load_predictor
    from edgekd.yardstick import fit_tfidf

    split, metric = TASKS[name]
    work.mkdir(parents=True, exist_ok=True)
    done = work / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    data = task_data(name, work)
    started_at = revision()
    max_train = smoke.rows(None)
    task = load_task(DataConfig(spec=str(data), dev_split=split, max_train=max_train))
    out: dict[str, Any] = {"eval_split": split, "metric": metric, "n_train": len(task.train)}
    out["n_eval"] = len(task.dev)

    start = time.perf_counter()
    predicted = fit_tfidf(task.train)(task.dev.texts)
    out["tfidf"] = {"score": score(metric, predicted, task.dev.labels), "minutes": _minutes(start)}
    out["probe"] = frozen_probe(task.train, task.dev, metric)

    edgekd = [sys.executable, "-m", "edgekd"]
    rows = ["--max-train", str(max_train)] if max_train else []
    teacher, student, export = work / "teacher", work / "student", work / "export"
    budget = str(smoke.pick(teacher_budget, smoke.BUDGET_MIN))
    out["teacher"] = measure(
        [*edgekd, "teacher", "--data", str(data), "--out", str(teacher), "--time-budget", budget,
         "--overwrite", *rows],
        work / "teacher.log",
    )  # fmt: skip
    quick = ["--time-budget", str(smoke.BUDGET_MIN)] if smoke.SMOKE else []
    out["distill"] = measure(
        [*edgekd, "distill", "--student", "bilstm", "--teacher", str(teacher), "--data",
         str(data), "--out", str(student), "--overwrite", *rows, *quick],
        work / "distill.log",
    )  # fmt: skip
    out["export"] = measure(
        [*edgekd, "export", str(student), "--int8", "--out", str(export), "--overwrite"],
        work / "export.log",
    )  # fmt: skip
    report = ExportReport.read(export)
    shipped = report.models[report.shipped()]
    out["student"] = {"shipped": report.shipped(), "bytes": shipped.bytes}
    for role, target in (("teacher", teacher), ("student", export / shipped.path)):
        predictor = load_predictor(target)
        logits = predictor.logits(list(task.dev.texts))
        names = list(predictor.label_names)
        gold = [names.index(task.label_names[y]) for y in task.dev.labels]
        out[role]["score"] = score(metric, logits.argmax(1), gold)
    teacher_metrics = json.loads((teacher / "metrics.json").read_text())
    out["teacher"]["steps"] = teacher_metrics["steps"]
    out["teacher"]["max_length"] = teacher_metrics.get("max_length")
    out["teacher"]["pooling"] = teacher_metrics.get("pooling")
    out["selection"] = selection(json.loads((student / "metrics.json").read_text()))
    out["revision"] = started_at
    done.write_text(json.dumps(out, indent=2))
    return out


def selection(metrics: dict[str, Any]) -> dict[str, Any]:
    """The kept epoch's dev accuracy against the best epoch's, from distill's history."""
    dev = [h["dev_accuracy"] for h in metrics["history"]]
    best = max(range(len(dev)), key=dev.__getitem__)  # the first best epoch on ties
    kept = metrics["best_epoch"]
    return {
        "rows": metrics.get("n_selection"),
        "epochs": len(dev),
        "kept_epoch": kept,
        "kept_dev": dev[kept - 1],
        "best_epoch": best + 1,
        "best_dev": dev[best],
    }


def markdown(results: dict[str, Any], teacher_budget: float) -> str:
    md = [
        "# Every shared task, defaults only (2 cores)",
        "",
        f"`edgekd teacher --time-budget {teacher_budget:g}`, `edgekd distill --student bilstm` "
        "(default 13-minute budget), `edgekd export --int8`. Metric: accuracy, or MCC × 100 "
        "(CoLA). CLINC150 (whole, or K training rows per label: clinc150-K) is scored on "
        "its test split, SST-2 and CoLA on dev. Each row names the revision that measured it.",
        "",
        "| task | TF-IDF + LR | frozen encoder + LR | edgekd teacher | int8 student | "
        "student − TF-IDF | student ÷ teacher | teacher: min, peak RSS | distill: min, "
        "peak RSS | student bytes | revision |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        scale = 1.0 if r["metric"] == "mcc" else 100.0
        t, s, f, p = (r[k]["score"] for k in ("teacher", "student", "tfidf", "probe"))
        retention = f"{100 * s / t:.1f}%" if t > 0 else "-"
        md.append(
            f"| {name} ({r['eval_split']}, {r['n_eval']:,} rows) | {f * scale:.1f} | "
            f"{p * scale:.1f} | {t * scale:.1f} | {s * scale:.1f} | {(s - f) * scale:+.1f} | "
            f"{retention} | {r['teacher']['minutes']:.1f}, {r['teacher']['peak_rss_mib']:,} MiB | "
            f"{r['distill']['minutes']:.1f}, {r['distill']['peak_rss_mib']:,} MiB | "
            f"{r['student']['bytes']:,} ({r['student']['shipped']}) | "
            f"{r.get('revision', 'b9b58e7')} |"  # rows measured before the column
        )
    chosen = {name: r["selection"] for name, r in results.items() if "selection" in r}
    if chosen:
        md += [
            "",
            "Selection: the epoch distill kept, chosen on its held-out training rows, "
            "against the best epoch on the dev split distill reports (PyTorch accuracy, "
            "never used to choose).",
            "",
            "| task | selection rows | epochs | kept epoch: dev | best epoch: dev | cost |",
            "|---|---|---|---|---|---|",
            *(
                f"| {name} | {c['rows'] or 0:,} | {c['epochs']} | {c['kept_epoch']}: "
                f"{c['kept_dev']:.4f} | {c['best_epoch']}: {c['best_dev']:.4f} | "
                f"{100 * (c['best_dev'] - c['kept_dev']):.2f} points |"
                for name, c in chosen.items()
            ),
        ]
    return "\n".join(md) + "\n"


def task_names(spec: str) -> list[str]:
    """The tasks a comma-separated `--tasks` names, each known; under smoke, the first
    whose data is there (a sandbox may hold one)."""
    names = [n for n in spec.split(",") if n]
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise SystemExit(f"unknown task {unknown[0]!r}; valid: {', '.join(TASKS)}")
    if smoke.SMOKE:
        names = [n for n in names if (SHARED / n.partition("-")[0]).is_dir()][:1]
    return names


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default=",".join(TASKS), help="Comma-separated: " + ", ".join(TASKS))
    p.add_argument("--teacher-budget", type=float, default=15.0, help="Minutes.")
    p.add_argument("--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-tasks"))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    names = task_names(args.tasks)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"smoke": smoke.SMOKE, "teacher_budget_min": args.teacher_budget}
    # Tasks not run now keep their earlier rows, each naming the revision it measured.
    earlier = args.out / "tasks.json"
    results: dict[str, Any] = {}
    if not smoke.SMOKE and earlier.is_file():
        kept = json.loads(earlier.read_text()).get("tasks", {})
        results = {k: v for k, v in kept.items() if k in TASKS and k not in names}
    text = "no task's data found under ../shared/data\n"
    for name in names:  # the files are rewritten after each task: a long run shows progress
        results[name] = {**run_task(name, args.work / name, args.teacher_budget)}
        results[name].setdefault("revision", "b9b58e7")  # rows measured before the column
        results = {k: results[k] for k in TASKS if k in results}  # the table's order
        (args.out / "tasks.json").write_text(json.dumps({**meta, "tasks": results}, indent=2))
        text = smoke.markdown(markdown(results, args.teacher_budget))
        (args.out / "tasks.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
