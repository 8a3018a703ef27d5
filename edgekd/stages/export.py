"""The export stage: a student folder in; validated ONNX (fp32, and int8 when asked),
re-scored on real dev rows, plus any other registered format, out.

The formats are the `FORMATS` registry, run in its order (onnx first: every other
format starts from the fp32 graph); each adds its entries to `export.json`. The
student's own exporter (`Student.exporter`) writes the fp32 graph.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.artifacts import (
    CONFIG,
    MODEL_FILES,
    DevPredictions,
    DistillMetrics,
    ExportReport,
    StudentMeta,
)
from edgekd.budget import Budget, load_budget
from edgekd.config import DataConfig, DistillConfig, ExportConfig, load_yaml, save_config, validate
from edgekd.data import align_labels, load_task
from edgekd.errors import EdgeKDError
from edgekd.exporters.base import ExportJob
from edgekd.io import atomic_dir, check_not_input, check_output, tree_bytes
from edgekd.progress import console
from edgekd.registry import FORMATS, STUDENTS, resolve
from edgekd.students.predict import OnnxPredictor, StudentPredictor, score


def student_data_config(student_dir: Path) -> DataConfig | None:
    """The data a student was distilled on, from its resolved config.yaml."""
    path = student_dir / CONFIG
    if not path.is_file():
        return None
    return validate(DistillConfig, load_yaml(path), str(path)).data


def rescore_data(student_dir: Path, spec: str | None) -> DataConfig | None:
    """The data to re-score on: `spec` read as the student's own data was (its columns
    and splits), else the student's own; None when neither is known."""
    data = student_data_config(student_dir) if student_dir.is_dir() else None
    if spec is None:
        return data
    return (data or DataConfig()).model_copy(update={"spec": spec})


def for_device(
    cfg: ExportConfig, device: str | None, preset_given: bool, budget_given: bool
) -> ExportConfig:
    """`cfg` for the target `device` (`edgekd export --device`): its spec's int8 preset,
    over the config's unless a preset was typed (`preset_given`). Without int8 a device
    only names the budget section an exit threshold holds (`budget_given`)."""
    if device is None or (not cfg.int8 and budget_given):
        return cfg
    if not cfg.int8:
        raise EdgeKDError("--device only applies to int8 models; add --int8")
    if preset_given:
        return cfg
    from edgekd.devices.base import load_spec

    return cfg.model_copy(update={"preset": load_spec(device).int8_preset()})


def exit_terms(
    budget: Budget | str | Path, device: str | None = None, required: bool = True
) -> dict[str, Any]:
    """What an early-exit student's threshold must hold, from a budget (a model or its
    YAML; its `device` entry where it has one): its min_agreement and min_accuracy, as
    export fields. `required`: a budget that sets neither is refused (`edgekd export
    --budget` asks for them; a recipe's budget may gate other things)."""
    limits = budget if isinstance(budget, Budget) else load_budget(budget)
    limits = limits.for_device(device) if device in limits.devices else limits
    if required and limits.min_agreement is None and limits.min_accuracy is None:
        named = "the budget" if isinstance(budget, Budget) else budget
        raise EdgeKDError(
            f"{named} sets neither min_accuracy nor min_agreement for an exit threshold to "
            "hold; add one, or pass --exit-threshold"
        )
    terms: dict[str, Any] = {"exit_min_accuracy": limits.min_accuracy}
    if limits.min_agreement is not None:
        terms["exit_min_agreement"] = limits.min_agreement
    return terms


def rows_sha256(texts: list[Any], labels: list[int]) -> str:
    """Which dev rows predictions were made on: their texts and gold labels, in order.
    Two exports with the same digest can be compared row by row."""
    import hashlib

    from edgekd.distill.cache import hash_texts

    h = hashlib.sha256()
    hash_texts(h, texts)
    h.update(",".join(str(int(y)) for y in labels).encode())
    return h.hexdigest()


def exit_threshold(
    cfg: ExportConfig, model: Any, tok: Any, student_dir: Path, task: Any
) -> dict[str, Any]:
    """An early-exit student's shipped threshold: the configured one, else the fastest
    that keeps `exit_min_agreement` (at its 95% lower bound) and `exit_min_accuracy` on
    the rows distill held out to choose its epoch: dev, which `check` judges, chooses
    nothing."""
    from edgekd.data import carve_selection
    from edgekd.exporters.early_exit import (
        THRESHOLDS,
        choose_threshold,
        exit_points,
        layer_outputs,
    )

    out: dict[str, Any] = {"layers": model.config.layers}
    if cfg.exit_threshold is not None:
        return {**out, "threshold": cfg.exit_threshold, "chosen_by": "given (exit_threshold)"}
    path = student_dir / CONFIG
    if not path.is_file():
        raise EdgeKDError(
            f"{student_dir} has no {CONFIG} to find the rows distill held out, on which the "
            "exit threshold is chosen; pass --exit-threshold"
        )
    distilled = validate(DistillConfig, load_yaml(path), str(path))
    _, select, _ = carve_selection(task.train, distilled.selection_rows, distilled.seed)
    if not len(select):
        raise EdgeKDError(
            "the student was distilled with no held-out selection rows to choose an exit "
            "threshold on; pass --exit-threshold"
        )
    logits, uncertain = layer_outputs(model, tok, select.texts)
    points = exit_points(logits, uncertain, np.array(select.labels), THRESHOLDS)
    threshold, rule = choose_threshold(
        points, len(select), cfg.exit_min_agreement, cfg.exit_min_accuracy
    )
    return {
        **out,
        "threshold": threshold,
        "chosen_by": rule,
        "selection": points,
    }


def export(
    cfg: ExportConfig,
    student_dir: str | Path,
    out_dir: str | Path,
    data: DataConfig | None = None,
    overwrite: bool = False,
) -> ExportReport:
    """Export, validate, quantize and re-score `student_dir` into `out_dir`; write
    `export.json` and return it. `data`: re-score on its dev split (default: the
    data the student was distilled on)."""
    check_output(out_dir, overwrite)
    student_dir = Path(student_dir)
    check_not_input(out_dir, [student_dir, data.spec if data else None])
    reference = StudentPredictor(student_dir)
    model, tok = reference.model, reference.tokenizer
    listed = {c.name: FORMATS.options(c, f"formats.{c.name}") for c in cfg.formats}
    formats = [FORMATS.get(name)(listed.get(name)) for name in FORMATS.names_in_order()]
    wanted = [f for f in formats if f.wanted(cfg)]
    for f in wanted:  # before any data loads: a format the student cannot take
        if f.needs is not None and f.needs not in model.capabilities:
            able = [n for n in STUDENTS.names() if f.needs in STUDENTS.get(n).capabilities]
            raise EdgeKDError(
                f"the {f.name} export needs a student with {f.needs!r}; {model.name!r} has "
                f"none (students that do: {', '.join(able) or 'none'})"
            )
    if cfg.exit_threshold is not None and "early_exit" not in model.capabilities:
        # A threshold that cannot apply would be silently ignored: the user asked for
        # a speed-up this student cannot give.
        raise EdgeKDError(
            "exit_threshold applies only to a student distilled with early exits "
            f"(distill --student bert --early-exit); {model.name!r} has none: drop "
            "--exit-threshold"
        )
    data = data or student_data_config(student_dir)
    if data is None:
        raise EdgeKDError(f"{student_dir} has no {CONFIG} naming its data; pass --data")
    check_not_input(out_dir, [data.spec])  # the data the student's config names
    task = align_labels(load_task(data), reference.label_names)
    # Real dev rows in the validation too: dummy ids alone would miss e.g. long texts.
    check = [tok(task.dev.texts[i : i + 16]) for i in range(0, min(len(task.dev), 64), 16)]
    exporter = resolve(model.exporter)(atol=cfg.atol, opset=cfg.opset)
    report: dict = {"student": str(student_dir), "atol": cfg.atol, "models": {}}
    early = None
    if "early_exit" in model.capabilities:
        early = exit_threshold(cfg, model, tok, student_dir, task)
        exporter.default_threshold = early["threshold"]
        console.print(f"early exit: threshold {early['threshold']:g} ({early['chosen_by']})")
    if DistillMetrics.path(student_dir).is_file():
        distilled = DistillMetrics.read(student_dir)
        report["teacher_accuracy"] = distilled.teacher_accuracy
        # Scored on the dev rows distill read: comparable only when they are these.
        if distilled.tfidf is not None and distilled.tfidf.n_dev == len(task.dev):
            report["tfidf_accuracy"] = distilled.tfidf.accuracy

    with atomic_dir(out_dir, overwrite) as tmp:
        t = time.perf_counter()
        tok.save(tmp)
        shutil.copy(StudentMeta.path(student_dir), StudentMeta.path(tmp))
        ref = score(reference, task.dev.texts, task.dev.labels)
        report["student_accuracy"] = ref["accuracy"]
        job = ExportJob(
            cfg=cfg,
            folder=tmp,
            model=model,
            tokenizer=tok,
            exporter=exporter,
            task=task,
            check=check,
            dev_score=lambda path: score(
                OnnxPredictor(path), task.dev.texts, task.dev.labels, reference=ref["predictions"]
            ),
            report=report,
        )
        for f in wanted:
            f.write(job)
        if exporter.static_source is not None:
            exporter.static_source.unlink(missing_ok=True)
        report["formats"] = [f.name for f in wanted]
        report["seconds_export"] = round(time.perf_counter() - t, 2)
        predictions: dict[str, list[int]] = {}
        for name, entry in report["models"].items():
            path = tmp / MODEL_FILES[name]
            result = job.dev_score(path)
            predictions[name] = result["predictions"].tolist()
            entry.update(
                path=path.name,
                bytes=tree_bytes(path),
                accuracy=result["accuracy"],
                mcc=result["mcc"],
                macro_f1=result["macro_f1"],
                agreement=result["agreement"],
            )
        report["n_dev"] = len(task.dev)
        if early is not None:
            from edgekd.exporters.early_exit import THRESHOLDS, onnx_exit_points

            gold = np.array(task.dev.labels)
            early["dev"] = {}
            for name in report["models"]:
                early["dev"][name] = onnx_exit_points(
                    tmp / MODEL_FILES[name],
                    tok,
                    task.dev.texts,
                    gold,
                    ref["predictions"],
                    THRESHOLDS,
                )
            early["ties"] = exporter.ties
            report["early_exit"] = early
        if "int8" in report["models"]:
            report["int8_drop"] = (
                report["models"]["fp32"]["accuracy"] - report["models"]["int8"]["accuracy"]
            )
        result = ExportReport.model_validate(report)
        DevPredictions(
            rows_sha256=rows_sha256(task.dev.texts, task.dev.labels),
            labels=[int(y) for y in task.dev.labels],
            reference=ref["predictions"].tolist(),
            models=predictions,  # type: ignore[arg-type]  # keys are the models' kinds
        ).write(tmp)
        save_config(cfg, tmp / CONFIG)
        result.write(tmp)
    return result
