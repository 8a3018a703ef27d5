"""Teacher → fp32 ONNX through optimum's exporter (which validates against PyTorch)."""

from __future__ import annotations

import warnings
from pathlib import Path

from edgekd.io import atomic_dir


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
    return Path(out_dir) / "model.onnx"
