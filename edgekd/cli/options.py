"""Options several commands share; defaults are the config models' (`field`)."""

from __future__ import annotations

import typer

from edgekd.cli.base import field
from edgekd.config import DataConfig

# DataConfig's options, for commands that read data.
DATA = field(DataConfig, "spec", "--data", help="HF dataset (glue/sst2) or local file/folder.")
TEXT_COL = field(DataConfig, "text_column", "--text-column", default="auto-detected")
LABEL_COL = field(DataConfig, "label_column", "--label-column", default="auto-detected")
PAIR_COL = field(DataConfig, "text_pair_column", "--text-pair-column", default="none: single texts")
MAX_TRAIN = field(
    DataConfig, "max_train", "--max-train", help="Seeded subsample of training rows (rows).",
    default="all rows",
)  # fmt: skip
MAX_DEV = field(
    DataConfig, "max_dev", "--max-dev", help="Seeded subsample of dev rows (rows).",
    default="all rows",
)  # fmt: skip
TRAIN_SPLIT = field(DataConfig, "train_split", "--train-split")
DEV_SPLIT = field(DataConfig, "dev_split", "--dev-split", default="dev, validation or valid")
ENCODING = field(DataConfig, "encoding", "--encoding")

CONFIG = typer.Option(
    None,
    "--config",
    help="YAML config (see examples/); -s and the options typed override it.",
    show_default="none",
)
SETS = typer.Option(
    None,
    "--set",
    "-s",
    help="Set a config field, dotted: epochs=4, student.options.hidden_size=300 (repeatable; "
    "applied over --config, under the options typed).",
    show_default="none",
)
OFF = "off"  # the shown default of a plain on/off flag
OVERWRITE = typer.Option(
    False,
    "--overwrite",
    help="Write into an output folder that holds files edgekd did not write; edgekd "
    "replaces only its own files there and keeps every other one.",
    show_default=OFF,
)
