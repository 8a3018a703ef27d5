"""`edgekd quickstart`: the built-in recipe `recipes/quickstart.yaml`, plus its table.

teacher (given, or fine-tuned from the packaged MiniLM on a subsample) → BiLSTM
student → fp32 + int8 ONNX → batch-1 profile of teacher and student on this CPU →
budget check → report, run by the same cached recipe runner as `edgekd run` (a
rerun skips the stages whose inputs did not change), then one summary table.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from edgekd.artifacts import (
    CHECK_GLOB,
    PROFILE_GLOB,
    CheckResult,
    ExportReport,
    ProfileResult,
    QuickstartSummary,
    RunManifest,
    SummaryRow,
)
from edgekd.errors import EdgeKDError

RECIPE = Path(__file__).parent / "recipes" / "quickstart.yaml"
VARIANT = "student"  # the recipe's one variant


def quickstart_sets(
    data: str | None = None,
    teacher: str | None = None,
    out: Path | None = None,
    max_train: int | None = None,
    teacher_max_train: int | None = None,
    epochs: int | None = None,
    seed: int | None = None,
    base: str | None = None,
) -> dict[str, Any]:
    """The quickstart's options as `--set` fields of its recipe (None: the recipe's)."""
    fields = {
        "data.spec": data,
        "teacher.path": teacher,
        "out": str(out) if out is not None else None,
        "data.max_train": max_train,
        "teacher.finetune.data.max_train": teacher_max_train,
        "teacher.finetune.base": base,
        "distill.epochs": epochs,
        "seed": seed,
    }
    return {k: v for k, v in fields.items() if v is not None}


def run_quickstart(
    sets: dict[str, Any] | None = None, overwrite: bool = False, force: bool = False
) -> int:
    """Run the quickstart recipe with `sets`; print its table; return the check's code."""
    from edgekd.recipe import load_recipe, run_recipe
    from edgekd.render import print_quickstart

    start = time.perf_counter()
    code = run_recipe(RECIPE, force, sets, overwrite)
    recipe = load_recipe(RECIPE, sets)
    summary = summarize(recipe.out_dir(), time.perf_counter() - start)
    summary.write(recipe.out_dir())
    print_quickstart(summary, recipe.data.spec)
    return code


def summarize(out: Path, seconds: float) -> QuickstartSummary:
    """The table's rows from the run's artifacts: the teacher's fp32 ONNX, then each
    exported student model, each with its accuracy, size and batch-1 latency."""
    report = ExportReport.read(out / VARIANT / "export")
    rows = [row("teacher fp32", report.teacher_accuracy, out / "teacher-profile", "model")]
    for kind, entry in report.models.items():
        stem = Path(entry.path).stem
        rows.append(row(f"student {kind}", entry.accuracy, out / VARIANT / "profile", stem))
    (check,) = [CheckResult.read(p) for p in sorted((out / VARIANT / "check").glob(CHECK_GLOB))]
    manifest = RunManifest.read(out)
    return QuickstartSummary(
        rows=rows, seconds=seconds, seq_len=manifest.seq_len, check=check,
        tfidf_accuracy=report.tfidf_accuracy,
    )  # fmt: skip


def row(name: str, accuracy: float | None, folder: Path, stem: str) -> SummaryRow:
    matches = [p for p in sorted(folder.glob(PROFILE_GLOB)) if p.stem.endswith(f"-{stem}")]
    if len(matches) != 1:
        raise EdgeKDError(f"{folder} holds {len(matches)} profiles of {stem}; rerun with --force")
    prof = ProfileResult.read(matches[0])
    return SummaryRow(
        model=name,
        accuracy=accuracy,
        bytes=prof.bytes,
        p50_ms=prof.p50_ms,
        p90_ms=prof.p90_ms,
        e2e_p50_ms=(prof.end_to_end or {}).get("p50_ms"),
    )
