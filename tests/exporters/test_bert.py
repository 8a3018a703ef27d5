"""BERT student → ONNX through optimum, validated against PyTorch."""

from __future__ import annotations

from pathlib import Path

import onnx

from edgekd.exporters.bert import BertExporter
from edgekd.students.bert import BertStudent


def test_bert_export_validates_against_pytorch_on_padded_rows(tiny_teacher: Path, tmp_path):
    from edgekd.teacher import load_teacher

    model, tok = BertStudent.prepare({"layers": 1}, ["x"], 2, *load_teacher(str(tiny_teacher)))
    model.eval()
    real = tok(["the movie was good", "bad", "the actors were really very dull and boring"])
    diff = BertExporter(atol=1e-5).export(model, tmp_path / "m.onnx", [real])
    assert diff <= 1e-5
    graph = onnx.load(str(tmp_path / "m.onnx")).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    assert {n.op_type for n in graph.node} >= {"MatMul", "Softmax"}
