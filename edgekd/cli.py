"""The `edgekd` command line.

Start-up stays fast: torch, transformers and onnxruntime are imported only inside
the command that needs them (a test guards that `edgekd --help` imports none).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from edgekd.errors import EdgeKDError

app = typer.Typer(
    help="Distil a text classifier into an edge model, export it, profile it, check budgets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Print an `EdgeKDError` as one line on stderr and exit with its code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except EdgeKDError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None

    return wrapper  # type: ignore[return-value]


def parse_options(pairs: list[str] | None, flag: str = "--student-option") -> dict[str, Any]:
    """`key=value` pairs; values are read as YAML scalars (`300`, `true`, `word`)."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise EdgeKDError(f"{flag} {pair!r} is not key=value; e.g. hidden_size=150")
        out[key.strip()] = yaml.safe_load(value)
    return out


def with_data(cfg: Any, data: str | None = None, **fields: Any) -> Any:
    """`cfg` with its `data` section overridden by the data options given."""
    from edgekd.config import override

    return override(cfg, data=override(cfg.data, spec=data, **fields))


# Options shared by commands that read data.
DATA = typer.Option(None, "--data", help="HF dataset (glue/sst2) or local file/folder.")
TEXT_COL = typer.Option(None, "--text-column", help="Text column (auto-detected).")
LABEL_COL = typer.Option(None, "--label-column", help="Label column (auto-detected).")
PAIR_COL = typer.Option(
    None, "--text-pair-column", help="Second text column of a sentence-pair task."
)
MAX_TRAIN = typer.Option(None, "--max-train", help="Random subsample of training rows.")
MAX_DEV = typer.Option(None, "--max-dev", help="Random subsample of dev rows.")
TRAIN_SPLIT = typer.Option(None, "--train-split", help="Training split name or file stem.")
DEV_SPLIT = typer.Option(None, "--dev-split", help="Dev split (default: dev/validation).")
CONFIG = typer.Option(None, "--config", help="YAML config; options given here override it.")


@app.command()
@user_errors
def teacher(
    out: Path = typer.Option(..., "--out", help="Folder for the fine-tuned HF classifier."),
    base: str | None = typer.Option(None, help="HF id or folder (default: packaged MiniLM)."),
    data: str | None = DATA,
    text_column: str | None = TEXT_COL,
    label_column: str | None = LABEL_COL,
    text_pair_column: str | None = PAIR_COL,
    max_train: int | None = MAX_TRAIN,
    max_dev: int | None = MAX_DEV,
    train_split: str | None = TRAIN_SPLIT,
    dev_split: str | None = DEV_SPLIT,
    epochs: float | None = typer.Option(None, help="Passes over the training rows."),
    lr: float | None = typer.Option(None, help="AdamW learning rate."),
    batch_size: int | None = typer.Option(None, help="Rows per step."),
    max_length: int | None = typer.Option(None, help="Tokens per text."),
    seed: int | None = typer.Option(None),
    config: Path | None = CONFIG,
) -> None:
    """Fine-tune a BERT-style encoder into a teacher classifier."""
    from edgekd.config import TeacherConfig, load_yaml, override, save_config, validate
    from edgekd.data import load_task
    from edgekd.io import atomic_dir, write_json
    from edgekd.teacher import finetune

    cfg = validate(TeacherConfig, load_yaml(config), str(config)) if config else TeacherConfig()
    cfg = override(
        cfg,
        base=base,
        epochs=epochs,
        lr=lr,
        batch_size=batch_size,
        max_length=max_length,
        seed=seed,
    )
    cfg = with_data(
        cfg,
        data,
        text_column=text_column,
        label_column=label_column,
        text_pair_column=text_pair_column,
        max_train=max_train,
        max_dev=max_dev,
        train_split=train_split,
        dev_split=dev_split,
        seed=seed,
    )
    task = load_task(cfg.data)
    with atomic_dir(out) as tmp:
        metrics = finetune(cfg, task, tmp)
        save_config(cfg, tmp / "config.yaml")
        write_json(tmp / "metrics.json", metrics)
    typer.echo(f"teacher: dev accuracy {metrics['dev_accuracy']:.4f} → {out}")


@app.command()
@user_errors
def distill(
    teacher: str | None = typer.Option(None, "--teacher", help="Fine-tuned HF classifier."),
    out: Path = typer.Option(..., "--out", help="Folder for the student."),
    extra_teacher: list[str] | None = typer.Option(
        None, "--extra-teacher", help="Another teacher for an ensemble (repeatable)."
    ),
    ensemble: str | None = typer.Option(None, help="Ensemble by averaging logits or probs."),
    data: str | None = DATA,
    student: str | None = typer.Option(None, "--student", help="Student kind: bilstm or bert."),
    student_option: list[str] | None = typer.Option(
        None, "--student-option", "-s", help="Student config field, key=value (repeatable)."
    ),
    layers: int | None = typer.Option(None, help="bert student: transformer layers."),
    hidden: int | None = typer.Option(None, help="bert student: width (default: teacher's)."),
    heads: int | None = typer.Option(None, help="bert student: attention heads."),
    ffn: int | None = typer.Option(None, help="bert student: FFN inner width."),
    intermediate: str | None = typer.Option(
        None, help="Intermediate-layer loss for a bert student: pkd, tinybert or alp."
    ),
    assistant_layers: int | None = typer.Option(
        None,
        "--assistant-layers",
        help="TAKD: first distil a bert assistant of this many layers, then the student from it.",
    ),
    intermediate_option: list[str] | None = typer.Option(
        None,
        "--intermediate-option",
        "-i",
        help="layer_map=uniform|top|bottom|last, weight=..., stage_epochs=... (repeatable).",
    ),
    augment: str | None = typer.Option(
        None,
        help="Comma-separated: mask, pos, ngram, tang (all three), minimax (pick the most "
        "divergent variants each epoch), mixup (MixKD).",
    ),
    n_iter: int | None = typer.Option(None, help="Augmented variants per training text."),
    max_augmented: int | None = typer.Option(None, help="Cap on augmented rows (subsample)."),
    minimax_k: int | None = typer.Option(
        None, help="minimax: variants kept per text each epoch (the most divergent)."
    ),
    loss: str | None = typer.Option(
        None, help="mse (Tang et al.), kd (Hinton) or annealing (Jafari et al.)."
    ),
    loss_option: list[str] | None = typer.Option(
        None, "--loss-option", "-l", help="Loss argument, key=value, e.g. tau_max=7."
    ),
    temperature: float | None = typer.Option(None, help="Softmax temperature for kd."),
    ce_weight: float | None = typer.Option(None, help="Weight of gold-label CE, 0..1."),
    epochs: int | None = typer.Option(None),
    batch_size: int | None = typer.Option(None),
    lr: float | None = typer.Option(None),
    patience: int | None = typer.Option(None, help="Epochs without dev gain before stopping."),
    text_column: str | None = TEXT_COL,
    label_column: str | None = LABEL_COL,
    text_pair_column: str | None = PAIR_COL,
    max_train: int | None = MAX_TRAIN,
    max_dev: int | None = MAX_DEV,
    train_split: str | None = TRAIN_SPLIT,
    dev_split: str | None = DEV_SPLIT,
    cache_dir: str | None = typer.Option(None, help="Teacher-logit cache folder."),
    teacher_runtime: str | None = typer.Option(
        None, help="torch (fp32) or onnx-int8 (faster labelling; agreement reported)."
    ),
    seed: int | None = typer.Option(None),
    config: Path | None = CONFIG,
) -> None:
    """Distil a teacher into a small student (BiLSTM or small BERT)."""
    from edgekd.config import DistillConfig, load_yaml, override, validate

    raw = load_yaml(config) if config else {}
    if teacher:
        raw = {**(raw or {}), "teacher": teacher}
    if not (raw or {}).get("teacher"):
        raise EdgeKDError("no teacher given; pass --teacher DIR_OR_ID (see `edgekd teacher`)")
    cfg = validate(DistillConfig, raw, str(config or "options"))
    sizes = {"layers": layers, "hidden": hidden, "heads": heads, "ffn": ffn}
    options = {
        **cfg.student_options,
        **{k: v for k, v in sizes.items() if v is not None},
        **parse_options(student_option),
    }
    methods = [m.strip() for m in augment.split(",") if m.strip()] if augment else None
    cfg = override(
        cfg,
        augment=override(
            cfg.augment,
            methods=methods,
            n_iter=n_iter,
            max_rows=max_augmented,
            minimax_k=minimax_k,
        ),
    )
    loss_options = {**cfg.loss_options, **parse_options(loss_option, "--loss-option")}
    layer_options = {
        **cfg.intermediate_options,
        **parse_options(intermediate_option, "--intermediate-option"),
    }
    if assistant_layers is not None:
        cfg = override(
            cfg, assistant={"student": "bert", "student_options": {"layers": assistant_layers}}
        )
    cfg = override(
        cfg,
        intermediate=intermediate,
        intermediate_options=layer_options,
        student=student,
        student_options=options,
        loss_options=loss_options,
        extra_teachers=extra_teacher or None,
        ensemble=ensemble,
        loss=loss,
        temperature=temperature,
        ce_weight=ce_weight,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        patience=patience,
        cache_dir=cache_dir,
        teacher_runtime=teacher_runtime,
        seed=seed,
    )
    cfg = with_data(
        cfg,
        data,
        text_column=text_column,
        label_column=label_column,
        text_pair_column=text_pair_column,
        max_train=max_train,
        max_dev=max_dev,
        train_split=train_split,
        dev_split=dev_split,
        seed=seed,
    )
    from edgekd.distill.trainer import run_distill

    m = run_distill(cfg, out)
    typer.echo(
        f"student: accuracy {m['student_accuracy']:.4f} (teacher "
        f"{m['teacher_accuracy']:.4f}, agreement {m['agreement']:.4f}, "
        f"{m['params']:,} params) → {out}"
    )


@app.command("eval")
@user_errors
def eval_(
    model: str = typer.Argument(..., help="HF classifier, student folder, or .onnx file."),
    data: str = typer.Option(..., "--data", help="HF dataset or local file/folder."),
    text_column: str | None = TEXT_COL,
    label_column: str | None = LABEL_COL,
    text_pair_column: str | None = PAIR_COL,
    max_dev: int | None = MAX_DEV,
    train_split: str | None = TRAIN_SPLIT,
    dev_split: str | None = DEV_SPLIT,
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON."),
) -> None:
    """Score a teacher, a student or an ONNX model on the dev split."""
    from edgekd.config import DataConfig
    from edgekd.data import load_task
    from edgekd.io import write_json
    from edgekd.predict import load_predictor, score
    from edgekd.teacher import align_labels

    task = load_task(
        DataConfig(
            spec=data,
            text_column=text_column,
            label_column=label_column,
            text_pair_column=text_pair_column,
            max_dev=max_dev,
            train_split=train_split or "train",
            dev_split=dev_split,
        )
    )
    predictor = load_predictor(model)
    task = align_labels(task, predictor.label_names)
    result = score(predictor, task.dev.texts, task.dev.labels)
    result.pop("predictions")
    result["model"] = model
    if json_out:
        write_json(json_out, result)
    typer.echo(f"{model}: accuracy {result['accuracy']:.4f} on {result['n']} dev rows")


@app.command()
@user_errors
def export(
    student_dir: Path = typer.Argument(..., help="Student folder from `edgekd distill`."),
    out: Path = typer.Option(..., "--out", help="Folder for the ONNX models."),
    int8: str = typer.Option(
        "none", "--int8", help="Also write an int8 model: dynamic, static (QDQ) or none."
    ),
    preset: str | None = typer.Option(
        None, help="int8 target CPU: auto (this CPU's flags), avx2, avx512_vnni, arm64."
    ),
    device: str | None = typer.Option(
        None, help="Device name or spec: its int8 preset (unless --preset is given)."
    ),
    calibration: str | None = typer.Option(
        None, help="Static int8 calibration: minmax, entropy or percentile."
    ),
    calibration_samples: int | None = typer.Option(None, help="Training rows to calibrate on."),
    per_channel: bool | None = typer.Option(None, "--per-channel/--per-tensor"),
    reduce_range: bool | None = typer.Option(None, "--reduce-range/--full-range"),
    guard: bool = typer.Option(
        True, "--guard/--no-guard", help="Keep int8 only if it beats fp32 on this CPU."
    ),
    max_int8_drop: float | None = typer.Option(
        None, help="Accuracy repair: keep sensitive nodes in fp32 until int8 loses at most this."
    ),
    mobile: bool = typer.Option(
        False, "--mobile", help="Also write .ort (+ required operators) and a usability report."
    ),
    fixed_shape: str | None = typer.Option(
        None, help="BATCHxSEQUENCE, e.g. 1x64: a fixed-shape variant for NNAPI/CoreML."
    ),
    executorch: bool = typer.Option(
        False, "--executorch", help="Also write an ExecuTorch .pte (needs executorch)."
    ),
    data: str | None = typer.Option(
        None,
        "--data",
        help="Re-score on this data's dev split (default: the data the student was distilled on).",
    ),
    atol: float | None = typer.Option(None, help="Max |ONNX − PyTorch| logit difference."),
    opset: int | None = typer.Option(None),
) -> None:
    """Export a student to ONNX (validated against PyTorch), optionally int8."""
    from edgekd.config import ExportConfig, override
    from edgekd.exporters.run import run_export, student_data_config

    if int8 not in ("none", "dynamic", "static"):
        raise EdgeKDError(f"--int8 {int8!r}: use dynamic, static or none")
    if device is not None and preset is None:
        from edgekd.devices.base import load_spec

        preset = load_spec(device).int8_preset()
    cfg = override(
        ExportConfig(int8=None if int8 == "none" else int8, guard=guard),  # type: ignore[arg-type]
        atol=atol,
        opset=opset,
        preset=preset,
        calibration=calibration,
        calibration_samples=calibration_samples,
        per_channel=per_channel,
        reduce_range=reduce_range,
        max_int8_drop=max_int8_drop,
        mobile=mobile or None,
        fixed_shape=fixed_shape,
        executorch=executorch or None,
    )
    data_cfg = student_data_config(student_dir) if student_dir.is_dir() else None
    if data:
        from edgekd.config import DataConfig

        data_cfg = override(data_cfg or DataConfig(), spec=data)
    r = run_export(student_dir, out, cfg, data_cfg)
    for name, m in r["models"].items():
        typer.echo(
            f"{name}: {m['path']} {m['bytes']:,} B, accuracy {m['accuracy']:.4f}, "
            f"agreement with PyTorch {m['agreement']:.4f}"
        )
    typer.echo(
        f"validated at atol {r['atol']:.0e} (max diff "
        f"{r['models']['fp32']['max_abs_diff']:.1e}) → {out}"
    )


@app.command()
@user_errors
def trim(
    student_dir: Path = typer.Argument(..., help="BiLSTM student folder."),
    out: Path = typer.Option(..., "--out", help="Folder for the trimmed student."),
    min_freq: int = typer.Option(1, help="Keep tokens seen at least this often in training."),
    keep_top: int | None = typer.Option(None, help="Keep at most this many tokens."),
) -> None:
    """Drop embedding rows the training set does not use (they map to [UNK])."""
    from edgekd.data import load_task
    from edgekd.exporters.run import student_data_config
    from edgekd.io import write_json
    from edgekd.predict import StudentPredictor, score
    from edgekd.students.trim import trim_student
    from edgekd.teacher import align_labels

    data = student_data_config(student_dir)
    if data is None:
        raise EdgeKDError(f"{student_dir} has no config.yaml naming its data; trim a distilled one")
    before = StudentPredictor(student_dir)
    task = align_labels(load_task(data), before.label_names)
    report = trim_student(student_dir, out, task.train.texts, min_freq, keep_top)
    for name, path in (("before", student_dir), ("after", out)):
        acc = score(StudentPredictor(path), task.dev.texts, task.dev.labels)["accuracy"]
        report[f"dev_accuracy_{name}"] = acc
    write_json(out / "trim.json", report)
    typer.echo(
        f"vocabulary {report['vocab_before']:,} → {report['vocab_after']:,} tokens, "
        f"dev accuracy {report['dev_accuracy_before']:.4f} → {report['dev_accuracy_after']:.4f}"
        f" → {out}"
    )


@app.command()
@user_errors
def bundle(
    export_dir: Path = typer.Argument(..., help="Folder from `edgekd export`."),
    out: Path = typer.Option(..., "--out", help="Bundle folder; a .zip is written beside it."),
    model: str = typer.Option("auto", help="auto (int8 if kept, else fp32), int8 or fp32."),
) -> None:
    """Package the shipping model, tokenizer, labels and a sha256 manifest."""
    from edgekd.bundle import make_bundle

    if model not in ("auto", "int8", "fp32"):
        raise EdgeKDError(f"--model {model!r}: use auto, int8 or fp32")
    archive = make_bundle(export_dir, out, model)
    typer.echo(f"bundle → {out} and {archive}")


@app.command()
@user_errors
def predict(
    bundle_path: Path = typer.Argument(..., metavar="BUNDLE", help="Bundle folder or .zip."),
    texts: list[str] | None = typer.Argument(None, help="Texts to classify."),
    file: Path | None = typer.Option(
        None, "--file", help="One text per line; 'first<TAB>second' is a sentence pair."
    ),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per line."),
    threads: int = typer.Option(0, help="onnxruntime intra-op threads (0: all cores)."),
) -> None:
    """Classify texts with a bundle (onnxruntime + numpy only: no torch, no transformers)."""
    from edgekd.bundle import Bundle

    rows: list[Any] = list(texts or [])
    if file is not None:
        if not file.is_file():
            raise EdgeKDError(f"--file {file} does not exist; check the path")
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                first, tab, second = line.partition("\t")
                rows.append((first, second) if tab else line)
    if not rows:
        raise EdgeKDError("no texts given; pass them as arguments or with --file")
    results = Bundle(bundle_path, threads).predict(rows)
    for text, r in zip(rows, results, strict=True):
        if json_out:
            typer.echo(json.dumps({"text": text, **r}, ensure_ascii=False))
        else:
            probs = "  ".join(f"{k} {v:.3f}" for k, v in r["probabilities"].items())
            shown = text if isinstance(text, str) else " ⟂ ".join(text)
            typer.echo(f"{r['label']}\t{probs}\t{shown}")


@app.command()
@user_errors
def profile(
    model: Path = typer.Argument(..., help="ONNX file."),
    device: str = typer.Option("local-cpu", help="Device name or YAML spec path."),
    host: str | None = typer.Option(None, help="[USER@]HOST for an ssh device."),
    threads: int | None = typer.Option(None, help="Intra-op threads (default: the device's)."),
    runs: int = typer.Option(200, help="Timed runs in all, split into --trials."),
    trials: int = typer.Option(5, help="Trials; p50/p90 are medians of the trials' own."),
    warmup: int = typer.Option(20, help="Untimed runs first."),
    seq_len: str = typer.Option(
        "64", help="Tokens per synthetic input; a list (16,32,64,128) sweeps lengths."
    ),
    vs: Path | None = typer.Option(
        None, "--vs", help="Time this second model alternately with MODEL; report the ratio."
    ),
    processes: int = typer.Option(
        3, min=1, help="--vs: agent processes; the interval spans their disagreement."
    ),
    data: str | None = typer.Option(None, "--data", help="Dev texts for end-to-end timing."),
    text_column: str | None = TEXT_COL,
    text_pair_column: str | None = PAIR_COL,
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON."),
) -> None:
    """Latency percentiles, load time, memory and size at batch 1 on onnxruntime."""
    from edgekd.devices.agent import NOISY_SPREAD
    from edgekd.devices.profile import profile_model
    from edgekd.io import write_json

    try:
        lengths = [int(n) for n in seq_len.split(",")]
    except ValueError:
        raise EdgeKDError(f"--seq-len {seq_len!r}: give integers, e.g. 64 or 16,32,64") from None
    texts = None
    if data:
        from edgekd.config import DataConfig
        from edgekd.data import load_task

        texts = load_task(
            DataConfig(spec=data, text_column=text_column, text_pair_column=text_pair_column)
        ).dev.texts
    from edgekd.progress import track

    results = [
        profile_model(model, device, threads, runs, warmup, n, texts, trials, vs, host, processes)
        for n in (track(lengths, "profiling") if len(lengths) > 1 else lengths)
    ]
    if len(results) > 1:
        print_sweep(results)
    elif vs:
        print_vs(results[0])
    else:
        print_profile(results[0])
    for r in results:
        series = {Path(r["model"]).name: r, "tokenize+infer": r.get("end_to_end")}
        if vs:
            series[Path(r["vs"]["b"]["model"]).name] = r["vs"]["b"]
        for name, m in series.items():
            if m and m["noisy"]:
                typer.echo(
                    f"warning: {name} at seq {r['seq_len']}: trial medians spread "
                    f"{100 * m['trial_spread']:.0f}% (> {100 * NOISY_SPREAD:.0f}%), the "
                    "machine was busy; rerun on an idle machine or raise --runs",
                    err=True,
                )
    if json_out:
        write_json(json_out, results[0] if len(results) == 1 else {"sweep": results})


def print_profile(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{Path(r['model']).name} on {r['device']} ({r['cpu']}), "
        f"{r['threads']} thread(s), batch 1, seq {r['seq_len']}, {r['trials']} trials"
    )
    for col in ("", "p50 ms", "p90 ms", "p99 ms", "IQR ms", "spread", "per s"):
        table.add_column(col, justify="right")
    rows = [("infer", r)]
    if "end_to_end" in r:
        rows.append(("tokenize+infer", r["end_to_end"]))
    for name, m in rows:
        table.add_row(
            name,
            *(f"{m[k]:.3f}" for k in ("p50_ms", "p90_ms", "p99_ms", "iqr_ms")),
            f"{100 * m['trial_spread']:.1f}%",
            f"{m['throughput_per_s']:.0f}",
        )
    Console().print(table)
    typer.echo(
        f"load {r['load_ms']:.1f} ms, peak RSS {r['peak_rss_mb']:.1f} MB, "
        f"file {r['bytes']:,} B, onnxruntime {r['onnxruntime']}"
    )


def print_sweep(results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    r0 = results[0]
    table = Table(title=f"{Path(r0['model']).name} on {r0['device']}, {r0['threads']} thread(s)")
    for col in ("seq len", "p50 ms", "p90 ms", "IQR ms", "spread", "e2e p50 ms"):
        table.add_column(col, justify="right")
    for r in results:
        e2e = r.get("end_to_end", {}).get("p50_ms")
        table.add_row(
            str(r["seq_len"]),
            *(f"{r[k]:.3f}" for k in ("p50_ms", "p90_ms", "iqr_ms")),
            f"{100 * r['trial_spread']:.1f}%",
            "—" if e2e is None else f"{e2e:.3f}",
        )
    Console().print(table)


def print_vs(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    b = r["vs"]["b"]
    table = Table(
        title=f"alternating trials on {r['device']}, {r['threads']} thread(s), "
        f"seq {r['seq_len']}, {r['trials']} trials each × {r['vs'].get('processes', 1)} "
        "process(es)"
    )
    for col in ("model", "bytes", "p50 ms", "p90 ms", "IQR ms", "load ms"):
        table.add_column(col, justify="right")
    for m in (r, b):
        table.add_row(
            Path(m["model"]).name,
            f"{m['bytes']:,}",
            *(f"{m[k]:.3f}" for k in ("p50_ms", "p90_ms", "iqr_ms", "load_ms")),
        )
    Console().print(table)
    ratio = r["vs"]["ratio_b_over_a"]
    lo, hi = r["vs"]["ratio_ci95"]
    a_name, b_name = Path(r["model"]).name, Path(b["model"]).name
    typer.echo(
        f"{b_name} / {a_name} latency: {ratio:.2f}× (95% CI {lo:.2f}–{hi:.2f}); "
        + (
            f"{a_name} is faster"
            if lo > 1
            else f"{b_name} is faster"
            if hi < 1
            else "no clear difference"
        )
    )


@app.command()
@user_errors
def check(
    artifacts: list[Path] = typer.Argument(..., help="Artifact folders (export, profiles)."),
    budget: Path = typer.Option(..., "--budget", help="Budget YAML."),
    device: str | None = typer.Option(
        None, "--device", help="Apply this device's limits from the budget's `devices:`."
    ),
    json_out: str | None = typer.Option(
        None, "--json", help="Write results as JSON ('-': stdout)."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML, one case per limit."),
    github_summary: bool = typer.Option(
        False, "--github-summary", help="Append a Markdown table to $GITHUB_STEP_SUMMARY."
    ),
    bench_json: Path | None = typer.Option(
        None, "--bench-json", help="Write github-action-benchmark customSmallerIsBetter JSON."
    ),
) -> None:
    """Check measured metrics against a budget: exit 0 if all hold, 1 if any fails."""
    import os

    from edgekd.budget import (
        bench_entries,
        collect_metrics,
        evaluate,
        junit_xml,
        load_budget,
        markdown_summary,
    )
    from edgekd.io import atomic_write_text

    full = load_budget(budget)
    defaults = None
    if device and device not in full.devices:
        from edgekd.devices.base import load_spec

        defaults = load_spec(device).budget  # the device spec's own default limits
    b = full.for_device(device, defaults)
    results = evaluate(b, collect_metrics(artifacts, b))
    failed = [r for r in results if not r.passed]
    title = f"edgekd budget: {b.model} model" + (f" on {device}" if device else "")
    payload = {
        "budget": str(budget),
        "model": b.model,
        "device": device,
        "passed": not failed,
        "limits": [r.to_dict() for r in results],
    }
    if junit:
        atomic_write_text(junit, junit_xml(results, title))
    if bench_json:
        atomic_write_text(bench_json, json.dumps(bench_entries(results, device or b.model)) + "\n")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if github_summary and summary:
        with open(summary, "a", encoding="utf-8") as f:  # the runner's file: append only
            f.write(markdown_summary(results, title))
    if json_out == "-":
        typer.echo(json.dumps(payload, indent=2))
    else:
        print_check(results, title)
        if json_out:
            from edgekd.io import write_json

            write_json(json_out, payload)
    raise typer.Exit(1 if failed else 0)


def print_check(results: list[Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("limit", "threshold", "measured", "status"):
        table.add_column(col)
    for r in results:
        style = "green" if r.passed else "bold red"
        table.add_row(
            r.limit,
            r.threshold_text(),
            r.measured_text(),
            f"[{style}]{r.status}[/]",
        )
    Console().print(table)


@app.command("run")
@user_errors
def run_(
    recipe: Path = typer.Argument(..., help="Recipe YAML (examples/recipe-*.yaml)."),
    force: bool = typer.Option(False, "--force", help="Re-run every stage, cache or not."),
    set_: list[str] | None = typer.Option(
        None, "--set", "-s", help="Override a field: distill.epochs=2, data.max_train=500."
    ),
) -> None:
    """Run a recipe: teacher → distill → export → profile → check → report, cached by stage."""
    from edgekd.recipe import run_recipe

    raise typer.Exit(run_recipe(recipe, force, parse_options(set_, "--set")))


@app.command()
@user_errors
def report(
    run_dir: Path = typer.Argument(..., help="A run folder (edgekd run, quickstart, ...)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for the page; RUN_DIR/report."),
) -> None:
    """Self-contained HTML page + PNG plots: accuracy vs latency vs size, budgets."""
    from edgekd.report import write_report

    page = write_report(run_dir, out)
    typer.echo(f"wrote {page}")


@app.command()
@user_errors
def devices(
    show: str | None = typer.Option(
        None, "--show", help="Print this spec's YAML (copy it to make your own)."
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
        where = spec.host or spec.serial or ("set host" if spec.runner == "ssh" else "this machine")
        if spec.runner == "adb" and not spec.serial:
            where = "the one attached phone"
        typer.echo(
            f"{name}: runner={spec.runner} ({where}) threads={spec.threads} "
            f"preset={spec.int8_preset()} — {spec.description}"
        )


@app.command()
@user_errors
def quickstart(
    data: str = typer.Option("glue/sst2", "--data", help="HF dataset or local copy."),
    teacher: str | None = typer.Option(
        None, "--teacher", help="Fine-tuned classifier; default: fine-tune --base first."
    ),
    base: str | None = typer.Option(None, help="Encoder to fine-tune (default: packaged MiniLM)."),
    out: Path = typer.Option(Path("runs/quickstart"), "--out", help="Folder for every stage."),
    max_train: int = typer.Option(
        100_000, help="Training rows for the student (a seeded subsample above this)."
    ),
    teacher_max_train: int = typer.Option(4_000, help="Rows to fine-tune a teacher on."),
    epochs: int = typer.Option(4, help="Student epochs."),
    seed: int = typer.Option(0),
) -> None:
    """Teacher → BiLSTM → int8 ONNX → profile → check, ending in one table."""
    from edgekd.quickstart import run_quickstart

    code = run_quickstart(data, teacher, out, max_train, teacher_max_train, epochs, seed, base)
    raise typer.Exit(code)
