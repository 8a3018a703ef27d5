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
    assert set(manifest["files"]) == {"model.onnx", "tokenizer.json", "student.json", "README.md"}
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


def test_onnx_predictor_runs_the_sessions_active_asks_for_at_each_call(export_dir, monkeypatch):
    import numpy as np

    from edgekd.students.predict import OnnxPredictor

    texts = [f"good movie number {i}" * (i % 4 + 1) for i in range(37)]
    running = [2]
    model = OnnxPredictor(
        export_dir / "model.int8.onnx", batch_size=4, workers=2, active=lambda: running[0]
    )
    calls = [0, 0]
    for n, session in enumerate(model.sessions):

        def spy(outputs, feed, n=n, run=session.run):
            calls[n] += 1
            return run(outputs, feed)

        monkeypatch.setattr(session, "run", spy)
    both = model.logits(texts)
    batches = sum(calls)
    assert calls[0] and calls[1]  # both sessions ran
    running[0], calls[:] = 1, [0, 0]  # e.g. the student now trains on the other core
    np.testing.assert_array_equal(model.logits(texts), both)
    assert calls == [batches, 0]  # every batch on the first session


def test_onnx_predictor_batches_long_rows_fewer_at_a_time(export_dir, monkeypatch):
    import numpy as np

    from edgekd.students import predict
    from edgekd.students.predict import OnnxPredictor

    # 4 tokens a row-slot: batches of 4 rows pad to at most 16 tokens, or hold one row.
    monkeypatch.setattr(predict, "TOKENS_PER_ROW", 4)
    texts = [" ".join(["good"] * (i % 9 + 1)) for i in range(30)]
    model = OnnxPredictor(export_dir / "model.onnx", batch_size=4, threads=1)
    shapes: list[tuple[int, int]] = []
    run = model.session.run

    def spy(outputs, feed):
        shapes.append(feed["input_ids"].shape)
        return run(outputs, feed)

    monkeypatch.setattr(model.session, "run", spy)
    got = model.logits(texts)
    assert sum(rows for rows, _ in shapes) == len(texts)
    assert all(rows * width <= 16 or rows == 1 for rows, width in shapes), shapes
    assert max(width for _, width in shapes) > 8  # long rows were there, fewer a batch
    one = OnnxPredictor(export_dir / "model.onnx", batch_size=1, threads=1).logits(texts)
    np.testing.assert_allclose(got, one, atol=1e-5)  # the same rows, however batched


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


# ------------------------------------------------------------------ the model card
# README.md: Hub front matter read back with yaml.safe_load, then Markdown whose
# no-edgekd snippet is run against the bundle.


def card_parts(text: str) -> tuple[dict, str]:
    """(front matter as yaml.safe_load reads it, the Markdown after it), split where a
    Hub or front-matter reader splits: at the first `---` line after the opening one."""
    import yaml

    assert text.startswith("---\n"), text[:40]
    head, sep, body = text[4:].partition("\n---\n")
    assert sep, "no closing --- line"
    return yaml.safe_load(head), body


def card_metrics(front: dict) -> dict[str, float]:
    (entry,) = front["model-index"]
    (result,) = entry["results"]
    return {m["type"]: m["value"] for m in result["metrics"]}


def copied_chain(tiny_chain: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The chain's student and export copied, the export naming the copied student."""
    import shutil

    student = Path(shutil.copytree(tiny_chain / "student", tmp_path / "student"))
    export = Path(shutil.copytree(tiny_chain / "export", tmp_path / "export"))
    edit_json(export / "export.json", lambda d: d.update(student=str(student)))
    return student, export


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def test_card_front_matter_parses_with_the_labels_accuracy_and_bytes_of_the_manifest(
    tiny_chain, tiny_teacher, tiny_data
):
    from edgekd import __version__
    from edgekd.artifacts import ModelCard

    text = (tiny_chain / "bundle" / "README.md").read_text(encoding="utf-8")
    front, body = card_parts(text)
    manifest = json.loads((tiny_chain / "bundle" / "manifest.json").read_text())
    distilled = json.loads((tiny_chain / "student" / "metrics.json").read_text())
    assert front["pipeline_tag"] == "text-classification" and front["library_name"] == "onnx"
    assert front["edgekd"]["labels"] == manifest["labels"] == ["negative", "positive"]
    assert front["edgekd"]["version"] == __version__ and front["edgekd"]["model"] == "int8"
    got = card_metrics(front)
    assert got["accuracy"] == manifest["accuracy"]
    assert got["agreement"] == distilled["agreement"]  # the student's, with the teacher
    assert got["model_bytes"] == manifest["files"]["model.onnx"]["bytes"]
    runs = [f["bytes"] for name, f in manifest["files"].items() if name != "README.md"]
    assert got["bundle_bytes"] == sum(runs)
    assert front["edgekd"]["params"] == distilled["params"]
    assert front["edgekd"]["dev_rows_sha256"] == manifest["predictions"]["rows_sha256"]
    # Local teacher and data: named nowhere (no Hub id, and no path of the user's).
    assert "base_model" not in front and "datasets" not in front
    assert str(tiny_teacher) not in text and str(tiny_data) not in text
    # edgekd's own reader and loader read the same card.
    card = ModelCard.read(tiny_chain / "bundle")
    assert card.edgekd.labels == front["edgekd"]["labels"] and card.body == body.lstrip("\n")
    assert body.startswith("\n# `bilstm` student, int8 ONNX\n")
    assert f"0.3750; the teacher's {distilled['teacher_accuracy']:.4f}" in body


CRAFTED = [
    "a: b",
    "say \"hi\" and 'bye'",
    "x\n---\ny",
    "---",
    "...",
    "line\r\nbreak\u2028sep",
    "日本語のラベル",
    "1e3",
    "no",
    "# not a comment",
    "`code` | <b>html</b>",
    "",
]


def test_card_front_matter_holds_crafted_label_names_when_they_hold_yaml_syntax(
    tiny_chain, tmp_path
):
    from edgekd.artifacts import ModelCard
    from edgekd.config import parse_yaml
    from edgekd.stages.bundle import make_bundle

    _, export = copied_chain(tiny_chain, tmp_path)
    edit_json(
        export / "student.json",
        lambda d: d.update(id2label=CRAFTED, num_labels=len(CRAFTED), student="s\n---"),
    )
    make_bundle(export, tmp_path / "b")
    text = (tmp_path / "b" / "README.md").read_text(encoding="utf-8")
    front, body = card_parts(text)
    assert front["edgekd"]["labels"] == CRAFTED  # all of them, none read as a number or bool
    assert front["edgekd"]["student"] == "s\n---"
    assert text.splitlines().count("---") == 2  # the front matter's own two lines only
    assert body.startswith("\n# ")
    head = text[4:].partition("\n---\n")[0]
    assert parse_yaml(head)["edgekd"]["labels"] == CRAFTED  # YAML 1.2 floats: "1e3" stays text
    assert ModelCard.read(tmp_path / "b").edgekd.labels == CRAFTED
    # The Markdown lists them on one line, each in code it cannot close.
    (listed,) = [line for line in body.splitlines() if line.startswith("A text classifier")]
    assert "`` `code` | <b>html</b> ``" in listed and "\\n---\\n" in listed


def test_card_is_in_the_manifest_and_refused_by_predict_when_edited(tiny_chain, tmp_path):
    import hashlib
    import shutil

    manifest = json.loads((tiny_chain / "bundle" / "manifest.json").read_text())
    card = (tiny_chain / "bundle" / "README.md").read_bytes()
    assert manifest["files"]["README.md"] == {
        "sha256": hashlib.sha256(card).hexdigest(),
        "bytes": len(card),
    }
    bundle = Path(shutil.copytree(tiny_chain / "bundle", tmp_path / "b"))
    (bundle / "README.md").write_bytes(card.replace(b"library_name: onnx", b"library_name: x"))
    r = runner.invoke(app, ["predict", str(bundle), "good"])
    refused(r, "README.md does not match its sha256", "edgekd bundle")
    (bundle / "README.md").unlink()
    r = runner.invoke(app, ["predict", str(bundle), "good"])
    refused(r, "README.md is missing", "edgekd bundle")


def test_bundle_zip_holds_the_card_of_the_folder(tiny_chain):
    import zipfile

    with zipfile.ZipFile(tiny_chain / "bundle.zip") as z:
        assert "README.md" in z.namelist()
        assert z.read("README.md") == (tiny_chain / "bundle" / "README.md").read_bytes()


SNIPPET_IMPORTS = {"json", "numpy", "onnxruntime", "tokenizers", "onnxruntime_extensions"}
TEXTS = ["the movie was good", "", "awful plot " * 40, "日本語 good 字", "xyzzy!?", "DULL film"]


def run_card_snippet(bundle: Path, texts: list[str], monkeypatch, capsys) -> list:
    """The card's ```python block, checked to import nothing but the runtime libraries,
    run from inside `bundle` as the card says; its `predict(texts)`."""
    import ast
    import re

    text = (bundle / "README.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)
    imported = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= SNIPPET_IMPORTS, imported  # no edgekd, torch or transformers
    monkeypatch.chdir(bundle)
    namespace: dict = {}
    capsys.readouterr()
    exec(compile(code, str(bundle / "README.md"), "exec"), namespace)
    assert capsys.readouterr().out.startswith("[(")  # its own example printed a prediction
    return namespace["predict"](texts)


def test_card_snippet_predicts_the_labels_of_bundle_without_edgekd(
    tiny_chain, tmp_path, monkeypatch, capsys
):
    import shutil

    from edgekd.stages.bundle import Bundle

    bundle = Path(shutil.copytree(tiny_chain / "bundle", tmp_path / "b"))
    got = run_card_snippet(bundle, TEXTS, monkeypatch, capsys)
    want = Bundle(bundle).predict(TEXTS)
    assert [label for label, _ in got] == [w["label"] for w in want]
    for (_, probs), w in zip(got, want, strict=True):
        assert probs == pytest.approx(w["probabilities"], abs=1e-5)


def test_card_names_the_hub_teacher_and_dataset_when_distilled_from_the_hub(
    tiny_chain, tmp_path, monkeypatch
):
    from edgekd.stages.bundle import make_bundle

    monkeypatch.chdir(tmp_path)  # no folder here is named like the ids
    student, export = copied_chain(tiny_chain, tmp_path)
    edit_json(student / "metrics.json", lambda d: d.update(teacher="acme/bert-sst2"))
    config = (student / "config.yaml").read_text()
    spec = next(line for line in config.splitlines() if line.startswith("  spec: "))
    (student / "config.yaml").write_text(config.replace(spec, "  spec: glue/sst2"))
    make_bundle(export, tmp_path / "b")
    text = (tmp_path / "b" / "README.md").read_text(encoding="utf-8")
    front, body = card_parts(text)
    assert front["base_model"] == "acme/bert-sst2" and front["datasets"] == ["glue/sst2"]
    assert front["model-index"][0]["results"][0]["dataset"]["type"] == "glue/sst2"
    assert "from a fine-tuned teacher (`acme/bert-sst2`)" in body


def test_card_leaves_out_what_distill_recorded_when_the_student_changed_since_export(
    tiny_chain, tmp_path
):
    from edgekd.stages.bundle import make_bundle

    student, export = copied_chain(tiny_chain, tmp_path)
    # Re-distilled into the same folder after the export: its metrics are another run's.
    edit_json(student / "metrics.json", lambda d: d.update(student_accuracy=0.123))
    make_bundle(export, tmp_path / "b")
    front, body = card_parts((tmp_path / "b" / "README.md").read_text(encoding="utf-8"))
    got = card_metrics(front)
    assert "agreement" not in got and "params" not in front["edgekd"]
    assert front["model-index"][0]["results"][0]["dataset"]["type"] == "unknown"
    assert "distill" not in front["edgekd"]["config_sha256"]
    # What the export itself measured stays.
    assert (
        got["accuracy"]
        == json.loads((export / "export.json").read_text())["models"]["int8"]["accuracy"]
    )
    assert "teacher's label" not in body


def untrained_pair_student(teacher: Path, data, folder: Path) -> Path:
    """A siamese BiLSTM on `data`'s sentence pairs, untrained: only fixed weights matter."""
    import torch

    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher
    from edgekd.students.base import save_student
    from edgekd.students.bilstm import BiLSTMStudent

    torch.manual_seed(0)
    options = {"vocab": "wordpiece", "embedding_dim": 8, "hidden_size": 4, "mlp_size": 8}
    texts = load_task(data).train.texts
    model, tok = BiLSTMStudent.prepare(options, texts, 2, *load_teacher(str(teacher)))
    folder.mkdir()
    save_student(folder, model.eval(), tok, ["negative", "positive"])
    return folder


@pytest.mark.slow  # exports the one-file model (~5 s)
@pytest.mark.parametrize("pairs", [False, True], ids=["single", "pair"])
def test_card_of_an_e2e_bundle_runs_its_one_file_snippet_as_bundle_predicts(
    pairs, tiny_chain, tiny_teacher, pair_data, tmp_path, monkeypatch, capsys
):
    from edgekd.config import DataConfig, ExportConfig
    from edgekd.render import print_export
    from edgekd.stages.bundle import Bundle, make_bundle
    from edgekd.stages.export import export as run_export

    student, data, texts = tiny_chain / "student", None, list(TEXTS)
    if pairs:  # its file reads [N, 2] strings: the snippet's one call must send them so
        data = DataConfig(spec=str(pair_data), text_pair_column="sentence2")
        student = untrained_pair_student(tiny_teacher, data, tmp_path / "s")
        texts = list(zip(TEXTS, TEXTS[::-1], strict=True))
    report = run_export(ExportConfig(e2e=True, guard=False), student, tmp_path / "e", data)
    assert report.e2e is not None and set(report.e2e.max_probability_diff_by_batch) == {
        "1", "8", "32",
    }  # fmt: skip
    capsys.readouterr()
    print_export(report, tmp_path / "e")
    assert f"on {report.e2e.rows} of {report.e2e.rows} dev rows at batch 1, 8 and 32" in (
        capsys.readouterr().out
    )
    make_bundle(tmp_path / "e", tmp_path / "b", model="e2e")
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.e2e.onnx", "README.md"}
    front, _ = card_parts((tmp_path / "b" / "README.md").read_text(encoding="utf-8"))
    assert front["edgekd"]["e2e"] is True
    assert card_metrics(front)["model_bytes"] == manifest["files"]["model.e2e.onnx"]["bytes"]
    got = run_card_snippet(tmp_path / "b", texts, monkeypatch, capsys)  # all rows, one call
    want = Bundle(tmp_path / "b").predict(texts)
    assert [label for label, _ in got] == [w["label"] for w in want]
    for (_, probs), w in zip(got, want, strict=True):  # one batch each side: the same call
        assert probs == pytest.approx(w["probabilities"], abs=1e-5)


@pytest.mark.slow  # builds and exports a BERT student (~15 s)
def test_card_snippet_predicts_the_labels_of_bundle_when_the_student_adds_special_tokens(
    tiny_teacher, tiny_data, tmp_path, monkeypatch, capsys
):
    import torch

    from edgekd.config import DataConfig, ExportConfig
    from edgekd.data import load_task
    from edgekd.distill.teacher import load_teacher
    from edgekd.stages.bundle import Bundle, make_bundle
    from edgekd.stages.export import export as run_export
    from edgekd.students.base import save_student
    from edgekd.students.bert import BertStudent

    # [CLS]/[SEP], token type ids, and truncation at 12 tokens by the tokenizer itself:
    # what the BiLSTM's snippet run above never meets. Untrained: only fixed weights matter.
    torch.manual_seed(0)
    data = DataConfig(spec=str(tiny_data))
    texts = load_task(data).train.texts
    options = {"layers": 1, "max_length": 12}
    model, tok = BertStudent.prepare(options, texts, 2, *load_teacher(str(tiny_teacher)))
    (tmp_path / "s").mkdir()
    save_student(tmp_path / "s", model.eval(), tok, ["negative", "positive"])
    run_export(ExportConfig(guard=False), tmp_path / "s", tmp_path / "e", data)
    make_bundle(tmp_path / "e", tmp_path / "b")
    assert json.loads((tmp_path / "b" / "student.json").read_text())["add_special_tokens"]
    got = run_card_snippet(tmp_path / "b", TEXTS, monkeypatch, capsys)
    want = Bundle(tmp_path / "b").predict(TEXTS)
    assert [label for label, _ in got] == [w["label"] for w in want]
    for (_, probs), w in zip(got, want, strict=True):
        assert probs == pytest.approx(w["probabilities"], abs=1e-5)
