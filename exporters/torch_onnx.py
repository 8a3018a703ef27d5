"""ONNX export of any student that is a plain `nn.Module`: `torch.onnx.export` of its
`forward` with the inputs and dynamic axes the student declares (`onnx_inputs`)."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.exporters.base import Exporter

# torch's C++ exporter says packed-sequence ops lack shape inference; the exported
# graph is still exact (validate() checks it), so this line is noise to users.
BENIGN_EXPORT_WARNING = re.compile(r"shape inference of prim::(PackPadded|PadPacked) type")


@contextlib.contextmanager
def drop_native_stderr_lines(pattern: re.Pattern[str]) -> Iterator[None]:
    """Hide lines matching `pattern` that native code writes to fd 2; pass the rest on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            for line in sink.read().decode("utf-8", "replace").splitlines():
                if not pattern.search(line):
                    print(line, file=sys.stderr)


class TorchOnnxExporter(Exporter):
    def dummy_inputs(self, model: Any) -> dict[str, np.ndarray]:
        return model.dummy_inputs()

    def _export(self, model: Any, path: Path) -> None:
        import torch

        inputs = self.dummy_inputs(model)
        axes = model.onnx_inputs()
        names = list(axes)
        model.eval()
        with warnings.catch_warnings(), drop_native_stderr_lines(BENIGN_EXPORT_WARNING):
            warnings.simplefilter("ignore")
            # The TorchScript exporter (dynamo=False) maps a packed nn.LSTM to one ONNX
            # LSTM op with `sequence_lens`, which onnxruntime's dynamic quantizer turns
            # into DynamicQuantizeLSTM; it also needs no onnxscript.
            torch.onnx.export(
                model,
                tuple(torch.from_numpy(inputs[n]) for n in names),
                str(path),
                input_names=names,
                output_names=list(self.output_names),
                dynamic_axes={**axes, "logits": {0: "batch"}},
                opset_version=self.opset,
                dynamo=False,
            )
