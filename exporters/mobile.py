"""Mobile formats: ORT format (`.ort`) with its required-operators config, an optional
fixed-shape variant, and a usability report for the mobile execution providers.

The `.ort` file is what onnxruntime-mobile (Android/iOS packages, reduced builds)
loads; its `.required_operators.config` lists the kernels a custom reduced build
must include. NNAPI (Android) and CoreML (iOS) need fixed input shapes and
support a subset of operators; the report counts, per provider, how many nodes
it would take and which operator types stay on the CPU provider.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from edgekd.artifacts import MODEL_FILES
from edgekd.config import ExportConfig
from edgekd.exporters.base import ExportFormat, ExportJob
from edgekd.progress import console

FP32, INT8 = MODEL_FILES["fp32"], MODEL_FILES["int8"]

# Operator types onnxruntime's XNNPACK execution provider registers kernels for
# (onnxruntime/core/providers/xnnpack/xnnpack_execution_provider.cc). An op-type
# estimate: the provider also checks shapes and constant weights at load time.
XNNPACK_OPS = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "MaxPool",
        "AveragePool",
        "Softmax",
        "Gemm",
        "MatMul",
        "Resize",
        "QLinearConv",
        "QLinearConvTranspose",
        "QLinearAveragePool",
        "QLinearSoftmax",
    }
)


def to_ort(onnx_path: Path, out_dir: Path, target_platform: str | None = None) -> dict[str, Path]:
    """Convert to `<stem>.ort` + `<stem>.required_operators.config` in `out_dir`.

    Fixed optimisation style: the graph is optimised once here, so the phone does not
    spend load time on it. `target_platform` "arm" keeps x86-only fusions out.
    """
    from onnxruntime.tools.convert_onnx_models_to_ort import (
        OptimizationStyle,
        convert_onnx_models_to_ort,
    )

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / onnx_path.name
        shutil.copy(onnx_path, src)  # the converter works on every model in a folder
        root = logging.getLogger()
        level = root.level
        root.setLevel(logging.WARNING)
        try:
            convert_onnx_models_to_ort(
                src, Path(tmp) / "out", [OptimizationStyle.Fixed], target_platform=target_platform
            )
        finally:
            root.setLevel(level)
        out = {}
        for suffix in (".ort", ".required_operators.config"):
            made = Path(tmp) / "out" / f"{onnx_path.stem}{suffix}"
            out[suffix] = out_dir / made.name
            shutil.move(str(made), out[suffix])
    return out


def fixed_shape(onnx_path: Path, dst: Path, batch: int, sequence: int) -> Path:
    """A copy whose every input is fixed at batch × sequence (NNAPI and CoreML need it;
    texts are then padded or cut to `sequence` tokens)."""
    import onnx
    from onnxruntime.tools.onnx_model_utils import make_input_shape_fixed

    model = onnx.load(str(onnx_path))
    for inp in model.graph.input:
        if len(inp.type.tensor_type.shape.dim) == 2:
            make_input_shape_fixed(model.graph, inp.name, [batch, sequence])
    onnx.save(model, str(dst))
    return dst


def usability(onnx_path: Path) -> dict[str, Any]:
    """Per mobile execution provider: nodes it takes, partitions, ops left on the CPU."""
    from onnxruntime.tools.mobile_helpers import usability_checker as uc

    # As onnxruntime's own checker does: basic optimisation first (constant folding
    # resolves shape arithmetic once inputs are fixed), then symbolic shape inference.
    with tempfile.TemporaryDirectory() as tmp:
        optimized = Path(tmp) / "basic.onnx"
        uc.optimize_model(onnx_path, optimized)
        model = uc.ModelProtoWithShapeInfo(optimized).model_with_shape_info
    nodes = list(model.graph.node)
    fixed = all(
        all(d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)
        for i in model.graph.input
    )
    report: dict[str, Any] = {"nodes": len(nodes), "fixed_input_shapes": fixed}
    quiet = logging.getLogger("usability_checker")
    quiet.setLevel(logging.ERROR)
    for name, check in (
        ("nnapi", lambda: uc.check_nnapi_partitions(model, require_fixed_input_sizes=True)),
        (
            "coreml",
            lambda: uc.check_coreml_partitions(model, True, "coreml_supported_mlprogram_ops.md"),
        ),
    ):
        try:
            info = check()
        except Exception as e:  # a checker failure is reported; the rest still runs
            report[name] = {"error": str(e).splitlines()[0][:200]}
            continue
        report[name] = {
            "supported_nodes": info.num_supported_nodes,
            "partitions": info.num_partitions,
            "unsupported_ops": sorted(info.unsupported_ops),
            "nodes_needing_fixed_shapes": info.nodes_unsupported_due_to_dynamic_input,
        }
    covered = [n for n in nodes if n.op_type in XNNPACK_OPS]
    report["xnnpack"] = {
        "supported_nodes": len(covered),
        "ops": sorted({n.op_type for n in covered}),
        "note": "op-type estimate from the provider's kernel registry",
    }
    lstm = sorted({n.op_type for n in nodes if "LSTM" in n.op_type})
    if lstm:
        report["lstm_fallback"] = (
            f"{', '.join(lstm)} runs on the CPU execution provider: NNAPI, CoreML and "
            "XNNPACK have no LSTM kernel in onnxruntime, so a BiLSTM is CPU-only on phones"
        )
    return report


class OrtFormat(ExportFormat):
    """`.ort` (+ required operators) of the model that ships, and a usability report."""

    name: ClassVar[str] = "ort"

    def wanted(self, cfg: ExportConfig) -> bool:
        return cfg.mobile or cfg.fixed_shape is not None

    def write(self, job: ExportJob) -> None:
        shipped = job.folder / (INT8 if "int8" in job.report["models"] else FP32)
        job.report["mobile"] = make_mobile(shipped, job.cfg, job.check, preset_platform(job.cfg))


def preset_platform(cfg: ExportConfig) -> str | None:
    """The `.ort` converter's target platform for the configured preset."""
    from edgekd.exporters.quantize import resolve_preset

    return "arm" if resolve_preset(cfg.preset).name == "arm64" else "amd64"


def make_mobile(
    model: Path, cfg: ExportConfig, check: list[dict[str, Any]], platform: str | None
) -> dict[str, Any]:
    """`.ort` (+ required operators) for `model`, a fixed-shape variant on request, each
    checked against the ONNX model it came from, and the mobile usability report."""
    import numpy as np

    from edgekd.exporters.base import pad_inputs
    from edgekd.exporters.mobile import fixed_shape, to_ort, usability

    out: dict[str, Any] = {}
    variants: list[tuple[Path, tuple[int, int] | None]] = [(model, None)]  # None: dynamic shape
    if cfg.fixed_shape:
        batch, seq = (int(x) for x in cfg.fixed_shape.split("x"))
        fixed = model.with_name(f"{model.stem}.fixed.onnx")
        variants.append((fixed_shape(model, fixed, batch, seq), (batch, seq)))
    for onnx_path, shape in variants:
        files = to_ort(onnx_path, model.parent, platform)
        feeds = check if shape is None else [pad_inputs(f, *shape) for f in check[:1]]
        diff = max(
            float(np.abs(a - b).max())
            for a, b in zip(
                run_model(files[".ort"], feeds), run_model(onnx_path, feeds), strict=True
            )
        )
        out[onnx_path.name] = {
            "ort": files[".ort"].name,
            "ort_bytes": files[".ort"].stat().st_size,
            "required_operators": files[".required_operators.config"].name,
            "max_abs_diff_vs_onnx": diff,
            "usability": usability(onnx_path),
        }
        console.print(f"mobile: {files['.ort'].name} ({diff:.1e} from its ONNX model)")
    return out


def run_model(path: Path, feeds: list[dict[str, Any]]) -> list[Any]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # errors only (an early-exit graph's threshold warns)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return [session.run(None, {k: v for k, v in f.items() if k in names})[0] for f in feeds]
