"""The deployable bundle: one folder (and a .zip of it) that runs with onnxruntime,
numpy and `tokenizers` alone.

    model.onnx       the model that ships (int8 when the export kept one, else fp32)
    tokenizer.json   the student's tokenizer
    student.json     label names, max length, special tokens
    manifest.json    sha256 and bytes of every file, accuracy, the measured profile

or, with `--model e2e`, `model.e2e.onnx` alone beside the manifest (string in, label
out: tokenizer and label names inside; onnxruntime-extensions runs it).

`Bundle` verifies every sha256 before it loads anything, then predicts labels and
probabilities. This module must never import torch or transformers (a test checks).
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.artifacts import (
    E2E_MODEL,
    MODEL_FILES,
    PROFILE_GLOB,
    TOKENIZER,
    BundleFile,
    BundleManifest,
    DevPredictions,
    ExportReport,
    ProfileResult,
    StudentMeta,
    read_profile,
)
from edgekd.errors import OUTPUT_REFUSED, EdgeKDError
from edgekd.io import MARKER, atomic_dir, check_output, owned_files, read_json, sha256_file
from edgekd.students.predict import E2EPredictor, OnnxPredictor, softmax

MANIFEST = BundleManifest.FILE
MODEL = MODEL_FILES["fp32"]  # whichever model ships, under one name
FORMAT = 1


def make_bundle(
    export_dir: str | Path, out_dir: str | Path, model: str = "auto", overwrite: bool = False
) -> Path:
    """Build the bundle from an `edgekd export` folder; return the .zip path.

    `model`: "int8", "fp32", "auto" (int8 when the export kept one), or "e2e": the
    one-file model of `edgekd export --e2e` alone, its tokenizer inside. The .zip is
    written beside `out_dir`: an existing one is replaced only when `out_dir` is an
    edgekd folder (they were written together), never a .zip of the user's.
    """
    out_dir = Path(out_dir)
    check_output(out_dir, overwrite)
    archive = out_dir.with_suffix(".zip")
    if archive.exists() and (owned_files(out_dir) is None or not archive.is_file()):
        raise EdgeKDError(
            f"{archive} exists and edgekd did not write it; pass a new --out path", OUTPUT_REFUSED
        )
    export_dir = Path(export_dir)
    if not ExportReport.path(export_dir).is_file():
        raise EdgeKDError(
            f"{export_dir} has no {ExportReport.FILE}; pass an `edgekd export --out` folder"
        )
    report = ExportReport.read(export_dir)
    e2e = model == "e2e"
    if e2e:
        if report.e2e is None:
            raise EdgeKDError(f"{export_dir} has no {E2E_MODEL}; export with --e2e")
        model = report.e2e.source
    if model == "auto":
        model = report.shipped()
    if model not in report.models:
        raise EdgeKDError(
            f"{export_dir} has no {model} model (has: {', '.join(report.models)}); "
            "pick another --model"
        )
    entry = report.models[model]  # type: ignore[index]
    source = export_dir / (E2E_MODEL if e2e else entry.path)
    # The latest `edgekd profile --json` of this model file saved in the export folder.
    profiles = [
        prof
        for path in sorted(export_dir.glob(PROFILE_GLOB), key=lambda p: p.stat().st_mtime)
        if isinstance(prof := read_profile(path), ProfileResult)
        and Path(prof.model).name == source.name
    ]
    predictions = None
    if DevPredictions.path(export_dir).is_file():  # older exports have none
        every = DevPredictions.read(export_dir)
        if model in every.models:
            predictions = every.model_copy(update={"models": {model: every.models[model]}})
    labels = StudentMeta.read(export_dir).id2label
    with atomic_dir(out_dir, overwrite) as tmp:
        # A one-file model ships alone: its tokenizer and label names are inside it.
        shutil.copy(source, tmp / (E2E_MODEL if e2e else MODEL))
        for name in () if e2e else (TOKENIZER, StudentMeta.FILE):
            shutil.copy(export_dir / name, tmp / name)
        files = {
            p.name: BundleFile(sha256=sha256_file(p), bytes=p.stat().st_size)
            for p in sorted(tmp.iterdir())
        }
        BundleManifest(
            format=FORMAT,
            model=model,
            files=files,
            bytes=sum(f.bytes for f in files.values()),
            accuracy=entry.accuracy,
            labels=labels,
            e2e=e2e,
            teacher_accuracy=report.teacher_accuracy,
            quantizer=entry.get("quantizer"),
            profile=profiles[-1] if profiles else None,
            predictions=predictions,
        ).write(tmp)
    tmp_zip = archive.with_name(f".{archive.name}.tmp")
    with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(out_dir.iterdir()):
            if p.name != MARKER:
                z.write(p, p.name)
    tmp_zip.replace(archive)
    return archive


class Bundle:
    """A verified bundle folder or .zip, ready to predict."""

    def __init__(self, path: str | Path, threads: int = 0) -> None:
        path = Path(path)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if path.suffix == ".zip" and path.is_file():
            self._tmp = tempfile.TemporaryDirectory(prefix="edgekd-bundle-")
            try:
                with zipfile.ZipFile(path) as z:
                    names = z.namelist()
                    # A bundle is flat: a path or hidden name is no file of ours (and
                    # extracting it could write outside the temp folder).
                    odd = [n for n in names if "/" in n or "\\" in n or n.startswith(".")]
                    if odd:
                        raise EdgeKDError(
                            f"{path} holds {odd[0]!r}, which no edgekd bundle has; "
                            "rebuild it with `edgekd bundle`"
                        )
                    z.extractall(self._tmp.name, members=names)
            except zipfile.BadZipFile:
                raise EdgeKDError(
                    f"{path} is not a readable .zip; rebuild it with `edgekd bundle`"
                ) from None
            folder = Path(self._tmp.name)
        elif (path / MANIFEST).is_file():
            folder = path
        else:
            raise EdgeKDError(
                f"{path} is not an edgekd bundle (no {MANIFEST}); see `edgekd bundle`"
            )
        self.folder = folder  # a .zip's files live here until this object goes
        self.manifest = verify(folder)
        self.predictor: OnnxPredictor | E2EPredictor
        if self.manifest.e2e:
            self.predictor = E2EPredictor(folder / E2E_MODEL, threads=threads)
        else:
            self.predictor = OnnxPredictor(folder / MODEL, threads=threads)
        self.label_names = self.predictor.label_names

    def predict(self, texts: list[Any]) -> list[dict[str, Any]]:
        """Label and class probabilities per text (a pair: a (first, second) tuple)."""
        return label_rows(self.label_names, probabilities(self.predictor, texts))


class OneFile:
    """A `model.e2e.onnx` on its own: nothing to verify but the file, which carries its
    tokenizer and label names."""

    def __init__(self, path: Path, threads: int = 0) -> None:
        if not path.is_file():
            raise EdgeKDError(f"{path} does not exist; pass a bundle or a model.e2e.onnx")
        self.predictor = E2EPredictor(path, threads=threads)

    def predict(self, texts: list[Any]) -> list[dict[str, Any]]:
        return label_rows(self.predictor.label_names, self.predictor.probabilities(texts))


def probabilities(predictor: OnnxPredictor | E2EPredictor, texts: list[Any]) -> np.ndarray:
    if isinstance(predictor, E2EPredictor):
        return predictor.probabilities(texts)
    return softmax(predictor.logits(texts))


def label_rows(label_names: list[str], probs: np.ndarray) -> list[dict[str, Any]]:
    """Each row's label and its probability per label name."""
    return [
        {
            "label": label_names[int(p.argmax())],
            "probabilities": {n: round(float(v), 6) for n, v in zip(label_names, p, strict=True)},
        }
        for p in probs
    ]


def verify(folder: Path) -> BundleManifest:
    """The manifest, after checking that the files present are exactly those it lists
    and that each matches its sha256; a one-line error otherwise. An unlisted file is
    refused too: a model swapped in under a new name must not be trusted."""
    manifest = read_json(folder / MANIFEST)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(m, dict) and isinstance(m.get("sha256"), str) for m in files.values()
    ):
        raise EdgeKDError(f"{folder / MANIFEST} lists no files; rebuild with `edgekd bundle`")
    present = {p.name for p in folder.iterdir()} - {MANIFEST, MARKER}
    unlisted = sorted(present - set(files))
    if unlisted:
        raise EdgeKDError(
            f"bundle file {unlisted[0]} is not in {MANIFEST}: the bundle was changed; "
            "rebuild with `edgekd bundle`"
        )
    for name, meta in files.items():
        path = folder / name
        if "/" in name or not path.is_file():
            raise EdgeKDError(f"bundle file {name} is missing; rebuild with `edgekd bundle`")
        if sha256_file(path) != meta["sha256"]:
            raise EdgeKDError(
                f"bundle file {name} does not match its sha256 in {MANIFEST}; "
                "it was changed or corrupted: rebuild with `edgekd bundle`"
            )
    return BundleManifest.read(folder)
