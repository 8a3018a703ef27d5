"""The eval stage: any model (teacher, student folder, ONNX file) scored on dev."""

from __future__ import annotations

from pathlib import Path

from edgekd.artifacts import EvalResult
from edgekd.config import DataConfig
from edgekd.data import align_labels, load_task
from edgekd.distill.teacher import load_predictor
from edgekd.io import check_not_input
from edgekd.students.predict import score


def evaluate(data: DataConfig, model: str, out: str | Path | None = None) -> EvalResult:
    """Accuracy of `model` on `data`'s dev split; with `out`, also written there."""
    if out is not None:  # an eval.json beside the model is fine; over it or the data, not
        check_not_input(EvalResult.path(out), [model, data.spec], "--json", nested_ok=True)
    task = load_task(data)
    predictor = load_predictor(model)
    task = align_labels(task, predictor.label_names)
    result = score(predictor, task.dev.texts, task.dev.labels)
    out_result = EvalResult(model=str(model), accuracy=result["accuracy"], n=result["n"])
    if out is not None:
        out_result.write(out)
    return out_result
