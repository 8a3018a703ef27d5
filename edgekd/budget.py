"""Budgets: limits on a deployed model, checked by a pure function.

`evaluate(budget, metrics)` compares each set limit with its measured value;
a limit whose metric was never measured fails (a gate must not pass on missing
evidence). `collect_metrics` reads the measured values from artifact folders.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from edgekd.config import StrictModel, load_yaml, validate
from edgekd.errors import EdgeKDError


class Budget(StrictModel):
    model: Literal["int8", "fp32"] = Field("int8", description="Which exported model ships.")
    threads: int = Field(1, ge=1, description="Thread count the latency limit applies to.")
    max_bytes: int | None = Field(None, ge=1, description="Model file size, bytes.")
    max_p90_ms: float | None = Field(None, gt=0, description="p90 latency at batch 1, ms.")
    min_accuracy: float | None = Field(None, ge=0, le=1, description="Dev accuracy, 0..1.")
    max_drop_vs_teacher: float | None = Field(
        None, ge=0, le=1, description="Teacher accuracy minus model accuracy, 0..1."
    )
    max_int8_drop: float | None = Field(
        None, ge=0, le=1, description="fp32 accuracy minus int8 accuracy, 0..1."
    )


# limit field → (metric name, comparison, unit)
LIMITS: dict[str, tuple[str, Literal["<=", ">="], str]] = {
    "max_bytes": ("bytes", "<=", "B"),
    "max_p90_ms": ("p90_ms", "<=", "ms"),
    "min_accuracy": ("accuracy", ">=", ""),
    "max_drop_vs_teacher": ("drop_vs_teacher", "<=", ""),
    "max_int8_drop": ("int8_drop", "<=", ""),
}


@dataclass(frozen=True)
class LimitResult:
    limit: str
    metric: str
    op: str
    threshold: float
    measured: float | None
    unit: str

    @property
    def passed(self) -> bool:
        if self.measured is None:
            return False
        if self.op == "<=":
            return self.measured <= self.threshold
        return self.measured >= self.threshold

    @property
    def status(self) -> str:
        return "missing" if self.measured is None else ("pass" if self.passed else "FAIL")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed, "status": self.status}


def evaluate(budget: Budget, metrics: dict[str, float | None]) -> list[LimitResult]:
    """One result per limit set in `budget`, in declaration order."""
    results = []
    for field, (metric, op, unit) in LIMITS.items():
        threshold = getattr(budget, field)
        if threshold is not None:
            results.append(
                LimitResult(field, metric, op, float(threshold), metrics.get(metric), unit)
            )
    return results


def load_budget(path: str | Path) -> Budget:
    data = load_yaml(path)
    if not isinstance(data, dict) or not data:
        raise EdgeKDError(f"{path} must be a YAML mapping of limits, e.g. `max_bytes: 2000000`", 2)
    budget = validate(Budget, data, str(path))
    if not any(getattr(budget, f) is not None for f in LIMITS):
        raise EdgeKDError(f"{path} sets no limit; set at least one of {', '.join(LIMITS)}", 2)
    return budget


def collect_metrics(dirs: list[Path], budget: Budget) -> dict[str, float | None]:
    """Measured values for `budget.model` from export.json and profile*.json files."""
    metrics: dict[str, float | None] = {}
    model_file: str | None = None
    for d in dirs:
        if not d.is_dir():
            raise EdgeKDError(f"{d} is not a folder; pass artifact folders from `edgekd export`")
        export = d / "export.json"
        if export.is_file():
            report = json.loads(export.read_text())
            entry = report["models"].get(budget.model)
            if entry is None:
                raise EdgeKDError(
                    f"{export} has no {budget.model} model; re-export with "
                    f"{'--int8' if budget.model == 'int8' else 'fp32'} or set "
                    "`model:` in the budget"
                )
            model_file = entry["path"]
            metrics["bytes"] = entry["bytes"]
            metrics["accuracy"] = entry["accuracy"]
            if report.get("teacher_accuracy") is not None:
                metrics["drop_vs_teacher"] = report["teacher_accuracy"] - entry["accuracy"]
            if report.get("int8_drop") is not None:
                metrics["int8_drop"] = report["int8_drop"]
    for d in dirs:
        for path in sorted(d.glob("profile*.json")):
            prof = json.loads(path.read_text())
            if prof.get("threads") == budget.threads and (
                model_file is None or Path(prof.get("model", "")).name == model_file
            ):
                metrics["p90_ms"] = prof["p90_ms"]
    return metrics
