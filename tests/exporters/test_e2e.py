"""`edgekd export --e2e`: one ONNX file, string in, label out, predicting exactly as the
Python tokenizer path does; then bundled alone, predicted from and profiled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgekd.artifacts import E2E_MODEL, MODEL_FILES, BundleManifest, ExportReport
from edgekd.config import DataConfig, ExportConfig
from edgekd.errors import EdgeKDError
from edgekd.exporters.e2e import check_tokenizer
from edgekd.stages.export import export as run_export
from edgekd.students.predict import E2EPredictor, OnnxPredictor, softmax

# Texts the dev rows do not have: empty, whitespace only, accents (stripped when
# lowercasing), CJK characters (split one by one), unknown words, punctuation runs,
# and one far past max_length (truncated).
ODD = [
    "",
    "   ",
    "Ünïcödé CAFÉ naïve Résumé",
    "中文 good 字",
    "good " * 200,
    "?!?! ... ,,, ''",
    "xyzzy plugh frobnicate",
    "It's a DON'T-miss, isn't it?",
]
MAX_LENGTH = 12  # short, so dev rows and ODD both meet truncation


def untrained(kind: str, teacher: Path, data: DataConfig, folder: Path) -> Path:
    """An untrained student of `kind` (BiLSTM word or wordpiece, or BERT) on `data`:
    the tokenizer is what is under test, weights only need to be fixed."""
    import torch

    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.base import save_student
    from edgekd.students.bert import BertStudent
    from edgekd.students.bilstm import BiLSTMStudent

    torch.manual_seed(0)
    texts = load_task(data).train.texts
    if kind == "bert":
        options = {"layers": 1, "max_length": MAX_LENGTH}
        model, tok = BertStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    else:
        options = {"vocab": kind, "embedding_dim": 8, "hidden_size": 4, "mlp_size": 8}
        options["max_length"] = MAX_LENGTH
        model, tok = BiLSTMStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    folder.mkdir()
    save_student(folder, model.eval(), tok, ["negative", "positive"])
    return folder


@pytest.mark.parametrize("pairs", [False, True], ids=["single", "pair"])
@pytest.mark.parametrize("kind", ["word", "wordpiece", "bert"])
def test_e2e_predicts_as_the_tokenizer_path(
    kind, pairs, tiny_teacher, tiny_data, pair_data, tmp_path
):
    data = DataConfig(spec=str(tiny_data))
    if pairs:
        data = DataConfig(spec=str(pair_data), text_pair_column="sentence2")
    student = untrained(kind, tiny_teacher, data, tmp_path / "s")
    report = run_export(ExportConfig(e2e=True, guard=False), student, tmp_path / "e", data)
    assert report.e2e is not None and report.e2e.rows == report.n_dev == 40
    assert (report.e2e.source, report.e2e.label_agreement) == ("int8", 1.0)
    texts: list = list(zip(ODD, ODD[::-1], strict=True)) if pairs else ODD
    got = E2EPredictor(tmp_path / "e" / E2E_MODEL).probabilities(texts)
    want = softmax(OnnxPredictor(tmp_path / "e" / MODEL_FILES["int8"], batch_size=1).logits(texts))
    assert np.array_equal(got.argmax(1), want.argmax(1))
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_e2e_refuses_a_tokenizer_the_op_cannot_run():
    spec = {"model": {"type": "BPE", "vocab": {"a": 0}}, "normalizer": None}
    with pytest.raises(EdgeKDError, match="WordPiece and word vocabularies; this tokenizer is BPE"):
        check_tokenizer(spec)
    spec = {
        "model": {"type": "WordPiece", "vocab": {"a": 0}},
        "normalizer": {"type": "NFKC"},
        "pre_tokenizer": {"type": "Whitespace"},
    }
    with pytest.raises(EdgeKDError, match="BERT normalisation"):
        check_tokenizer(spec)


@pytest.fixture(scope="module")
def e2e_export(tiny_teacher, tiny_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    data = DataConfig(spec=str(tiny_data))
    student = untrained("wordpiece", tiny_teacher, data, root / "s")
    run_export(ExportConfig(e2e=True, guard=False), student, root / "e", data)
    return root / "e"


def test_bundle_ships_the_e2e_model_alone_and_predicts_the_same(e2e_export, tmp_path):
    from edgekd.stages.bundle import Bundle, make_bundle

    archive = make_bundle(e2e_export, tmp_path / "b", model="e2e")
    manifest = BundleManifest.read(tmp_path / "b")
    assert manifest.e2e and set(manifest.files) == {E2E_MODEL, "README.md"}  # and its card
    assert manifest.model == ExportReport.read(e2e_export).e2e.source
    texts = ["good film", "bad", ""]
    from_zip = Bundle(archive).predict(texts)
    ids_path = OnnxPredictor(e2e_export / MODEL_FILES["int8"], batch_size=1)
    labels = [ids_path.label_names[i] for i in ids_path.logits(texts).argmax(1)]
    assert [r["label"] for r in from_zip] == labels


def test_bundle_e2e_needs_an_export_with_e2e(tiny_teacher, tiny_data, tmp_path):
    from edgekd.stages.bundle import make_bundle

    data = DataConfig(spec=str(tiny_data))
    student = untrained("word", tiny_teacher, data, tmp_path / "s")
    run_export(ExportConfig(guard=False), student, tmp_path / "e", data)
    with pytest.raises(EdgeKDError, match="export with --e2e"):
        make_bundle(tmp_path / "e", tmp_path / "b", model="e2e")
    assert not (tmp_path / "b").exists()


def test_cli_predict_takes_a_model_e2e_file(e2e_export):
    import json

    from typer.testing import CliRunner

    from edgekd.cli import app

    r = CliRunner().invoke(app, ["predict", str(e2e_export / E2E_MODEL), "good film", "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output.splitlines()[0])
    assert row["text"] == "good film" and set(row["probabilities"]) == {"negative", "positive"}


def test_profile_times_the_e2e_model_on_strings_and_beside_the_two_step_path(e2e_export):
    from edgekd.devices.profile import profile_model

    alone = profile_model(e2e_export / E2E_MODEL, runs=20, trials=2, warmup=2, seq_len=8)
    assert alone["end_to_end_timing"] and alone["p50_ms"] > 0
    both = profile_model(
        e2e_export / MODEL_FILES["int8"],
        runs=20,
        trials=2,
        warmup=2,
        texts=["good film", "bad"],
        vs=e2e_export / E2E_MODEL,
    )
    assert both["end_to_end_timing"] and both["vs"]["ratio_b_over_a"] > 0


def test_cli_export_e2e_says_what_it_checked(tiny_teacher, tiny_data, tmp_path):
    from typer.testing import CliRunner

    from edgekd.cli import app

    data = DataConfig(spec=str(tiny_data))
    student = untrained("word", tiny_teacher, data, tmp_path / "s")
    (student / "config.yaml").write_text(f"teacher: {tiny_teacher}\ndata:\n  spec: {tiny_data}\n")
    r = CliRunner().invoke(app, ["export", str(student), "--out", str(tmp_path / "e"), "--e2e"])
    assert r.exit_code == 0, r.output
    assert "e2e: model.e2e.onnx" in r.output and "on 40 of 40 dev rows" in r.output
    assert ExportReport.read(tmp_path / "e").e2e.source == "fp32"  # no --int8: fp32 inside
