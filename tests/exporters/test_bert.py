"""BERT student → ONNX through optimum, validated against PyTorch."""

from __future__ import annotations

from pathlib import Path

import onnx

from edgekd.exporters.bert import BertExporter
from edgekd.students.bert import BertStudent


def test_bert_export_validates_against_pytorch_on_padded_rows(tiny_teacher: Path, tmp_path):
    from edgekd.distill.teacher import load_teacher

    model, tok = BertStudent.prepare({"layers": 1}, ["x"], 2, *load_teacher(str(tiny_teacher)))
    model.eval()
    real = tok(["the movie was good", "bad", "the actors were really very dull and boring"])
    exporter = BertExporter(atol=1e-5)
    diff = exporter.export(model, tmp_path / "m.onnx", [real])
    assert diff <= 1e-5
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    # onnxruntime's transformer fusions ran before validation: one fused op per kind.
    ops = {n.op_type for n in graph.node}
    assert {"Attention", "SkipLayerNormalization"} <= ops
    assert "EmbedLayerNormalization" not in ops  # its fp32 word table would dodge int8
    assert "Softmax" not in ops
    assert exporter.fusions["Attention"] == 1


def test_bert_static_int8_quantizes_the_unfused_graph_with_qdq(tiny_teacher, tiny_data, tmp_path):
    from collections import Counter

    from edgekd.config import DataConfig, ExportConfig
    from edgekd.distill.teacher import load_teacher
    from edgekd.stages.export import export as run_export
    from edgekd.students.base import save_student

    model, tok = BertStudent.prepare({"layers": 1}, ["x"], 2, *load_teacher(str(tiny_teacher)))
    (tmp_path / "s").mkdir()
    save_student(tmp_path / "s", model.eval(), tok, ["negative", "positive"])
    data = DataConfig(spec=str(tiny_data))
    for mode in ("static", "dynamic"):
        cfg = ExportConfig(int8_mode=mode, guard=False)
        report = run_export(cfg, tmp_path / "s", tmp_path / mode, data)
        ops = Counter(
            n.op_type for n in onnx.load(str(tmp_path / mode / "model.int8.onnx")).graph.node
        )
        assert report["models"]["fp32"]["fusions"]["Attention"] == 1
        if mode == "static":
            assert ops["QuantizeLinear"] >= 4 and ops["DequantizeLinear"] >= 8
        else:
            assert ops["QAttention"] == 1  # fused attention, quantized
            graph = onnx.load(str(tmp_path / mode / "model.int8.onnx")).graph
            inits = {i.name: i for i in graph.initializer}
            word_table = next(
                inits[n.input[0]]
                for n in graph.node
                if n.op_type == "Gather"
                and n.input[0] in inits
                and inits[n.input[0]].dims[0] == tok.vocab_size
            )
            eight_bit = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
            assert word_table.data_type in eight_bit  # the word table is int8 too
        hidden = {p.name for p in (tmp_path / mode).glob(".*")}
        assert hidden == {".edgekd.json"}  # the unfused copy is gone; the marker stays
