"""int8 quantization for onnxruntime: presets per target CPU, dynamic and static (QDQ).

A preset is named for the CPU it targets and says why it picks its types. `auto`
reads the CPU flags (this machine's, or a device spec's).

- dynamic: weights int8 ahead of time, activations quantized per batch at run
  time. The only kind onnxruntime has for LSTMs (DynamicQuantizeLSTM), so the
  default for the BiLSTM.
- static: QDQ format, activation ranges calibrated on training rows (minmax,
  entropy or percentile), after `quant_pre_process` (shape inference + graph
  optimisation). onnxruntime has no static LSTM kernel: static leaves the LSTM in
  fp32 and quantizes MatMul/Gemm/Gather around it.

Either way an embedding table is stored int8 with one scale per row (`embedding="row"`,
`rowwise_embeddings`) unless asked for onnxruntime's one scale per table (`"tensor"`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import platform
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

OP_TYPES = ["LSTM", "MatMul", "Gemm", "Gather", "Attention"]
EMBEDDINGS = ("row", "tensor")
CALIBRATION = ("minmax", "entropy", "percentile")
# Fused transformer graphs (SkipLayerNormalization, Attention: com.microsoft ops) defeat
# ONNX shape inference; their tensors are fp32, which is what this tells the quantizer.
# EnableSubgraph: quantize the layers inside an early-exit graph's `If` branches too
# (off by default in onnxruntime: only the top graph would be int8).
EXTRA_OPTIONS = {"DefaultTensorType": 1, "EnableSubgraph": True}  # 1: onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class Preset:
    name: str
    weight_type: str  # onnxruntime QuantType name: "QInt8" (s8) or "QUInt8" (u8)
    per_channel: bool
    reduce_range: bool
    why: str


PRESETS = {
    # No VNNI: u8×s8 products go through vpmaddubsw, which adds two of them into a
    # saturating int16 (2 · 255 · 128 = 65,280 > 32,767), so full-range s8 weights can
    # clip. u8 weights take onnxruntime's u8×u8 kernel, which widens to 16 bits first
    # and never saturates (optimum's avx2 preset makes the same choice).
    "avx2": Preset(
        "avx2", "QUInt8", True, False, "AVX2 without VNNI: u8 weights avoid int16 saturation"
    ),
    # VNNI (AVX512-VNNI or AVX-VNNI) has vpdpbusd: i32 += u8 · s8 in one instruction,
    # no int16 intermediate, so symmetric s8 weights are exact and the fastest path.
    "avx512_vnni": Preset(
        "avx512_vnni", "QInt8", True, False, "VNNI: u8 activations × s8 weights, one instruction"
    ),
    # ARM64 sdot/udot multiply 8-bit lanes straight into int32 (no saturation); u8
    # activations × s8 weights is as fast as u8×u8 on big cores and faster on small ones.
    "arm64": Preset(
        "arm64", "QInt8", True, False, "ARM64 dot-product: u8 × s8 into int32, no saturation"
    ),
}
PRESET_NAMES = (*PRESETS, "auto")


def cpu_flags() -> set[str]:
    """This machine's CPU feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def detect_preset(flags: set[str], machine: str) -> tuple[str, str]:
    """(preset name, why) for a CPU with `flags` on architecture `machine`."""
    if machine.lower() in ("aarch64", "arm64") or {"asimddp", "asimd"} & flags:
        return "arm64", f"{machine}: ARM64"
    vnni = {"avx512_vnni", "avx512vnni", "avx_vnni", "amx_int8"} & flags
    if vnni:
        return "avx512_vnni", f"CPU flags include {sorted(vnni)[0]}"
    if "avx2" in flags:
        return "avx2", "CPU has AVX2 but no VNNI"
    return "avx2", "no AVX2/VNNI flag found: the u8×u8 path is the safe choice"


def resolve_preset(name: str, flags: set[str] | None = None, machine: str | None = None) -> Preset:
    """A preset by name; `auto` picks from `flags`/`machine` (default: this machine's)."""
    if name == "auto":
        name, _ = detect_preset(
            cpu_flags() if flags is None else flags, machine or platform.machine()
        )
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid: {', '.join(PRESET_NAMES)}")
    return PRESETS[name]


@contextlib.contextmanager
def quiet_quantizer() -> Iterator[None]:
    # onnxruntime logs a generic "consider pre-processing" warning on every call.
    # Calibration also prints its progress ("Collecting tensor data ...") to stdout.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


class Quantizer:
    """fp32 ONNX → int8 ONNX. `calibration`: input feeds (static quantization only)."""

    name: ClassVar[str]

    def __init__(
        self,
        preset: str = "auto",
        per_channel: bool | None = None,
        reduce_range: bool | None = None,
        exclude_nodes: Sequence[str] = (),
        flags: set[str] | None = None,
        calibration_method: str = "minmax",
        embedding: str = "row",
    ) -> None:
        self.preset = resolve_preset(preset, flags)
        self.per_channel = self.preset.per_channel if per_channel is None else per_channel
        self.reduce_range = self.preset.reduce_range if reduce_range is None else reduce_range
        self.exclude_nodes = list(exclude_nodes)
        if calibration_method not in CALIBRATION:
            raise ValueError(
                f"unknown calibration {calibration_method!r}; valid: {', '.join(CALIBRATION)}"
            )
        self.calibration_method = calibration_method
        if embedding not in EMBEDDINGS:
            raise ValueError(f"unknown embedding {embedding!r}; valid: {', '.join(EMBEDDINGS)}")
        self.embedding = embedding

    def prepare(self, src: Path, tmp: Path) -> tuple[Path, list[str]]:
        """`src` as the quantizer should read it, embedding tables already int8 per row
        (unless `embedding="tensor"`; in `tmp` when rewritten), and the nodes it must
        leave alone: those excluded, and the lookups of the row scales (onnxruntime
        would quantize a scale table like any other, to one 8-bit step for all rows)."""
        if self.embedding == "row":
            path, lookups = rowwise_embeddings(src, tmp / "rowwise.onnx", self.exclude_nodes)
            return path, [*self.exclude_nodes, *lookups]
        return src, self.exclude_nodes

    def describe(self) -> dict[str, Any]:
        return {
            "mode": self.name,
            "preset": self.preset.name,
            "why": self.preset.why,
            "weight_type": self.preset.weight_type,
            "per_channel": self.per_channel,
            "reduce_range": self.reduce_range,
            "excluded_nodes": self.exclude_nodes,
            "embedding": self.embedding,
        }

    def quantize(
        self, src: Path, dst: Path, calibration: list[dict[str, np.ndarray]] | None = None
    ) -> None:
        raise NotImplementedError


def unshare_lstm_weights(src: Path, dst: Path) -> Path:
    """Give every LSTM node its own copy of weights it shares with another (a siamese
    encoder runs one LSTM twice). onnxruntime's LSTM quantizer rewrites a weight in
    place for its first node, which breaks the second; MatMul and Gather sharing is
    handled fine and stays shared (the embedding table is not duplicated)."""
    import onnx

    model = onnx.load(str(src))
    inits = {i.name: i for i in model.graph.initializer}
    # The TorchScript exporter hands the second use of a weight through Identity nodes.
    identity = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Identity"}
    seen: set[str] = set()
    changed = False
    for n, node in enumerate(model.graph.node):
        if node.op_type != "LSTM":
            continue
        for k, name in enumerate(node.input):
            while name in identity:
                name = identity[name]
            if name not in inits:
                continue
            if name in seen:
                copy = onnx.TensorProto()
                copy.CopyFrom(inits[name])
                copy.name = f"{name}.copy{n}"
                model.graph.initializer.append(copy)
                node.input[k] = copy.name
                changed = True
            seen.add(name)
    if not changed:
        return src
    onnx.save(model, str(dst))
    return dst


def rowwise_embeddings(src: Path, dst: Path, exclude: Sequence[str] = ()) -> tuple[Path, list[str]]:
    """Store each embedding table of `src` as symmetric int8 with one fp32 scale per row,
    dequantized after the lookup: Gather(int8 table) → Cast → Mul(Gather(scales)).

    onnxruntime quantizes a Gather's table with one scale for all of it, so every row
    shares the step of the largest weight (max |w| / 127 over the table): a piece whose
    row is small keeps few levels. One scale per row gives each row its own 255 levels
    (max |w_row| / 127 a step) for 4 bytes a row (the default SST-2 student's 11,319
    pieces: 45 KB beside the 724 KB table). What it does to the int8 graph's agreement
    with fp32, its accuracy and its latency: benchmarks/results/int8_embedding.md.

    A table is rewritten when every use is a row lookup (a Gather on axis 0 whose node
    is not in `exclude`, reading the table itself or through Identity nodes, as the
    TorchScript exporter hands a weight used twice); one read by anything else (a tied
    output layer, a branch of an early-exit graph, a graph input or output) is left to
    the quantizer, as is every table of a graph below opset 13 (its Unsqueeze takes no
    axes input). Return `dst` (`src` when nothing was rewritten) and the names of the
    nodes added, which the quantizer must skip.
    """
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnx.helper import make_node as make

    model = onnx.load(str(src))
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < 13:
        return src, []
    floats = {
        i.name: i
        for i in graph.initializer
        if i.data_type == TensorProto.FLOAT and len(i.dims) == 2
    }
    # Identity outputs that stand for a table (chains included): name → the table.
    alias = {name: name for name in floats}
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in alias:
            alias[node.output[0]] = alias[node.input[0]]
    lookups: dict[str, list[Any]] = {}
    other_uses = {alias[v.name] for v in [*graph.input, *graph.output] if v.name in alias}
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in alias:
            continue  # an alias: its readers count, not itself
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        for k, name in enumerate(node.input):
            if name not in alias:
                continue
            if node.op_type == "Gather" and k == 0 and axis == 0 and node.name not in exclude:
                lookups.setdefault(alias[name], []).append(node)
            else:
                other_uses.add(alias[name])
        for attr in node.attribute:  # subgraphs (If, Loop) may read outer initializers
            for sub in _subgraphs(attr):
                other_uses.update(alias[n] for n in _inputs_of(sub) if n in alias)
    tables = {name: nodes for name, nodes in lookups.items() if name not in other_uses}
    if not tables:
        return src, []
    taken = _names_in(graph)

    def fresh(name: str) -> str:
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    axes = fresh("row_scale_axes")  # Unsqueeze's axes as an input (opset >= 13)
    graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), axes))
    replaced: dict[int, list[Any]] = {}
    for name, nodes in tables.items():
        w = numpy_helper.to_array(floats[name])
        # A row of zeros gets scale 1 (any scale maps it to 0; 0 would divide by 0).
        scale = np.abs(w).max(axis=1) / 127
        scale = np.where(scale > 0, scale, 1).astype(np.float32)
        q = np.clip(np.rint(w / scale[:, None]), -127, 127).astype(np.int8)
        qname, sname = fresh(f"{name}_int8_rows"), fresh(f"{name}_row_scale")
        graph.initializer.extend(
            [numpy_helper.from_array(q, qname), numpy_helper.from_array(scale, sname)]
        )
        for node in nodes:
            out, ids, base = node.output[0], node.input[1], node.name or node.output[0]
            rows, cast, steps, steps1 = (fresh(f"{out}_{s}") for s in ("q", "f", "s", "s1"))
            replaced[id(node)] = [
                make("Gather", [qname, ids], [rows], name=fresh(f"{base}_int8"), axis=0),
                make("Cast", [rows], [cast], name=fresh(f"{base}_cast"), to=TensorProto.FLOAT),
                make("Gather", [sname, ids], [steps], name=fresh(f"{base}_scale"), axis=0),
                make("Unsqueeze", [steps, axes], [steps1], name=fresh(f"{base}_unsqueeze")),
                make("Mul", [cast, steps1], [out], name=fresh(f"{base}_dequantize")),
            ]
    # The rewritten tables, their aliases and what was said of their shapes go.
    gone = {n for n, table in alias.items() if table in tables}
    nodes = [
        new
        for node in graph.node
        if not (node.op_type == "Identity" and node.input[0] in gone)
        for new in replaced.get(id(node), [node])
    ]
    del graph.node[:]
    graph.node.extend(nodes)
    for field in (graph.initializer, graph.value_info):
        kept = [i for i in field if i.name not in gone]
        del field[:]
        field.extend(kept)
    onnx.save(model, str(dst))
    return dst, [n.name for added in replaced.values() for n in added]


def _subgraphs(attr: Any) -> list[Any]:
    from onnx import AttributeProto

    if attr.type == AttributeProto.GRAPH:
        return [attr.g]
    return list(attr.graphs) if attr.type == AttributeProto.GRAPHS else []


def _inputs_of(graph: Any) -> set[str]:
    """Every name the nodes of `graph` and of its own subgraphs read."""
    names: set[str] = set()
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in _subgraphs(attr):
                names |= _inputs_of(sub)
    return names


def _names_in(graph: Any) -> set[str]:
    """Every name `graph` and its subgraphs use: nodes, values, initializers."""
    names = {v.name for v in [*graph.input, *graph.output, *graph.value_info]}
    names |= {i.name for i in graph.initializer}
    for node in graph.node:
        names |= {node.name, *node.input, *node.output}
        for attr in node.attribute:
            for sub in _subgraphs(attr):
                names |= _names_in(sub)
    return names


class DynamicInt8Quantizer(Quantizer):
    """Dynamic int8: weights per the preset, activations u8 per batch at run time.

    The embedding table becomes an 8-bit Gather, cutting the largest tensor 4×.
    """

    name = "dynamic"

    def quantize(
        self, src: Path, dst: Path, calibration: list[dict[str, np.ndarray]] | None = None
    ) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp, quiet_quantizer():
            prepared, exclude = self.prepare(src, Path(tmp))
            quantize_dynamic(
                str(unshare_lstm_weights(prepared, Path(tmp) / "unshared.onnx")),
                str(dst),
                weight_type=QuantType[self.preset.weight_type],
                op_types_to_quantize=OP_TYPES,
                per_channel=self.per_channel,
                reduce_range=self.reduce_range,
                nodes_to_exclude=exclude,
                extra_options=EXTRA_OPTIONS,
            )


class StaticInt8Quantizer(Quantizer):
    """Static int8 in QDQ format, activation ranges calibrated on `calibration` feeds."""

    name = "static"
    note = "static int8 leaves LSTM layers in fp32 (onnxruntime has no static LSTM kernel)"

    def quantize(
        self, src: Path, dst: Path, calibration: list[dict[str, np.ndarray]] | None = None
    ) -> None:
        from onnxruntime.quantization import (
            CalibrationDataReader,
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )
        from onnxruntime.quantization.shape_inference import quant_pre_process

        if not calibration:
            raise ValueError("static int8 needs calibration inputs (training rows)")

        class Reader(CalibrationDataReader):  # type: ignore[misc]
            def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
                self.feeds = iter(feeds)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.feeds, None)

        method = {
            "minmax": CalibrationMethod.MinMax,
            "entropy": CalibrationMethod.Entropy,
            "percentile": CalibrationMethod.Percentile,
        }[self.calibration_method]
        with tempfile.TemporaryDirectory() as tmp, quiet_quantizer():
            prepped = Path(tmp) / "prepped.onnx"
            prepared, exclude = self.prepare(src, Path(tmp))
            quant_pre_process(str(prepared), str(prepped), skip_symbolic_shape=True)
            quantize_static(
                str(prepped),
                str(dst),
                Reader(calibration),
                quant_format=QuantFormat.QDQ,
                op_types_to_quantize=[op for op in OP_TYPES if op != "LSTM"],
                per_channel=self.per_channel,
                reduce_range=self.reduce_range,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType[self.preset.weight_type],
                nodes_to_exclude=exclude,
                calibrate_method=method,
                # Calibration data and the augmented model go to tmp, not the cwd.
                calibration_cache_path=None,
                extra_options={**EXTRA_OPTIONS, "CalibTensorRangeSymmetric": False},
            )
