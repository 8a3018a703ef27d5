"""The deployable bundle: manifest, integrity check, and prediction without torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import assert_refused
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


# ------------------------------------------------------------------ crafted inputs
# Every case: exit 2, one line on stderr that names the fix, no traceback, nothing
# written at --out or beside it, and nothing left in the temp folder.


def refused(r, *fragments: str) -> str:
    return assert_refused(r, *fragments)


@pytest.fixture
def temp_dir(tmp_path, monkeypatch) -> Path:
    """The temp folder a .zip unpacks into, inside this test's tmp_path."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def copied_export(export_dir: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(export_dir, tmp_path / "export"))


def test_bundle_refused_when_tokenizer_is_a_symlink_outside_the_export(export_dir, tmp_path):
    export = copied_export(export_dir, tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("password=hunter2")
    (export / "tokenizer.json").unlink()
    (export / "tokenizer.json").symlink_to(secret)
    r = runner.invoke(app, ["bundle", str(export), "--out", str(tmp_path / "b")])
    refused(r, "tokenizer.json is a symlink", "edgekd export")
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.zip").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "secret.txt"]


@pytest.mark.parametrize("where", ["parent", "absolute"])
def test_bundle_refused_when_an_export_model_path_leaves_the_folder(export_dir, tmp_path, where):
    export = copied_export(export_dir, tmp_path)
    outside = tmp_path / "outside.onnx"
    outside.write_bytes((export / "model.int8.onnx").read_bytes())
    report = json.loads((export / "export.json").read_text())
    report["models"]["int8"]["path"] = "../outside.onnx" if where == "parent" else str(outside)
    (export / "export.json").write_text(json.dumps(report))
    r = runner.invoke(app, ["bundle", str(export), "--out", str(tmp_path / "b")])
    refused(r, "models.int8.path", "not a plain file name", "re-create it with `edgekd export`")
    assert not (tmp_path / "b").exists() and not (tmp_path / "b.zip").exists()


def test_bundle_refused_when_export_json_has_a_key_twice(export_dir, tmp_path):
    export = copied_export(export_dir, tmp_path)
    text = (export / "export.json").read_text()
    # The first "kind" says export, a second one would silently win: refused instead.
    (export / "export.json").write_text(text.replace('"kind"', '"kind": "export", "kind"', 1))
    r = runner.invoke(app, ["bundle", str(export), "--out", str(tmp_path / "b")])
    refused(r, "'kind' twice", "export.json")
    assert not (tmp_path / "b").exists()


def test_predict_refused_when_a_bundle_file_is_a_symlink_with_a_matching_sha256(
    tiny_chain, tmp_path
):
    import shutil

    bundle = Path(shutil.copytree(tiny_chain / "bundle", tmp_path / "b"))
    real = tmp_path / "elsewhere.json"
    shutil.move(bundle / "tokenizer.json", real)
    (bundle / "tokenizer.json").symlink_to(real)
    r = runner.invoke(app, ["predict", str(bundle), "good"])
    refused(r, "tokenizer.json is a symlink", "edgekd bundle")


def zip_of(path: Path, entries: dict[str, bytes], method: int = 8) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def test_predict_refused_before_extracting_when_a_zip_bomb(tmp_path, temp_dir, monkeypatch):
    import tempfile
    import zipfile

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", "{}")
        with z.open("model.onnx", "w") as f:  # 200 MB of zeros, streamed: ~200 KB zipped
            block = bytes(1 << 20)
            for _ in range(200):
                f.write(block)
    assert bomb.stat().st_size < 1 << 20
    made = []
    real = tempfile.TemporaryDirectory
    monkeypatch.setattr(tempfile, "TemporaryDirectory", lambda **kw: made.append(1) or real(**kw))
    r = runner.invoke(app, ["predict", str(bomb), "good"])
    refused(r, "'model.onnx'", "zip bomb", "rebuild it with `edgekd bundle`")
    assert not made  # refused from the directory alone: no temp folder, not a byte out
    assert not any(temp_dir.iterdir())


def test_predict_refused_before_extracting_when_a_zip_is_past_the_size_cap(
    tiny_chain, tmp_path, temp_dir, monkeypatch
):
    import edgekd.stages.bundle as bundle

    monkeypatch.setattr(bundle, "MAX_BUNDLE_BYTES", 10_000)  # the tiny bundle is ~16 KB
    r = runner.invoke(app, ["predict", str(tiny_chain / "bundle.zip"), "good"])
    refused(r, "unpacks to over 10,000 bytes", "edgekd bundle")
    assert not any(temp_dir.iterdir())


def test_predict_refused_when_a_zip_has_too_many_entries(tmp_path, temp_dir):
    many = zip_of(tmp_path / "many.zip", {f"f{i}.json": b"{}" for i in range(17)})
    r = runner.invoke(app, ["predict", str(many), "good"])
    refused(r, "17 entries", "at most 16", "edgekd bundle")
    assert not any(temp_dir.iterdir())


def test_predict_refused_when_two_zip_entries_differ_only_in_case(tmp_path, temp_dir):
    # One file on a case-insensitive disk (macOS): the second would fail mid-extraction.
    twins = zip_of(tmp_path / "twins.zip", {"model.onnx": b"a", "MODEL.onnx": b"b"})
    r = runner.invoke(app, ["predict", str(twins), "good"])
    refused(r, "twice")
    assert not any(temp_dir.iterdir())


def test_predict_refused_when_a_zip_entry_has_an_unknown_compression_method(
    tiny_chain, tmp_path, temp_dir
):
    import struct
    import zipfile

    data = bytearray((tiny_chain / "bundle.zip").read_bytes())
    with zipfile.ZipFile(tiny_chain / "bundle.zip") as z:
        first = z.infolist()[0]
        start = z.start_dir  # the central directory; its first entry is `first`'s
    assert data[start : start + 4] == b"PK\x01\x02"
    struct.pack_into("<H", data, first.header_offset + 8, 99)  # the local header's method
    struct.pack_into("<H", data, start + 10, 99)  # and the central directory's
    patched = tmp_path / "patched.zip"
    patched.write_bytes(bytes(data))
    r = runner.invoke(app, ["predict", str(patched), "good"])
    refused(r, f"{first.filename!r} uses zip compression method 99", "edgekd bundle")
    assert not any(temp_dir.iterdir())


def test_predict_refused_leaving_nothing_when_a_zip_header_understates_a_size(
    tiny_chain, tmp_path, temp_dir
):
    import struct
    import zipfile

    data = bytearray((tiny_chain / "bundle.zip").read_bytes())
    with zipfile.ZipFile(tiny_chain / "bundle.zip") as z:
        start = z.start_dir
    struct.pack_into("<L", data, start + 24, 10)  # first entry: "10 bytes uncompressed"
    lying = tmp_path / "lying.zip"
    lying.write_bytes(bytes(data))
    r = runner.invoke(app, ["predict", str(lying), "good"])
    refused(r, "not a readable .zip", "edgekd bundle")
    assert not any(temp_dir.iterdir())  # what was extracted before the refusal is gone


@pytest.mark.parametrize("name", ["../evil.json", "/abs/evil.json", ".hidden", "sub/x.json"])
def test_predict_refused_when_a_zip_entry_has_a_path_or_hidden_name(tmp_path, temp_dir, name):
    odd = zip_of(tmp_path / "odd.zip", {"manifest.json": b"{}", name: b"x"})
    r = runner.invoke(app, ["predict", str(odd), "good"])
    refused(r, "which no edgekd bundle has", "edgekd bundle")
    assert not any(temp_dir.iterdir())
    assert not (tmp_path.parent / "evil.json").exists()


def test_predict_refused_when_a_zip_entry_is_a_symlink(tmp_path, temp_dir):
    import stat
    import zipfile

    link = zipfile.ZipInfo("tokenizer.json")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(tmp_path / "link.zip", "w") as z:
        z.writestr("manifest.json", "{}")
        z.writestr(link, "/etc/passwd")
    r = runner.invoke(app, ["predict", str(tmp_path / "link.zip"), "good"])
    refused(r, "'tokenizer.json' is a symlink", "edgekd bundle")
    assert not any(temp_dir.iterdir())


def test_bundle_zip_predicts_when_within_the_caps(tiny_chain, temp_dir):
    from edgekd.stages.bundle import Bundle

    b = Bundle(tiny_chain / "bundle.zip")
    assert b.predict(["good film"])[0]["label"] in b.label_names
    del b


def test_predict_leaves_no_temp_files_when_a_zipped_bundle_fails_verification(
    tiny_chain, tmp_path, temp_dir
):
    import zipfile

    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(tiny_chain / "bundle.zip") as src, zipfile.ZipFile(tampered, "w") as z:
        for info in src.infolist():
            data = src.read(info)
            z.writestr(info.filename, data + b"\0" if info.filename == "model.onnx" else data)
    r = runner.invoke(app, ["predict", str(tampered), "good"])
    refused(r, "does not match its sha256", "edgekd bundle")
    assert not any(temp_dir.iterdir())
