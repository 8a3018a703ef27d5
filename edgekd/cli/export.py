"""`edgekd export` (ONNX, int8 and the other formats) and `edgekd trim`."""

from __future__ import annotations

from pathlib import Path

import typer

from edgekd.cli.base import Fields, field, typed
from edgekd.cli.options import CONFIG, OFF, OVERWRITE, SETS
from edgekd.config import Calibration, ExportConfig, Int8Embedding, Int8Mode, Preset
from edgekd.resolve import resolve

SWITCHES = (
    "int8", "preset", "calibration", "calibration_samples", "per_channel", "reduce_range",
    "int8_embedding", "guard", "max_int8_drop", "mobile", "fixed_shape", "executorch", "e2e",
    "atol", "opset", "exit_threshold",
)  # fmt: skip
# Option → ExportConfig field; --int8-mode asks for int8 too (the help says so).
FIELDS: Fields = {**{k: k for k in SWITCHES}, "int8_mode": ["int8_mode", ("int8", lambda _: True)]}


def export(
    ctx: typer.Context,
    student_dir: Path = typer.Argument(..., help="Student folder from `edgekd distill`."),
    out: Path = typer.Option(..., "--out", help="Folder for the ONNX models."),
    int8: bool = field(
        ExportConfig,
        "int8",
        "--int8",
        help="Also write model.int8.onnx: dynamic int8 unless --int8-mode static; refused "
        "if it runs slower than fp32 on this CPU (see --guard).",
        default=OFF,
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
    per_channel: bool | None = field(
        ExportConfig,
        "per_channel",
        "--per-channel/--per-tensor",
        help="int8 weight scales per output channel or per tensor.",
        default="the preset's",
    ),
    reduce_range: bool | None = field(
        ExportConfig,
        "reduce_range",
        "--reduce-range/--full-range",
        help="7-bit int8 weights (avoids overflow on CPUs without VNNI) or the full 8 bits.",
        default="the preset's",
    ),
    int8_embedding: Int8Embedding = field(ExportConfig, "int8_embedding", "--int8-embedding"),
    guard: bool = field(
        ExportConfig,
        "guard",
        "--guard/--no-guard",
        help="Refuse int8 if it runs at least 1.25× fp32's latency on this CPU.",
    ),
    max_int8_drop: float | None = field(
        ExportConfig, "max_int8_drop", "--max-int8-drop", default="none: no repair"
    ),
    mobile: bool = field(
        ExportConfig,
        "mobile",
        "--mobile",
        help="Also write .ort (+ required operators) and a usability report.",
        default=OFF,
    ),
    fixed_shape: str | None = field(
        ExportConfig, "fixed_shape", "--fixed-shape", default="none: dynamic shapes only"
    ),
    executorch: bool = field(
        ExportConfig,
        "executorch",
        "--executorch",
        help="Also write an ExecuTorch .pte (needs the executorch extra of edgekd).",
        default=OFF,
    ),
    e2e: bool = field(
        ExportConfig,
        "e2e",
        "--e2e",
        help="Also write model.e2e.onnx: string in, label out, the tokenizer in the graph "
        "(onnxruntime-extensions); checked to predict as the tokenizer path on every dev row.",
        default=OFF,
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
    from edgekd.render import print_export
    from edgekd.stages.export import exit_terms, for_device, rescore_data
    from edgekd.stages.export import export as run_export

    flags = typed(ctx, FIELDS)
    if budget is not None:  # its accuracy terms, as typed export fields
        flags.values.update(exit_terms(budget, device))
    cfg = resolve(ExportConfig, config, set_, flags)
    cfg = for_device(cfg, device, "preset" in flags.values, budget is not None)
    report = run_export(cfg, student_dir, out, rescore_data(student_dir, data), overwrite)
    print_export(report, out)


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
    from edgekd.render import print_trim
    from edgekd.stages.trim import trim as run_trim

    print_trim(run_trim(student_dir, out, min_freq, keep_top, overwrite), out)
