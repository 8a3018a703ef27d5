"""Budgets: limits on a deployed model, checked by a pure function.

`evaluate(budget, metrics)` compares each set limit with its measured value;
a limit whose metric was never measured fails (a gate must not pass on missing
evidence). `collect_metrics` reads the measured values from artifact folders.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from edgekd.config import StrictModel, load_yaml, validate
from edgekd.errors import EdgeKDError
from edgekd.io import read_json


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
    max_peak_rss_mb: float | None = Field(
        None, gt=0, description="Peak resident memory while serving, MB."
    )
    max_init_ms: float | None = Field(None, gt=0, description="Model load time, ms.")
    min_agreement: float | None = Field(
        None, ge=0, le=1, description="Share of dev rows where ONNX and PyTorch agree, 0..1."
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
    "max_drop_vs_teacher": ("drop_vs_teacher", "<=", ""),
    "max_int8_drop": ("int8_drop", "<=", ""),
    "min_agreement": ("agreement", ">=", ""),
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

    def threshold_text(self) -> str:
        return f"{self.op} {show(self.threshold, self.unit)}"

    def measured_text(self) -> str:
        return "—" if self.measured is None else show(self.measured, self.unit)


def show(value: float, unit: str) -> str:
    """A limit's value for people: bytes in full with separators, others to 4 digits."""
    if unit == "B":
        return f"{value:,.0f} B"
    return f"{value:,.4g} {unit}".strip()


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
    for name in budget.devices:
        budget.for_device(name)  # a bad per-device field fails here, with exit 2
    limits = [budget] + [budget.for_device(n) for n in budget.devices]
    if not any(getattr(b, f) is not None for b in limits for f in LIMITS):
        raise EdgeKDError(f"{path} sets no limit; set at least one of {', '.join(LIMITS)}", 2)
    return budget


def measured(value: Any) -> float | None:
    """A measured value a limit can be judged on: a finite real number, else None (the
    limit then reads as not measured and fails; a gate never passes on garbage)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _mapping(data: Any, path: Path, key: str | None = None) -> dict[str, Any]:
    value = data.get(key) if key is not None and isinstance(data, dict) else data
    if not isinstance(value, dict):
        where = f"`{key}` in {path}" if key else str(path)
        raise EdgeKDError(
            f"{where} is not a JSON object; re-create {path.name} with the edgekd command "
            "that wrote it"
        )
    return value


def collect_metrics(dirs: list[Path], budget: Budget) -> dict[str, float | None]:
    """Measured values for `budget.model` from export.json and profile*.json files.

    An unreadable or malformed file is an error (exit 2), never a pass; a value that is
    not a finite number counts as not measured, so its limit fails."""
    metrics: dict[str, float | None] = {}
    model_file: str | None = None
    for d in dirs:
        if not d.is_dir():
            raise EdgeKDError(f"{d} is not a folder; pass artifact folders from `edgekd export`")
        export = d / "export.json"
        if export.is_file():
            report = _mapping(read_json(export), export)
            models = _mapping(report, export, "models")
            if budget.model not in models and report.get("int8_refused"):
                # The export's guard dropped int8 (not faster than fp32 on its CPU): what
                # the budget gates does not exist, so every limit on it fails (exit 1).
                from edgekd.progress import console

                console.print(
                    f"note: {export} kept no int8 model (its guard found int8 slower than "
                    "fp32 there); every int8 limit reads as not measured"
                )
                continue
            if budget.model not in models:
                raise EdgeKDError(
                    f"{export} has no {budget.model} model; re-export with "
                    f"{'--int8' if budget.model == 'int8' else 'fp32'} or set "
                    "`model:` in the budget"
                )
            entry = _mapping(models, export, budget.model)
            model_file = str(entry.get("path", ""))
            metrics["bytes"] = measured(entry.get("bytes"))
            accuracy = metrics["accuracy"] = measured(entry.get("accuracy"))
            metrics["agreement"] = measured(entry.get("agreement"))
            teacher = measured(report.get("teacher_accuracy"))
            if teacher is not None and accuracy is not None:
                metrics["drop_vs_teacher"] = teacher - accuracy
            metrics["int8_drop"] = measured(report.get("int8_drop"))
    seen: set[str] = set()
    for d in dirs:
        for path in sorted(d.glob("profile*.json")):
            prof = _mapping(read_json(path), path)
            if (
                prof.get("threads") == budget.threads
                and (model_file is None or Path(str(prof.get("model", ""))).name == model_file)
                and (budget.device is None or prof.get("device") == budget.device)
            ):
                seen.add(str(prof.get("device")))
                for metric in ("p90_ms", "peak_rss_mb", "load_ms"):
                    value = measured(prof.get(metric))
                    if value is not None or metric not in metrics:
                        metrics[metric] = value
    if len(seen) > 1:  # a Pi's latency must never be checked against a server's limit
        raise EdgeKDError(
            f"profiles from several devices ({', '.join(sorted(seen))}) match; "
            "pass --device NAME to check one"
        )
    return {k: v for k, v in metrics.items() if v is not None}  # absent: "not measured"


# ---------------------------------------------------------------- CI outputs


def junit_xml(results: list[LimitResult], suite: str) -> str:
    """JUnit XML: one test case per limit; a failed or unmeasured limit is a failure."""
    from xml.sax.saxutils import quoteattr

    failures = sum(not r.passed for r in results)
    cases = []
    for r in results:
        measured = "not measured" if r.measured is None else r.measured_text()
        attrs = f"classname={quoteattr(suite)} name={quoteattr(r.limit)}"
        if r.passed:
            cases.append(f"  <testcase {attrs}/>")
        else:
            message = quoteattr(f"{r.metric} {measured}, limit {r.threshold_text()}")
            cases.append(f"  <testcase {attrs}>\n    <failure message={message}/>\n  </testcase>")
    header = (
        f'<testsuite name={quoteattr(suite)} tests="{len(results)}" '
        f'failures="{failures}" errors="0">'
    )
    body = "\n".join(cases)
    return f'<?xml version="1.0" encoding="utf-8"?>\n{header}\n{body}\n</testsuite>\n'


def markdown_summary(results: list[LimitResult], title: str) -> str:
    """A Markdown table for a CI job summary."""
    verdict = "✅ all limits hold" if all(r.passed for r in results) else "❌ budget missed"
    lines = [f"### {title}: {verdict}", "", "| limit | threshold | measured | status |"]
    lines.append("|---|---|---|---|")
    for r in results:
        lines.append(f"| {r.limit} | {r.threshold_text()} | {r.measured_text()} | {r.status} |")
    return "\n".join(lines) + "\n"


def bench_entries(results: list[LimitResult], prefix: str) -> list[dict[str, Any]]:
    """github-action-benchmark `customSmallerIsBetter` entries for the measured limits.

    Larger-is-better metrics (accuracy, agreement) are reported as 1 − value (error
    rate, disagreement) so every entry trends the same way.
    """
    out = []
    for r in results:
        if r.measured is None:
            continue
        name, value = r.metric, r.measured
        if r.op == ">=":
            name, value = f"1 - {r.metric}", 1.0 - r.measured
        out.append({"name": f"{prefix} {name}", "unit": r.unit or "ratio", "value": value})
    return out
