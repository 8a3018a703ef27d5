"""`edgekd quickstart`: the whole chain on one dataset, ending in one table.

teacher (given, or fine-tuned from the packaged MiniLM on a subsample) → BiLSTM
student → fp32 + int8 ONNX → batch-1 profile of teacher and students on this
CPU → budget check. Sized to finish in under 15 minutes on 2 cores.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.artifacts import ProfileResult, QuickstartSummary
from edgekd.budget import Budget
from edgekd.config import (
    DataConfig,
    DistillConfig,
    ExportConfig,
    ProfileConfig,
    TeacherConfig,
    save_config,
)
from edgekd.data import load_task
from edgekd.io import claim_folder
from edgekd.progress import console

# The quickstart's gate: int8 may cost at most 1 point over fp32, and the student at
# most 6 points under its teacher after 4 epochs without augmentation (SST-2: ~4).
QUICKSTART_BUDGET = Budget(model="int8", threads=1, max_int8_drop=0.01, max_drop_vs_teacher=0.06)
PROFILE_RUNS = 200


def run_quickstart(
    data: str,
    teacher: str | None,
    out: Path,
    max_train: int,
    teacher_max_train: int,
    epochs: int,
    seed: int,
    base: str | None = None,
    overwrite: bool = False,
) -> int:
    """Run every stage into `out`; print the summary table; return the check's exit code."""
    from rich.table import Table

    from edgekd.data import align_labels
    from edgekd.exporters.teacher import export_teacher
    from edgekd.render import print_check, print_profile
    from edgekd.stages.check import check
    from edgekd.stages.distill import distill
    from edgekd.stages.export import export
    from edgekd.stages.profile import profile
    from edgekd.stages.report import report as write_report
    from edgekd.stages.teacher import teacher as train_teacher
    from edgekd.students.predict import OnnxPredictor, score

    start = time.perf_counter()
    stage_start = [start]

    def done(stage: str, detail: str) -> None:
        # One plain line per finished stage, for CI logs where rules and bars blur.
        now = time.perf_counter()
        console.print(f"{stage}: done in {now - stage_start[0]:.1f} s, {detail}")
        stage_start[0] = now

    data_cfg = DataConfig(spec=data, seed=seed)
    task = load_task(data_cfg)  # fails fast, before any training, on bad or offline data
    claim_folder(out, overwrite)

    if teacher is None:
        tcfg = TeacherConfig(
            data=data_cfg.model_copy(update={"max_train": teacher_max_train}), epochs=2, seed=seed
        )
        if base:
            tcfg = tcfg.model_copy(update={"base": base})
        console.rule(f"1/5 teacher: fine-tune {tcfg.base} on {teacher_max_train:,} rows")
        teacher_dir = out / "teacher"
        metrics = train_teacher(tcfg, teacher_dir)
        teacher = str(teacher_dir)
        done("teacher", f"dev accuracy {metrics.dev_accuracy:.4f}")
    else:
        console.rule("1/5 teacher: given")

    console.rule("2/5 distill a BiLSTM student")
    dcfg = DistillConfig(
        teacher=teacher,
        data=data_cfg.model_copy(update={"max_train": max_train}),
        epochs=epochs,
        seed=seed,
    )
    m = distill(dcfg, out / "student")
    done("distill", f"student dev accuracy {m.student_accuracy:.4f}")

    console.rule("3/5 export: ONNX fp32 + int8, teacher ONNX")
    # The int8 guard times int8 against fp32 here; if int8 loses, fp32 ships.
    exported = export(ExportConfig(int8=True), out / "student", out / "export")
    shipped = exported.shipped()
    teacher_onnx = export_teacher(teacher, out / "teacher-onnx")
    teacher_pred = OnnxPredictor(teacher_onnx)
    dev = align_labels(task, teacher_pred.label_names).dev
    teacher_acc = score(teacher_pred, dev.texts, dev.labels)["accuracy"]
    done("export", f"shipping {shipped}, teacher ONNX dev accuracy {teacher_acc:.4f}")

    # Time every model on inputs of the median dev length in teacher tokens, so the
    # "infer" column reflects this task's texts, not an arbitrary 64 or 128.
    seq_len = int(np.median([len(x) for x in teacher_pred.tokenizer.ids(dev.texts)]))
    console.rule(f"4/5 profile at batch 1, 1 thread, {seq_len} tokens")
    rows: list[dict[str, Any]] = []
    models = [
        ("teacher fp32", teacher_onnx, teacher_acc),
    ]
    for kind, entry in exported.models.items():
        models.append((f"student {kind}", out / "export" / entry.path, entry.accuracy))
    pcfg = ProfileConfig(threads=1, runs=PROFILE_RUNS, seq_lens=[seq_len])
    for name, path, acc in models:
        (prof,) = profile(pcfg, [path], path.parent, dev.texts)  # beside the model
        assert isinstance(prof, ProfileResult)  # one length: no sweep
        print_profile(prof.model_dump(exclude_none=True))
        rows.append(
            {
                "model": name,
                "accuracy": acc,
                "bytes": prof.bytes,
                "p50_ms": prof.p50_ms,
                "p90_ms": prof.p90_ms,
                "e2e_p50_ms": (prof.end_to_end or {}).get("p50_ms"),
            }
        )

    done("profile", f"{len(rows)} models")
    console.rule("5/5 budget check")
    budget_path = out / "budget.yaml"
    budget = QUICKSTART_BUDGET
    if shipped == "fp32":  # int8 refused by the guard: gate the model that ships
        budget = budget.model_copy(update={"model": "fp32", "max_int8_drop": None})
    save_config(budget, budget_path)
    verdict = check(budget, [out / "export"], out)
    print_check(verdict.limits, verdict.title())
    done("check", "pass" if verdict.passed else "FAIL")

    base = rows[0]
    # Eight columns that fit an 80-column terminal; quickstart.json has every figure.
    table = Table(title=f"edgekd quickstart: {data}, {len(dev)} dev rows, 1 thread, batch 1")
    for col in ("model", "acc", "MB", "p50 ms", "p90 ms", "e2e p50", "smaller", "faster"):
        table.add_column(col, justify="left" if col == "model" else "right", no_wrap=True)
    for r in rows:
        table.add_row(
            r["model"],
            f"{r['accuracy']:.4f}",
            f"{r['bytes'] / 1e6:.2f}",
            f"{r['p50_ms']:.3f}",
            f"{r['p90_ms']:.3f}",
            f"{r['e2e_p50_ms']:.3f}",
            f"{base['bytes'] / r['bytes']:.1f}×",
            f"{base['p50_ms'] / r['p50_ms']:.1f}×",
        )
    console.print(table)
    QuickstartSummary(
        rows=rows, seconds=time.perf_counter() - start, seq_len=seq_len, check=verdict
    ).write(out)
    page = write_report(out)
    console.print(
        f"e2e = tokenize + infer one dev text at a time. Artifacts in {out}, report "
        f"{page}; total {time.perf_counter() - start:.0f} s"
    )
    return 0 if verdict.passed else 1
