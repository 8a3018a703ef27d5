"""The `Exporter` abstraction: declared inputs and dynamic axes, export, then validate.

Every export ends in `validate()`: the ONNX model and the PyTorch model see the
same inputs and their logits must agree within `atol`, or the export fails and
nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import BaseModel

from edgekd.artifacts import MODEL_FILES
from edgekd.config import ExportConfig
from edgekd.errors import EdgeKDError
from edgekd.registry import NoOptions


class Exporter:
    """Turns one kind of model into ONNX; subclasses declare its graph signature."""

    output_names: ClassVar[tuple[str, ...]] = ("logits",)

    def __init__(self, atol: float = 1e-4, opset: int = 17) -> None:
        self.atol = atol
        self.opset = opset
        # A graph static int8 should start from instead of the exported one (None: that).
        self.static_source: Path | None = None
        self.fusions: dict[str, int] = {}  # graph fusions the export applied, by op

    def dummy_inputs(self, model: Any) -> dict[str, np.ndarray]:
        """Inputs that exercise every dynamic axis (several rows, several lengths)."""
        raise NotImplementedError

    def torch_logits(self, model: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
        import torch

        with torch.inference_mode():
            return model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).float().numpy()

    def export(
        self, model: Any, path: Path, check_inputs: list[dict[str, np.ndarray]] | None = None
    ) -> float:
        """Write `path` and return the max |ONNX − PyTorch| over all check inputs."""
        self._export(model, path)
        return self.validate(model, path, check_inputs)

    def _export(self, model: Any, path: Path) -> None:
        raise NotImplementedError

    def check_feed(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Tokenizer output → the graph's inputs (adds what the tokenizer lacks)."""
        return inputs

    def validate(
        self, model: Any, path: Path, check_inputs: list[dict[str, np.ndarray]] | None = None
    ) -> float:
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        worst = 0.0
        for raw in [self.dummy_inputs(model), *(check_inputs or [])]:
            inputs = self.check_feed(raw)
            got = session.run(None, inputs)[0]
            want = self.torch_logits(model, inputs)
            if got.shape != want.shape:
                raise EdgeKDError(
                    f"ONNX output shape {got.shape} != PyTorch {want.shape}; "
                    "this is an exporter bug, please report it"
                )
            worst = max(worst, float(np.abs(got - want).max()))
        if worst > self.atol:
            raise EdgeKDError(
                f"ONNX logits differ from PyTorch by {worst:.2e} > atol {self.atol:.0e}; "
                "raise --atol only if that difference is acceptable"
            )
        return worst


def pad_inputs(feed: dict[str, np.ndarray], batch: int, seq: int) -> dict[str, np.ndarray]:
    """Cut or zero-pad every 2-D input to batch × seq (a fixed-shape graph's inputs).

    Rows added by padding get one real token, so no row is empty.
    """
    out = {}
    for k, v in feed.items():
        v = v[:batch, :seq]
        out[k] = np.pad(v, ((0, batch - v.shape[0]), (0, seq - v.shape[1])))
    if "attention_mask" in out:
        out["attention_mask"][:, 0] = 1
    return out


# ------------------------------------------------------------------ export formats


@dataclass
class ExportJob:
    """What every export format sees: the student, its exporter, real dev rows and the
    export report being built (formats add their entries to it)."""

    cfg: ExportConfig
    folder: Path  # the export's temp folder: formats write here, beside model.onnx
    model: Any  # the PyTorch student
    tokenizer: Any
    exporter: Exporter
    task: Any  # TaskData, labels aligned to the student's
    check: list[dict[str, np.ndarray]]  # real dev rows, tokenized, for validation
    dev_score: Callable[[Path], dict[str, Any]]  # ONNX file → accuracy, agreement
    report: dict[str, Any] = field(default_factory=dict)


class ExportFormat:
    """One output format of `edgekd export` (registry `FORMATS`, run in its order).

    A format is asked for as `{name, options}` in `export.formats`, its options typed
    by its `Config` and validated when the export config is read. The built-in four
    keep the switches users know them by (`--int8`, `--mobile`, `--executorch`)."""

    name: ClassVar[str]
    # The student capability this format needs (Student.capabilities), if any.
    needs: ClassVar[str | None] = None
    Config: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Config()

    def wanted(self, cfg: ExportConfig) -> bool:
        return any(c.name == self.name for c in cfg.formats)

    def write(self, job: ExportJob) -> None:
        raise NotImplementedError


class OnnxFormat(ExportFormat):
    """fp32 ONNX through the student's exporter, validated against PyTorch: always
    first, every other format starts from it."""

    name: ClassVar[str] = "onnx"

    def wanted(self, cfg: ExportConfig) -> bool:
        return True

    def write(self, job: ExportJob) -> None:
        max_diff = job.exporter.export(job.model, job.folder / MODEL_FILES["fp32"], job.check)
        job.report["models"]["fp32"] = {"max_abs_diff": max_diff}
        if job.exporter.fusions:
            job.report["models"]["fp32"]["fusions"] = job.exporter.fusions
