"""ONNX export of the BiLSTM student."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

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


class BiLSTMExporter(Exporter):
    input_names = ("input_ids", "attention_mask")
    dynamic_axes: ClassVar[dict[str, dict[int, str]]] = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        "logits": {0: "batch"},
    }
    # A siamese pair student reads the second texts too, with their own length axis.
    pair_axes: ClassVar[dict[str, dict[int, str]]] = {
        "input_ids_b": {0: "batch", 1: "sequence_b"},
        "attention_mask_b": {0: "batch", 1: "sequence_b"},
    }

    def names(self, model: Any) -> list[str]:
        extra = list(self.pair_axes) if model.config.pair else []
        return [*self.input_names, *extra]

    def dummy_inputs(self, model: Any) -> dict[str, np.ndarray]:
        # Three rows of lengths 7, 4 and 1 padded to 7: checks batching, padding and the
        # shortest possible text in one run. Pairs get second texts of lengths 1, 5, 3.
        rng = np.random.default_rng(0)
        out = {}
        for suffix, lengths in (("", (7, 4, 1)), ("_b", (1, 5, 3))):
            ids = rng.integers(1, model.vocab_size, size=(3, max(lengths)), dtype=np.int64)
            mask = np.ones_like(ids)
            for row, length in enumerate(lengths):
                mask[row, length:] = 0
                ids[row, length:] = 0
            out.update({f"input_ids{suffix}": ids, f"attention_mask{suffix}": mask})
        return {k: out[k] for k in self.names(model)}

    def _export(self, model: Any, path: Path) -> None:
        import torch

        inputs = self.dummy_inputs(model)
        names = self.names(model)
        model.eval()
        with warnings.catch_warnings(), drop_native_stderr_lines(BENIGN_EXPORT_WARNING):
            warnings.simplefilter("ignore")
            # The TorchScript exporter (dynamo=False) maps the packed nn.LSTM to one ONNX
            # LSTM op with `sequence_lens`, which onnxruntime's dynamic quantizer turns
            # into DynamicQuantizeLSTM; it also needs no onnxscript.
            torch.onnx.export(
                model,
                tuple(torch.from_numpy(inputs[n]) for n in names),
                str(path),
                input_names=names,
                output_names=list(self.output_names),
                dynamic_axes={**self.dynamic_axes, **(self.pair_axes if model.config.pair else {})},
                opset_version=self.opset,
                dynamo=False,
            )
