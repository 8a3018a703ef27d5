"""int8 presets, static QDQ calibration, the int8-beats-fp32 guard, accuracy repair."""

from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgekd.exporters.guard import pick_fastest_int8
from edgekd.exporters.quantize import (
    DynamicInt8Quantizer,
    StaticInt8Quantizer,
    detect_preset,
    resolve_preset,
    rowwise_embeddings,
)
from edgekd.exporters.repair import quantizable_nodes, repair


def mlp(path: Path, w1: np.ndarray, w2: np.ndarray) -> Path:
    """x (batch × 4) → MatMul w1 → Relu → MatMul w2 → logits; IR 10 for onnxruntime."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", w1.shape[0]])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", w2.shape[1]])
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["logits"], name="second"),
    ]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    graph = helper.make_graph(nodes, "mlp", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


def lookup(path: Path, table: np.ndarray, tied: bool = False, head: bool = True) -> Path:
    """ids (batch × length) → Gather rows of `table` → logits = MatMul(rows, w); `tied`:
    the MatMul reads the table too (a tied output layer); no `head`: rows alone (static
    int8 would quantize the MatMul's input, rows included, to one activation scale)."""
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "length"])
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)
    rows = helper.make_tensor_value_info("rows", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0),
        helper.make_node("MatMul", ["rows", "table_t" if tied else "w"], ["logits"], name="out"),
    ][: 2 if head else 1]
    if tied:
        nodes.insert(1, helper.make_node("Transpose", ["table"], ["table_t"], name="tie"))
    w = np.random.default_rng(1).normal(size=(table.shape[1], 3)).astype(np.float32)
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")]
    graph = helper.make_graph(nodes, "lookup", [ids], [y, rows] if head else [rows], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


def rows_of(path: Path, ids: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["rows"], {"ids": ids})[0]


def run(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]


@pytest.mark.parametrize(
    ("flags", "machine", "preset"),
    [
        ({"avx2", "avx512f", "avx512_vnni"}, "x86_64", "avx512_vnni"),
        ({"avx2", "avx_vnni"}, "x86_64", "avx512_vnni"),
        ({"avx2", "fma"}, "x86_64", "avx2"),
        ({"sse4_2"}, "x86_64", "avx2"),
        ({"fp", "asimd", "asimddp"}, "aarch64", "arm64"),
    ],
)
def test_auto_preset_follows_cpu_flags(flags, machine, preset):
    assert detect_preset(flags, machine)[0] == preset
    assert resolve_preset("auto", flags, machine).name == preset


def test_presets_pick_weight_types_for_their_cpu():
    assert resolve_preset("avx2").weight_type == "QUInt8"  # no VNNI: avoid int16 saturation
    assert resolve_preset("avx512_vnni").weight_type == "QInt8"
    assert resolve_preset("arm64").weight_type == "QInt8"
    with pytest.raises(ValueError, match="valid: avx2, avx512_vnni, arm64, auto"):
        resolve_preset("x86")


def test_static_int8_calibrates_scales_into_qdq_nodes(tmp_path):
    rng = np.random.default_rng(0)
    src = mlp(tmp_path / "m.onnx", rng.normal(size=(4, 8)).astype(np.float32),
              rng.normal(size=(8, 2)).astype(np.float32))  # fmt: skip
    feeds = [{"x": rng.normal(size=(16, 4)).astype(np.float32)} for _ in range(4)]
    StaticInt8Quantizer(preset="avx512_vnni").quantize(src, tmp_path / "q.onnx", feeds)
    model = onnx.load(str(tmp_path / "q.onnx"))
    ops = Counter(n.op_type for n in model.graph.node)
    # Both MatMuls get QDQ pairs on their activations and weights.
    assert ops["QuantizeLinear"] >= 2 and ops["DequantizeLinear"] >= 4
    scales = [i for i in model.graph.initializer if i.name.endswith("_scale")]
    assert scales and all(numpy_helper.to_array(s).min() > 0 for s in scales)
    x = feeds[0]["x"]
    np.testing.assert_allclose(run(tmp_path / "q.onnx", x), run(src, x), atol=0.3)
    # Calibrating on inputs 100× larger changes the activation scales: the data matters.
    wide = [{"x": f["x"] * 100} for f in feeds]
    StaticInt8Quantizer(preset="avx512_vnni").quantize(src, tmp_path / "w.onnx", wide)
    wide_scales = {
        i.name: numpy_helper.to_array(i)
        for i in onnx.load(str(tmp_path / "w.onnx")).graph.initializer
    }
    assert any(not np.allclose(numpy_helper.to_array(s), wide_scales[s.name]) for s in scales)
    with pytest.raises(ValueError, match="needs calibration inputs"):
        StaticInt8Quantizer().quantize(src, tmp_path / "n.onnx", None)


def test_int8_embedding_rows_keep_their_own_step_when_row(tmp_path):
    # Row 0's weights are ~0.001, row 1's ~10, row 2 is zeros. One scale for the table
    # is 10 / 127 ≈ 0.08 a step, so row 0 rounds to all zeros; its own scale is
    # max|row 0| / 127 ≈ 0.00002 a step, half of which bounds the error of each weight.
    rng = np.random.default_rng(0)
    table = np.stack([rng.uniform(-1e-3, 1e-3, 8), rng.uniform(-10, 10, 8), np.zeros(8)]).astype(
        np.float32
    )
    src, ids = lookup(tmp_path / "m.onnx", table, head=False), np.array([[0, 1, 2, 0]])
    for kind in ("dynamic", "static"):
        quantizer = DynamicInt8Quantizer if kind == "dynamic" else StaticInt8Quantizer
        feeds = [{"ids": ids}]
        quantizer(preset="avx512_vnni").quantize(src, tmp_path / f"{kind}.onnx", feeds)
        rows = rows_of(tmp_path / f"{kind}.onnx", ids)[0]
        step = np.abs(table).max(axis=1, keepdims=True) / 127
        assert np.all(np.abs(rows - table[[0, 1, 2, 0]]) <= step[[0, 1, 2, 0]] / 2 + 1e-9), kind
        assert np.all(rows[2] == 0) and np.all(np.sign(rows[0]) == np.sign(table[0])), kind
        model = onnx.load(str(tmp_path / f"{kind}.onnx"))
        tables = {i.name: i for i in model.graph.initializer}
        assert tables["table_int8_rows"].data_type == TensorProto.INT8, kind
        # The scales stay fp32, one a row (onnxruntime must not quantize them).
        assert numpy_helper.to_array(tables["table_row_scale"]).shape == (3,), kind
        assert "table" not in tables, kind  # the fp32 table is gone, not kept beside
    DynamicInt8Quantizer(preset="avx512_vnni", embedding="tensor").quantize(
        src, tmp_path / "tensor.onnx"
    )
    tensor_rows = rows_of(tmp_path / "tensor.onnx", ids)[0]
    assert np.all(tensor_rows[0] == 0)  # what the row scales are for
    with pytest.raises(ValueError, match="valid: row, tensor"):
        DynamicInt8Quantizer(embedding="column")


def test_int8_embedding_tables_read_otherwise_or_excluded_are_left_to_the_quantizer(tmp_path):
    table = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    tied = lookup(tmp_path / "tied.onnx", table, tied=True)
    assert rowwise_embeddings(tied, tmp_path / "t.onnx") == (tied, [])
    plain = lookup(tmp_path / "plain.onnx", table)
    assert rowwise_embeddings(plain, tmp_path / "p.onnx", exclude=["embed"]) == (plain, [])
    out, added = rowwise_embeddings(plain, tmp_path / "p.onnx")
    assert out == tmp_path / "p.onnx" and len(added) == 5
    # Excluded from int8 (accuracy repair's way): the table stays fp32, rows exact.
    DynamicInt8Quantizer(exclude_nodes=["embed"]).quantize(plain, tmp_path / "x.onnx")
    ids = np.array([[4, 0]], dtype=np.int64)
    np.testing.assert_array_equal(rows_of(tmp_path / "x.onnx", ids)[0], table[[4, 0]])
    # A table that is also a graph input (a caller may feed another) stays as it is.
    model = onnx.load(str(plain))
    model.graph.input.append(helper.make_tensor_value_info("table", TensorProto.FLOAT, [5, 4]))
    onnx.save(model, str(tmp_path / "fed.onnx"))
    assert rowwise_embeddings(tmp_path / "fed.onnx", tmp_path / "f.onnx") == (
        tmp_path / "fed.onnx",
        [],
    )


def test_int8_embedding_rows_follow_a_table_read_twice_through_identity(tmp_path):
    # A siamese encoder's second lookup reads the table through Identity nodes (the
    # TorchScript exporter's way with a weight used twice); names the rewrite would
    # pick are taken already, so it must pick others.
    table = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "length"])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b")]
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["a"], name="first", axis=0),
        helper.make_node("Identity", ["table"], ["table_again"], name="table_int8_rows"),
        helper.make_node("Identity", ["table_again"], ["table_twice"], name="again"),
        helper.make_node("Gather", ["table_twice", "ids"], ["b"], name="second", axis=0),
    ]
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.zeros(2, np.float32), "table_row_scale"),
    ]
    graph = helper.make_graph(nodes, "twice", [ids], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(tmp_path / "m.onnx"))
    DynamicInt8Quantizer().quantize(tmp_path / "m.onnx", tmp_path / "q.onnx")
    q = onnx.load(str(tmp_path / "q.onnx")).graph
    assert {n.op_type for n in q.node} == {"Gather", "Cast", "Unsqueeze", "Mul"}
    assert {i.name for i in q.initializer if i.data_type == TensorProto.INT8} == {
        "table_int8_rows_"
    }
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    feed = np.array([[5, 0, 2]], dtype=np.int64)
    a, b = session.run(["a", "b"], {"ids": feed})
    step = np.abs(table).max(axis=1) / 127
    np.testing.assert_array_equal(a, b)
    assert np.all(np.abs(a[0] - table[[5, 0, 2]]) <= step[[5, 0, 2], None] / 2 + 1e-7)


def test_guard_keeps_fp32_when_int8_is_slower(tmp_path):
    def timer(paths, feed):  # int8 made slower on purpose: no real clock in a test
        return {name: (2.0 if name == "fp32" else 3.0) for name in paths}

    decision = pick_fastest_int8(tmp_path / "f", {"dynamic/avx2": tmp_path / "q"}, {}, timer)
    assert decision["chosen"] is None and "shipping fp32" in decision["reason"]


@pytest.mark.parametrize(
    ("int8_ms", "chosen"),
    [(2.2, "dynamic/avx2"), (2.49, "dynamic/avx2"), (2.5, None)],  # SLOWER × 2.0 = 2.5
)
def test_guard_keeps_int8_when_its_latency_is_within_the_timings_swing(tmp_path, int8_ms, chosen):
    def timer(paths, feed):
        return {name: (2.0 if name == "fp32" else int8_ms) for name in paths}

    decision = pick_fastest_int8(tmp_path / "f", {"dynamic/avx2": tmp_path / "q"}, {}, timer)
    assert decision["chosen"] == chosen
    if chosen:  # kept for its size at 2.0 / 2.2 = 0.91× fp32's speed
        assert decision["speedup_vs_fp32"] == pytest.approx(2.0 / int8_ms)


def test_guard_picks_the_fastest_int8_that_beats_fp32(tmp_path):
    speeds = {"fp32": 2.0, "dynamic/avx2": 2.5, "static/arm64": 1.0, "dynamic/arm64": 1.5}
    paths = {name: tmp_path / name for name in speeds if name != "fp32"}
    decision = pick_fastest_int8(tmp_path / "f", paths, {}, lambda p, f: {n: speeds[n] for n in p})
    assert decision["chosen"] == "static/arm64" and decision["speedup_vs_fp32"] == 2.0


def test_guard_help_and_option_name_the_bound_the_guard_applies():
    from edgekd.cli.export import export
    from edgekd.config import ExportConfig
    from edgekd.exporters.guard import SLOWER

    bound = f"{SLOWER:g}×"
    assert bound in (ExportConfig.model_fields["guard"].description or "")
    assert bound in inspect.signature(export).parameters["guard"].default.help


def test_accuracy_repair_keeps_the_sensitive_node_in_fp32(tmp_path):
    rng = np.random.default_rng(0)
    # `first` is built to be sensitive: one huge weight sets its per-tensor scale
    # (1000/127 ≈ 7.9), so every other weight (|w| ≤ 0.5) rounds to zero in int8.
    # It multiplies a constant input of 1 into a unit Relu always zeroes, so `second`
    # sees no outlier activation and stays benign.
    w1 = rng.uniform(-0.5, 0.5, size=(4, 256)).astype(np.float32)
    w1[3, 0] = -1000.0
    w2 = rng.normal(size=(256, 3)).astype(np.float32) / 16
    src = mlp(tmp_path / "m.onnx", w1, w2)
    x = rng.normal(size=(400, 4)).astype(np.float32)
    x[:, 3] = 1.0
    gold = run(src, x).argmax(1)

    def accuracy(path: Path) -> float:
        return float((run(path, x).argmax(1) == gold).mean())

    def quantize(s: Path, d: Path, exclude: list[str]) -> None:
        DynamicInt8Quantizer("avx512_vnni", per_channel=False, exclude_nodes=exclude).quantize(s, d)

    nodes = quantizable_nodes(src, ["MatMul"])
    assert nodes == ["first", "second"]
    report = repair(src, tmp_path / "q.onnx", quantize, accuracy, 0.02, nodes)
    assert report["drop_before"] > 0.2
    assert report["kept_fp32"] == ["first"]
    assert report["drop_after"] <= 0.02 and report["within_budget"]
    assert report["bytes_cost"] > 2 * 4 * 256  # w1 keeps 4 bytes per weight, not 1
    assert accuracy(tmp_path / "q.onnx") >= 0.98
