"""An early-exit (FastBERT) student → one ONNX graph that stops each batch at the layer
where its rows are decided, equal to PyTorch row by row at every threshold."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from conftest import build_tiny_bert
from edgekd.exporters.early_exit import (
    THRESHOLDS,
    EarlyExitExporter,
    choose_threshold,
    decide,
    exit_points,
    layer_outputs,
    rows_to_show,
    wilson_low,
)
from edgekd.students.bert import BertStudent

TEXTS = [
    "the movie was good",
    "bad",
    "the actors were really very dull and boring",
    "good good good",
    "plot",
    "a fine film with a dull end",
    "x y z",
    "",
]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A 3-layer early-exit student whose exits are sure of some rows and not others."""
    from edgekd.distill.teacher import load_teacher

    teacher = load_teacher(str(build_tiny_bert(tmp_path_factory.mktemp("t3"), layers=3)))
    model, tok = BertStudent.prepare({"layers": 3, "early_exit": True}, ["x"], 2, *teacher)
    torch.manual_seed(1)
    with torch.no_grad():
        for head in model.exits:
            head.classifier.weight.normal_(0, 3.0)
            head.dense.weight.normal_(0, 1.0)
    return model.eval(), tok


def feed(tok, texts):
    enc = tok(texts)
    return {**enc, "token_type_ids": np.zeros_like(enc["input_ids"])}


def graph_ops(graph, out=None) -> Counter:
    """Op counts of a graph and every graph nested in it."""
    out = Counter() if out is None else out
    for node in graph.node:
        out[node.op_type] += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                graph_ops(attr.g, out)
    return out


def test_early_exit_graph_equals_pytorch_row_by_row_at_every_threshold(student, tmp_path):
    import onnxruntime as ort

    model, tok = student
    exporter = EarlyExitExporter(atol=1e-4)  # logits of exits scaled ×3: ~10 wide
    assert exporter.export(model, tmp_path / "m.onnx", [feed(tok, TEXTS)]) <= 1e-4
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    inputs = feed(tok, TEXTS)
    layers_seen = set()
    for threshold in THRESHOLDS:
        got, got_layer = exporter.onnx_outputs(session, inputs, threshold)
        with torch.no_grad():
            want, want_layer = model.early_exit(
                **{k: torch.from_numpy(v) for k, v in inputs.items()}, threshold=threshold
            )
        assert got_layer.tolist() == want_layer.tolist()
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=0)
        layers_seen |= set(got_layer.tolist())
    assert layers_seen == {1, 2, 3}  # the sweep exits at every layer somewhere
    assert exporter.ties == 0


def test_early_exit_graph_predicts_a_row_in_a_batch_as_alone(student, tmp_path):
    import onnxruntime as ort

    model, tok = student
    EarlyExitExporter().export(model, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    batch = session.run(
        None, {**feed(tok, TEXTS), "exit_threshold": np.array(0.5, dtype=np.float32)}
    )
    for i, text in enumerate(TEXTS):
        alone = session.run(
            None, {**feed(tok, [text]), "exit_threshold": np.array(0.5, dtype=np.float32)}
        )
        assert alone[1][0] == batch[1][i]
        np.testing.assert_allclose(alone[0][0], batch[0][i], atol=1e-4)


def test_early_exit_graph_runs_no_layer_after_the_exit(student, tmp_path):
    """onnxruntime's own trace of what ran: at threshold 1 no node of layers 2-3 runs."""
    import onnxruntime as ort

    model, tok = student
    EarlyExitExporter().export(model, tmp_path / "m.onnx")

    def layers_run(threshold: float) -> set[str]:
        options = ort.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(tmp_path / f"trace{threshold}")
        session = ort.InferenceSession(str(tmp_path / "m.onnx"), options)
        layer = session.run(
            ["exit_layer"],
            {**feed(tok, ["good"]), "exit_threshold": np.array(threshold, dtype=np.float32)},
        )[0]
        trace = json.loads(Path(session.end_profiling()).read_text())
        names = {e["name"].split("/")[0] for e in trace if e.get("cat") == "Node"}
        return {n for n in names if n.startswith("L")}, int(layer[0])

    ran, layer = layers_run(1.0)
    assert layer == 1 and ran == {"L1"}
    ran, layer = layers_run(0.0)
    assert layer == 3 and ran == {"L1", "L2", "L3"}


def test_early_exit_graph_default_threshold_is_what_the_exporter_was_given(student, tmp_path):
    import onnxruntime as ort

    model, tok = student
    exporter = EarlyExitExporter()
    exporter.default_threshold = 0.5
    exporter.export(model, tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"))
    assert [i.name for i in session.get_inputs()] == [
        "input_ids",
        "attention_mask",
        "token_type_ids",
    ]  # callers that know nothing of exits feed what they feed any BERT student
    default = session.run(None, feed(tok, TEXTS))
    given = session.run(
        None, {**feed(tok, TEXTS), "exit_threshold": np.array(0.5, dtype=np.float32)}
    )
    assert default[1].tolist() == given[1].tolist()


def test_early_exit_graph_quantizes_the_layers_inside_its_branches(student, tmp_path):
    from edgekd.exporters.quantize import DynamicInt8Quantizer

    model, _ = student
    EarlyExitExporter().export(model, tmp_path / "m.onnx")
    DynamicInt8Quantizer().quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", [])
    before = graph_ops(onnx.load(str(tmp_path / "m.onnx")).graph)
    after = graph_ops(onnx.load(str(tmp_path / "q.onnx")).graph)
    assert before["If"] == after["If"] == 2  # exits after layers 1 and 2
    assert after["MatMul"] < before["MatMul"] / 2  # the nested layers are int8 too


def test_choose_threshold_takes_the_fastest_whose_bound_holds():
    # The rule reads agreement_low, not agreement: 0.4 agrees 0.995 as seen but its bound
    # is 0.985, so at 0.99 the slower 0.2 ships.
    points = [
        {"threshold": 0.0, "accuracy": 0.90, "agreement": 1.0, "agreement_low": 0.996,
         "mean_exit_layer": 3.0},
        {"threshold": 0.2, "accuracy": 0.90, "agreement": 1.0, "agreement_low": 0.995,
         "mean_exit_layer": 2.1},
        {"threshold": 0.4, "accuracy": 0.88, "agreement": 0.995, "agreement_low": 0.985,
         "mean_exit_layer": 1.5},
    ]  # fmt: skip
    assert choose_threshold(points, 1000, 0.99, None)[0] == 0.2
    assert choose_threshold(points, 1000, 0.98, None)[0] == 0.4
    assert choose_threshold(points, 1000, 0.98, 0.89)[0] == 0.2
    threshold, rule = choose_threshold(points, 1000, 0.997, None)  # 899 rows show 0.997
    assert threshold == 0.0 and "every layer runs" in rule and "raise" not in rule


def test_choose_threshold_says_how_many_rows_when_too_few_to_show_agreement():
    point = {"threshold": 0.3, "accuracy": 0.9, "agreement": 1.0, "mean_exit_layer": 1.2}
    point["agreement_low"] = wilson_low(200, 200)  # 200 / 202.7 = 0.987
    threshold, rule = choose_threshold([point], 200, 0.99, None)
    assert threshold == 0.0 and "≥ 268 rows" in rule  # 2.706 × 0.99 / 0.01 = 267.9


def test_wilson_low_matches_hand_values():
    assert wilson_low(0, 0) == 0.0
    # Perfect scores: n / (n + z²), z² = 1.6449² = 2.7057.
    assert wilson_low(200, 200) == pytest.approx(200 / 202.7057, abs=1e-6)
    assert wilson_low(500, 500) == pytest.approx(500 / 502.7057, abs=1e-6)
    # 99 of 100: centre 0.99 + 2.7057/200 = 1.0035285; spread 1.6449 × √(0.0099/100 +
    # 2.7057/40000) = 1.6449 × 0.0129090 = 0.0212340; (1.0035285 − 0.0212340) /
    # (1 + 0.027057) = 0.956417.
    assert wilson_low(99, 100) == pytest.approx(0.956417, abs=1e-5)
    assert rows_to_show(0.99) == 268 and rows_to_show(0.95) == 52  # 2.7057 × 19 = 51.4


def test_exit_points_follow_the_exit_rule_by_hand():
    # 2 layers × 3 rows × 2 labels. Layer 1 is sure of row 0 (u ≈ 0) only.
    logits = np.array(
        [[[0.0, 50.0], [0.0, 0.0], [0.0, 0.0]], [[50.0, 0.0], [0.0, 50.0], [50.0, 0.0]]],
        dtype=np.float32,
    )
    uncertain = np.array([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    labels, layers = decide(logits, uncertain, 0.5)
    assert labels.tolist() == [1, 1, 0] and layers.tolist() == [1, 2, 2]
    gold = np.array([1, 1, 1])
    p0, p5 = exit_points(logits, uncertain, gold, (0.0, 0.5))
    assert p0 == {
        "threshold": 0.0,
        "accuracy": 1 / 3,
        "agreement": 1.0,
        "agreement_low": pytest.approx(3 / (3 + 2.7057), abs=1e-5),  # n / (n + z²)
        "mean_exit_layer": 2.0,
    }
    assert p5["accuracy"] == pytest.approx(2 / 3) and p5["agreement"] == pytest.approx(2 / 3)
    assert p5["mean_exit_layer"] == pytest.approx(5 / 3)


def test_layer_outputs_match_the_students_early_exit(student):
    model, tok = student
    logits, uncertain = layer_outputs(model, tok, TEXTS)
    enc = {k: torch.from_numpy(v) for k, v in feed(tok, TEXTS).items()}
    for threshold in (0.0, 0.5, 1.0):
        labels, layers = decide(logits, uncertain, threshold)
        with torch.no_grad():
            want, want_layer = model.early_exit(**enc, threshold=threshold)
        assert layers.tolist() == want_layer.tolist()
        assert labels.tolist() == want.argmax(-1).tolist()


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, tiny_data):
    """An early-exit student distilled as `edgekd distill --early-exit` leaves it."""
    from edgekd.config import DistillConfig
    from edgekd.stages.distill import distill

    tmp = tmp_path_factory.mktemp("ee")
    teacher = build_tiny_bert(tmp / "teacher", layers=3)
    cfg = DistillConfig(
        teacher=str(teacher),
        data={"spec": str(tiny_data)},
        student={"name": "bert", "options": {"layers": 3, "early_exit": True, "max_length": 16}},
        augment={"methods": []},
        epochs=2,
        batch_size=16,
        selection_rows=40,
    )
    distill(cfg, tmp / "s")
    return tmp / "s"


@pytest.mark.slow
def test_export_stage_chooses_the_threshold_on_held_out_rows_and_sweeps_dev(distilled, tmp_path):
    import onnxruntime as ort

    from edgekd.config import ExportConfig
    from edgekd.stages.export import export

    report = export(ExportConfig(guard=False, exit_min_agreement=0.0), distilled, tmp_path / "e")
    early = report.early_exit
    assert early is not None and early.layers == 3
    # Agreement ≥ 0 holds everywhere: the fastest threshold, 1.0, is chosen.
    assert early.threshold == 1.0 and "held-out rows" in early.chosen_by
    assert [p.threshold for p in early.selection] == list(THRESHOLDS)
    assert set(early.dev) == {"fp32", "int8"}
    assert early.dev["fp32"][0].agreement == 1.0 and early.dev["fp32"][0].mean_exit_layer == 3
    session = ort.InferenceSession(str(tmp_path / "e" / "model.int8.onnx"))
    (default,) = [i for i in session.get_overridable_initializers() if i.name == "exit_threshold"]
    init = {i.name: i for i in onnx.load(str(tmp_path / "e" / "model.int8.onnx")).graph.initializer}
    assert onnx.numpy_helper.to_array(init["exit_threshold"]) == np.float32(1.0)
    assert default.type == "tensor(float)"
    # Given, a threshold is shipped as is.
    given = export(ExportConfig(int8=False, exit_threshold=0.3), distilled, tmp_path / "g")
    assert given.early_exit.threshold == 0.3 and given.early_exit.selection == []


def test_profile_times_each_threshold_on_dev_rows_with_its_mean_exit_layer(
    distilled, tmp_path, tiny_data, capsys
):
    from edgekd.config import ExportConfig, ProfileConfig
    from edgekd.data import load_task
    from edgekd.stages.export import export
    from edgekd.stages.profile import profile

    export(ExportConfig(int8=False, exit_threshold=0.5), distilled, tmp_path / "e")
    model = tmp_path / "e" / "model.onnx"
    texts = load_task(distilled_data(distilled)).dev.texts[:20]
    cfg = ProfileConfig(runs=10, trials=2, warmup=1)
    (result,) = profile(cfg, [model], texts=texts)
    sweep = result.early_exit
    assert [e.threshold for e in sweep] == list(THRESHOLDS)
    assert sweep[0].mean_exit_layer == 3.0  # threshold 0: every layer
    assert all(1.0 <= e.mean_exit_layer <= 3.0 and e.p50_ms > 0 for e in sweep)
    layers = [e.mean_exit_layer for e in sweep]
    assert layers == sorted(layers, reverse=True)  # a higher threshold never runs more
    # Without dev rows there is nothing real to exit on: the sweep is left out, said so.
    (bare,) = profile(cfg, [model])
    assert bare.early_exit is None
    assert "pass --data to time each exit threshold" in capsys.readouterr().err


def distilled_data(student_dir: Path):
    from edgekd.stages.export import student_data_config

    return student_data_config(student_dir)
