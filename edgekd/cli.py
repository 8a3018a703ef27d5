"""The `edgekd` command line.

Start-up stays fast: torch, transformers and onnxruntime are imported only inside
the command that needs them (a test guards that `edgekd --help` imports none).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import typer
from pydantic import BaseModel
from typer.core import TyperGroup

try:  # recent typer carries its own copy of click; older releases use click itself
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover
    # The same class under its older home; mypy sees two unrelated classes.
    from click.exceptions import ClickException  # type: ignore[assignment]

from edgekd import __version__
from edgekd.artifacts import ProfileSweep
from edgekd.config import (
    DEFAULT_BASE,
    AugmentConfig,
    Calibration,
    DataConfig,
    DistillConfig,
    Ensemble,
    ExportConfig,
    Int8Mode,
    PlanConfig,
    Preset,
    ProfileConfig,
    TeacherConfig,
    TeacherRuntime,
    apply_sets,
    load_fields,
    load_yaml,
    override,
    parse_sets,
    validate,
)
from edgekd.errors import EdgeKDError, printable, printable_json
from edgekd.render import echo, print_check, print_export, print_profile, print_sweep, print_vs


class OneLineErrors(TyperGroup):
    """Usage errors (an unknown option, a value out of range) as one line on stderr,
    exit 2, like every other bad input; typer would draw a multi-line box."""

    # click's signature: `standalone_mode` passed by position lands here too.
    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        # Every argument as given but standalone_mode: click's own exit handling stays off.
        expand = windows_expand_args
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, expand, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, expand, **extra)
        except ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `edgekd`: the help page
                e.show()
                sys.exit(e.exit_code)
            where = e.ctx.command_path if getattr(e, "ctx", None) else "edgekd"  # type: ignore[attr-defined]
            message = e.format_message().rstrip(".")
            typer.echo(printable(f"error: {message}; see `{where} --help`"), err=True)
            sys.exit(e.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=OneLineErrors,
    help="Distil a text classifier into an edge model, export it, profile it, check budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)


DEBUG = {"on": False}  # set by --debug; EDGEKD_DEBUG=1 does the same


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"edgekd {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    debug: bool = typer.Option(
        False,
        "--debug",
        help="On an internal error, print its traceback; show the dependencies' warnings "
        "edgekd hides (also EDGEKD_DEBUG=1).",
        show_default="off",
    ),
    version: bool = typer.Option(
        False,
        "--version",
        help="Print edgekd's version (the installed package's) and exit.",
        callback=_print_version,
        is_eager=True,  # before a command is required, as `--help` is
        show_default="off",
    ),
) -> None:
    """Distil a text classifier into an edge model, export it, profile it, check budgets."""
    from edgekd.progress import progress_style, quiet_dependencies

    DEBUG["on"] = debug
    # Warnings a dependency raises about its own API (transformers' `torch_dtype`) say
    # nothing a user can act on; --debug shows them for a bug report.
    quiet_dependencies(not (debug or os.environ.get("EDGEKD_DEBUG")))
    try:
        progress_style()  # a bad EDGEKD_PROGRESS fails now, not at the first progress bar
    except EdgeKDError as e:
        typer.echo(f"error: {printable(str(e))}", err=True)
        raise typer.Exit(e.exit_code) from None


def user_errors(fn: F) -> F:
    """Print an error as one line on stderr and exit with its code (edgekd.errors):
    an `EdgeKDError` as it says, anything else through `failures.describe`. The line
    passes `printable`: a path or a file's text it quotes cannot drive the terminal."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:

        try:
            return fn(*args, **kwargs)
        except EdgeKDError as e:
            typer.echo(f"error: {printable(str(e))}", err=True)
            raise typer.Exit(e.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as e:
            from edgekd.errors import INTERNAL_ERROR
            from edgekd.failures import describe

            message, code = describe(e)
            if code == INTERNAL_ERROR and (DEBUG["on"] or os.environ.get("EDGEKD_DEBUG")):
                # The traceback follows; a report needs the version that raised it.
                typer.echo(f"edgekd {__version__} (Python {sys.version.split()[0]})", err=True)
                raise
            typer.echo(f"error: {printable(message)}", err=True)
            raise typer.Exit(code) from None

    return wrapper  # type: ignore[return-value]


def config_data(model: type[BaseModel], config: Path | None, sets: list[str] | None) -> Any:
    """The --config file's fields (if any) with the --set fields applied, as plain data."""
    return apply_sets(load_fields(config), parse_sets(sets), model)


def load_config(model: type[M], config: Path | None, sets: list[str] | None) -> M:
    """`model` from the --config file (if any) with the --set fields applied."""
    return validate(model, config_data(model, config, sets), str(config) if config else "--set")


def component_name(value: Any) -> str | None:
    """The name of a component as plain config data (`bilstm` or `{name: bilstm, ...}`)."""
    return value.get("name") if isinstance(value, dict) else value


def _hint_student_option(sets: dict[str, Any]) -> None:
    """`-s hidden_size=300` reads as a student option but names no distill field: say the
    path that sets it."""
    from edgekd.registry import STUDENTS

    for key in sets:
        if "." not in key and key not in DistillConfig.model_fields:
            owners = [n for n in STUDENTS.names() if key in STUDENTS.config_model(n).model_fields]
            if owners:
                raise EdgeKDError(
                    f"--set {key}: distill has no field {key!r}; a student option is set as "
                    f"-s student.options.{key}=VALUE"
                )


def field(
    model: type[BaseModel],
    name: str,
    *decls: str,
    help: str | None = None,
    default: str | None = None,
) -> Any:
    """A typer option whose default and help come from `model`'s field, so the config
    model stays the one place a default is written (choices: annotate the parameter
    with the field's Literal alias). `default` is the text shown when the field's own
    default is None (e.g. "auto-detected")."""
    info = model.model_fields[name]
    value = None if info.default_factory is not None else info.default
    if value is None and default is None:
        raise TypeError(f"{model.__name__}.{name} defaults to None: say what that means")
    return typer.Option(value, *decls, help=help or info.description, show_default=default or True)


def given(ctx: typer.Context, **values: Any) -> dict[str, Any]:
    """The options the user typed: those left at their default must not override a
    `--config` file's fields."""

    # By name: typer carries its own copy of click, whose enum is not click's.
    def typed(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        if source is None:  # not a parameter of this command: a bug here, never "untyped"
            raise TypeError(f"{ctx.command.name} has no parameter {name!r}")
        return source.name not in ("DEFAULT", "DEFAULT_MAP")

    return {k: v for k, v in values.items() if typed(k)}


def data_fields(ctx: typer.Context, **values: Any) -> dict[str, Any]:
    """The `DataConfig` fields given on the command line (`--data` is its `spec`)."""
    fields = given(ctx, **values)
    if "data" in fields:
        fields["spec"] = fields.pop("data")
    return fields


# Options shared by commands that read data; defaults are DataConfig's.
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
    help="YAML config (see examples/); options given on the command line override it.",
    show_default="none",
)
SETS = typer.Option(
    None,
    "--set",
    "-s",
    help="Set a config field, dotted: epochs=4, student.options.hidden_size=300 (repeatable; "
    "applied over --config, under the named options).",
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


@app.command()
@user_errors
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
    from edgekd.stages.teacher import teacher as train_teacher

    cfg = load_config(TeacherConfig, config, set_)
    own = given(
        ctx, base=base, epochs=epochs, lr=lr, batch_size=batch_size, max_length=max_length,
        time_budget=time_budget, seed=seed,
    )  # fmt: skip
    cfg = override(cfg, **own)
    fields = data_fields(
        ctx, data=data, text_column=text_column, label_column=label_column,
        text_pair_column=text_pair_column, max_train=max_train, max_dev=max_dev,
        train_split=train_split, dev_split=dev_split, encoding=encoding,
    )  # fmt: skip
    cfg = with_data(cfg, fields, own.get("seed"))
    metrics = train_teacher(cfg, out, overwrite)  # checks --out before loading any data
    echo(f"teacher: dev accuracy {metrics.dev_accuracy:.4f} → {out}")


def with_data(cfg: Any, fields: dict[str, Any], seed: int | None) -> Any:
    """`cfg` with its `data` section overridden by the data options given; a given
    --seed also seeds the subsample."""

    return override(cfg, data=override(cfg.data, seed=seed, **fields))


@app.command()
@user_errors
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
        show_default="bilstm",
    ),
    layers: int | None = typer.Option(
        None, "--layers", help="bert student: transformer layers.", show_default="3"
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
        "text), minimax (pick the most divergent variants each epoch), mixup (MixKD), "
        "mate (MATE-KD: a masked LM rewrites text against the student; --generator); none: "
        "no augmentation. Their options: -s augment.methods.NAME.options.FIELD=VALUE.",
        show_default="tang",
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
        show_default="mse",
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

    sets = parse_sets(set_)
    _hint_student_option(sets)
    raw = load_fields(config)
    if teacher:
        raw["teacher"] = teacher
    if not raw.get("teacher"):
        raise EdgeKDError("no teacher given; pass --teacher DIR_OR_ID (see `edgekd teacher`)")
    # Flags go onto the plain data, so the whole config validates once, components' options
    # included, before any data loads. A flag naming another component drops the options
    # the file gave the one it replaces; --set then applies to the components named.
    for key, name in {"student": student, "loss": loss, "intermediate": intermediate}.items():
        if name is not None and component_name(raw.get(key)) != name:
            raw[key] = name
    if augment is not None:
        listed = {component_name(m): m for m in (raw.get("augment") or {}).get("methods") or []}
        names = [m.strip() for m in augment.split(",") if m.strip() not in ("", "none")]
        raw = apply_sets(raw, {"augment.methods": [listed.get(n, n) for n in names]})
    if generator is not None:
        methods = [component_name(m) for m in (raw.get("augment") or {}).get("methods") or []]
        if "mate" not in methods:
            raise EdgeKDError("--generator is MATE-KD's: add mate to --augment (--augment mate)")
        raw = apply_sets(raw, {"augment.methods.mate.options.generator": generator})
    raw = apply_sets(raw, sets, DistillConfig)
    sizes: dict[str, Any] = {"layers": layers, "hidden": hidden, "heads": heads, "ffn": ffn}
    if early_exit:
        from edgekd.registry import STUDENTS

        kind = component_name(raw.get("student")) or "bilstm"
        if "early_exit" not in STUDENTS.config_model(kind).model_fields:
            raise EdgeKDError(f"--early-exit needs a bert student (not {kind}); add --student bert")
        sizes["early_exit"] = True
    raw = apply_sets(
        raw, {f"student.options.{k}": v for k, v in sizes.items() if v is not None}, DistillConfig
    )
    aug = given(ctx, n_iter=n_iter, max_augmented=max_augmented)
    if "max_augmented" in aug:
        aug["max_rows"] = aug.pop("max_augmented")
    raw = apply_sets(raw, {f"augment.{k}": v for k, v in aug.items()})
    if assistant_layers is not None:
        raw["assistant"] = {"student": {"name": "bert", "options": {"layers": assistant_layers}}}
    own = given(
        ctx, ensemble=ensemble, temperature=temperature, ce_weight=ce_weight, epochs=epochs,
        time_budget=time_budget, batch_size=batch_size, lr=lr, patience=patience,
        cache_dir=cache_dir, teacher_runtime=teacher_runtime, seed=seed,
    )  # fmt: skip
    if extra_teacher:
        own["extra_teachers"] = extra_teacher
    raw.update(own)
    fields = data_fields(
        ctx, data=data, text_column=text_column, label_column=label_column,
        text_pair_column=text_pair_column, max_train=max_train, max_dev=max_dev,
        train_split=train_split, dev_split=dev_split, encoding=encoding,
    )  # fmt: skip
    if "seed" in own:
        fields["seed"] = own["seed"]
    raw = apply_sets(raw, {f"data.{k}": v for k, v in fields.items()})
    cfg = validate(DistillConfig, raw, str(config or "options"))
    from edgekd.stages.distill import distill as run_distill

    m = run_distill(cfg, out, overwrite)
    from edgekd.progress import main_process

    if main_process():  # one result line, however many processes trained
        echo(
            f"student: accuracy {m.student_accuracy:.4f} (teacher {m.teacher_accuracy:.4f}, "
            f"agreement {m.agreement:.4f}, {m.params:,} params) → {out}"
        )
        if m.tfidf is not None:
            margin = 100 * (m.student_accuracy - m.tfidf.accuracy)
            echo(f"TF-IDF + LR on the same rows: {m.tfidf.accuracy:.4f} (student {margin:+.1f} pt)")


@app.command("eval")
@user_errors
def eval_(
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
    from edgekd.stages.evaluate import evaluate

    data_cfg = DataConfig(
        spec=data,
        text_column=text_column,
        label_column=label_column,
        text_pair_column=text_pair_column,
        max_dev=max_dev,
        train_split=train_split,
        dev_split=dev_split,
        encoding=encoding,
    )
    result = evaluate(data_cfg, model, json_out)
    echo(f"{model}: accuracy {result.accuracy:.4f} on {result.n} dev rows")


@app.command()
@user_errors
def export(
    ctx: typer.Context,
    student_dir: Path = typer.Argument(..., help="Student folder from `edgekd distill`."),
    out: Path = typer.Option(..., "--out", help="Folder for the ONNX models."),
    int8: bool = typer.Option(
        False,
        "--int8",
        help="Also write model.int8.onnx: dynamic int8 unless --int8-mode static; kept only "
        "if it beats fp32 on this CPU (see --guard).",
        show_default=OFF,
    ),
    int8_mode: Int8Mode = field(
        ExportConfig,
        "int8_mode",
        "--int8-mode",
        help="dynamic: int8 weights, activations scaled at run time (LSTM-capable); static: "
        "QDQ with activation ranges calibrated on training rows. Implies --int8.",
    ),
    preset: Preset = field(ExportConfig, "preset", "--preset"),
    device: str | None = typer.Option(
        None,
        "--device",
        help="Device name or spec path: take its int8 preset (unless --preset is given), and "
        "its section of --budget.",
        show_default="none: --preset",
    ),
    calibration: Calibration = field(ExportConfig, "calibration", "--calibration"),
    calibration_samples: int = field(ExportConfig, "calibration_samples", "--calibration-samples"),
    per_channel: bool | None = typer.Option(
        None,
        "--per-channel/--per-tensor",
        help="int8 weight scales per output channel or per tensor.",
        show_default="the preset's",
    ),
    reduce_range: bool | None = typer.Option(
        None,
        "--reduce-range/--full-range",
        help="7-bit int8 weights (avoids overflow on CPUs without VNNI) or the full 8 bits.",
        show_default="the preset's",
    ),
    guard: bool = typer.Option(
        True, "--guard/--no-guard", help="Keep int8 only if it beats fp32 on this CPU."
    ),
    max_int8_drop: float | None = field(
        ExportConfig, "max_int8_drop", "--max-int8-drop", default="none: no repair"
    ),
    mobile: bool = typer.Option(
        False,
        "--mobile",
        help="Also write .ort (+ required operators) and a usability report.",
        show_default=OFF,
    ),
    fixed_shape: str | None = field(
        ExportConfig, "fixed_shape", "--fixed-shape", default="none: dynamic shapes only"
    ),
    executorch: bool = typer.Option(
        False,
        "--executorch",
        help="Also write an ExecuTorch .pte (needs the executorch extra of edgekd).",
        show_default=OFF,
    ),
    e2e: bool = typer.Option(
        False,
        "--e2e",
        help="Also write model.e2e.onnx: string in, label out, the tokenizer in the graph "
        "(onnxruntime-extensions); checked to predict as the tokenizer path on every dev row.",
        show_default=OFF,
    ),
    data: str | None = typer.Option(
        None,
        "--data",
        help="Re-score on this data's dev split.",
        show_default="the data the student was distilled on",
    ),
    atol: float = field(ExportConfig, "atol", "--atol"),
    opset: int = field(ExportConfig, "opset", "--opset"),
    exit_threshold: float | None = field(
        ExportConfig,
        "exit_threshold",
        "--exit-threshold",
        default="the fastest keeping 99% agreement with every layer on held-out rows",
    ),
    budget: Path | None = typer.Option(
        None,
        "--budget",
        help="Early-exit students: choose the threshold to hold this budget's min_accuracy "
        "and min_agreement (for --device, when it has an entry) on held-out rows.",
        show_default="none",
    ),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
    overwrite: bool = OVERWRITE,
) -> None:
    """Export a student to ONNX (validated against PyTorch), optionally int8 (--int8)."""
    from edgekd.stages.export import export as run_export
    from edgekd.stages.export import student_data_config

    quant = given(
        ctx, int8_mode=int8_mode, preset=preset, device=device, per_channel=per_channel,
        reduce_range=reduce_range, max_int8_drop=max_int8_drop, calibration=calibration,
        calibration_samples=calibration_samples,
    )  # fmt: skip
    raw = config_data(ExportConfig, config, set_)
    # The flag spelling: int8 only with --int8 (a config file or -s int8=true also asks).
    raw.setdefault("int8", False)
    flags = {p.name: "/".join(p.opts + p.secondary_opts) for p in ctx.command.params}
    static = {"calibration", "calibration_samples"} & set(quant)
    mode = quant.get("int8_mode", raw.get("int8_mode"))
    if static and mode != "static":  # --int8-mode static is the whole fix: it implies --int8
        raise EdgeKDError(
            f"{flags[sorted(static)[0]]} only applies to static int8; add --int8-mode static"
        )
    if int8 or "int8_mode" in quant:
        raw["int8"] = True
    # --device also names a budget's section (--budget): then it needs no int8.
    int8_only = {k: v for k, v in quant.items() if not (k == "device" and budget is not None)}
    if raw["int8"] is False and int8_only:
        raise EdgeKDError(f"{flags[next(iter(int8_only))]} only applies to int8 models; add --int8")
    if device is not None and raw["int8"] and "preset" not in quant:
        from edgekd.devices.base import load_spec

        quant["preset"] = load_spec(device).int8_preset()
    quant.pop("device", None)
    raw.update(quant)
    raw.update(
        given(
            ctx, guard=guard, atol=atol, opset=opset, mobile=mobile, executorch=executorch,
            fixed_shape=fixed_shape, e2e=e2e,
        )
    )  # fmt: skip
    if exit_threshold is not None:
        raw["exit_threshold"] = exit_threshold
    if budget is not None:
        from edgekd.budget import load_budget

        limits = load_budget(budget)
        limits = limits.for_device(device) if device in limits.devices else limits
        if limits.min_agreement is None and limits.min_accuracy is None:
            raise EdgeKDError(
                f"{budget} sets neither min_accuracy nor min_agreement for an exit threshold "
                "to hold; add one, or pass --exit-threshold"
            )
        if limits.min_agreement is not None:
            raw["exit_min_agreement"] = limits.min_agreement
        raw["exit_min_accuracy"] = limits.min_accuracy
    cfg = validate(ExportConfig, raw, str(config) if config else "export options")
    data_cfg = student_data_config(student_dir) if student_dir.is_dir() else None
    if data:
        data_cfg = override(data_cfg or DataConfig(), spec=data)
    r = run_export(cfg, student_dir, out, data_cfg, overwrite)
    print_export(r, out)


@app.command()
@user_errors
def trim(
    student_dir: Path = typer.Argument(..., help="BiLSTM student folder."),
    out: Path = typer.Option(..., "--out", help="Folder for the trimmed student."),
    min_freq: int = typer.Option(
        1, "--min-freq", min=1, help="Keep tokens seen at least this often in training (times)."
    ),
    keep_top: int | None = typer.Option(
        None,
        "--keep-top",
        min=1,
        help="Keep at most this many tokens, the most frequent.",
        show_default="no cap",
    ),
    overwrite: bool = OVERWRITE,
) -> None:
    """Drop embedding rows the training set does not use (they map to [UNK])."""
    from edgekd.stages.trim import trim as run_trim

    r = run_trim(student_dir, out, min_freq, keep_top, overwrite)
    echo(
        f"vocabulary {r.vocab_before:,} → {r.vocab_after:,} tokens, dev accuracy "
        f"{r.dev_accuracy_before:.4f} → {r.dev_accuracy_after:.4f} → {out}"
    )


@app.command()
@user_errors
def bundle(
    export_dir: Path = typer.Argument(..., help="Folder from `edgekd export`."),
    out: Path = typer.Option(..., "--out", help="Bundle folder; a .zip is written beside it."),
    model: Literal["auto", "int8", "fp32", "e2e"] = typer.Option(
        "auto",
        "--model",
        help="Which model ships: auto (int8 if the export kept one, else fp32), int8, fp32, "
        "or e2e (model.e2e.onnx alone, from `edgekd export --e2e`).",
    ),
    overwrite: bool = OVERWRITE,
) -> None:
    """Package the shipping model, tokenizer, labels and a sha256 manifest."""
    from edgekd.stages.bundle import make_bundle

    archive = make_bundle(export_dir, out, model, overwrite)
    echo(f"bundle → {out} and {archive}")


@app.command()
@user_errors
def predict(
    bundle_path: Path = typer.Argument(
        ..., metavar="BUNDLE", help="Bundle folder or .zip, or a model.e2e.onnx alone."
    ),
    texts: list[str] | None = typer.Argument(
        None, help="Texts to classify.", show_default="none: read --file"
    ),
    file: Path | None = typer.Option(
        None,
        "--file",
        help="One text per line; 'first<TAB>second' is a sentence pair.",
        show_default="none",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per line instead of a table.", show_default=OFF
    ),
    threads: int = typer.Option(
        0, "--threads", min=0, help="onnxruntime intra-op threads (0: all cores)."
    ),
) -> None:
    """Classify texts with a bundle (onnxruntime + numpy only: no torch, no transformers)."""
    from edgekd.stages.bundle import Bundle, OneFile

    rows: list[Any] = list(texts or [])
    if file is not None:
        from edgekd.io import read_regular

        if file.is_dir():
            raise EdgeKDError(f"--file {file} is a folder; give a text file, one text per line")
        # A regular file only: a FIFO would block the read (and was called missing).
        data = read_regular(file, "--file", "give a text file, one text per line")
        try:
            lines = data.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise EdgeKDError(
                f"--file {file} is not UTF-8 (byte {e.start}); save it as UTF-8"
            ) from None
        for line in lines:
            if line.strip():
                first, tab, second = line.partition("\t")
                rows.append((first, second) if tab else line)
    if not rows:
        raise EdgeKDError("no texts given; pass them as arguments or with --file")
    model = OneFile(bundle_path, threads) if bundle_path.suffix == ".onnx" else None
    results = (model or Bundle(bundle_path, threads)).predict(rows)
    for text, r in zip(rows, results, strict=True):
        if json_out:
            typer.echo(printable_json(json.dumps({"text": text, **r}, ensure_ascii=False)))
        else:
            # Tab-separated: each field passes `printable`, so a text's tab, line break
            # or escape sequence cannot add a column, a row or a colour.
            probs = "  ".join(f"{printable(k)} {v:.3f}" for k, v in r["probabilities"].items())
            shown = text if isinstance(text, str) else " ⟂ ".join(text)
            typer.echo(f"{printable(r['label'])}\t{probs}\t{printable(shown)}")


@app.command()
@user_errors
def profile(
    ctx: typer.Context,
    model: Path = typer.Argument(..., help="ONNX file."),
    device: str = typer.Option(
        "local-cpu", "--device", help="Device name (`edgekd devices`) or YAML spec path."
    ),
    host: str | None = typer.Option(
        None, "--host", help="[USER@]HOST for an ssh device.", show_default="the spec's"
    ),
    threads: int | None = typer.Option(
        None,
        "--threads",
        min=0,
        help="onnxruntime intra-op threads (0: all cores).",
        show_default="the device's",
    ),
    runs: int = typer.Option(
        200, "--runs", min=1, help="Timed runs in all, split into --trials (at least one each)."
    ),
    trials: int = typer.Option(
        5, "--trials", min=1, help="Trials; p50/p90 are medians of the trials' own."
    ),
    warmup: int = typer.Option(20, "--warmup", min=0, help="Untimed runs first."),
    seq_len: str = typer.Option(
        "64",
        "--seq-len",
        help="Tokens per synthetic input; a list (16,32,64,128) sweeps lengths.",
    ),
    vs: Path | None = typer.Option(
        None,
        "--vs",
        help="Time this second model alternately with MODEL; report the ratio.",
        show_default="none",
    ),
    processes: int = typer.Option(
        3, "--processes", min=1, help="--vs: agent processes; the interval spans their spread."
    ),
    data: str | None = typer.Option(
        None,
        "--data",
        help="Dev texts for end-to-end (tokenize + infer) timing.",
        show_default="none: model only",
    ),
    text_column: str | None = TEXT_COL,
    text_pair_column: str | None = PAIR_COL,
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the result to this JSON file.", show_default="none"
    ),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
) -> None:
    """Latency percentiles, load time, memory and size at batch 1 on onnxruntime."""
    from edgekd.stages.profile import profile as run_profile

    try:
        lengths = [int(n) for n in seq_len.split(",")]
    except ValueError:
        raise EdgeKDError(f"--seq-len {seq_len!r}: give integers, e.g. 64 or 16,32,64") from None
    if min(lengths) < 1:
        raise EdgeKDError(f"--seq-len {seq_len!r}: lengths are at least 1 token")
    if runs < trials:
        raise EdgeKDError(
            f"--runs {runs} < --trials {trials}: each trial needs a run; raise --runs"
        )
    flags = dict(
        devices=[device],
        hosts={device: host} if host else {},
        threads=threads,
        runs=runs,
        trials=trials,
        warmup=warmup,
        seq_lens=lengths,
        vs=str(vs) if vs else None,
        processes=processes,
    )
    typed = given(
        ctx, device=device, host=host, threads=threads, runs=runs, trials=trials,
        warmup=warmup, seq_len=seq_len, vs=vs, processes=processes,
    )  # fmt: skip
    names = {"device": "devices", "host": "hosts", "seq_len": "seq_lens"}
    # The flags' defaults, under the --config file and --set, under the flags typed.
    raw = {
        **{k: v for k, v in flags.items() if v is not None},
        **config_data(ProfileConfig, config, set_),
        **{names.get(k, k): flags[names.get(k, k)] for k in typed},
    }
    cfg = validate(ProfileConfig, raw, str(config) if config else "profile options")
    if len(cfg.devices) != 1:
        raise EdgeKDError(
            f"edgekd profile times one device, the config names {len(cfg.devices)}; "
            "pass --device NAME (recipes profile several)"
        )
    texts = None
    if data:
        from edgekd.data import load_task

        texts = load_task(
            DataConfig(spec=data, text_column=text_column, text_pair_column=text_pair_column)
        ).dev.texts
    (result,) = run_profile(cfg, [model], texts=texts)
    if isinstance(result, ProfileSweep):
        print_sweep([r.model_dump(exclude_none=True) for r in result.sweep])
    elif vs:
        print_vs(result.model_dump(exclude_none=True))
    else:
        print_profile(result.model_dump(exclude_none=True))
    if json_out:
        result.write(json_out)


@app.command()
@user_errors
def check(
    artifacts: list[Path] = typer.Argument(..., help="Artifact folders (export, profiles)."),
    budget: Path | None = typer.Option(
        None,
        "--budget",
        help="Budget YAML (examples/budget.yaml).",
        show_default="none: --baseline's default margins",
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
    runs: int = typer.Option(
        400, "--runs", min=1, help="--baseline: timed runs per model per process."
    ),
    trials: int = typer.Option(
        10, "--trials", min=2, help="--baseline: trials per process (ratio pairs)."
    ),
    processes: int = typer.Option(
        3, "--processes", min=1, help="--baseline: agent processes; the interval spans them."
    ),
    seq_len: int = typer.Option(
        64, "--seq-len", min=1, help="--baseline: tokens per synthetic input."
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
    from edgekd.stages.check import check as run_check
    from edgekd.stages.check import write_ci_outputs

    if runs < trials:
        raise EdgeKDError(f"--runs {runs} < --trials {trials}: each trial needs a run")
    for flag, path in (("--baseline", baseline), ("--budget", budget)):
        if path is not None and not path.exists():
            raise EdgeKDError(f"{flag} {path} does not exist; check the path")
    timing = validate(
        ProfileConfig,
        {
            "devices": [device or "local-cpu"],
            "hosts": {device: host} if device and host else {},
            "runs": runs,
            "trials": trials,
            "seq_lens": [seq_len],
            "processes": processes,
        },
        "options",
    )
    result = run_check(
        budget, artifacts, device=device, sets=parse_sets(set_), baseline=baseline, timing=timing
    )
    summary = os.environ.get("GITHUB_STEP_SUMMARY") if github_summary else None
    write_ci_outputs(result, junit, bench_json, summary, bmf, markdown)
    if json_out == "-":
        typer.echo(printable_json(result.model_dump_json(indent=2)))
    else:
        print_check(result)
        if json_out:
            result.write(Path(json_out))
    raise typer.Exit(0 if result.passed else 1)


@app.command()
@user_errors
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
    device: str = typer.Option(
        "local-cpu", "--device", help="Device name (`edgekd devices`) or YAML spec path."
    ),
    host: str | None = typer.Option(
        None, "--host", help="[USER@]HOST for an ssh device.", show_default="the spec's"
    ),
    grid: Path | None = typer.Option(
        None,
        "--grid",
        help="YAML list of candidates, each {name, options} as distill.student.",
        show_default="the built-in grid: 6 BiLSTMs, 4 BERTs",
    ),
    out: Path = typer.Option(..., "--out", help="Folder for plan.json."),
    config: Path | None = CONFIG,
    set_: list[str] | None = SETS,
    overwrite: bool = OVERWRITE,
) -> None:
    """Which students fit the device's latency, memory and size limits, before distilling
    any: untrained candidates exported and profiled as a trained one would be."""
    from edgekd.budget import load_budget
    from edgekd.render import print_plan
    from edgekd.stages.plan import plan as run_plan

    raw = load_fields(config)
    if teacher:
        raw["teacher"] = teacher
    if data:
        raw["data"] = {**(raw.get("data") or {}), "spec": data}
    columns = given(ctx, text_column=text_column, text_pair_column=text_pair_column)
    if columns:
        raw["data"] = {**(raw.get("data") or {}), **columns}
    raw.update(given(ctx, device=device, host=host))
    if grid is not None:
        raw["grid"] = load_yaml(grid)
    for key, flag in (("teacher", "--teacher DIR_OR_ID"), ("data", "--data SPEC")):
        if not raw.get(key):
            raise EdgeKDError(f"no {key} given; pass {flag}")
    cfg = validate(PlanConfig, apply_sets(raw, parse_sets(set_), PlanConfig), "plan options")
    result = run_plan(cfg, load_budget(budget), out, overwrite)
    print_plan(result)
    echo(f"plan → {out}")


@app.command("run")
@user_errors
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


@app.command()
@user_errors
def report(
    run_dir: Path = typer.Argument(..., help="A run folder (edgekd run, quickstart, ...)."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the page and plots.", show_default="RUN_DIR/report"
    ),
    overwrite: bool = OVERWRITE,
) -> None:
    """Self-contained HTML page + PNG plots: accuracy vs latency vs size, budgets."""
    from edgekd.stages.report import report as write_report

    page = write_report(run_dir, out, overwrite=overwrite)
    echo(f"wrote {page}")


@app.command()
@user_errors
def devices(
    show: str | None = typer.Option(
        None,
        "--show",
        help="Print this spec's YAML (copy it to make your own).",
        show_default="none: list them all",
    ),
) -> None:
    """List the packaged device specs."""
    from edgekd.devices.base import SPEC_DIR, load_spec, packaged_devices

    if show:
        load_spec(show)  # unknown names fail with the list of valid ones
        typer.echo(SPEC_DIR.joinpath(f"{show}.yaml").read_text(), nl=False)
        return
    for name in packaged_devices():
        spec = load_spec(name)
        own = spec.options
        where = own.get("host") or own.get("serial")
        where = where or ("set host" if spec.runner == "ssh" else "this machine")
        if spec.runner == "adb" and not own.get("serial"):
            where = "the one attached phone"
        echo(
            f"{name}: runner={spec.runner} ({where}) threads={spec.threads} "
            f"preset={spec.int8_preset()} — {spec.description}"
        )


@app.command()
@user_errors
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

    sets = parse_sets(set_)
    sets.update(
        quickstart_sets(data, teacher, out, max_train, teacher_max_train, epochs, seed, base)
    )
    raise typer.Exit(run_quickstart(sets, overwrite, force))
