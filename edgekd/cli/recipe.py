"""`edgekd run` (a recipe), `edgekd quickstart` (the built-in one) and `edgekd report`.

A recipe is the config file of these commands: `-s` sets its fields, and quickstart's
options (typed only) set theirs over `-s`; `edgekd.recipe.load_recipe` resolves them.
"""

from __future__ import annotations

from pathlib import Path

import typer

from edgekd.cli.options import OFF, OVERWRITE, SETS
from edgekd.config import DEFAULT_BASE, parse_sets


def run_(
    recipe: Path = typer.Argument(..., help="Recipe YAML (examples/recipe-*.yaml)."),
    force: bool = typer.Option(
        False, "--force", help="Re-run every stage, cache or not.", show_default=OFF
    ),
    set_: list[str] | None = SETS,
    overwrite: bool = OVERWRITE,
) -> None:
    """Run a recipe: teacher → distill → export → profile → check → report, cached by stage.
    `-s` sets a recipe field: distill.epochs=2, data.max_train=500."""
    from edgekd.recipe import run_recipe

    raise typer.Exit(run_recipe(recipe, force, parse_sets(set_), overwrite))


def report(
    run_dir: Path = typer.Argument(..., help="A run folder (edgekd run, quickstart, ...)."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the page and plots.", show_default="RUN_DIR/report"
    ),
    overwrite: bool = OVERWRITE,
) -> None:
    """Self-contained HTML page + PNG plots: accuracy vs latency vs size, budgets."""
    from edgekd.render import echo
    from edgekd.stages.report import report as write_report

    page = write_report(run_dir, out, overwrite=overwrite)
    echo(f"wrote {page}")


def quickstart(
    data: str | None = typer.Option(
        None, "--data", help="HF dataset or local copy.", show_default="glue/sst2"
    ),
    teacher: str | None = typer.Option(
        None,
        "--teacher",
        help="Fine-tuned classifier (folder or hub id).",
        show_default="none: fine-tune --base first",
    ),
    base: str | None = typer.Option(
        None, "--base", help="Encoder to fine-tune (no --teacher).", show_default=DEFAULT_BASE
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for every stage.", show_default="runs/quickstart"
    ),
    max_train: int | None = typer.Option(
        None,
        "--max-train",
        min=1,
        help="Training rows for the student, a seeded subsample above this (rows).",
        show_default="100000",
    ),
    teacher_max_train: int | None = typer.Option(
        None,
        "--teacher-max-train",
        min=1,
        help="Rows to fine-tune a teacher on (rows).",
        show_default="all (its time budget decides how many passes)",
    ),
    epochs: int | None = typer.Option(
        None,
        "--epochs",
        min=1,
        help="Student epochs (passes over the rows).",
        show_default="what the time budget affords",
    ),
    seed: int | None = typer.Option(
        None, "--seed", help="Seed for subsampling, training and export.", show_default="0"
    ),
    set_: list[str] | None = SETS,
    force: bool = typer.Option(
        False, "--force", help="Re-run every stage, cache or not.", show_default=OFF
    ),
    overwrite: bool = OVERWRITE,
) -> None:
    """Teacher → BiLSTM → int8 ONNX → profile → check: the built-in recipe
    (`edgekd/recipes/quickstart.yaml`, cached by stage like `edgekd run`), ending in one
    table. `-s` sets any of its fields: distill.student.options.embedding_dim=128."""
    from edgekd.quickstart import quickstart_sets, run_quickstart

    # Its options default to None, so the ones typed are those quickstart_sets keeps.
    typed = quickstart_sets(data, teacher, out, max_train, teacher_max_train, epochs, seed, base)
    raise typer.Exit(run_quickstart({**parse_sets(set_), **typed}, overwrite, force))
