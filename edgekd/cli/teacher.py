"""`edgekd teacher`: fine-tune an encoder into the teacher classifier."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekd.cli.base import DATA_FIELDS, Fields, field, typed, under
from edgekd.cli.options import (
    CONFIG,
    DATA,
    DEV_SPLIT,
    ENCODING,
    LABEL_COL,
    MAX_DEV,
    MAX_TRAIN,
    OVERWRITE,
    PAIR_COL,
    SETS,
    TEXT_COL,
    TRAIN_SPLIT,
)
from edgekd.config import TeacherConfig
from edgekd.resolve import resolve

# Option → TeacherConfig field; a typed --seed also seeds the data's subsample.
FIELDS: Fields = {
    **{k: k for k in ("base", "epochs", "lr", "batch_size", "max_length", "time_budget")},
    "seed": ["seed", "data.seed"],
    **under("data", DATA_FIELDS),
}


def teacher(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="Folder for the fine-tuned HF classifier."),
    base: str = field(TeacherConfig, "base", "--base"),
    data: str = DATA,
    text_column: str | None = TEXT_COL,
    label_column: str | None = LABEL_COL,
    text_pair_column: str | None = PAIR_COL,
    max_train: int | None = MAX_TRAIN,
    max_dev: int | None = MAX_DEV,
    train_split: str = TRAIN_SPLIT,
    dev_split: str | None = DEV_SPLIT,
    encoding: str = ENCODING,
    epochs: float = field(TeacherConfig, "epochs", "--epochs"),
    lr: float = field(TeacherConfig, "lr", "--lr"),
    batch_size: int = field(TeacherConfig, "batch_size", "--batch-size"),
    max_length: int | None = field(
        TeacherConfig, "max_length", "--max-length", default="from the data"
    ),
    time_budget: float | None = field(TeacherConfig, "time_budget", "--time-budget"),
    seed: int = field(TeacherConfig, "seed", "--seed"),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
    overwrite: bool = OVERWRITE,
) -> None:
    """Fine-tune a BERT-style encoder into a teacher classifier."""
    from edgekd.render import print_teacher
    from edgekd.stages.teacher import teacher as train_teacher

    cfg = resolve(TeacherConfig, config, set_, typed(ctx, FIELDS))
    metrics = train_teacher(cfg, out, overwrite)  # checks --out before loading any data
    print_teacher(metrics, out)
