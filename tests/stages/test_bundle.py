"""The deployable bundle: manifest, integrity check, and prediction without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgekd.cli import app

runner = CliRunner()


@pytest.fixture
def export_dir(tiny_export) -> Path:
    return tiny_export


def test_bundle_holds_int8_model_tokenizer_labels_and_sha256_manifest(export_dir, tmp_path):
    r = runner.invoke(app, ["bundle", str(export_dir), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["model"] == "int8"
    assert set(manifest["files"]) == {"model.onnx", "tokenizer.json", "student.json"}
    assert (tmp_path / "b.zip").is_file()
    report = json.loads((export_dir / "export.json").read_text())
    assert manifest["accuracy"] == report["models"]["int8"]["accuracy"]


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(f"{name} must not be imported by predict")
sys.meta_path.insert(0, Block())
from typer.testing import CliRunner
from edgekd.cli import app
r = CliRunner().invoke(app, sys.argv[1:], catch_exceptions=False)
print(r.output, end="")
print("HEAVY", sorted(m for m in ("torch", "transformers") if m in sys.modules))
sys.exit(r.exit_code)
"""


@pytest.mark.parametrize("archive", [False, True], ids=["folder", "zip"])
def test_predict_runs_without_torch_and_matches_the_export(export_dir, tmp_path, archive):
    from edgekd.students.predict import OnnxPredictor

    runner.invoke(app, ["bundle", str(export_dir), "--out", str(tmp_path / "b")])
    target = tmp_path / ("b.zip" if archive else "b")
    texts = ["the movie was good", "awful plot", "a really dull film"]
    out = subprocess.run(
        [sys.executable, "-c", BLOCKER, "predict", str(target), *texts, "--json"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr + out.stdout
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "HEAVY []"
    got = [json.loads(line) for line in lines[:-1]]
    want = OnnxPredictor(export_dir / "model.int8.onnx").logits(texts).argmax(1)
    names = OnnxPredictor(export_dir / "model.int8.onnx").label_names
    assert [g["label"] for g in got] == [names[i] for i in want]
    assert all(abs(sum(g["probabilities"].values()) - 1) < 1e-4 for g in got)


def test_predict_reads_a_file_of_texts(export_dir, tmp_path):
    runner.invoke(app, ["bundle", str(export_dir), "--out", str(tmp_path / "b")])
    (tmp_path / "in.txt").write_text("good film\n\nbad plot\n")
    r = runner.invoke(app, ["predict", str(tmp_path / "b"), "--file", str(tmp_path / "in.txt")])
    assert r.exit_code == 0, r.output
    assert len(r.output.strip().splitlines()) == 2


def test_predict_refuses_a_tampered_bundle(export_dir, tmp_path):
    runner.invoke(app, ["bundle", str(export_dir), "--out", str(tmp_path / "b")])
    with open(tmp_path / "b" / "model.onnx", "ab") as f:
        f.write(b"\0")
    r = runner.invoke(app, ["predict", str(tmp_path / "b"), "good"])
    assert r.exit_code == 2 and "does not match its sha256" in r.output


def test_bundle_refuses_a_model_the_export_lacks(export_dir, tmp_path):
    fp32_only = tmp_path / "e"
    fp32_only.mkdir()
    report = json.loads((export_dir / "export.json").read_text())
    del report["models"]["int8"]
    (fp32_only / "export.json").write_text(json.dumps(report))
    r = runner.invoke(
        app, ["bundle", str(fp32_only), "--out", str(tmp_path / "b"), "--model", "int8"]
    )
    assert r.exit_code == 2 and "no int8 model" in r.output
    assert not (tmp_path / "b").exists()


def test_onnx_predictor_workers_give_the_same_logits_as_one_session(export_dir):
    import numpy as np

    from edgekd.students.predict import OnnxPredictor

    texts = [f"good movie number {i}" * (i % 4 + 1) for i in range(37)]
    # One single-thread session: onnxruntime's int8 MatMul kernels round differently
    # with an intra-op pool (~4e-6), which is not what the workers change.
    one = OnnxPredictor(export_dir / "model.int8.onnx", batch_size=4, threads=1).logits(texts)
    two = OnnxPredictor(export_dir / "model.int8.onnx", batch_size=4, workers=2)
    assert len(two.sessions) == 2
    np.testing.assert_array_equal(two.logits(texts, "labelling"), one)
