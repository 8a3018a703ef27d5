"""`edgekd check`: measured metrics against a budget and/or a baseline; exit 0 or 1.

Its config is the budget (`--budget`, with `-s` over its fields: the check stage reads
both, file under `-s`); `--baseline`'s timing is a `BaselineTiming` from the options
typed, over the model's defaults.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from edgekd.cli.base import Fields, field, typed
from edgekd.cli.options import OFF, SETS
from edgekd.config import BaselineTiming, parse_sets
from edgekd.resolve import resolve

# Option → BaselineTiming field.
FIELDS: Fields = {
    **{k: k for k in ("runs", "trials", "processes")},
    "device": ("devices", lambda name: [name]),
    "seq_len": ("seq_lens", lambda n: [n]),
}


def check(
    ctx: typer.Context,
    artifacts: list[Path] = typer.Argument(..., help="Artifact folders (export, profiles)."),
    budget: Path | None = typer.Option(
        None,
        "--budget",
        help="Budget YAML (examples/budget.yaml).",
        show_default="none: -s fields, --device's spec limits, or --baseline's margins",
    ),
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        help="A previous run's export folder, bundle (folder or .zip) or profile JSON: fail "
        "on a regression beyond the budget's margins (max_latency_regression: 5%, ...).",
        show_default="none: limits only",
    ),
    device: str | None = typer.Option(
        None,
        "--device",
        help="Apply this device's limits: the budget's `devices:` entry, else the spec's. "
        "--baseline: time both models there.",
        show_default="none: the top-level limits",
    ),
    host: str | None = typer.Option(
        None, "--host", help="[USER@]HOST for an ssh device.", show_default="the spec's"
    ),
    runs: int = field(
        BaselineTiming,
        "runs",
        "--runs",
        min=1,
        help="--baseline: timed runs per model per process.",
    ),
    trials: int = field(
        BaselineTiming,
        "trials",
        "--trials",
        min=2,
        help="--baseline: trials per process (ratio pairs).",
    ),
    processes: int = field(
        BaselineTiming,
        "processes",
        "--processes",
        min=1,
        help="--baseline: agent processes; the interval spans them.",
    ),
    seq_len: int = field(
        BaselineTiming,
        "seq_lens",
        "--seq-len",
        min=1,
        help="--baseline: tokens per synthetic input.",
    ),
    json_out: str | None = typer.Option(
        None, "--json", help="Write results as JSON ('-': stdout).", show_default="none"
    ),
    junit: Path | None = typer.Option(
        None, "--junit", help="Write JUnit XML, one case per limit.", show_default="none"
    ),
    github_summary: bool = typer.Option(
        False,
        "--github-summary",
        help="Append a Markdown table to $GITHUB_STEP_SUMMARY.",
        show_default=OFF,
    ),
    bench_json: Path | None = typer.Option(
        None,
        "--bench-json",
        help="Write github-action-benchmark customSmallerIsBetter JSON.",
        show_default="none",
    ),
    bmf: Path | None = typer.Option(
        None, "--bmf", help="Write Bencher Metric Format JSON.", show_default="none"
    ),
    markdown: Path | None = typer.Option(
        None,
        "--markdown",
        help="Write the verdict as Markdown (a PR comment): baseline → now, change, verdict.",
        show_default="none",
    ),
    set_: list[str] | None = SETS,
) -> None:
    """Check measured metrics against a budget and/or a baseline: exit 0 if all hold,
    1 if any fails. `-s` sets a budget field over the file's: max_p90_ms=5,
    devices.rpi4.max_bytes=2e6, max_latency_regression=10%."""
    from edgekd.render import print_verdict
    from edgekd.stages.check import check as run_check
    from edgekd.stages.check import write_ci_outputs

    flags = typed(ctx, FIELDS)
    if device and host:
        flags.values["hosts"] = {device: host}
    timing = resolve(BaselineTiming, typed=flags, source="timing options")
    result = run_check(
        budget, artifacts, device=device, sets=parse_sets(set_), baseline=baseline, timing=timing
    )
    summary = os.environ.get("GITHUB_STEP_SUMMARY") if github_summary else None
    write_ci_outputs(result, junit, bench_json, summary, bmf, markdown)
    print_verdict(result, json_out)
    raise typer.Exit(0 if result.passed else 1)
