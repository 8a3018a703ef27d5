"""int8 embedding tables with one scale per row against onnxruntime's one per table, on
every student at hand: dev accuracy, agreement with fp32, mean |Δlogit|, bytes, latency.

    python benchmarks/int8_embedding.py [--shared ../shared]
        [--students 'runs/bench-default/*/student' ...] [--rounds 5]

Students: folders `edgekd distill` wrote (globs or paths; default: distill_default.py's
runs). None found: one default SST-2 student is distilled under a 5-minute budget.
Each is exported twice by the export stage, dynamic int8 with `int8_embedding` row and
then tensor (the guard off, so both keep int8 whatever their speed), and both int8
graphs score the dev split of the data the student was distilled on beside its fp32
graph: accuracy, agreement with fp32's labels, mean |int8 logit − fp32 logit| (the
error a change of label needs to cross), bytes. Latency: the two int8 graphs of each
task's first student, side by side (`guard.measure`, 1 thread), at batch 1 on the
median dev row and on 64 rows; medians over rounds of each round's p50.

Writes benchmarks/results/int8_embedding.json and int8_embedding.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import glob
import json
import platform
import statistics
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import SMALL, cpu, edgekd, revision

REPO = Path(__file__).resolve().parents[1]
WORK = smoke.runs_dir(REPO / "runs" / "bench-int8-embedding")
KINDS = ("row", "tensor")


def default_student(shared: Path) -> Path:
    """One SST-2 student by the README's command (5 minutes; smoke: 200 rows, 1 epoch)."""
    out = WORK / "sst2-student"
    if not (out / "metrics.json").is_file():
        budget = [] if smoke.SMOKE else ["--time-budget", "5"]
        subprocess.run(
            edgekd("distill", "--student", "bilstm", "--teacher",
                   str(shared / "models" / "sst2-minilm-teacher"), "--data",
                   str(shared / "data" / "sst2"), "--out", str(out), "--overwrite",
                   *budget, *SMALL),
            check=True, cwd=REPO,
        )  # fmt: skip
    return out


def one_student(student: Path, out: Path) -> dict[str, Any]:
    """Both exports of `student` under `out`, scored on its dev split."""
    from edgekd.artifacts import MODEL_FILES
    from edgekd.config import ExportConfig
    from edgekd.data import load_task
    from edgekd.stages.export import export, rescore_data
    from edgekd.students.predict import OnnxPredictor

    data = rescore_data(student, None)
    assert data is not None, f"{student}: no config.yaml naming its data"
    dev = load_task(data).dev
    gold = np.array(dev.labels)
    logits: dict[str, np.ndarray] = {}
    # The revision that trained it, where distill_default.py left its result beside it.
    trained = student.parent / "result.json"
    revision_ = json.loads(trained.read_text()).get("revision") if trained.is_file() else None
    row: dict[str, Any] = {"student": str(student), "trained_at": revision_, "n_dev": len(gold)}
    for kind in KINDS:
        folder = out / kind
        cfg = ExportConfig(int8_embedding=kind, guard=False)  # type: ignore[arg-type]
        report = export(cfg, student, folder, data, overwrite=True).model_dump()
        if "fp32" not in logits:
            logits["fp32"] = OnnxPredictor(folder / MODEL_FILES["fp32"]).logits(dev.texts)
            row["task"] = Path(data.spec).name
            row["fp32"] = {"accuracy": report["models"]["fp32"]["accuracy"]}
        int8 = folder / MODEL_FILES["int8"]
        logits[kind] = OnnxPredictor(int8).logits(dev.texts)
        row[kind] = {
            "accuracy": float((logits[kind].argmax(1) == gold).mean()),
            "export_accuracy": report["models"]["int8"]["accuracy"],
            "agreement": float((logits[kind].argmax(1) == logits["fp32"].argmax(1)).mean()),
            "mean_abs_logit_error": float(np.abs(logits[kind] - logits["fp32"]).mean()),
            "bytes": int8.stat().st_size,
            "path": str(int8),
        }
    return row


def latency(row: dict[str, Any], rounds: int) -> dict[str, Any]:
    """p50 ms of both int8 graphs of one student, side by side, at batch 1 and 64."""
    from edgekd.data import load_task
    from edgekd.exporters.guard import measure
    from edgekd.stages.export import rescore_data
    from edgekd.students.predict import OnnxPredictor

    paths = {kind: Path(row[kind]["path"]) for kind in KINDS}
    data = rescore_data(Path(row["student"]), None)
    assert data is not None
    texts = load_task(data).dev.texts
    pred = OnnxPredictor(paths["row"])
    ids = sorted(pred.tokenizer.ids(texts), key=pred.tokenizer.length)
    out: dict[str, Any] = {}
    for batch, rows in ((1, [ids[len(ids) // 2]]), (64, ids[:: max(1, len(ids) // 64)][:64])):
        feed = pred.feed(rows)
        timed = measure(paths, dict.fromkeys(paths, feed), rounds, smoke.at_most(100, smoke.RUNS))
        out[f"batch {batch}"] = {
            **{kind: timed[kind]["p50"] for kind in KINDS},
            "row / tensor": timed["row"]["p50"] / timed["tensor"]["p50"],
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--students", nargs="*", default=[str(REPO / "runs/bench-default/*/student")])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    rounds = smoke.at_most(args.rounds, smoke.REPEATS)
    students = sorted(
        {Path(f) for pattern in args.students for f in glob.glob(pattern)}
        if not smoke.SMOKE
        else set()
    )
    students = [s for s in students if (s / "metrics.json").is_file()]
    if not students:
        students = [default_student(args.shared.resolve())]
    rows = []
    for n, student in enumerate(students):
        rows.append(one_student(student, WORK / "exports" / f"{n:03d}"))
        r = rows[-1]
        print(f"{student}: row {r['row']['accuracy']:.4f}, tensor {r['tensor']['accuracy']:.4f}")
    firsts = {r["task"]: r for r in reversed(rows)}
    timings = {task: latency(r, rounds) for task, r in sorted(firsts.items())}
    result = {
        "smoke": smoke.SMOKE,
        "revision": revision(),
        "machine": f"{platform.machine()}, {cpu()}",
        "students": rows,
        "latency": timings,
        "summary": summary(rows),
    }
    write(result)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per task and over all: means of each measure, and how often row beat tensor."""
    out: dict[str, Any] = {}
    for task in [*sorted({r["task"] for r in rows}), "all"]:
        some = [r for r in rows if task in ("all", r["task"])]
        out[task] = {
            "students": len(some),
            **{
                f"{kind} {key}": statistics.fmean(r[kind][key] for r in some)
                for kind in KINDS
                for key in ("accuracy", "agreement", "mean_abs_logit_error", "bytes")
            },
            "fp32 accuracy": statistics.fmean(r["fp32"]["accuracy"] for r in some),
            "row error lower": sum(
                r["row"]["mean_abs_logit_error"] < r["tensor"]["mean_abs_logit_error"] for r in some
            ),
            "row accuracy above, equal, below": [
                sum(cmp(r["row"]["accuracy"], r["tensor"]["accuracy"]) == c for r in some)
                for c in (1, 0, -1)
            ],
        }
    return out


def cmp(a: float, b: float) -> int:
    return (a > b) - (a < b)


def write(result: dict[str, Any]) -> None:
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "int8_embedding.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# int8 embedding tables: one scale per row against one per table",
        "",
        f"{result['machine']}; revision {result['revision']}; dynamic int8 by the export "
        "stage, `int8_embedding` row and tensor, the guard off; every figure on the dev "
        "split of the data each student was distilled on.",
        "",
        "| task | students | fp32 acc | int8 acc: row | tensor | agreement with fp32: row "
        "| tensor | mean abs logit error: row | tensor | row's error lower | row's acc above"
        " / equal / below | bytes: row | tensor |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for task, s in result["summary"].items():
        lines.append(
            f"| {task} | {s['students']} | {s['fp32 accuracy']:.4f} | "
            f"{s['row accuracy']:.4f} | {s['tensor accuracy']:.4f} | "
            f"{s['row agreement']:.4%} | {s['tensor agreement']:.4%} | "
            f"{s['row mean_abs_logit_error']:.4f} | {s['tensor mean_abs_logit_error']:.4f} | "
            f"{s['row error lower']} of {s['students']} | "
            f"{' / '.join(map(str, s['row accuracy above, equal, below']))} | "
            f"{s['row bytes']:,.0f} | {s['tensor bytes']:,.0f} |"
        )
    lines += ["", "Means over students. Latency, p50 ms at 1 thread (each task's first "
              "student, both graphs side by side):", "",
              "| task | batch | row | tensor | row / tensor |",
              "|---|---|---|---|---|"]  # fmt: skip
    for task, t in result["latency"].items():
        for batch, v in t.items():
            lines.append(
                f"| {task} | {batch} | {v['row']:.3f} | {v['tensor']:.3f} | "
                f"{v['row / tensor']:.2f} |"
            )
    lines += ["", "Each student (accuracy, agreement with fp32, mean abs logit error):", "",
              "| task | student | fp32 | row | tensor |", "|---|---|---|---|---|"]  # fmt: skip
    for r in result["students"]:
        shown = f"{Path(r['student']).parent.name} ({(r.get('trained_at') or '?')[:7]})"
        lines.append(
            f"| {r['task']} | {shown} | {r['fp32']['accuracy']:.4f} | "
            + " | ".join(
                f"{r[k]['accuracy']:.4f}, {r[k]['agreement']:.2%}, "
                f"{r[k]['mean_abs_logit_error']:.4f}"
                for k in KINDS
            )
            + " |"
        )
    (out / "int8_embedding.md").write_text(smoke.markdown("\n".join(lines) + "\n"))


if __name__ == "__main__":
    main()
