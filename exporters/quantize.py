"""int8 quantization presets for onnxruntime.

A preset is named for what it targets and says why it picks its types.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import ClassVar


class Quantizer:
    name: ClassVar[str]

    def quantize(self, src: Path, dst: Path) -> None:
        raise NotImplementedError


class DynamicInt8Quantizer(Quantizer):
    """Dynamic int8 for any x86-64 or arm64 CPU (weights int8 ahead of time,
    activations quantized per batch at run time).

    Why these types: int8 weights (QInt8, symmetric) with uint8 activations is the
    pairing onnxruntime's MatMulInteger/DynamicQuantizeLSTM kernels are fastest on
    for both AVX2 (u8×s8 via vpmaddubsw) and ARM64 (sdot/udot). Per-tensor scales:
    per-channel buys little for LSTM/MLP weights and is not supported by
    DynamicQuantizeLSTM. The embedding table becomes an 8-bit Gather (onnxruntime
    stores it as uint8 with a zero point), cutting the largest tensor 4×.
    """

    name = "dynamic"
    op_types: ClassVar[list[str]] = ["LSTM", "MatMul", "Gemm", "Gather", "Attention"]

    def quantize(self, src: Path, dst: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # onnxruntime logs a generic "consider pre-processing" warning on every call;
        # shape inference changes nothing for these graphs.
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(
                str(src),
                str(dst),
                weight_type=QuantType.QInt8,
                op_types_to_quantize=self.op_types,
                per_channel=False,
                reduce_range=False,
            )
        finally:
            root.setLevel(level)
