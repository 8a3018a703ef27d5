"""ExecuTorch `.pte` of a student's fixed-length form, lowered with the XNNPACK partitioner;
int8 (with `--int8`) through ExecuTorch's XNNPACK quantizer.

`torch.export` cannot trace packed sequences, and it specialises an `nn.LSTM` on
its sequence length, so the program has a fixed shape: batch 1 × `max_length`
tokens, padded. Padding would corrupt a plain bidirectional LSTM (its backward
direction would start on padding), so the exported module runs the two
directions as separate LSTMs: the forward one over the padded row (padding comes
after the text, so it never reaches a real step) and the backward one over the
row reversed within its own length (a gather), so it too starts at the text's
last token. The logits are those of the packed student, exactly.

int8 (`Int8FixedLengthBiLSTM`): the LSTM written out as Linears (input projection,
recurrent step) unrolled over the fixed length, so the XNNPACK quantizer (dynamic,
per-channel int8: activations scaled per call, like onnxruntime's dynamic int8)
takes all of them with the MLP and the classifier; the embedding table, which
XNNPACK cannot look up in int8, is an int8 buffer widened at the looked-up rows.
Every weight ships in int8: on SST-2 1.6 MB against 4.9 MB fp32. int8 logits are
held to `INT8_ATOL` of PyTorch's on the check rows, and the export scores every dev
row through the runtime (accuracy, agreement).

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

# int8 .pte logits against PyTorch's, logit units: dynamic int8 activations (one scale
# per tensor per call) moved SST-2 logits by at most 0.025; a wrong scale or a weight
# left unquantised moves them by far more than 0.1.
INT8_ATOL = 0.1


def export_pte(student: Any, path: Path, length: int, int8: bool = False) -> None:
    """Write a batch-1 × `length` `.pte`, XNNPACK-delegated where it can be; `int8`:
    quantised by the XNNPACK quantizer (dynamic, per channel) first."""
    try:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
            XnnpackPartitioner,
        )
        from executorch.exir import to_edge_transform_and_lower
    except ImportError:
        raise EdgeKDError(
            "the .pte export needs ExecuTorch: pip install executorch (beside torch 2.13)"
        ) from None
    module = student.fixed_length_module(int8=int8).eval()
    example = (torch.ones(1, length, dtype=torch.long), torch.ones(1, length, dtype=torch.long))
    if int8:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = XNNPACKQuantizer().set_global(
            get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
        )
        graph = prepare_pt2e(torch.export.export(module, example).module(), quantizer)
        graph(*example)  # dynamic: no ranges to calibrate, but the observers must run once
        module = convert_pt2e(graph)
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
        job.report["executorch"] = make_pte(
            job.model, job.folder / PTE, job.check, job.exporter, job.cfg.int8, job
        )


def make_pte(
    model: Any,
    path: Path,
    check: list[dict[str, Any]],
    exporter: Any,
    int8: bool = False,
    job: ExportJob | None = None,
) -> dict[str, Any]:
    """ExecuTorch `.pte` at batch 1 × the student's max length, checked row by row
    against the PyTorch student on the same real dev rows as the ONNX model (fp32:
    within the export's atol; int8: within `INT8_ATOL`); int8 is also scored on every
    dev row of `job`'s task through the runtime."""
    from edgekd.exporters.base import pad_inputs

    length = model.config.max_length
    export_pte(model, path, length, int8)
    rows = [
        {k: v[i : i + 1, : int(f["attention_mask"][i].sum())] for k, v in f.items()}
        for f in check
        for i in range(f["input_ids"].shape[0])
    ]
    got = run_pte(path, [pad_inputs(r, 1, length) for r in rows])
    want = [exporter.torch_logits(model, r) for r in rows]
    diff = max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True))
    atol = INT8_ATOL if int8 else exporter.atol
    if diff > atol:
        raise EdgeKDError(
            f".pte logits differ from PyTorch by {diff:.2e} > {'int8 ' if int8 else ''}"
            f"atol {atol}; drop --executorch, or report this student"
        )
    entry = {
        "path": path.name,
        "bytes": path.stat().st_size,
        "length": length,
        "int8": int8,
        "max_abs_diff": diff,
        "atol": atol,
    }
    if int8 and job is not None:
        entry.update(score_pte(path, model, job, exporter, length))
    console.print(
        f"executorch: {path.name} ({'int8, ' if int8 else ''}{path.stat().st_size:,} B, "
        f"{diff:.1e} from PyTorch)"
    )
    return entry


def score_pte(path: Path, model: Any, job: ExportJob, exporter: Any, length: int) -> dict[str, Any]:
    """Accuracy on every dev row through the ExecuTorch runtime, and agreement with
    the PyTorch student's labels, at batch 1 × `length`."""
    from edgekd.exporters.base import pad_inputs

    texts, gold = job.task.dev.texts, np.array(job.task.dev.labels)
    feeds = [pad_inputs(job.tokenizer([t]), 1, length) for t in texts]
    got = np.concatenate(run_pte(path, feeds)).argmax(1)
    want = np.concatenate([exporter.torch_logits(model, job.tokenizer([t])) for t in texts])
    return {
        "accuracy": float((got == gold).mean()),
        "agreement": float((got == want.argmax(1)).mean()),
        "n_dev": len(texts),
    }
