"""The teacher as ONNX: fp32 through optimum's exporter (which validates against PyTorch),
and its dynamic int8 copy: the fast labelers of distillation (`teacher_runtime`)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.artifacts import MODEL_FILES
from edgekd.config import DistillConfig
from edgekd.io import atomic_dir
from edgekd.progress import console
from edgekd.students.predict import OnnxPredictor
from edgekd.threads import available_cores


def export_teacher(name_or_path: str, out_dir: str | Path, opset: int | None = None) -> Path:
    """Write an optimum ONNX folder (model.onnx, config, tokenizer); return model.onnx.

    `opset=None` lets optimum pick the opset it recommends for the architecture.
    """
    from optimum.exporters.onnx import main_export

    with atomic_dir(out_dir) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # dtype fp32 whatever the stored weights: a checkpoint saved in fp16 (the
        # reference teacher is) would otherwise export an fp16 graph slow on CPUs.
        main_export(name_or_path, tmp, task="text-classification", opset=opset, dtype="fp32")
    return Path(out_dir) / MODEL_FILES["fp32"]


class OnnxLabelers:
    """The teacher as fp32 and dynamic int8 ONNX, exported once per teacher (by its
    fingerprint, beside the logit cache) on first use: a run whose logits are all
    cached exports nothing. Each runs one single-thread session per available core."""

    def __init__(self, cfg: DistillConfig, name: str, fingerprint: str) -> None:
        from edgekd.distill.labeling import cache_root

        self.cfg, self.name = cfg, name
        self.folder = cache_root(cfg) / "teachers" / fingerprint[:32]
        self.predictors: dict[str, OnnxPredictor] = {}

    def predictor(self, kind: str) -> OnnxPredictor:
        if kind not in self.predictors:
            from edgekd.exporters.quantize import DynamicInt8Quantizer

            fp32, int8 = self.folder / MODEL_FILES["fp32"], self.folder / MODEL_FILES["int8"]
            if not fp32.is_file():
                with console.status(f"exporting {self.name} to ONNX for labelling"):
                    export_teacher(self.name, self.folder)
            if kind == "int8" and not int8.is_file():
                tmp = self.folder / f".model.int8.onnx.tmp-{os.getpid()}"
                DynamicInt8Quantizer().quantize(fp32, tmp)
                os.replace(tmp, int8)
            self.predictors[kind] = OnnxPredictor(
                self.folder / MODEL_FILES[kind],
                batch_size=self.cfg.teacher_batch_size,
                max_length=self.cfg.teacher_max_length,
                workers=available_cores(),
            )
        return self.predictors[kind]

    def fp32(self, texts: list[Any], what: str) -> np.ndarray:
        return self.predictor("fp32").logits(texts, what)

    def int8(self, texts: list[Any], what: str) -> np.ndarray:
        return self.predictor("int8").logits(texts, what)
