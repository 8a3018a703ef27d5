"""`edgekd export`: student folder → validated fp32 ONNX (+ int8), both re-scored on dev."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from edgekd.config import DataConfig, DistillConfig, ExportConfig, load_yaml, save_config, validate
from edgekd.data import load_task
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_dir, read_json, tree_bytes, write_json
from edgekd.registry import EXPORTERS, QUANTIZERS
from edgekd.students import STUDENT_FILE

FP32, INT8 = "model.onnx", "model.int8.onnx"


def student_data_config(student_dir: Path) -> DataConfig | None:
    """The data a student was distilled on, from its resolved config.yaml."""
    path = student_dir / "config.yaml"
    if not path.is_file():
        return None
    return validate(DistillConfig, load_yaml(path), str(path)).data


def run_export(
    student_dir: str | Path, out_dir: str | Path, cfg: ExportConfig, data: DataConfig | None = None
) -> dict[str, Any]:
    """Export, validate, quantize and re-score; write `export.json` and return it."""
    from edgekd.predict import OnnxPredictor, StudentPredictor, score
    from edgekd.teacher import align_labels

    student_dir = Path(student_dir)
    reference = StudentPredictor(student_dir)
    model, tok = reference.model, reference.tokenizer
    data = data or student_data_config(student_dir)
    if data is None:
        raise EdgeKDError(f"{student_dir} has no config.yaml naming its data; pass --data")
    task = align_labels(load_task(data), reference.label_names)
    # Real dev rows in the validation too: dummy ids alone would miss e.g. long texts.
    check = [tok(task.dev.texts[i : i + 16]) for i in range(0, min(len(task.dev), 64), 16)]
    exporter = EXPORTERS.get(model.name)(atol=cfg.atol, opset=cfg.opset)

    report: dict[str, Any] = {"student": str(student_dir), "atol": cfg.atol, "models": {}}
    metrics_path = student_dir / "metrics.json"
    if metrics_path.is_file():
        report["teacher_accuracy"] = read_json(metrics_path).get("teacher_accuracy")
    with atomic_dir(out_dir) as tmp:
        t = time.perf_counter()
        max_diff = exporter.export(model, tmp / FP32, check)
        report["models"]["fp32"] = {"max_abs_diff": max_diff}
        if cfg.int8:
            QUANTIZERS.get(cfg.quantizer)().quantize(tmp / FP32, tmp / INT8)
            report["models"]["int8"] = {"quantizer": cfg.quantizer}
        report["seconds_export"] = round(time.perf_counter() - t, 2)
        tok.save(tmp)
        shutil.copy(student_dir / STUDENT_FILE, tmp / STUDENT_FILE)

        ref = score(reference, task.dev.texts, task.dev.labels)
        report["student_accuracy"] = ref["accuracy"]
        for name, entry in report["models"].items():
            path = tmp / (FP32 if name == "fp32" else INT8)
            result = score(
                OnnxPredictor(path), task.dev.texts, task.dev.labels, reference=ref["predictions"]
            )
            entry.update(
                {
                    "path": path.name,
                    "bytes": tree_bytes(path),
                    "accuracy": result["accuracy"],
                    "agreement": result["agreement"],
                }
            )
        report["n_dev"] = len(task.dev)
        if "int8" in report["models"]:
            report["int8_drop"] = (
                report["models"]["fp32"]["accuracy"] - report["models"]["int8"]["accuracy"]
            )
        save_config(cfg, tmp / "config.yaml")
        write_json(tmp / "export.json", report)
    return report
