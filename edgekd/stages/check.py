"""The check stage: measured metrics against a budget, one verdict (`CheckResult`).

Whichever entry point runs it (`edgekd check`, a recipe, quickstart, the Python
API), the verdict has one shape, written as `check.json` (or `check-DEVICE.json`)
with a JUnit file beside it when a folder is given; CI outputs (JUnit XML, a job
summary table, github-action-benchmark entries) are views of the same results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from edgekd.artifacts import CheckResult, LimitResult
from edgekd.budget import Budget, collect_metrics, evaluate, load_budget, resolve_shipped
from edgekd.io import atomic_write_text


def check(
    budget: Budget | str | Path,
    artifacts: list[Path],
    out_dir: str | Path | None = None,
    device: str | None = None,
    threads: int | None = None,
    defaults: dict[str, Any] | None = None,
    sets: dict[str, Any] | None = None,
) -> CheckResult:
    """Check the metrics measured in `artifacts` (export and profile folders) against
    `budget` (a model or a YAML path) for `device` (`defaults`: its spec's own limits,
    else read from the spec named `device`); with `out_dir`, write the verdict
    and its JUnit XML there. `threads`: the thread count the profiles ran at, for
    budgets (and device entries) that do not set one. `sets`: dotted budget fields set
    over the file's (`--set max_p90_ms=5`)."""
    path = None
    if not isinstance(budget, Budget):
        path, budget = str(budget), load_budget(budget, sets)
    b = resolve_shipped(budget_for(budget, device, threads, defaults), [Path(a) for a in artifacts])
    results = evaluate(b, collect_metrics([Path(a) for a in artifacts], b))
    assert b.model != "shipped"  # resolved above
    result = CheckResult(
        budget=path,
        model=b.model,
        device=device,
        passed=all(r.passed for r in results),
        limits=results,
    )
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        result.write(out / CheckResult.file_name(device))
        junit = out / (f"junit-{device}.xml" if device else "junit.xml")
        atomic_write_text(junit, junit_xml(results, result.title()))
    return result


def budget_for(
    budget: Budget,
    device: str | None,
    threads: int | None = None,
    defaults: dict[str, Any] | None = None,
) -> Budget:
    """`budget` as it applies on `device`: the budget's `devices:` entry, else the device
    spec's own default limits; latency limits at `threads` unless a budget sets it."""
    if device is None:
        return budget
    if defaults is None and device not in budget.devices:
        from edgekd.devices.base import load_spec

        defaults = load_spec(device).budget  # the device spec's own default limits
    b = budget.for_device(device, defaults)
    explicit = (
        "threads" in budget.model_fields_set
        or "threads" in budget.devices.get(device, {})
        or "threads" in (defaults or {})
    )
    if threads is not None and not explicit:
        b = b.model_copy(update={"threads": threads})
    return b


def write_ci_outputs(
    result: CheckResult,
    junit: Path | None = None,
    bench_json: Path | None = None,
    github_summary: str | None = None,
) -> None:
    """The verdict for CI: JUnit XML, benchmark entries, a job-summary table (appended
    to `github_summary`, the runner's own file)."""
    title = result.title()
    if junit:
        atomic_write_text(junit, junit_xml(result.limits, title))
    if bench_json:
        prefix = result.device or result.model
        atomic_write_text(bench_json, json.dumps(bench_entries(result.limits, prefix)) + "\n")
    if github_summary:
        with open(github_summary, "a", encoding="utf-8") as f:  # append only
            f.write(markdown_summary(result.limits, title))


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
