"""`edgekd eval`: any model (teacher, student, ONNX) scored on a dev split."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekd.cli.base import DATA_FIELDS, Fields, typed
from edgekd.cli.options import (
    DEV_SPLIT,
    ENCODING,
    LABEL_COL,
    MAX_DEV,
    PAIR_COL,
    TEXT_COL,
    TRAIN_SPLIT,
)
from edgekd.config import DataConfig
from edgekd.resolve import resolve

# Option → DataConfig field (eval reads no training rows: no --max-train).
FIELDS: Fields = {k: v for k, v in DATA_FIELDS.items() if k != "max_train"}


def eval_(
    ctx: typer.Context,
    model: str = typer.Argument(..., help="HF classifier, student folder, or .onnx file."),
    data: str = typer.Option(..., "--data", help="HF dataset or local file/folder."),
    text_column: str | None = TEXT_COL,
    label_column: str | None = LABEL_COL,
    text_pair_column: str | None = PAIR_COL,
    max_dev: int | None = MAX_DEV,
    train_split: str = TRAIN_SPLIT,
    dev_split: str | None = DEV_SPLIT,
    encoding: str = ENCODING,
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the result to this JSON file.", show_default="none"
    ),
) -> None:
    """Score a teacher, a student or an ONNX model on the dev split."""
    from edgekd.render import print_eval
    from edgekd.stages.evaluate import evaluate

    data_cfg = resolve(DataConfig, typed=typed(ctx, FIELDS), source="--data options")
    print_eval(evaluate(data_cfg, model, json_out), model)
