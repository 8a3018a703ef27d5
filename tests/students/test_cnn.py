import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from pydantic import ValidationError

from edgekd.exporters.quantize import DynamicInt8Quantizer
from edgekd.exporters.torch_onnx import TorchOnnxExporter
from edgekd.students.cnn import CNNConfig, CNNStudent


def tiny(vocab=50, **options):
    torch.manual_seed(0)
    cfg = CNNConfig(**{"embedding_dim": 8, "filters": 5, "mlp_size": 8, "dropout": 0.0, **options})
    return CNNStudent(cfg, vocab, 3).eval()


def test_cnn_padded_rows_equal_rows_alone_when_shorter_than_a_window():
    model = tiny()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [3, 4, 0, 0, 0, 0, 0], [9, 0, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        batch = model(ids, mask)
        for row, n in enumerate((7, 2, 1)):  # 2 and 1 tokens: shorter than windows of 3, 4
            alone = model(ids[row : row + 1, :n], mask[row : row + 1, :n])
            torch.testing.assert_close(batch[row : row + 1], alone, atol=1e-6, rtol=0)


def test_cnn_features_are_the_max_of_each_window_over_the_text_by_hand():
    model = tiny(widths=[2], filters=3)
    ids = torch.tensor([[4, 7, 9]])
    with torch.no_grad():
        got = model.encode(ids, torch.ones_like(ids))
        x = model.embedding(ids)[0]  # 3 × 8: a plain table (rank 64 ≥ width 8)
        zero = torch.zeros(1, 8)
        rows = torch.cat([zero, x, zero])  # full windows: one zero vector each side
        linear = model.windows[0]
        # Windows (pad, t0), (t0, t1), (t1, t2), (t2, pad): n + w − 1 = 4 of them.
        feats = [torch.relu(linear(torch.cat([rows[j], rows[j + 1]]))) for j in range(4)]
        want = torch.stack(feats).max(dim=0).values
    torch.testing.assert_close(got[0], want)


def test_cnn_mix_with_lambda_one_is_the_plain_forward():
    model = tiny()
    ids = torch.tensor([[5, 6, 7, 0], [3, 4, 8, 9]])
    mask = (ids != 0).long()
    with torch.no_grad():
        plain = model(ids, mask)
        # Row 0 mixed with itself at λ = 1 (perm = identity).
        mixed = model(ids, mask, mix=(torch.tensor([0, 1]), torch.ones(2)))
    torch.testing.assert_close(plain, mixed)


def test_cnn_pair_student_reads_both_sides_with_one_encoder():
    model = tiny(pair=True)
    a = torch.tensor([[5, 6, 0], [7, 8, 9]])
    b = torch.tensor([[3, 0], [4, 2]])
    with torch.no_grad():
        logits = model(a, (a != 0).long(), b, (b != 0).long())
        swapped = model(b, (b != 0).long(), a, (a != 0).long())
    assert logits.shape == (2, 3)
    assert not torch.allclose(logits, swapped)  # [h1, h2, …] is ordered
    assert model.mlp.in_features == 4 * 4 * 5  # 4 features × 4 widths × 5 filters


def test_cnn_trimmed_keeps_the_kept_rows_and_every_other_weight():
    model = tiny()
    small = model.trimmed([0, 5, 6, 7])
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        torch.testing.assert_close(
            model(ids, torch.ones_like(ids)), small(torch.tensor([[1, 2, 3]]), torch.ones_like(ids))
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"widths": [0, 2]}, "window widths must be 1..16"),
        ({"widths": [2, 2]}, "repeat"),
        ({"widths": []}, "at least 1"),
        ({"filters": 16384, "widths": list(range(9, 17)), "embedding_dim": 4096}, "parameters"),
    ],
)
def test_cnn_config_rejects_bad_windows_and_sizes_before_any_weight(options, message):
    with pytest.raises(ValidationError, match=message):
        CNNConfig(**options)


def test_cnn_exports_to_onnx_and_int8_matmuls_within_tolerance(tmp_path):
    model = tiny(vocab=40, embedding_dim=16, embedding_rank=None, filters=8, mlp_size=16)
    rows = {
        "input_ids": np.array([[1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 5, 0, 0, 0, 0, 0, 0, 0]]),
        "attention_mask": np.array([[1] * 9, [1, 1] + [0] * 7]),
    }
    diff = TorchOnnxExporter(atol=1e-5).export(model, tmp_path / "m.onnx", [rows])
    assert diff <= 1e-5
    assert "Conv" not in {n.op_type for n in onnx.load(str(tmp_path / "m.onnx")).graph.node}
    DynamicInt8Quantizer().quantize(tmp_path / "m.onnx", tmp_path / "q.onnx")
    q = {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    assert "MatMulInteger" in q or "DynamicQuantizeMatMul" in q
    session = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, rows)[0]
    with torch.no_grad():
        want = model(torch.from_numpy(rows["input_ids"]), torch.from_numpy(rows["attention_mask"]))
    assert np.abs(got - want.numpy()).max() < 0.1  # int8: close, not equal
