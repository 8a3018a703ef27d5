"""The teacher as ONNX: fp32 through optimum's exporter (which validates against PyTorch),
and its dynamic int8 copy as a faster labeller for distillation (`teacher_runtime: onnx-int8`)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from edgekd.artifacts import MODEL_FILES
from edgekd.config import DistillConfig
from edgekd.distill.labeling import Labeler
from edgekd.io import atomic_dir
from edgekd.progress import console


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


def int8_labeler(cfg: DistillConfig, name: str, fingerprint: str) -> Labeler:
    """The teacher exported to ONNX and dynamically quantized, built once per teacher."""
    from edgekd.distill.labeling import cache_dir
    from edgekd.exporters.quantize import DynamicInt8Quantizer
    from edgekd.students.predict import OnnxPredictor

    folder = cache_dir(cfg).parent / "teachers" / fingerprint[:32]
    if not (folder / "model.int8.onnx").is_file():
        with console.status(f"exporting {name} to int8 ONNX for labelling"):
            export_teacher(name, folder)
            tmp = folder / f".model.int8.onnx.tmp-{os.getpid()}"
            DynamicInt8Quantizer().quantize(folder / "model.onnx", tmp)
            os.replace(tmp, folder / "model.int8.onnx")
    predictor = OnnxPredictor(
        folder / "model.int8.onnx",
        batch_size=cfg.teacher_batch_size,
        max_length=cfg.teacher_max_length,
    )
    return lambda texts, what: predictor.logits(texts, what)
