"""The fast labelers: deduplication, the int8 margin, calibration and the auto choice."""

import numpy as np
import pytest

from edgekd.config import DataConfig, DistillConfig
from edgekd.distill import labeling
from edgekd.distill.labeling import (
    calibrate,
    deduplicated,
    hybrid_labeler,
    margins,
    pick_margin,
)


class FakeOnnx:
    """fp32 logits [0, x] per text x (a float as text); int8 flips the rows in `flip`."""

    def __init__(self, flip=()):
        self.flip, self.calls = set(flip), {"fp32": [], "int8": []}

    def fp32(self, texts, what):
        self.calls["fp32"].append(list(texts))
        return np.array([[0.0, float(t)] for t in texts], dtype=np.float32)

    def int8(self, texts, what):
        self.calls["int8"].append(list(texts))
        out = self.fp32(texts, what)
        self.calls["fp32"].pop()
        for i, t in enumerate(texts):
            if t in self.flip:
                out[i, 1] = -out[i, 1]  # the sign of x decides the class: int8 gets it wrong
        return out


def test_margins_are_top1_minus_top2_logit():
    logits = np.array([[1.0, 3.0, 2.5], [0.0, -1.0, -4.0]])
    np.testing.assert_allclose(margins(logits), [0.5, 1.0])


def test_pick_margin_is_slack_times_largest_disagreeing_int8_margin():
    fp32 = np.array([[0, 1.0], [0, -0.2], [0, 0.3], [0, 2.0]])
    int8 = np.array([[0, 1.1], [0, 0.1], [0, -0.4], [0, 2.0]])  # rows 1 and 2 disagree
    # int8 margins of the disagreeing rows: 0.1 and 0.4 → 1.5 × 0.4 = 0.6
    assert pick_margin(fp32, int8) == pytest.approx(0.6)
    assert pick_margin(fp32, fp32) == 0.0  # no disagreement: int8 is trusted everywhere


def test_hybrid_labeler_redoes_only_low_margin_rows_in_fp32():
    onnx = FakeOnnx(flip={"0.1"})
    out = hybrid_labeler(onnx, margin=0.5)(["2.0", "0.1", "-3.0", "0.4"], "x")
    np.testing.assert_allclose(out[:, 1], [2.0, 0.1, -3.0, 0.4])  # 0.1 repaired by fp32
    assert onnx.calls["fp32"] == [["0.1", "0.4"]]  # margins 0.1 and 0.4 < 0.5


def test_calibrate_picks_margin_on_one_half_and_measures_on_the_other():
    # First half: int8 flips 0.2 (margin 0.2 → threshold 0.3). Second half: it flips
    # 0.25 (repaired: 0.25 < 0.3) and 0.9 (not repaired: 0.9 ≥ 0.3).
    first = ["0.2", "1.0", "2.0", "3.0"]
    second = ["0.25", "0.9", "4.0", "5.0"]
    cal = calibrate(FakeOnnx(flip={"0.2", "0.25", "0.9"}), first + second)
    assert cal.margin == pytest.approx(0.3)
    assert (cal.n, cal.int8_agreement, cal.hybrid_agreement) == (4, 0.5, 0.75)
    assert cal.relabelled == 0.25 and cal.choice == "onnx"  # 75% < 99.5%: fp32 for all
    clean = calibrate(FakeOnnx(flip={"0.2", "0.25"}), first + second)
    assert (clean.hybrid_agreement, clean.choice) == (1.0, "hybrid")


def test_deduplicated_labels_each_distinct_text_once_in_order():
    seen = []

    def labeler(texts, what):
        seen.append(list(texts))
        return np.array([[len(t), 0.0] for t in texts], dtype=np.float32)

    out = deduplicated(labeler)(["aa", "b", "aa", ("x", "yy"), ("x", "yy")], "x")
    assert seen == [["aa", "b", ("x", "yy")]]
    np.testing.assert_allclose(out[:, 0], [2, 1, 2, 2, 2])


def dcfg(teacher, data, **kw):
    student = {"name": "bilstm", "options": {"embedding_dim": 8, "hidden_size": 4, "mlp_size": 8}}
    return DistillConfig(
        teacher=str(teacher), data=DataConfig(spec=str(data)), epochs=1, student=student, **kw
    )


def test_auto_runtime_labels_small_sets_with_torch_and_says_why(tiny_teacher, tiny_data, tmp_path):
    from edgekd.stages.distill import distill

    m = distill(dcfg(tiny_teacher, tiny_data), tmp_path / "s")
    report = m["teacher_runtime"]
    assert (report["runtime"], report["used"]) == ("auto", "torch")
    assert "under 20,000: not worth an export" in report["why"]


def test_auto_runtime_labels_with_int8_and_fp32_close_calls_when_large(
    tiny_teacher, tiny_data, tmp_path, monkeypatch
):
    from edgekd.distill.teacher import load_teacher, teacher_logits
    from edgekd.stages.distill import distill

    monkeypatch.setattr(labeling, "AUTO_MIN_ROWS", 0)  # the tiny set counts as large
    m = distill(dcfg(tiny_teacher, tiny_data), tmp_path / "s")
    report = m["teacher_runtime"]
    assert report["used"] in ("hybrid", "onnx") and report["calibration"]["n"] > 0
    assert report["calibration"]["hybrid_agreement"] >= report["calibration"]["int8_agreement"]
    # Dev is labelled in fp32: the teacher accuracy equals PyTorch's.
    from edgekd.data import load_task

    dev = load_task(DataConfig(spec=str(tiny_data))).dev
    ref = teacher_logits(*load_teacher(str(tiny_teacher)), dev.texts).argmax(1)
    assert m["teacher_accuracy"] == float((ref == np.array(dev.labels)).mean())
    again = distill(dcfg(tiny_teacher, tiny_data), tmp_path / "t")
    assert all(again["cache_hits"].values())
    assert again["teacher_runtime"]["calibration"] == report["calibration"]  # cached too
