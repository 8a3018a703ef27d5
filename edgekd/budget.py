"""Budgets: limits on a deployed model, checked by a pure function.

`evaluate(budget, metrics)` compares each set limit with its measured value;
a limit whose metric was never measured fails (a gate must not pass on missing
evidence). `collect_metrics` reads the measured values from artifact folders.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from edgekd.artifacts import (
    MODEL_FILES,
    PROFILE_GLOB,
    ExportReport,
    LimitResult,
    ProfileResult,
    read_profile,
)
from edgekd.config import MAX_THREADS, StrictModel, apply_sets, load_yaml, validate
from edgekd.errors import EdgeKDError


def fraction(value: Any) -> Any:
    """A margin as a fraction: "5%" is 0.05, 0.05 is 0.05. A bare number of 1 or more
    is refused (is `5` five percent or 500%?): write "5%" or 0.05."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage; write e.g. 5%") from None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1:
        raise ValueError(f"{value} is ambiguous; write a percentage ({value}%) or a fraction")
    return value


# A regression margin: "5%" or 0.05, never negative.
Margin = Annotated[float, BeforeValidator(fraction), Field(ge=0)]


def whole(value: Any) -> Any:
    """A count written as a float with nothing after the point (`2e6`, 2000000.0) as an
    int: `max_bytes: 2e6` is how people write two megabytes, and the strict config
    refused it (the CLI's own help showed `devices.rpi4.max_bytes=2e6`). 2.5e0 stays a
    float and is refused as no whole number of bytes."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Bytes = Annotated[int, BeforeValidator(whole), Field(ge=1)]


class Budget(StrictModel):
    model: Literal["int8", "fp32", "shipped"] = Field(
        "int8",
        description="Which exported model is gated: int8, fp32, or shipped (int8 when the "
        "export kept one, else fp32; an fp32 that ships has no int8 drop to limit).",
    )
    threads: int = Field(
        1,
        ge=0,
        le=MAX_THREADS,
        description="Thread count the latency limit applies to (0: all cores, as profiled "
        "with --threads 0).",
    )
    max_bytes: Bytes | None = Field(None, description="Model file size, bytes (2e6: 2 MB).")
    max_p90_ms: float | None = Field(None, gt=0, description="p90 latency at batch 1, ms.")
    min_accuracy: float | None = Field(None, ge=0, le=1, description="Dev accuracy, 0..1.")
    min_mcc: float | None = Field(
        None,
        ge=-1,
        le=1,
        description="Matthews correlation on the dev rows, -1..1: the metric of unbalanced "
        "tasks (CoLA), where always saying the common label scores 0.",
    )
    min_macro_f1: float | None = Field(
        None, ge=0, le=1, description="F1 averaged over the labels, dev rows, 0..1."
    )
    max_drop_vs_teacher: float | None = Field(
        None, ge=0, le=1, description="Teacher accuracy minus model accuracy, 0..1."
    )
    max_int8_drop: float | None = Field(
        None, ge=0, le=1, description="fp32 accuracy minus int8 accuracy, 0..1."
    )
    min_margin_over_baseline: float | None = Field(
        None,
        ge=-1,
        le=1,
        description="Model accuracy minus that of TF-IDF + logistic regression fitted by "
        "distill on the same rows, 0..1: 0.01 fails a model under 1 point above it.",
    )
    max_peak_rss_mb: float | None = Field(
        None, gt=0, description="Peak resident memory while serving, MB."
    )
    max_init_ms: float | None = Field(None, gt=0, description="Model load time, ms.")
    min_agreement: float | None = Field(
        None, ge=0, le=1, description="Share of dev rows where ONNX and PyTorch agree, 0..1."
    )
    # Against a baseline (`edgekd check --baseline`): how much worse this run may be.
    max_latency_regression: Margin | None = Field(
        None,
        description='p50 and p90 latency over the baseline\'s, timed side by side: "5%".',
    )
    max_bytes_regression: Margin | None = Field(
        None, description='Model file size over the baseline\'s: "1%".'
    )
    max_accuracy_drop: Margin | None = Field(
        None, description='Dev accuracy below the baseline\'s, per row: "0.5%" (0.5 pt).'
    )
    max_agreement_drop: Margin | None = Field(
        None, description='ONNX–PyTorch agreement below the baseline\'s, per row: "0.5%".'
    )
    device: str | None = Field(
        None, description="Device the latency/memory limits apply to (profiles say theirs)."
    )
    devices: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-device overrides of any field above, by device name.",
    )

    def for_device(self, name: str | None, defaults: dict[str, Any] | None = None) -> Budget:
        """The budget for device `name`: shared limits, then that device's overrides.

        `defaults` (a device spec's own `budget:`) stand in when this budget has no
        entry for `name`.
        """
        if name is None:
            return self
        if name not in self.devices and defaults is None:
            valid = ", ".join(self.devices) or "none"
            raise EdgeKDError(
                f"the budget has no device {name!r} (devices: {valid}); fix --device", 2
            )
        override = self.devices.get(name, defaults or {})
        fields = {**self.model_dump(exclude={"devices"}), **override, "device": name}
        return validate(Budget, fields, f"budget for device {name}")


# limit field → (metric name, comparison, unit)
LIMITS: dict[str, tuple[str, Literal["<=", ">="], str]] = {
    "max_bytes": ("bytes", "<=", "B"),
    "max_p90_ms": ("p90_ms", "<=", "ms"),
    "max_peak_rss_mb": ("peak_rss_mb", "<=", "MB"),
    "max_init_ms": ("load_ms", "<=", "ms"),
    "min_accuracy": ("accuracy", ">=", ""),
    "min_mcc": ("mcc", ">=", ""),
    "min_macro_f1": ("macro_f1", ">=", ""),
    "max_drop_vs_teacher": ("drop_vs_teacher", "<=", ""),
    "max_int8_drop": ("int8_drop", "<=", ""),
    "min_margin_over_baseline": ("margin_over_tfidf", ">=", ""),
    "min_agreement": ("agreement", ">=", ""),
}


# baseline margin field → the metrics it judges
REGRESSIONS: dict[str, tuple[str, ...]] = {
    "max_latency_regression": ("p50_ms", "p90_ms"),
    "max_bytes_regression": ("bytes",),
    "max_accuracy_drop": ("accuracy",),
    "max_agreement_drop": ("agreement",),
}
# What `--baseline` judges when the budget sets no margin: 5% latency (the side-by-side
# p50 interval of identical models is ~2 points wide on an idle core here, so 5% is a
# change, not noise: 0 false alarms in 120 checks, benchmarks/results/baseline_gate.md),
# 1% bytes, and any accuracy or agreement drop the dev rows can tell from chance.
DEFAULT_MARGINS = {
    "max_latency_regression": 0.05,
    "max_bytes_regression": 0.01,
    "max_accuracy_drop": 0.0,
    "max_agreement_drop": 0.0,
}


def evaluate(budget: Budget, metrics: dict[str, float | None]) -> list[LimitResult]:
    """One result per limit set in `budget`, in declaration order."""
    results = []
    for field, (metric, op, unit) in LIMITS.items():
        threshold = getattr(budget, field)
        if threshold is not None:
            results.append(
                LimitResult(
                    limit=field,
                    metric=metric,
                    op=op,
                    threshold=float(threshold),
                    measured=metrics.get(metric),
                    unit=unit,
                )
            )
    return results


def load_budget(path: str | Path, sets: dict[str, Any] | None = None) -> Budget:
    """The budget at `path` with `sets` (dotted fields, `--set`) applied."""
    data = load_yaml(path)
    if sets:
        data = apply_sets(data, sets)
    if not isinstance(data, dict) or not data:
        raise EdgeKDError(f"{path} must be a YAML mapping of limits, e.g. `max_bytes: 2000000`", 2)
    budget = validate(Budget, data, str(path))
    for name in budget.devices:
        budget.for_device(name)  # a bad per-device field fails here, with exit 2
    limits = [budget] + [budget.for_device(n) for n in budget.devices]
    fields = [*LIMITS, *REGRESSIONS]
    if not any(getattr(b, f) is not None for b in limits for f in fields):
        raise EdgeKDError(f"{path} sets no limit; set at least one of {', '.join(fields)}", 2)
    return budget


def measured(value: Any) -> float | None:
    """A measured value a limit can be judged on: a finite real number, else None (the
    limit then reads as not measured and fails; a gate never passes on garbage)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def resolve_shipped(budget: Budget, dirs: list[Path]) -> Budget:
    """`budget` with `model: shipped` replaced by the model the export in `dirs` ships."""
    if budget.model != "shipped":
        return budget
    shipped = {
        ExportReport.read(d).shipped()
        for d in dirs
        if d.is_dir() and ExportReport.path(d).is_file()
    }
    if len(shipped) != 1:
        raise EdgeKDError(
            f"budget `model: shipped` needs one export folder among the artifacts (got "
            f"{len(shipped)} kinds of shipped model); pass the export folder, or set model: int8"
        )
    model = shipped.pop()
    # An fp32 that ships was never quantised: the int8 drop limit has nothing to judge.
    drop = {"max_int8_drop": None} if model == "fp32" else {}
    return budget.model_copy(update={"model": model, **drop})


def collect_metrics(dirs: list[Path], budget: Budget) -> dict[str, float | None]:
    """Measured values for `budget.model` from the export report and profiles in `dirs`.

    An unreadable or malformed file is an error (exit 2), never a pass; a value that is
    not a finite number counts as not measured, so its limit fails."""
    metrics: dict[str, float | None] = {}
    model_file: str | None = None
    model = resolve_shipped(budget, dirs).model
    for d in dirs:
        if not d.is_dir():
            raise EdgeKDError(f"{d} is not a folder; pass artifact folders from `edgekd export`")
        if not ExportReport.path(d).is_file():
            continue
        report = ExportReport.read(d)
        if model not in report.models and report.int8_refused:
            # The export's guard dropped int8 (slower than fp32 on its CPU): what
            # the budget gates does not exist, so every limit on it fails (exit 1).
            from edgekd.progress import console

            console.print(
                f"note: {ExportReport.path(d)} kept no int8 model (its guard found int8 slower "
                "than fp32 there); every int8 limit reads as not measured"
            )
            model_file = MODEL_FILES[model]
            continue
        if model not in report.models:
            raise EdgeKDError(
                f"{ExportReport.path(d)} has no {model} model; re-export with "
                f"{'--int8' if model == 'int8' else 'fp32'} or set `model:` in the budget"
            )
        entry = report.models[model]
        model_file = entry.path
        metrics["bytes"] = measured(entry.bytes)
        accuracy = metrics["accuracy"] = measured(entry.accuracy)
        metrics["agreement"] = measured(entry.agreement)
        # Absent from exports made before these metrics: a limit on one fails (missing).
        metrics["mcc"] = measured(entry.mcc)
        metrics["macro_f1"] = measured(entry.macro_f1)
        teacher = measured(report.teacher_accuracy)
        if teacher is not None and accuracy is not None:
            metrics["drop_vs_teacher"] = teacher - accuracy
        tfidf = measured(report.tfidf_accuracy)
        if tfidf is not None and accuracy is not None:
            metrics["margin_over_tfidf"] = accuracy - tfidf
        metrics["int8_drop"] = measured(report.int8_drop)
    seen: set[str] = set()
    for d in dirs:
        for path in sorted(d.glob(PROFILE_GLOB)):
            prof = read_profile(path)
            if not isinstance(prof, ProfileResult):
                continue  # a --seq-len sweep: the limits apply to single profiles
            if (
                prof.threads == budget.threads
                and (model_file is None or Path(prof.model).name == model_file)
                and (budget.device is None or prof.device == budget.device)
            ):
                seen.add(prof.device)
                for metric in ("p90_ms", "peak_rss_mb", "load_ms"):
                    value = measured(getattr(prof, metric))
                    if value is not None or metric not in metrics:
                        metrics[metric] = value
    if len(seen) > 1:  # a Pi's latency must never be checked against a server's limit
        raise EdgeKDError(
            f"profiles from several devices ({', '.join(sorted(seen))}) match; "
            "pass --device NAME to check one"
        )
    return {k: v for k, v in metrics.items() if v is not None}  # absent: "not measured"
