"""ONNX export of the small-BERT student through optimum's exporter."""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekd.exporters.base import Exporter


class BertExporter(Exporter):
    input_names = ("input_ids", "attention_mask", "token_type_ids")
    dynamic_axes: ClassVar[dict[str, dict[int, str]]] = {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "sequence_length"},
        "token_type_ids": {0: "batch_size", 1: "sequence_length"},
        "logits": {0: "batch_size"},
    }

    def dummy_inputs(self, model: Any) -> dict[str, np.ndarray]:
        # Rows of lengths 7, 4 and 2 ([CLS] x [SEP] is the shortest real input).
        rng = np.random.default_rng(0)
        ids = rng.integers(5, model.vocab_size, size=(3, 7), dtype=np.int64)
        mask = np.ones((3, 7), dtype=np.int64)
        for row, length in ((1, 4), (2, 2)):
            mask[row, length:] = 0
            ids[row, length:] = 0
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}

    def _export(self, model: Any, path: Path) -> None:
        from optimum.exporters.onnx import main_export

        # The student's state dict is an HF checkpoint: save it as one and let optimum
        # export it (its own validation is off: validate() below checks against the
        # student at our atol, on real dev rows too).
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf = model.hf_classifier()
            hf.save_pretrained(Path(tmp) / "hf", safe_serialization=True)
            main_export(
                str(Path(tmp) / "hf"),
                Path(tmp) / "onnx",
                task="text-classification",
                # optimum's minimum for BERT is opset 18 (LayerNormalization as one op).
                opset=max(self.opset, 18),
                dtype="fp32",
                do_validation=False,
            )
            # Static QDQ calibrates the unfused graph (onnxruntime fuses QDQ groups when
            # it loads the model); dynamic int8 and fp32 use the fused one.
            self.static_source = path.with_name(f".{path.stem}.unfused.onnx")
            shutil.copy(Path(tmp) / "onnx" / "model.onnx", self.static_source)
            if model.fuses:
                self.fusions = fuse_transformer(
                    Path(tmp) / "onnx" / "model.onnx", path, model.hf_config
                )
            else:
                shutil.copy(Path(tmp) / "onnx" / "model.onnx", path)

    def check_feed(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if "token_type_ids" not in inputs:
            inputs = {**inputs, "token_type_ids": np.zeros_like(inputs["input_ids"])}
        return inputs


def fuse_transformer(src: Path, dst: Path, config: Any) -> dict[str, int]:
    """onnxruntime's transformer optimizer: attention, skip+LayerNorm and bias+GELU
    fusions, done before quantization so int8 sees the fused ops
    (Attention becomes QAttention). Python fusions only (opt_level 0): the graph stays
    portable to any onnxruntime build. validate() then checks it against PyTorch."""
    import contextlib
    import io
    import logging

    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    # No EmbedLayerNormalization: that fused op keeps the word table in fp32 (30,522 ×
    # 384 × 4 B = 47 MB for MiniLM), where a plain Gather becomes an 8-bit table in int8.
    options.enable_embed_layer_norm = False

    logger = logging.getLogger("onnxruntime.transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            optimized = optimize_model(
                str(src),
                model_type="bert",
                num_heads=config.num_attention_heads,
                hidden_size=config.hidden_size,
                optimization_options=options,
                opt_level=0,
            )
    finally:
        logger.setLevel(level)
    optimized.save_model_to_file(str(dst))
    return {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
