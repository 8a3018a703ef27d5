"""`edgekd distill`: a teacher distilled into a small student."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from edgekd.cli.base import DATA_FIELDS, Fields, default_name, field, typed, under
from edgekd.cli.options import (
    CONFIG,
    DATA,
    DEV_SPLIT,
    ENCODING,
    LABEL_COL,
    MAX_DEV,
    MAX_TRAIN,
    OFF,
    OVERWRITE,
    PAIR_COL,
    SETS,
    TEXT_COL,
    TRAIN_SPLIT,
)
from edgekd.config import SMALL_TASK_TEXTS, AugmentConfig, DistillConfig, Ensemble, TeacherRuntime
from edgekd.resolve import resolve


def augmenters(value: str) -> list[str] | str:
    """`--augment mask,tang` as the list it names (`none`: no augmentation; `auto`: the
    default's choice from the data)."""
    if value.strip() == "auto":
        return "auto"
    return [m.strip() for m in value.split(",") if m.strip() not in ("", "none")]


def assistant(layers: int) -> dict[str, Any]:
    """`--assistant-layers N`: a first run distils a bert student of N layers."""
    return {"student": {"name": "bert", "options": {"layers": layers}}}


OWN = (
    "teacher", "ensemble", "student", "loss", "intermediate", "temperature", "ce_weight",
    "epochs", "time_budget", "batch_size", "lr", "patience", "cache_dir", "teacher_runtime",
)  # fmt: skip
# Option → DistillConfig field(s); a typed --seed also seeds the data's subsample.
FIELDS: Fields = {
    **{k: k for k in OWN},
    "extra_teacher": "extra_teachers",
    **{k: f"student.options.{k}" for k in ("layers", "hidden", "heads", "ffn")},
    "early_exit": "student.options.early_exit",
    "assistant_layers": ("assistant", assistant),
    "augment": ("augment.methods", augmenters),
    "generator": "augment.methods.mate.options.generator",
    "n_iter": "augment.n_iter",
    "max_augmented": "augment.max_rows",
    "seed": ["seed", "data.seed"],
    **under("data", DATA_FIELDS),
}


def distill(
    ctx: typer.Context,
    teacher: str | None = typer.Option(
        None,
        "--teacher",
        help="Fine-tuned HF classifier: a folder or hub id.",
        show_default="the --config file's",
    ),
    out: Path = typer.Option(..., "--out", help="Folder for the student."),
    extra_teacher: list[str] | None = typer.Option(
        None,
        "--extra-teacher",
        help="Another teacher for an ensemble (repeatable).",
        show_default="none",
    ),
    ensemble: Ensemble = field(DistillConfig, "ensemble", "--ensemble"),
    data: str = DATA,
    student: str | None = typer.Option(
        None,
        "--student",
        help="Student kind: bilstm, cnn (windows of 1-4 tokens, max-pooled), bert or "
        "mobilebert (bottleneck layers; trains with feature-map and attention transfer, "
        "then prediction KD).",
        show_default=default_name(DistillConfig, "student"),
    ),
    layers: int | None = typer.Option(
        None, "--layers", help="bert student: transformer layers.", show_default="the student's"
    ),
    hidden: int | None = typer.Option(
        None, "--hidden", help="bert student: width (units).", show_default="the teacher's"
    ),
    heads: int | None = typer.Option(
        None, "--heads", help="bert student: attention heads.", show_default="the teacher's"
    ),
    ffn: int | None = typer.Option(
        None, "--ffn", help="bert student: FFN inner width (units).", show_default="the teacher's"
    ),
    intermediate: str | None = typer.Option(
        None,
        "--intermediate",
        help="Intermediate-layer loss for a bert student: pkd, tinybert, alp, distilbert "
        "(cosine on mapped layers, every-other-layer init) or minilm (last-layer attention "
        "and value relations).",
        show_default="none: logits only",
    ),
    early_exit: bool = typer.Option(
        False,
        "--early-exit",
        help="FastBERT (bert student): a classifier after every layer, self-distilled from the "
        "last; the exported graph stops each row at the first layer certain enough (the "
        "threshold: `edgekd export --exit-threshold` or chosen there).",
        show_default=OFF,
    ),
    assistant_layers: int | None = typer.Option(
        None,
        "--assistant-layers",
        help="TAKD: first distil a bert assistant of this many layers, then the student from it.",
        show_default="none: no assistant",
    ),
    augment: str | None = typer.Option(
        None,
        "--augment",
        help="Comma-separated: mask, pos, ngram, tang (all three), swap (a span from another "
        "text), neighbour (words near in the teacher's embeddings), minimax (pick the most "
        "divergent variants each epoch), mixup (MixKD), mate (MATE-KD: a masked LM rewrites "
        "text against the student; --generator); none: no augmentation; auto: tang, and "
        f"neighbour,tang on a small task (under {SMALL_TASK_TEXTS:,} training texts). Their "
        "options: "
        "-s augment.methods.NAME.options.FIELD=VALUE.",
        show_default=default_name(AugmentConfig, "methods"),
    ),
    generator: str | None = typer.Option(
        None,
        "--generator",
        help="MATE-KD (--augment mate): the masked-LM generator, an HF id or folder reading the "
        "teacher's vocabulary (a BERT-uncased teacher: distilbert-base-uncased, or the smaller "
        "google/bert_uncased_L-4_H-256_A-4).",
        show_default="none",
    ),
    n_iter: int | None = typer.Option(
        None,
        "--n-iter",
        min=1,
        help=AugmentConfig.model_fields["n_iter"].description,
        show_default="auto",
    ),
    max_augmented: int | None = field(
        AugmentConfig,
        "max_rows",
        "--max-augmented",
        help="Cap on augmented rows, a seeded subsample (rows).",
        default="all",
    ),
    loss: str | None = typer.Option(
        None,
        "--loss",
        help="mse (Tang et al.), kd (Hinton), annealing (Jafari et al.) or uniform.",
        show_default=default_name(DistillConfig, "loss"),
    ),
    temperature: float = field(DistillConfig, "temperature", "--temperature"),
    ce_weight: float = field(DistillConfig, "ce_weight", "--ce-weight"),
    epochs: int | None = field(
        DistillConfig, "epochs", "--epochs", default="what the budget affords; 10 without"
    ),
    time_budget: float | None = field(DistillConfig, "time_budget", "--time-budget"),
    batch_size: int = field(DistillConfig, "batch_size", "--batch-size"),
    lr: float | None = field(
        DistillConfig, "lr", "--lr", default="the student's: bilstm 1e-3, bert 5e-5"
    ),
    patience: int = field(DistillConfig, "patience", "--patience"),
    text_column: str | None = TEXT_COL,
    label_column: str | None = LABEL_COL,
    text_pair_column: str | None = PAIR_COL,
    max_train: int | None = MAX_TRAIN,
    max_dev: int | None = MAX_DEV,
    train_split: str = TRAIN_SPLIT,
    dev_split: str | None = DEV_SPLIT,
    encoding: str = ENCODING,
    cache_dir: str | None = field(
        DistillConfig, "cache_dir", "--cache-dir", default="$EDGEKD_CACHE or ~/.cache/edgekd"
    ),
    teacher_runtime: TeacherRuntime = field(DistillConfig, "teacher_runtime", "--teacher-runtime"),
    seed: int = field(DistillConfig, "seed", "--seed"),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
    overwrite: bool = OVERWRITE,
) -> None:
    """Distil a teacher into a small student (BiLSTM or small BERT)."""
    from edgekd.render import print_distill
    from edgekd.stages.distill import distill as run_distill

    cfg = resolve(DistillConfig, config, set_, typed(ctx, FIELDS))
    print_distill(run_distill(cfg, out, overwrite), out)
