"""`edgekd export --e2e`: one ONNX file, a batch of strings in, one label per string out,
predicting row by row as the Python tokenizer path does on the same batches; then
bundled alone, predicted from and profiled."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from edgekd.artifacts import E2E_MODEL, MODEL_FILES, BundleManifest, ExportReport
from edgekd.config import DataConfig, ExportConfig
from edgekd.errors import EdgeKDError
from edgekd.exporters.e2e import build_e2e, check_tokenizer, validate_e2e
from edgekd.stages.export import export as run_export
from edgekd.students.predict import E2EPredictor, OnnxPredictor, extension_options, softmax

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
    """An untrained student of `kind` (BiLSTM word or wordpiece, CNN, or BERT) on `data`:
    the tokenizer is what is under test, weights only need to be fixed."""
    import torch

    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.base import save_student
    from edgekd.students.bert import BertStudent
    from edgekd.students.bilstm import BiLSTMStudent
    from edgekd.students.cnn import CNNStudent

    torch.manual_seed(0)
    texts = load_task(data).train.texts
    if kind == "bert":
        options = {"layers": 1, "max_length": MAX_LENGTH}
        model, tok = BertStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    elif kind == "cnn":
        options = {"vocab": "wordpiece", "embedding_dim": 8, "filters": 4, "mlp_size": 8}
        options["max_length"] = MAX_LENGTH
        model, tok = CNNStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    else:
        options = {"vocab": kind, "embedding_dim": 8, "hidden_size": 4, "mlp_size": 8}
        options["max_length"] = MAX_LENGTH
        model, tok = BiLSTMStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    folder.mkdir()
    save_student(folder, model.eval(), tok, ["negative", "positive"])
    return folder


def two_step(model: Path, texts: list, batch: int) -> np.ndarray:
    """The Python tokenizer + ONNX path's probabilities, `batch` consecutive rows a call."""
    return softmax(OnnxPredictor(model, batch_size=batch).logits(texts, in_order=True))


@pytest.mark.parametrize("pairs", [False, True], ids=["single", "pair"])
@pytest.mark.parametrize("kind", ["word", "wordpiece", "bert"])
def test_e2e_predicts_as_the_tokenizer_path_when_batched(
    kind, pairs, tiny_teacher, tiny_data, pair_data, tmp_path
):
    data = DataConfig(spec=str(tiny_data))
    if pairs:
        data = DataConfig(spec=str(pair_data), text_pair_column="sentence2")
    student = untrained(kind, tiny_teacher, data, tmp_path / "s")
    report = run_export(ExportConfig(e2e=True, guard=False), student, tmp_path / "e", data)
    assert report.e2e is not None and report.e2e.rows == report.n_dev == 40
    assert (report.e2e.source, report.e2e.label_agreement) == ("int8", 1.0)
    assert set(report.e2e["max_probability_diff_by_batch"]) == {"1", "8", "32"}
    texts: list = list(zip(ODD, ODD[::-1], strict=True)) if pairs else ODD
    one_file = E2EPredictor(tmp_path / "e" / E2E_MODEL)
    assert one_file.pairs is pairs
    # One call of all 8 ragged rows (0 to 200 words), and one row a call.
    for batch in (len(texts), 1):
        got = one_file.probabilities(texts, batch_size=batch)
        want = two_step(tmp_path / "e" / MODEL_FILES["int8"], texts, batch)
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


@pytest.fixture(scope="module")
def e2e_pair_export(tiny_teacher, pair_data, tmp_path_factory):
    """A siamese BiLSTM on sentence pairs: its file reads [N, 2] strings."""
    root = tmp_path_factory.mktemp("e2e-pairs")
    data = DataConfig(spec=str(pair_data), text_pair_column="sentence2")
    student = untrained("wordpiece", tiny_teacher, data, root / "s")
    run_export(ExportConfig(e2e=True, guard=False), student, root / "e", data)
    return root / "e"


def review(words: int, seed: int) -> str:
    """`words` words, seeded: known ones, an unknown one, accents, CJK and punctuation."""
    rng = random.Random(seed)
    pool = ["good", "bad", "film", "the", "plot", "xyzzy", "Ünïcödé", "字", "isn't", "!!"]
    return " ".join(rng.choice(pool) for _ in range(words))


def ragged(dev: list[str]) -> list[str]:
    """Dev rows, ODD, empty rows and two 5,000-word rows (~24 KB each, truncated to
    MAX_LENGTH), shuffled so long and empty rows share batches: 52 rows, so batches
    of 8 and 32 both end short (52 = 6 × 8 + 4 = 32 + 20)."""
    texts = dev + ODD + ["", review(5_000, 0), "", review(5_000, 1)]
    random.Random(0).shuffle(texts)
    return texts


def session(path: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), extension_options(), providers=["CPUExecutionProvider"])


def test_e2e_batch_equals_the_tokenizer_path_row_by_row_at_batch_1_8_and_32(e2e_export, tiny_data):
    from edgekd.data import load_task

    texts = ragged(load_task(DataConfig(spec=str(tiny_data))).dev.texts)
    assert len(texts) == 52 and max(len(t.split()) for t in texts) == 5_000 and "" in texts
    one_file = E2EPredictor(e2e_export / E2E_MODEL)
    for batch in (1, 8, 32):
        got = one_file.probabilities(texts, batch_size=batch)
        want = two_step(e2e_export / MODEL_FILES["int8"], texts, batch)
        assert np.array_equal(got.argmax(1), want.argmax(1)), batch
        np.testing.assert_allclose(got, want, atol=1e-6, err_msg=f"batch {batch}")
    # A batch of nothing but empty rows: each row is the one fill token.
    empty = ["", "   ", "\t"]
    got = one_file.probabilities(empty, batch_size=3)
    np.testing.assert_allclose(got, two_step(e2e_export / MODEL_FILES["int8"], empty, 3), atol=1e-6)


@pytest.mark.parametrize(
    ("kind", "pairs"),
    [("wordpiece", False), ("wordpiece", True), ("cnn", False), ("bert", False), ("bert", True)],
    ids=["bilstm", "siamese-bilstm", "cnn", "bert", "bert-pair"],
)
def test_e2e_row_gives_its_batch_1_probabilities_when_padded_beside_longer_rows(
    kind, pairs, tiny_teacher, tiny_data, pair_data, tmp_path
):
    """fp32 inside (int8 scales over the batch): a row's result must not depend on its
    batch, so a padded row that saw its padding, or another row's ids, would show."""
    import json

    from edgekd.artifacts import StudentMeta

    data = DataConfig(spec=str(tiny_data))
    if pairs:
        data = DataConfig(spec=str(pair_data), text_pair_column="sentence2")
    student = untrained(kind, tiny_teacher, data, tmp_path / "s")
    run_export(ExportConfig(int8=False, guard=False), student, tmp_path / "e", data)
    meta = StudentMeta.read(tmp_path / "e")
    out = tmp_path / "fp32.e2e.onnx"
    fp32 = tmp_path / "e" / MODEL_FILES["fp32"]
    spec = json.loads((tmp_path / "e" / "tokenizer.json").read_text())
    build_e2e(fp32, spec, meta.max_length, meta.add_special_tokens, meta.id2label, out, pairs)
    texts: list = ["good", "", "the plot was good and the film was bad " * 3, "bad film", "字"]
    if pairs:
        texts = list(zip(texts, texts[1:] + texts[:1], strict=True))
    batched = E2EPredictor(out).probabilities(texts, batch_size=len(texts))
    np.testing.assert_allclose(batched, two_step(fp32, texts, 1), atol=1e-6)
    assert len({round(float(p[0]), 6) for p in batched}) > 1  # rows differ: order is checked


def test_e2e_file_returns_one_label_and_probability_row_per_text_when_fed_n_strings(
    e2e_export,
):
    s = session(e2e_export / E2E_MODEL)
    for n in (1, 3, 32):
        texts = np.array([review(1 + 7 * i % 40, i) for i in range(n)], dtype=object)
        label, probabilities = s.run(["label", "probabilities"], {"text": texts})
        assert label.shape == (n,) and label.dtype == np.int64
        assert probabilities.shape == (n, 2)
        assert np.array_equal(label, probabilities.argmax(1))


def test_e2e_pair_model_reads_n_by_2_strings_and_refuses_a_1d_pair(e2e_pair_export):
    import onnxruntime as ort

    s = session(e2e_pair_export / E2E_MODEL)
    pairs = [("good film", "bad"), ("", "the plot"), (review(5_000, 2), "")]
    label, probabilities = s.run(["label", "probabilities"], {"text": np.array(pairs, object)})
    assert label.shape == (3,) and probabilities.shape == (3, 2)
    want = two_step(e2e_pair_export / MODEL_FILES["int8"], pairs, 3)
    np.testing.assert_allclose(probabilities, want, atol=1e-6)
    # The old spelling of one pair is a batch of two texts: refused by the input's rank.
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="Got: 1"):
        s.run(["label"], {"text": np.array(["good film", "bad"], object)})
    with pytest.raises(EdgeKDError, match="reads sentence pairs, but row 1 is a single text"):
        E2EPredictor(e2e_pair_export / E2E_MODEL).probabilities(["good film", "bad"])


def test_e2e_single_text_model_refuses_pairs(e2e_export):
    import onnxruntime as ort

    with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument, match="Got: 2"):
        session(e2e_export / E2E_MODEL).run(["label"], {"text": np.array([["a", "b"]], object)})
    with pytest.raises(EdgeKDError, match="reads one text per row, but row 2 is a sentence pair"):
        E2EPredictor(e2e_export / E2E_MODEL).probabilities(["good", ("a", "b")])


@pytest.mark.slow  # a subprocess: a crash in onnxruntime must fail this test alone
def test_e2e_file_returns_no_rows_when_fed_an_empty_batch(e2e_export, e2e_pair_export):
    import subprocess
    import sys

    # onnxruntime 1.31 segfaults running the int8 BiLSTM on a batch of 0 rows; the graph
    # runs one dummy row instead and cuts it off.
    code = (
        "import sys, numpy as np, onnxruntime as ort\n"
        "from edgekd.students.predict import extension_options\n"
        "for path, shape in ((sys.argv[1], (0,)), (sys.argv[2], (0, 2))):\n"
        "    s = ort.InferenceSession(path, extension_options(), "
        "providers=['CPUExecutionProvider'])\n"
        "    label, p = s.run(None, {'text': np.zeros(shape, dtype=object)})\n"
        "    print(label.shape, p.shape)\n"
    )
    files = [str(e2e_export / E2E_MODEL), str(e2e_pair_export / E2E_MODEL)]
    r = subprocess.run([sys.executable, "-c", code, *files], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["(0,) (0, 2)", "(0,) (0, 2)"]
    assert E2EPredictor(e2e_export / E2E_MODEL).probabilities([]).shape == (0, 2)


class Calls:
    """A session that records the shape of each `text` it is fed."""

    def __init__(self, inner) -> None:
        self.inner, self.shapes = inner, []

    def run(self, names, feed):
        self.shapes.append(feed["text"].shape)
        return self.inner.run(names, feed)


def test_e2e_predictor_sends_batch_size_rows_a_call(e2e_export):
    predictor = E2EPredictor(e2e_export / E2E_MODEL, batch_size=2)
    predictor.session = Calls(predictor.session)
    predictor.probabilities(["good", "bad film", "", "the plot"])
    predictor.probabilities(["good", "bad film", "", "the plot"], batch_size=3)
    assert predictor.session.shapes == [(2,), (2,), (3,), (1,)]


def test_e2e_predictor_reads_a_file_of_one_row_a_call_one_row_a_call(e2e_export, tmp_path):
    """A model.e2e.onnx of edgekd before batching declares `label` [1]: its graph takes
    one text a call, so the predictor feeds it so (a bundle shipped then still works)."""
    import onnx

    model = onnx.load(str(e2e_export / E2E_MODEL))
    for output in model.graph.output:  # what the old files declared; N = 1 runs alike
        output.type.tensor_type.shape.dim[0].ClearField("dim_param")
        output.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(model, str(tmp_path / E2E_MODEL))
    old = E2EPredictor(tmp_path / E2E_MODEL)
    old.session = Calls(old.session)
    texts = ["good", "bad film", ""]
    got = old.probabilities(texts)
    assert old.session.shapes == [(1,)] * 3
    np.testing.assert_allclose(got, two_step(e2e_export / MODEL_FILES["int8"], texts, 1), atol=1e-6)


def test_export_check_fails_when_the_tokenizer_path_labels_a_row_otherwise_at_batch_32(
    e2e_export, tmp_path
):
    import shutil

    import onnx
    from onnx import helper

    # The two-step side with negated logits: every label flips (argmax becomes argmin).
    folder = tmp_path / "e"
    shutil.copytree(e2e_export, folder)
    model = onnx.load(str(folder / MODEL_FILES["int8"]))
    logits = model.graph.output[0].name
    model.graph.node.append(helper.make_node("Neg", [logits], ["negated"]))
    model.graph.output[0].name = "negated"
    onnx.save(model, str(folder / "negated.onnx"))
    texts = ["good film", "bad", "the plot"]
    with pytest.raises(EdgeKDError, match=r"3 dev row\(s\) differently .* at batch 32"):
        validate_e2e(folder / E2E_MODEL, folder / "negated.onnx", texts, batch_sizes=(32,))
    report = validate_e2e(folder / E2E_MODEL, folder / MODEL_FILES["int8"], texts)
    assert set(report["max_probability_diff_by_batch"]) == {"1", "8", "32"}


def test_bundle_ships_the_e2e_model_alone_and_predicts_the_same(e2e_export, tmp_path):
    from edgekd.stages.bundle import Bundle, make_bundle

    archive = make_bundle(e2e_export, tmp_path / "b", model="e2e")
    manifest = BundleManifest.read(tmp_path / "b")
    assert manifest.e2e and set(manifest.files) == {E2E_MODEL, "README.md"}  # and its card
    assert manifest.model == ExportReport.read(e2e_export).e2e.source
    texts = ["good film", "bad", ""]
    from_zip = Bundle(archive).predict(texts)  # one call of the three
    ids_path = OnnxPredictor(e2e_export / MODEL_FILES["int8"], batch_size=len(texts))
    labels = [ids_path.label_names[i] for i in ids_path.logits(texts, in_order=True).argmax(1)]
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


def test_profile_times_a_bare_e2e_model_from_the_vocabulary_inside_it(e2e_export, tmp_path):
    # No tokenizer.json beside it and no --data: the synthetic texts come from the
    # WordpieceTokenizer inside the graph's Loop body.
    import json

    import onnx

    from edgekd.devices.profile import graph_vocabulary, profile_model

    bare = tmp_path / E2E_MODEL
    bare.write_bytes((e2e_export / E2E_MODEL).read_bytes())
    vocab = json.loads((e2e_export / "tokenizer.json").read_text())["model"]["vocab"]
    assert set(graph_vocabulary(onnx.load(str(bare)).graph)) == set(vocab)
    r = profile_model(bare, runs=4, trials=2, warmup=0, seq_len=4)
    assert r["end_to_end_timing"] and r["p50_ms"] > 0


@pytest.mark.parametrize("vocab", [b"\xff", b"[1, 2]", b"7", b"{}", b"[" * 100_000])
def test_graph_vocabulary_skips_a_crafted_tokenizer_vocabulary(vocab):
    # No vocabulary to draw from is `profile`'s one-line refusal (pass --data), never a
    # traceback from a file that may have been crafted.
    from onnx import helper

    from edgekd.devices.profile import graph_vocabulary

    node = helper.make_node("WordpieceTokenizer", ["t"], ["p"], domain="ai.onnx.contrib")
    node.attribute.append(helper.make_attribute("vocab", vocab))
    graph = helper.make_graph([node], "g", [], [])
    assert graph_vocabulary(graph) == []
