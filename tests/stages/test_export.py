"""`run_export`: int8 modes, the guard's verdict and accuracy repair, end to end."""

from __future__ import annotations

import json

import pytest

from edgekd.artifacts import MODEL_FILES
from edgekd.config import ExportConfig
from edgekd.stages.export import export as run_export

INT8 = MODEL_FILES["int8"]


@pytest.fixture
def student(tiny_student):
    return tiny_student


def test_static_int8_on_a_bilstm_says_the_lstm_stays_fp32(student, tmp_path):
    report = run_export(ExportConfig(int8_mode="static", guard=False), student, tmp_path / "e")
    int8 = report["models"]["int8"]
    assert int8["quantizer"]["mode"] == "static" and "LSTM layers in fp32" in int8["note"]
    assert (tmp_path / "e" / INT8).is_file() and 0 <= report["int8_drop"] <= 1


@pytest.mark.parametrize("embedding", ["row", "tensor"])
def test_int8_embedding_reaches_the_quantizer_and_its_report(student, tmp_path, embedding):
    import onnx

    cfg = ExportConfig(guard=False, **({} if embedding == "row" else {"int8_embedding": embedding}))
    report = run_export(cfg, student, tmp_path / "e")
    assert report["models"]["int8"]["quantizer"]["embedding"] == embedding
    graph = onnx.load(str(tmp_path / "e" / INT8)).graph
    per_row = [i for i in graph.initializer if i.name.endswith("_row_scale")]
    assert len(per_row) == (1 if embedding == "row" else 0)


def test_guard_refuses_int8_that_is_slower_and_ships_fp32(student, tmp_path, monkeypatch):
    import edgekd.exporters.guard as guard

    def slow_int8(paths, feed):
        return {name: 1.0 if name == "fp32" else 5.0 for name in paths}

    monkeypatch.setattr(guard, "side_by_side", slow_int8)
    report = run_export(ExportConfig(preset="avx2"), student, tmp_path / "e")
    assert report["int8_refused"] and set(report["models"]) == {"fp32"}
    assert not (tmp_path / "e" / INT8).exists()
    saved = json.loads((tmp_path / "e" / "export.json").read_text())
    assert saved["int8_refused"] is True


def test_guard_keeps_the_configured_int8_when_slower_within_the_swing(
    student, tmp_path, monkeypatch
):
    import edgekd.exporters.guard as guard

    timed = []

    def int8_a_little_slower(paths, feed):  # 1.1× fp32's latency: under SLOWER (1.25×)
        timed.append(sorted(paths))
        return {name: 1.0 if name == "fp32" else 1.1 for name in paths}

    monkeypatch.setattr(guard, "side_by_side", int8_a_little_slower)
    report = run_export(ExportConfig(preset="avx2"), student, tmp_path / "e")
    int8 = report["models"]["int8"]
    assert not report["int8_refused"] and (tmp_path / "e" / INT8).is_file()
    assert int8["quantizer"]["preset"] == "avx2" and int8["guard"]["chosen"] == "dynamic/avx2"
    assert timed == [["dynamic/avx2", "fp32"]]  # no other preset was tried


def test_guard_swaps_in_a_faster_preset(student, tmp_path, monkeypatch):
    import edgekd.exporters.guard as guard

    def arm_wins(paths, feed):  # the configured avx2 at 2× fp32's latency: past SLOWER
        speeds = {"fp32": 1.0, "dynamic/arm64": 0.5}
        return {name: speeds.get(name, 2.0) for name in paths}

    monkeypatch.setattr(guard, "side_by_side", arm_wins)
    report = run_export(ExportConfig(preset="avx2"), student, tmp_path / "e")
    assert report["models"]["int8"]["quantizer"]["preset"] == "arm64"
    assert report["models"]["int8"]["guard"]["chosen"] == "dynamic/arm64"
    assert not list((tmp_path / "e").glob(".*.onnx"))  # trial models cleaned up


def test_accuracy_repair_scores_trials_in_the_export_folder(student, tmp_path, monkeypatch):
    import edgekd.stages.export as stage

    real = stage.score

    def int8_scores_nothing(predictor, texts, labels, reference=None):
        # Every int8 graph "scores" 0 (an accuracy stays in 0..1, or export.json is
        # refused on reading): repair must try each node, scoring each trial with the
        # real predictor (which needs the export folder's tokenizer).
        result = real(predictor, texts, labels, reference)
        if getattr(predictor, "path", None) and predictor.path.name != "model.onnx":
            result["accuracy"] = 0.0
        return result

    monkeypatch.setattr(stage, "score", int8_scores_nothing)
    cfg = ExportConfig(guard=False, max_int8_drop=0.0)
    report = run_export(cfg, student, tmp_path / "e")
    repair = report["models"]["int8"]["repair"]
    # All of fp32's accuracy off, give or take the real int8 rounding's few rows.
    fp32 = report["models"]["fp32"]["accuracy"]
    assert fp32 > 0 and repair["drop_before"] == pytest.approx(fp32, abs=0.1)
    assert not repair["within_budget"]
    assert repair["kept_fp32"] == []  # no single exclusion helped: nothing kept
    hidden = {p.name for p in (tmp_path / "e").glob(".*")}
    assert hidden == {".edgekd.json"}  # the trial model is cleaned up; the marker stays


def test_mobile_export_writes_ort_that_matches_onnx_and_a_usability_report(student, tmp_path):
    import numpy as np
    import onnxruntime as ort

    cfg = ExportConfig(guard=False, mobile=True, fixed_shape="1x16")
    report = run_export(cfg, student, tmp_path / "e")
    mobile = report["mobile"]
    assert set(mobile) == {"model.int8.onnx", "model.int8.fixed.onnx"}
    entry = mobile["model.int8.onnx"]
    assert (tmp_path / "e" / entry["ort"]).is_file()
    assert (tmp_path / "e" / entry["required_operators"]).read_text().strip()
    assert entry["max_abs_diff_vs_onnx"] < 1e-4
    usability = entry["usability"]
    assert "DynamicQuantizeLSTM" in usability["lstm_fallback"]
    assert {"nnapi", "coreml", "xnnpack"} <= set(usability)
    fixed = mobile["model.int8.fixed.onnx"]["usability"]
    assert fixed["fixed_input_shapes"] and not usability["fixed_input_shapes"]
    session = ort.InferenceSession(str(tmp_path / "e" / "model.int8.fixed.ort"))
    assert [i.shape for i in session.get_inputs()] == [[1, 16], [1, 16]]
    feed = {"input_ids": np.ones((1, 16), np.int64), "attention_mask": np.ones((1, 16), np.int64)}
    assert session.run(None, feed)[0].shape == (1, 2)


def test_executorch_pte_matches_pytorch_on_padded_rows(student, tmp_path):
    pytest.importorskip("executorch", reason="optional: pip install -e '.[executorch]'")
    cfg = ExportConfig(int8=False, executorch=True)
    pte = run_export(cfg, student, tmp_path / "e")["executorch"]
    assert (tmp_path / "e" / "model.pte").stat().st_size == pte["bytes"] > 0
    assert pte["max_abs_diff"] <= 1e-4 and pte["length"] == 64 and pte["int8"] is False


def test_executorch_int8_pte_runs_and_matches_pytorch_within_tolerance(
    tiny_teacher, tiny_data, tmp_path
):
    pytest.importorskip("executorch", reason="optional: pip install -e '.[executorch]'")
    from edgekd.exporters.executorch import INT8_ATOL

    # max_length 8: the int8 program unrolls the recurrence, one step per token.
    student = short_student(tiny_teacher, tiny_data, tmp_path / "s", hidden=16)
    fp32 = run_export(ExportConfig(int8=False, executorch=True), student, tmp_path / "f")
    int8 = run_export(ExportConfig(guard=False, executorch=True), student, tmp_path / "i")
    pte = int8["executorch"]
    assert pte["int8"] is True and pte["max_abs_diff"] <= INT8_ATOL and pte["n_dev"] == 40
    assert pte["agreement"] >= 0.9 and 0 <= pte["accuracy"] <= 1
    assert pte["bytes"] < fp32["executorch"]["bytes"]  # weights stored in int8


def short_student(teacher, data, folder, hidden: int = 8):
    """An untrained BiLSTM of max_length 8 (weights fixed by the seed)."""
    import torch

    from edgekd.config import DataConfig
    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.base import save_student
    from edgekd.students.bilstm import BiLSTMStudent

    torch.manual_seed(0)
    texts = load_task(DataConfig(spec=str(data))).train.texts
    options = {"embedding_dim": 16, "hidden_size": hidden, "mlp_size": 16, "max_length": 8}
    model, tok = BiLSTMStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    folder.mkdir()
    save_student(folder, model.eval(), tok, ["negative", "positive"])
    (folder / "config.yaml").write_text(f"teacher: {teacher}\ndata:\n  spec: {data}\n")
    return folder


def test_int8_fixed_length_bilstm_equals_fp32_when_weights_are_on_the_int8_grid(student):
    # A table that int8 stores exactly (k · scale, |k| ≤ 127, one scale per row) leaves
    # only the written-out recurrence: the int8 module must then equal the fp32 one.
    import torch

    from edgekd.exporters.base import pad_inputs
    from edgekd.students.base import load_student
    from edgekd.students.bilstm import int8_rows

    model, tok, _ = load_student(student)
    with torch.no_grad():
        for name, w in model.named_parameters():
            if name == "embedding.weight":
                q, scale = int8_rows(w)
                w.copy_(q.float() * scale[:, None])
    fixed, int8 = model.fixed_length_module().eval(), model.fixed_length_module(int8=True).eval()
    assert not any(isinstance(m, torch.nn.LSTM) for m in int8.modules() if m is not model.lstm)
    for text in ["good", "the movie was really very good and fun", "bad plot"]:
        padded = pad_inputs(tok([text]), 1, 16)
        args = [torch.from_numpy(padded[k]) for k in ("input_ids", "attention_mask")]
        with torch.no_grad():
            torch.testing.assert_close(int8(*args), fixed(*args), atol=1e-5, rtol=0)


def test_fixed_length_bilstm_equals_the_packed_student_at_any_length(student):
    import torch

    from edgekd.exporters.base import pad_inputs
    from edgekd.students.base import load_student

    model, tok, _ = load_student(student)
    fixed = model.fixed_length_module().eval()
    for text in ["good", "the movie was really very good and fun", "bad plot"]:
        feed = tok([text])
        padded = pad_inputs(feed, 1, 32)
        with torch.no_grad():
            want = model(**{k: torch.from_numpy(v) for k, v in feed.items()})
            got = fixed(*(torch.from_numpy(padded[k]) for k in ("input_ids", "attention_mask")))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_export_records_each_models_mcc_and_macro_f1_from_its_dev_predictions(student, tmp_path):
    import numpy as np

    from edgekd.artifacts import DevPredictions
    from edgekd.students.predict import class_scores

    report = run_export(ExportConfig(guard=False), student, tmp_path / "e")
    preds = DevPredictions.read(tmp_path / "e")
    for name, entry in report["models"].items():
        want = class_scores(np.array(preds.models[name]), np.array(preds.labels))
        assert (entry["mcc"], entry["macro_f1"]) == pytest.approx((want["mcc"], want["macro_f1"]))
