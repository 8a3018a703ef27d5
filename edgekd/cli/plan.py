"""`edgekd plan`: which untrained students fit a device's budget."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekd.cli.base import DATA_FIELDS, Fields, field, typed, under
from edgekd.cli.options import CONFIG, OVERWRITE, PAIR_COL, SETS, TEXT_COL
from edgekd.config import PlanConfig, load_yaml
from edgekd.resolve import resolve

# Option → PlanConfig field.
FIELDS: Fields = {
    **{k: k for k in ("teacher", "device", "host")},
    **under("data", {k: DATA_FIELDS[k] for k in ("data", "text_column", "text_pair_column")}),
    "grid": ("grid", load_yaml),
}


def plan(
    ctx: typer.Context,
    teacher: str | None = typer.Option(
        None,
        "--teacher",
        help="The teacher the students would learn from (folder or hub id).",
        show_default="the --config file's",
    ),
    data: str | None = typer.Option(
        None,
        "--data",
        help="The task (vocabulary, labels, dev texts).",
        show_default="the --config file's",
    ),
    text_column: str | None = TEXT_COL,
    text_pair_column: str | None = PAIR_COL,
    budget: Path = typer.Option(
        ...,
        "--budget",
        help="Budget YAML: its max_p90_ms, max_peak_rss_mb, max_bytes, max_init_ms.",
    ),
    device: str = field(
        PlanConfig, "device", "--device", help="Device name (`edgekd devices`) or YAML spec path."
    ),
    host: str | None = field(
        PlanConfig, "host", "--host", help="[USER@]HOST for an ssh device.", default="the spec's"
    ),
    grid: Path | None = typer.Option(
        None,
        "--grid",
        help="YAML list of candidates, each {name, options} as distill.student.",
        show_default="the built-in grid: 6 BiLSTMs, 3 CNNs, 4 BERTs",
    ),
    out: Path = typer.Option(..., "--out", help="Folder for plan.json."),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
    overwrite: bool = OVERWRITE,
) -> None:
    """Which students fit the device's latency, memory and size limits, before distilling
    any: untrained candidates exported and profiled as a trained one would be."""
    from edgekd.render import print_plan
    from edgekd.stages.plan import plan as run_plan

    cfg = resolve(PlanConfig, config, set_, typed(ctx, FIELDS))
    print_plan(run_plan(cfg, budget, out, overwrite), out)
