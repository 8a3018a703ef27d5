"""The check stage: measured metrics against a budget, one verdict (`CheckResult`).

Whichever entry point runs it (`edgekd check`, a recipe, quickstart, the Python
API), the verdict has one shape, written as `check.json` (or `check-DEVICE.json`)
with a JUnit file beside it when a folder is given; CI outputs (JUnit XML, a job
summary table, github-action-benchmark entries) are views of the same results.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgekd.artifacts import CheckResult, LimitResult, RegressionResult
from edgekd.budget import (
    LIMITS,
    REGRESSIONS,
    Budget,
    collect_metrics,
    evaluate,
    load_budget,
    resolve_shipped,
)
from edgekd.config import BaselineTiming, ProfileConfig, apply_sets, validate
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_write_text
from edgekd.stages.baseline import baseline_side, compare, current_side

if TYPE_CHECKING:
    from edgekd.devices.base import DeviceSpec


def check(
    budget: Budget | str | Path | None,
    artifacts: list[Path],
    out_dir: str | Path | None = None,
    device: str | None = None,
    threads: int | None = None,
    defaults: dict[str, Any] | None = None,
    sets: dict[str, Any] | None = None,
    baseline: str | Path | None = None,
    timing: ProfileConfig | None = None,
) -> CheckResult:
    """Check the metrics measured in `artifacts` (export and profile folders) against
    `budget` (a model or a YAML path) for `device` (`defaults`: its spec's own limits,
    else read from the spec named `device`); with `out_dir`, write the verdict
    and its JUnit XML there. `threads`: the thread count the profiles ran at, for
    budgets (and device entries) that do not set one. `sets`: dotted budget fields set
    over the file's (`--set max_p90_ms=5`).

    With `baseline` (a previous export folder, bundle or profile), this run's model is
    also compared with the baseline's (`edgekd.stages.baseline`): latency timed side
    by side under `timing` (its device, runs, trials, processes, length), bytes, and
    accuracy and agreement row by row. `budget` None: the limits are `sets` alone, the
    device spec's own (`device`), or a baseline's default margins."""
    for flag, given in (("--baseline", baseline), ("--budget", budget)):
        if isinstance(given, str | Path) and not Path(given).exists():  # before any work
            raise EdgeKDError(f"{flag} {given} does not exist; check the path")
    path = None
    if budget is None:
        if baseline is None and not sets and device is None:
            raise EdgeKDError(
                "edgekd check needs limits: --budget FILE, -s max_p90_ms=5, --device NAME "
                "(its spec's limits) or --baseline"
            )
        # Without a file, the budget is `-s` alone (-s max_bytes=2e6), the device spec's
        # limits, or a baseline's default margins (each side's shipped model compared).
        start = {"model": "shipped"} if baseline is not None else {}
        budget = validate(Budget, apply_sets(start, sets or {}), "--set")
    elif not isinstance(budget, Budget):
        path, budget = str(budget), load_budget(budget, sets)
    dirs = [Path(a) for a in artifacts]
    unresolved = budget_for(budget, device, threads, defaults)
    top = {k: v for k, v in (sets or {}).items() if not k.startswith("devices.")}
    if device is not None and top:
        # `-s` has the last word, over the device's entry or its spec's own limits too
        # (-s max_p90_ms=5 --device raspberry-pi-4 gates at 5 ms, not the spec's 20).
        fields = apply_sets(unresolved.model_dump(exclude={"devices"}), top)
        unresolved = validate(Budget, fields, "--set")
    # With `model: shipped` each side's own shipped model is compared: a run whose int8
    # guard kept fp32 is judged against the int8 the baseline shipped.
    wanted = unresolved.model
    b = resolve_shipped(unresolved, dirs)
    regressions: list[RegressionResult] = []
    notes: list[str] = []
    if baseline is not None:
        now = current_side(dirs, wanted)  # before the baseline: refuse cheap errors first
        timing = timing or BaselineTiming()
        timing = timing.model_copy(
            update={
                "devices": [device or b.device or timing.devices[0]],
                "threads": timing.threads if timing.threads is not None else b.threads,
            }
        )
        with baseline_side(Path(baseline), wanted) as base:
            regressions = compare(b, base, now, timing, timing.hosts.get(timing.devices[0]))
        notes += [f"{r.metric}: {r.note}" for r in regressions if r.note]
    else:
        notes += [
            f"{f} is set but no --baseline was given; it reads as not measured"
            for f in REGRESSIONS
            if getattr(b, f) is not None
        ]
    # Absolute limits: only when some are set (a baseline alone judges regressions).
    results = evaluate(b, collect_metrics(dirs, b)) if has_limits(b) else []
    results += unmeasured_margins(b) if baseline is None else []
    if not results and not regressions:  # nothing judged must never read as a pass
        raise EdgeKDError("the budget sets no limit for this check; set at least one", 2)
    assert b.model != "shipped"  # resolved above
    result = CheckResult(
        budget=path,
        model=b.model,
        device=device,
        passed=all(r.passed for r in results) and all(r.passed for r in regressions),
        limits=results,
        baseline=str(baseline) if baseline is not None else None,
        regressions=regressions,
        notes=notes,
    )
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        result.write(out / CheckResult.file_name(device))
        atomic_write_text(out / CheckResult.junit_name(device), junit_xml(result))
    return result


def check_devices(
    budget: Budget,
    artifacts: list[Path],
    out_dir: str | Path,
    specs: list[DeviceSpec],
    threads: int | None = None,
) -> list[CheckResult]:
    """`check` on each of `specs` (a recipe's profile devices), every verdict and its
    JUnit XML in `out_dir`: each device's limits (the budget's `devices:` entry, else its
    spec's own) at the threads its profiles ran with (`threads`, else the spec's)."""
    # The spec's name: what the profiles call it, and the budget's `devices:` key.
    return [
        check(budget, artifacts, out_dir, s.name, s.threads_for(threads), defaults=s.budget)
        for s in specs
    ]


def has_limits(budget: Budget) -> bool:
    return any(getattr(budget, f) is not None for f in LIMITS)


def unmeasured_margins(budget: Budget) -> list[LimitResult]:
    """A baseline margin set without --baseline: a limit that was never measured (it
    fails: a budget asking for a comparison must not pass without one)."""
    return [
        LimitResult(limit=f, metric=REGRESSIONS[f][0], op="<=", threshold=float(v), unit="")
        for f in REGRESSIONS
        if (v := getattr(budget, f)) is not None
    ]


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
    bmf: Path | None = None,
    markdown: Path | None = None,
) -> None:
    """The verdict for CI: JUnit XML, benchmark entries, a job-summary table (appended
    to `github_summary`, the runner's own file), Bencher Metric Format, a PR comment."""
    if junit:
        atomic_write_text(junit, junit_xml(result))
    if bench_json:
        prefix = result.device or result.model
        atomic_write_text(bench_json, json.dumps(bench_entries(result.limits, prefix)) + "\n")
    if github_summary:
        with open(github_summary, "a", encoding="utf-8") as f:  # append only
            f.write(markdown_summary(result))
    if bmf:
        atomic_write_text(bmf, json.dumps(bencher_metrics(result), indent=2) + "\n")
    if markdown:
        atomic_write_text(markdown, markdown_summary(result))


def junit_xml(result: CheckResult) -> str:
    """JUnit XML: one test case per limit and per baseline metric; a failed or
    unmeasured one is a failure."""
    from xml.sax.saxutils import quoteattr

    suite = result.title()
    cases = []
    failures = 0
    for name, passed, message in [
        *(
            (r.limit, r.passed, f"{r.metric} {measured(r)}, limit {r.threshold_text()}")
            for r in result.limits
        ),
        *(
            (
                f"{r.limit} ({r.metric})",
                r.passed,
                f"{r.metric} {r.value_text(r.baseline)} → {r.value_text(r.now)}, "
                f"{r.change_text()}, allowed {r.margin_text()}" + (f": {r.note}" if r.note else ""),
            )
            for r in result.regressions
        ),
    ]:
        attrs = f"classname={quoteattr(suite)} name={quoteattr(name)}"
        if passed:
            cases.append(f"  <testcase {attrs}/>")
        else:
            failures += 1
            cases.append(
                f"  <testcase {attrs}>\n    <failure message={quoteattr(message)}/>\n  </testcase>"
            )
    header = (
        f'<testsuite name={quoteattr(suite)} tests="{len(cases)}" failures="{failures}" errors="0">'
    )
    body = "\n".join(cases)
    return f'<?xml version="1.0" encoding="utf-8"?>\n{header}\n{body}\n</testsuite>\n'


def measured(r: LimitResult) -> str:
    return "not measured" if r.measured is None else r.measured_text()


def markdown_summary(result: CheckResult) -> str:
    """Markdown for a CI job summary or a PR comment: the baseline comparison (each
    metric, baseline → now, change with its interval, verdict), then the limits."""
    verdict = "✅ passed" if result.passed else "❌ failed"
    lines = [f"### {result.title()}: {verdict}", ""]
    if result.baseline is not None:
        lines += [
            f"Against baseline `{result.baseline}`:",
            "",
            "| metric | baseline | now | change [95% CI] | allowed | verdict |",
            "|---|---|---|---|---|---|",
        ]
        for r in result.regressions:
            lines.append(
                f"| {r.metric} | {r.value_text(r.baseline)} | {r.value_text(r.now)} | "
                f"{r.change_text()} | {r.margin_text()} | {VERDICTS[r.status]} |"
            )
        lines += [""] + [f"- {r.metric}: {r.how}" for r in result.regressions if r.how]
        lines.append("")
    if result.limits:
        lines += ["| limit | threshold | measured | status |", "|---|---|---|---|"]
        for limit in result.limits:
            lines.append(
                f"| {limit.limit} | {limit.threshold_text()} | {limit.measured_text()} | "
                f"{limit.status} |"
            )
        lines.append("")
    lines += [f"> {note}" for note in result.notes]
    return "\n".join(lines).rstrip("\n") + "\n"


VERDICTS = {"pass": "✅ pass", "FAIL": "❌ regression", "missing": "❌ not measured"}

# metric → (Bencher measure slug, factor to its unit): Bencher's built-in `latency`
# measure is in nanoseconds (1 ms = 1e6 ns), `file-size` in bytes.
MEASURES = {
    "p50_ms": ("latency", 1e6),
    "p90_ms": ("latency-p90", 1e6),
    "load_ms": ("load-time", 1e6),
    "bytes": ("file-size", 1.0),
    "peak_rss_mb": ("peak-rss-mb", 1.0),
    "accuracy": ("accuracy", 1.0),
    "agreement": ("agreement", 1.0),
}


def bencher_metrics(result: CheckResult) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: {benchmark: {measure: {value, lower_value, upper_value}}}
    for this run's measured values (one benchmark: device and model).

    Against a baseline, a value and its bounds come from the comparison, so they agree:
    latency is the baseline's × (1 + the side-by-side change and its interval), and
    accuracy and agreement are the baseline's − the paired drop (bounds kept in 0..1)."""
    out: dict[str, dict[str, float]] = {}
    for limit in result.limits:
        if limit.measured is not None and limit.metric in MEASURES:
            slug, k = MEASURES[limit.metric]
            out[slug] = {"value": limit.measured * k}
    for r in result.regressions:
        if r.now is None or r.worse is None or r.metric not in MEASURES:
            continue
        slug, k = MEASURES[r.metric]
        if r.baseline is None or r.ci95 is None:
            out[slug] = {"value": r.now * k}
        elif r.relative():
            values = [r.baseline * (1 + c) * k for c in (r.worse, *r.ci95)]
            out[slug] = dict(zip(BOUNDS, values, strict=True))
        else:
            values = [min(1.0, max(0.0, r.baseline - c)) for c in (r.worse, *r.ci95[::-1])]
            out[slug] = dict(zip(BOUNDS, values, strict=True))
    return {f"edgekd/{result.device or 'local'}/{result.model}": out}


BOUNDS = ("value", "lower_value", "upper_value")


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
