import numpy as np
import onnx
import pytest
import torch

from edgekd.errors import EdgeKDError
from edgekd.exporters.quantize import DynamicInt8Quantizer
from edgekd.exporters.torch_onnx import TorchOnnxExporter
from edgekd.students.bilstm import BiLSTMConfig, BiLSTMStudent


def student(seed=0):
    torch.manual_seed(seed)
    cfg = BiLSTMConfig(embedding_dim=16, hidden_size=8, mlp_size=16, dropout=0.0)
    return BiLSTMStudent(cfg, 40, 3).eval()


def ops(path):
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def test_export_validates_within_atol_on_padded_batches(tmp_path):
    exporter = TorchOnnxExporter(atol=1e-5)
    long_rows = {
        "input_ids": np.arange(1, 61, dtype=np.int64).reshape(2, 30) % 39 + 1,
        "attention_mask": np.ones((2, 30), dtype=np.int64),
    }
    diff = exporter.export(student(), tmp_path / "m.onnx", [long_rows])
    assert diff <= 1e-5
    assert "LSTM" in ops(tmp_path / "m.onnx")


def test_export_hides_only_the_benign_packed_sequence_warning(tmp_path, capfd):
    import os

    from edgekd.exporters.torch_onnx import BENIGN_EXPORT_WARNING, drop_native_stderr_lines

    TorchOnnxExporter().export(student(), tmp_path / "m.onnx")
    assert "PackPadded" not in capfd.readouterr().err
    with drop_native_stderr_lines(BENIGN_EXPORT_WARNING):
        os.write(2, b"Warning: The shape inference of prim::PackPadded type is missing\n")
        os.write(2, b"a real problem\n")
    err = capfd.readouterr().err
    assert "a real problem" in err and "PackPadded" not in err


def test_validate_fails_when_onnx_disagrees_with_pytorch(tmp_path):
    exporter = TorchOnnxExporter()
    exporter.export(student(seed=0), tmp_path / "m.onnx")
    with pytest.raises(EdgeKDError, match="differ from PyTorch"):
        exporter.validate(student(seed=1), tmp_path / "m.onnx")


def test_dynamic_int8_quantizes_lstm_and_embedding(tmp_path):
    TorchOnnxExporter().export(student(), tmp_path / "m.onnx")
    DynamicInt8Quantizer().quantize(tmp_path / "m.onnx", tmp_path / "q.onnx")
    q = ops(tmp_path / "q.onnx")
    assert "DynamicQuantizeLSTM" in q and "LSTM" not in q
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    tables = [
        i for i in onnx.load(str(tmp_path / "q.onnx")).graph.initializer if list(i.dims) == [40, 16]
    ]
    assert [t.data_type in eight_bit for t in tables] == [True], "embedding should be 8-bit"
    # One fp32 scale per embedding row (40 pieces), not one for the table.
    scales = [i for i in onnx.load(str(tmp_path / "q.onnx")).graph.initializer if i.dims == [40]]
    assert [s.data_type for s in scales] == [onnx.TensorProto.FLOAT]
