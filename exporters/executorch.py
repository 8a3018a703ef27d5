"""ExecuTorch `.pte` of a student's fixed-length form, lowered with the XNNPACK partitioner.

`torch.export` cannot trace packed sequences, and it specialises an `nn.LSTM` on
its sequence length, so the program has a fixed shape: batch 1 × `max_length`
tokens, padded. Padding would corrupt a plain bidirectional LSTM (its backward
direction would start on padding), so the exported module runs the two
directions as separate LSTMs: the forward one over the padded row (padding comes
after the text, so it never reaches a real step) and the backward one over the
row reversed within its own length (a gather), so it too starts at the text's
last token. The logits are those of the packed student, exactly.

Optional: needs `pip install executorch` (installs beside torch 2.13).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from edgekd.artifacts import PTE
from edgekd.config import ExportConfig
from edgekd.errors import EdgeKDError
from edgekd.exporters.base import ExportFormat, ExportJob
from edgekd.progress import console


def export_pte(student: Any, path: Path, length: int) -> None:
    """Write a batch-1 × `length` `.pte`, XNNPACK-delegated where it can be."""
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        from executorch.exir import to_edge_transform_and_lower
    except ImportError:
        raise EdgeKDError(
            "the .pte export needs ExecuTorch: pip install executorch (beside torch 2.13)"
        ) from None
    module = student.fixed_length_module().eval()
    example = (torch.ones(1, length, dtype=torch.long), torch.ones(1, length, dtype=torch.long))
    program = torch.export.export(module, example)
    lowered = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    path.write_bytes(lowered.to_executorch().buffer)


def run_pte(path: Path, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    """Logits from the ExecuTorch runtime, one batch-1 row at a time."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(path)).load_method("forward")
    out = []
    for feed in feeds:
        for i in range(feed["input_ids"].shape[0]):
            args = [torch.from_numpy(feed[k][i : i + 1]) for k in ("input_ids", "attention_mask")]
            out.append(method.execute(args)[0].numpy())
    return out


class PteFormat(ExportFormat):
    """ExecuTorch `.pte` for students that declare the `pte` capability."""

    name: ClassVar[str] = "pte"
    needs: ClassVar[str | None] = "pte"

    def wanted(self, cfg: ExportConfig) -> bool:
        return cfg.executorch

    def write(self, job: ExportJob) -> None:
        job.report["executorch"] = make_pte(job.model, job.folder / PTE, job.check, job.exporter)


def make_pte(model: Any, path: Path, check: list[dict[str, Any]], exporter: Any) -> dict[str, Any]:
    """ExecuTorch `.pte` at batch 1 × the student's max length, checked row by row
    against the PyTorch student on the same real dev rows as the ONNX model."""
    import numpy as np

    from edgekd.exporters.base import pad_inputs
    from edgekd.exporters.executorch import export_pte, run_pte

    length = model.config.max_length
    export_pte(model, path, length)
    rows = [
        {k: v[i : i + 1, : int(f["attention_mask"][i].sum())] for k, v in f.items()}
        for f in check
        for i in range(f["input_ids"].shape[0])
    ]
    got = run_pte(path, [pad_inputs(r, 1, length) for r in rows])
    want = [exporter.torch_logits(model, r) for r in rows]
    diff = max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True))
    if diff > exporter.atol:
        raise EdgeKDError(f".pte logits differ from PyTorch by {diff:.2e} > atol {exporter.atol}")
    console.print(f"executorch: {path.name} ({diff:.1e} from PyTorch)")
    return {"path": path.name, "bytes": path.stat().st_size, "length": length, "max_abs_diff": diff}
