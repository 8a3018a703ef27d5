"""The deployable bundle: one folder (and a .zip of it) that runs with onnxruntime,
numpy and `tokenizers` alone.

    model.onnx       the model that ships (int8 when the export kept one, else fp32)
    tokenizer.json   the student's tokenizer
    student.json     label names, max length, special tokens
    README.md        the model card: Hub front matter (labels, metrics, provenance), then
                     how to predict with edgekd and without it
    manifest.json    sha256 and bytes of every file (the card's too), accuracy, the
                     measured profile

or, with `--model e2e`, `model.e2e.onnx` and the card beside the manifest (string in,
label out: tokenizer and label names inside; onnxruntime-extensions runs it).

`Bundle` verifies every sha256 before it loads anything, then predicts labels and
probabilities. This module must never import torch or transformers (a test checks).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np

from edgekd import __version__
from edgekd.artifacts import (
    BUNDLE_MODEL,
    CONFIG,
    E2E_MODEL,
    PROFILE_GLOB,
    TOKENIZER,
    Artifact,
    BundleFile,
    BundleManifest,
    CardDataset,
    CardEdgekd,
    CardMetric,
    CardModel,
    CardResult,
    DevPredictions,
    DistillMetrics,
    ExportedModel,
    ExportReport,
    ModelCard,
    ProfileResult,
    StudentMeta,
    file_inside,
    is_plain_name,
    read_profile,
)
from edgekd.config import DataConfig, load_fields, validate
from edgekd.data import SUFFIXES
from edgekd.errors import OUTPUT_REFUSED, EdgeKDError
from edgekd.io import (
    MARKER,
    atomic_dir,
    check_not_input,
    check_output,
    load_json,
    owned_files,
    sha256_file,
)
from edgekd.students.predict import (
    E2E_LABELS,
    E2EPredictor,
    OnnxPredictor,
    check_rows,
    softmax,
)

MANIFEST = BundleManifest.FILE
FORMAT = 1
EXPORT_FIX = "re-create the export with `edgekd export`"
BUNDLE_FIX = "rebuild it with `edgekd bundle`"

# Caps on a bundle .zip, all checked from its central directory before a byte is
# extracted, and the sizes again while extracting (a header can lie):
# - 512 MiB uncompressed in all. The largest real bundle is a fp32 BiLSTM (~19 MB, the
#   300-d table); a fp32 BERT student as large as the MiniLM reference teacher would be
#   ~91 MB. 512 MiB is over 5x that, and `make_bundle` refuses to write a larger one.
MAX_BUNDLE_BYTES = 512 << 20
# - 16 entries: a bundle holds 5 (model, tokenizer, student.json, card, manifest) or 3
#   (e2e).
MAX_ENTRIES = 16
# - a central directory of 64 KiB: 16 entries with short names need under 2 KiB. Checked
#   from the end record before zipfile parses the directory, so a zip claiming millions
#   of entries costs no time or memory.
MAX_DIRECTORY_BYTES = 64 << 10
# - 100:1 per entry over 1 MiB. Real entries compress 1-5:1 (an int8 model barely, a
#   tokenizer's vocabulary ~4:1); deflate reaches ~1000:1 only on crafted runs like
#   zeros. Small entries are left alone: a ratio of a few KB proves nothing.
MAX_RATIO = 100
RATIO_FLOOR = 1 << 20
# Stored or deflated, as `make_bundle` writes (zipfile cannot read some others at all).
METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
CHUNK = 1 << 20

A = TypeVar("A", bound=Artifact)


def _read_checked(cls: type[A], folder: Path, fix: str) -> A:
    """`cls`'s file in `folder`, refused unless it is a regular file there (no link);
    `Artifact.read` (io.read_json) then caps, checks and types it in one read."""
    return cls.read(file_inside(folder, cls.FILE, fix))


def _copy(source: Path, dest: Path) -> None:
    """`source` to the new file `dest`. Opened without following a link: a file swapped
    for one after `file_inside` looked at it fails here instead of being shipped."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        raise EdgeKDError(f"cannot read {source} ({e.strerror}); {EXPORT_FIX}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise EdgeKDError(f"{source} is not a regular file; {EXPORT_FIX}")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as src, open(dest, "xb") as out:
        shutil.copyfileobj(src, out, CHUNK)


def make_bundle(
    export_dir: str | Path, out_dir: str | Path, model: str = "auto", overwrite: bool = False
) -> Path:
    """Build the bundle from an `edgekd export` folder; return the .zip path.

    `model`: "int8", "fp32", "auto" (int8 when the export kept one), or "e2e": the
    one-file model of `edgekd export --e2e` alone, its tokenizer inside. The .zip is
    written beside `out_dir`: an existing one is replaced only when `out_dir` is an
    edgekd folder (they were written together), never a .zip of the user's.

    Every file that ships is read from inside `export_dir` only: a name from export.json
    must be a plain file name there, and a symlink where a file is expected is refused (it
    would ship whatever it points at). The card also reads the student folder export.json
    names, for where the student came from (`distilled_from`), and ships none of its files.
    """
    out_dir = Path(out_dir)
    check_output(out_dir, overwrite)
    check_not_input(out_dir, [export_dir])
    check_not_input(out_dir.with_suffix(".zip"), [export_dir], flag="--out (its .zip)")
    archive = out_dir.with_suffix(".zip")
    if archive.exists() and (owned_files(out_dir) is None or not archive.is_file()):
        raise EdgeKDError(
            f"{archive} exists and edgekd did not write it; pass a new --out path", OUTPUT_REFUSED
        )
    export_dir = Path(export_dir)
    if not os.path.lexists(ExportReport.path(export_dir)):
        raise EdgeKDError(
            f"{export_dir} has no {ExportReport.FILE}; pass an `edgekd export --out` folder"
        )
    report = _read_checked(ExportReport, export_dir, EXPORT_FIX)
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
    source = file_inside(export_dir, E2E_MODEL if e2e else entry.path, EXPORT_FIX)
    extras = {} if e2e else {n: file_inside(export_dir, n, EXPORT_FIX) for n in (TOKENIZER,)}
    # The latest `edgekd profile --json` of this model file saved in the export folder.
    found = [file_inside(export_dir, p.name, EXPORT_FIX) for p in export_dir.glob(PROFILE_GLOB)]
    for path in found:
        load_json(path, EXPORT_FIX)
    profiles = [
        prof
        for path in sorted(found, key=lambda p: p.stat().st_mtime)
        if isinstance(prof := read_profile(path), ProfileResult)
        and Path(prof.model).name == source.name
    ]
    predictions = None
    if os.path.lexists(DevPredictions.path(export_dir)):  # older exports have none
        every = _read_checked(DevPredictions, export_dir, EXPORT_FIX)
        if model in every.models:
            predictions = every.model_copy(update={"models": {model: every.models[model]}})
    meta = _read_checked(StudentMeta, export_dir, EXPORT_FIX)
    if not e2e:
        extras[StudentMeta.FILE] = StudentMeta.path(export_dir)
    size = source.stat().st_size + sum(p.stat().st_size for p in extras.values())
    if size > MAX_BUNDLE_BYTES:  # `Bundle` would refuse to unpack it
        raise EdgeKDError(
            f"{source.name} and its files hold {size:,} bytes, more than a bundle's "
            f"{MAX_BUNDLE_BYTES:,}; bundle the int8 model (--model int8) or a smaller student"
        )
    profile = profiles[-1] if profiles else None
    with atomic_dir(out_dir, overwrite) as tmp:
        # A one-file model ships alone: its tokenizer and label names are inside it.
        _copy(source, tmp / (E2E_MODEL if e2e else BUNDLE_MODEL))
        for name, path in extras.items():
            _copy(path, tmp / name)
        runs = {p.name: p.stat().st_size for p in tmp.iterdir()}  # what predicting reads
        model_card(export_dir, report, meta, model, e2e, runs, profile, predictions).write(tmp)
        # Listed like every other file: an edited card fails `verify` as a model would.
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
            labels=meta.id2label,
            e2e=e2e,
            teacher_accuracy=report.teacher_accuracy,
            quantizer=entry.get("quantizer"),
            profile=profile,
            predictions=predictions,
        ).write(tmp)
    tmp_zip = archive.with_name(f".{archive.name}.tmp")
    with zipfile.ZipFile(tmp_zip, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(out_dir.iterdir()):
            if p.name != MARKER:
                z.write(p, p.name)
    tmp_zip.replace(archive)
    return archive


# ------------------------------------------------------------------ the model card

# huggingface_hub's repo id rule, ASCII only: [namespace/]name, 96 characters at most.
HUB_ID = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
MAX_LABELS_SHOWN = 20  # the body's list; the front matter holds every label

# What `Bundle` does, with onnxruntime, numpy and tokenizers only: the tokenizer as
# `StudentTokenizer` sets it up (truncated to max_length, never padded by itself; an
# empty row gets one [UNK]), one padded batch, the inputs the graph takes, softmax.
# tests/stages/test_bundle.py runs it from a card against `Bundle`.
SNIPPET = """\
import json

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

meta = json.load(open("student.json", encoding="utf-8"))
labels, special = meta["id2label"], meta.get("add_special_tokens", False)
tokenizer = Tokenizer.from_file("tokenizer.json")
tokenizer.no_padding()
tokenizer.enable_truncation(meta["max_length"])
pad = tokenizer.token_to_id("[PAD]") or 0
fill = tokenizer.token_to_id("[UNK]") or pad  # an empty text still gets one token
session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
inputs = {i.name for i in session.get_inputs()}


def predict(texts):
    \"\"\"Each text's label and its probability per label.\"\"\"
    rows = [e.ids or [fill] for e in tokenizer.encode_batch(texts, add_special_tokens=special)]
    ids = np.full((len(rows), max(map(len, rows))), pad, dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    logits = session.run(None, {k: v for k, v in feed.items() if k in inputs})[0]
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    return [(labels[p.argmax()], dict(zip(labels, p.tolist()))) for p in probs]


print(predict(["an example text"]))
"""

# What `E2EPredictor` does: the tokenizer is inside the graph, which reads the whole
# batch in one call: [N] texts, or a pair model's [N, 2] (one [first, second] row each).
E2E_SNIPPET = f"""\
import json

import numpy as np
import onnxruntime as ort
from onnxruntime_extensions import get_library_path

options = ort.SessionOptions()
options.register_custom_ops_library(get_library_path())
session = ort.InferenceSession("{E2E_MODEL}", options, providers=["CPUExecutionProvider"])
labels = json.loads(session.get_modelmeta().custom_metadata_map["{E2E_LABELS}"])
pairs = len(session.get_inputs()[0].shape) == 2  # a sentence-pair model reads [N, 2]


def predict(texts):
    \"\"\"Each text's label and its probability per label (a pair: a (first, second) tuple).\"\"\"
    rows = np.array([t if isinstance(t, str) else list(t) for t in texts], dtype=object)
    probs = session.run(["probabilities"], {{"text": rows}})[0]
    return [(labels[p.argmax()], dict(zip(labels, p.tolist()))) for p in probs]


print(predict([("a first text", "a second text") if pairs else "an example text"]))
"""


def hub_id(name: str | None) -> str | None:
    """`name` when edgekd read it from the Hugging Face Hub: a repo id that is no file or
    folder here, edgekd's own test (`hub.require_hub`, `data.load_task`), and no data
    file name. A local path is left out of the card: it names nothing for its readers
    and would publish the user's folders."""
    if name is None or not HUB_ID.fullmatch(name) or "--" in name or ".." in name:
        return None
    if name.endswith(".git") or Path(name).suffix in SUFFIXES:
        return None
    return None if os.path.lexists(name) else name


def distilled_from(
    export_dir: Path, report: ExportReport, meta: StudentMeta
) -> tuple[DistillMetrics, Path] | None:
    """The distill run behind this export, from the student folder export.json names, or
    None. DistillMetrics is not copied into an export, so this folder is the one place
    the teacher, the data and the student's agreement with the teacher are recorded.

    Taken only while that folder is still the student exported: its student.json byte for
    byte the export's copy, its metrics the teacher accuracy that export.json copied from
    them, and the PyTorch student's accuracy that the export re-scored, on as many dev rows
    with the same labels. Moved, re-distilled since, or exported on other data: None, and
    the card leaves those values out rather than state another run's."""
    if report.student is None or report.teacher_accuracy is None:
        return None
    folder = Path(report.student)
    try:
        if not folder.is_dir():
            return None
        metrics = DistillMetrics.read(file_inside(folder, DistillMetrics.FILE, EXPORT_FIX))
        theirs = sha256_file(file_inside(folder, StudentMeta.FILE, EXPORT_FIX))
        ours = sha256_file(file_inside(export_dir, StudentMeta.FILE, EXPORT_FIX))
    except (EdgeKDError, OSError):
        return None
    same = (
        theirs == ours
        and metrics.labels == meta.id2label
        and metrics.n_dev == report.n_dev
        and metrics.teacher_accuracy == report.teacher_accuracy
        and metrics.student_accuracy == report.student_accuracy
    )
    return (metrics, folder) if same else None


def _config(folder: Path) -> tuple[str, DataConfig | None] | None:
    """The sha256 of `folder`'s resolved config.yaml and its `data` section (None when it
    has none, as an export's has not); None without a readable config."""
    try:
        path = file_inside(folder, CONFIG, EXPORT_FIX)
        fields = load_fields(path)
        data = validate(DataConfig, fields["data"], str(path)) if "data" in fields else None
        return sha256_file(path), data
    except (EdgeKDError, OSError):
        return None


def model_card(
    export_dir: Path,
    report: ExportReport,
    meta: StudentMeta,
    model: str,
    e2e: bool,
    runs: dict[str, int],
    profile: ProfileResult | None,
    predictions: DevPredictions | None,
) -> ModelCard:
    """The bundle's README.md, every value from the typed artifacts above; `runs`: bytes of
    each file that predicting reads. A value nobody measured is left out."""
    entry: ExportedModel = report.models[model]  # type: ignore[index]
    distilled = distilled_from(export_dir, report, meta)
    metrics = distilled[0] if distilled else None
    distill_config = _config(distilled[1]) if distilled else None
    configs = {"distill": distill_config, "export": _config(export_dir)}
    data = distill_config[1] if distill_config else None
    hub_data = hub_id(data.spec) if data else None
    if hub_data is not None:
        dataset = CardDataset(type=hub_data, name=hub_data)
    elif data is not None:
        dataset = CardDataset(type="local", name="local data files")
    else:
        dataset = CardDataset(type="unknown", name="not recorded with the export")

    kind = f"{model} ONNX"
    model_file = E2E_MODEL if e2e else BUNDLE_MODEL
    found: list[CardMetric] = []
    if entry.accuracy is not None:
        what = f"{kind}, which {E2E_MODEL} wraps" if e2e else kind
        found.append(
            CardMetric(type="accuracy", value=entry.accuracy, name=f"Dev accuracy ({what})")
        )
    if metrics is not None:
        found.append(
            CardMetric(
                type="agreement",
                value=metrics.agreement,
                name="Agreement with the teacher on dev (the PyTorch student, before export)",
            )
        )
    if entry.agreement is not None:
        found.append(
            CardMetric(
                type="agreement_with_student",
                value=entry.agreement,
                name=f"Agreement with the PyTorch student on dev ({kind})",
            )
        )
    if profile is not None:
        where = _where(profile, profile.device)
        for q in ("p50", "p90"):
            value = getattr(profile, f"{q}_ms")
            if value is not None:
                found.append(
                    CardMetric(
                        type=f"latency_{q}_ms", value=value, name=f"{q} latency, ms ({where})"
                    )
                )
    found.append(
        CardMetric(type="model_bytes", value=runs[model_file], name=f"{model_file}, bytes")
    )
    found.append(
        CardMetric(
            type="bundle_bytes",
            value=sum(runs.values()),
            name=f"What predicting reads ({', '.join(sorted(runs))}), bytes",
        )
    )
    teacher = hub_id(metrics.teacher) if metrics else None
    card = ModelCard(
        tags=["edgekd", "onnx", "knowledge-distillation", *(["int8"] if model == "int8" else [])],
        base_model=teacher,
        datasets=[hub_data] if hub_data else None,
        model_index=[
            CardModel(
                name=f"{meta.student}-{model}",
                results=[CardResult(dataset=dataset, metrics=found)],
            )
        ],
        edgekd=CardEdgekd(
            version=__version__,
            model=model,  # type: ignore[arg-type]  # resolved above to fp32 or int8
            e2e=e2e,
            student=meta.student,
            student_options=meta.config,
            labels=meta.id2label,
            params=metrics.params if metrics else None,
            teacher_accuracy=report.teacher_accuracy,
            dev_rows=report.n_dev,
            dev_rows_sha256=predictions.rows_sha256 if predictions else None,
            data=hub_data,
            config_sha256={k: v[0] for k, v in configs.items() if v is not None},
        ),
    )
    body = card_body(card, meta, profile, model_file, runs)
    return card.model_copy(update={"body": body})


def _where(profile: ProfileResult, device: str) -> str:
    """How a latency was measured, for people (`device`: the name as shown)."""
    threads = f"{profile.threads} thread{'s' * (profile.threads != 1)}"
    if profile.threads == 0:
        threads = "onnxruntime's default threads"
    tokens = f", {profile.seq_len} tokens" if profile.seq_len is not None else ""
    # `edgekd profile` warned: the trial medians spread, the machine was busy
    noisy = ", noisy: trials disagreed" if profile.noisy else ""
    return f"{device}, {threads}{tokens}{noisy}"


def _code(text: str) -> str:
    """`text` as Markdown inline code it cannot break out of: control characters (line
    breaks too) escaped as JSON escapes them, and the line separators JSON leaves alone,
    in a backtick fence longer than any run of backticks inside."""
    shown = json.dumps(text, ensure_ascii=False)[1:-1] or '""'
    for sep in "\x85\u2028\u2029":
        shown = shown.replace(sep, f"\\u{ord(sep):04x}")
    fence = "`" * (max((len(r) for r in re.findall("`+", shown)), default=0) + 1)
    pad = " " if "`" in (shown[0], shown[-1]) else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def card_body(
    card: ModelCard,
    meta: StudentMeta,
    profile: ProfileResult | None,
    model_file: str,
    runs: dict[str, int],
) -> str:
    """The card's Markdown: what the model is, then how to predict with and without edgekd.
    Figures come from the card's own metrics, so the two parts never disagree."""
    k = card.edgekd
    got = {m.type: m.value for m in card.model_index[0].results[0].metrics}
    kind = f"{k.model} ONNX" + (f" in one file, `{E2E_MODEL}`" if k.e2e else "")
    shown = ", ".join(_code(n) for n in k.labels[:MAX_LABELS_SHOWN])
    more = len(k.labels) - MAX_LABELS_SHOWN
    # export.json has a teacher accuracy only when the student came from `edgekd distill`
    # (a `plan` candidate is exported untrained)
    made = f"An edgekd student exported to {kind}"
    if k.teacher_accuracy is not None:
        teacher = f" (`{card.base_model}`)" if card.base_model else ""
        made = f"Distilled by edgekd from a fine-tuned teacher{teacher}, exported to {kind}"
    lines = [
        f"# {_code(k.student)} student, {k.model} ONNX",
        "",
        f"A text classifier over {len(k.labels)} labels: {shown}"
        + (f" and {more:,} more (all in the front matter)." if more > 0 else ".")
        + f" {made} (edgekd {k.version}).",
        "",
    ]
    others = [f"`{n}`" for n in sorted(set(runs) - {model_file})]
    beside = ""
    if others:
        named = " and ".join([", ".join(others[:-1]), others[-1]] if len(others) > 1 else others)
        beside = f"; with {named}, {got['bundle_bytes']:,} B"
    size = f"{k.params:,} parameters; " if k.params is not None else ""
    facts = [f"- **Size**: {size}`{model_file}` is {got['model_bytes']:,} B{beside}."]
    acc, teacher_acc = got.get("accuracy"), k.teacher_accuracy
    if acc is not None:
        on = f" on {k.dev_rows:,} dev rows" if k.dev_rows else ""
        against = ""
        if teacher_acc is not None:
            against = f"; the teacher's {teacher_acc:.4f}"
            if teacher_acc > 0:
                against += f" (this model keeps {acc / teacher_acc:.1%} of it)"
        facts.append(f"- **Accuracy**{on}: {acc:.4f}{against}.")
    to_student = (
        f"the {k.model} ONNX model gave the PyTorch student's label on "
        f"{got['agreement_with_student']:.1%} of them"
        if "agreement_with_student" in got
        else ""
    )
    if "agreement" in got:
        facts.append(
            f"- **Agreement**: the student gave the teacher's label on {got['agreement']:.1%} "
            "of the dev rows (PyTorch, before export)" + (f"; {to_student}." if to_student else ".")
        )
    elif to_student:
        facts.append(f"- **Agreement** on the dev rows: {to_student}.")
    if profile is not None and "latency_p50_ms" in got:
        p90 = f", p90 {got['latency_p90_ms']:.3g} ms" if "latency_p90_ms" in got else ""
        where = _where(profile, _code(profile.device))
        facts.append(f"- **Latency**: p50 {got['latency_p50_ms']:.3g} ms{p90} ({where}).")
    if k.dev_rows_sha256:
        facts.append(f"- **Dev rows**: sha256 {_code(k.dev_rows_sha256)} (texts and gold labels).")
    lines += [
        *facts,
        "",
        f"`{MANIFEST}` holds the sha256 of every file here, this card's too: `edgekd predict` "
        "refuses the bundle when any of them changed. Edit the card where you publish it, or "
        "rebuild the bundle with `edgekd bundle`.",
        "",
        "## Predict with edgekd",
        "",
        "```bash",
        'edgekd predict BUNDLE "first text" "second text"',
        "```",
        "",
        "`BUNDLE` is this folder or its `.zip`. `--json` prints one JSON object per text; "
        "`--file texts.txt` reads one text per line"
        + ("; a sentence pair is one `first<TAB>second` line." if not k.e2e else "."),
        "",
        "## Predict without edgekd",
        "",
    ]
    if k.e2e:
        lines += [
            "With onnxruntime, numpy and onnxruntime-extensions (`pip install onnxruntime "
            "onnxruntime-extensions numpy`), from this folder; the tokenizer and the label "
            "names are inside the model:",
            "",
            "```python",
            E2E_SNIPPET.rstrip("\n"),
            "```",
        ]
    elif meta.config.get("pair") is True:
        lines += [
            "This model reads sentence pairs, each side through its own inputs "
            "(`input_ids_b`); use `edgekd predict`, or feed both sides as "
            "`edgekd.students.predict.OnnxPredictor` does.",
        ]
    else:
        lines += [
            "With onnxruntime, numpy and tokenizers only (`pip install onnxruntime numpy "
            "tokenizers`), from this folder, one text per row (sentence pairs: "
            "`edgekd predict`):",
            "",
            "```python",
            SNIPPET.rstrip("\n"),
            "```",
        ]
    return "\n".join(lines) + "\n"


class Bundle:
    """A verified bundle folder or .zip, ready to predict."""

    def __init__(self, path: str | Path, threads: int = 0) -> None:
        path = Path(path)
        self.path = path  # what errors name: a .zip's temp folder is gone by then
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if path.suffix == ".zip" and path.is_file():
            self._tmp = unpack(path)
            folder = Path(self._tmp.name)
        elif os.path.lexists(path / MANIFEST):
            folder = path
        else:
            raise EdgeKDError(
                f"{path} is not an edgekd bundle (no {MANIFEST}); see `edgekd bundle`"
            )
        self.folder = folder  # a .zip's files live here until this object goes
        self.predictor: OnnxPredictor | E2EPredictor
        try:
            self.manifest = verify(folder)
            if self.manifest.e2e:
                self.predictor = E2EPredictor(folder / E2E_MODEL, threads=threads)
            else:
                self.predictor = OnnxPredictor(folder / BUNDLE_MODEL, threads=threads)
        except BaseException:
            if self._tmp is not None:  # refused: the unpacked files go now, not at exit
                self._tmp.cleanup()
            raise
        self.label_names = self.predictor.label_names

    def predict(self, texts: list[Any]) -> list[dict[str, Any]]:
        """Label and class probabilities per text (a pair: a (first, second) tuple)."""
        check_rows(texts, getattr(self.predictor, "pairs", None), self.path)
        return label_rows(self.label_names, probabilities(self.predictor, texts))


def unpack(path: Path) -> tempfile.TemporaryDirectory[str]:
    """The bundle .zip at `path` extracted into a new temp folder, after its central
    directory passed every cap above; entries are streamed out with a byte count, so a
    header that understates a size cannot write past the caps either. On any refusal
    nothing is left behind."""
    try:
        with open(path, "rb") as f:
            _check_end_record(path, f)
            with zipfile.ZipFile(f) as z:
                infos = z.infolist()
                _check_entries(path, infos)
                tmp = tempfile.TemporaryDirectory(prefix="edgekd-bundle-")
                try:
                    total = 0
                    for info in infos:
                        total = _extract(path, z, info, Path(tmp.name) / info.filename, total)
                except BaseException:
                    tmp.cleanup()
                    raise
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        why = (str(e).splitlines() or [type(e).__name__])[0][:80]
        raise EdgeKDError(f"{path} is not a readable .zip ({why}); {BUNDLE_FIX}") from None
    return tmp


_END = struct.Struct("<4s4H2LH")  # the end of central directory record
_END_SIGNATURE = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"


def _check_end_record(path: Path, f: IO[bytes]) -> None:
    """Refuse a zip whose end record claims more entries or a larger central directory
    than a bundle has, or ZIP64 (a bundle is far below 4 GiB), before zipfile reads the
    directory. The record is found as zipfile finds it; none: zipfile says not a zip."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - (1 << 16) - _END.size))
    tail = f.read()
    if tail[-_END.size : -_END.size + 4] == _END_SIGNATURE and tail[-2:] == b"\0\0":
        at = len(tail) - _END.size
    else:
        at = tail.rfind(_END_SIGNATURE)
    if at < 0 or len(tail) - at < _END.size:
        return
    _, _, _, _, entries, directory, offset, _ = _END.unpack_from(tail, at)
    if tail[max(0, at - 20) : at - 16] == _ZIP64_LOCATOR or 0xFFFFFFFF in (directory, offset):
        raise EdgeKDError(f"{path} is a ZIP64 archive, which no edgekd bundle is; {BUNDLE_FIX}")
    if entries > MAX_ENTRIES or directory > MAX_DIRECTORY_BYTES:
        raise EdgeKDError(
            f"{path} lists {entries:,} entries in {directory:,} bytes; an edgekd bundle has at "
            f"most {MAX_ENTRIES} (in under {MAX_DIRECTORY_BYTES:,} bytes): {BUNDLE_FIX}"
        )


def _check_entries(path: Path, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse, from the central directory alone, any entry no bundle has: a path, hidden
    or odd name, a name twice, a link or special file, encryption, a compression other
    than stored/deflate, or sizes past the caps."""
    if len(infos) > MAX_ENTRIES:
        raise EdgeKDError(
            f"{path} holds {len(infos):,} entries; an edgekd bundle has at most "
            f"{MAX_ENTRIES}: {BUNDLE_FIX}"
        )
    names: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        # A bundle is flat: a path or hidden name is no file of ours (and extracting
        # it could write outside the temp folder).
        # casefold: model.onnx and MODEL.onnx are one file on macOS's default disk.
        if not is_plain_name(name) or name.casefold() in names:
            # The name itself, quoted: "holds twice" named nothing to look for.
            what = (
                f"{name!r} twice (names differing only in case are one file on some disks)"
                if name.casefold() in names
                else f"{name!r}, which no edgekd bundle has"
            )
            raise EdgeKDError(f"{path} holds {what}; {BUNDLE_FIX}")
        names.add(name.casefold())
        kind_bits = stat.S_IFMT(info.external_attr >> 16)  # Unix file type; 0: unstated
        if kind_bits not in (0, stat.S_IFREG):
            kind = "a symlink" if kind_bits == stat.S_IFLNK else "not a regular file"
            raise EdgeKDError(f"{path} entry {name!r} is {kind}; {BUNDLE_FIX}")
        if info.flag_bits & 0x1:
            raise EdgeKDError(f"{path} entry {name!r} is encrypted; {BUNDLE_FIX}")
        if info.compress_type not in METHODS:
            raise EdgeKDError(
                f"{path} entry {name!r} uses zip compression method {info.compress_type}; "
                f"edgekd bundles are {' or '.join(METHODS.values())} only: {BUNDLE_FIX}"
            )
        total += info.file_size
        if total > MAX_BUNDLE_BYTES:
            raise EdgeKDError(
                f"{path} unpacks to over {MAX_BUNDLE_BYTES:,} bytes, more than any edgekd "
                f"bundle; {BUNDLE_FIX}"
            )
        if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * info.compress_size:
            raise EdgeKDError(
                f"{path} entry {name!r} unpacks {info.compress_size:,} bytes to "
                f"{info.file_size:,} (over {MAX_RATIO}:1, a zip bomb, not a model); {BUNDLE_FIX}"
            )


def _extract(path: Path, z: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, total: int) -> int:
    """Stream one entry to the new file `dest`, counting bytes: past its stated size or
    the bundle cap it stops. Returns the bytes extracted so far in all."""
    written = 0
    with z.open(info) as src, open(dest, "xb") as out:  # "x": never through a link
        while chunk := src.read(CHUNK):
            written += len(chunk)
            if written > info.file_size or total + written > MAX_BUNDLE_BYTES:
                raise EdgeKDError(
                    f"{path} entry {info.filename!r} unpacks to more bytes than its header "
                    f"says; {BUNDLE_FIX}"
                )
            out.write(chunk)
    return total + written


class OneFile:
    """A `model.e2e.onnx` on its own: nothing to verify but the file, which carries its
    tokenizer and label names."""

    def __init__(self, path: Path, threads: int = 0) -> None:
        if not path.is_file():  # missing, or a FIFO or device: never opened
            what = "is not a regular file" if path.exists() else "does not exist"
            raise EdgeKDError(f"{path} {what}; pass a bundle or a model.e2e.onnx")
        try:
            self.predictor = E2EPredictor(path, threads=threads)
        except EdgeKDError:
            # Not a one-file model: a bundle's or an export's model.onnx, whose tokenizer
            # is a file beside it? Say what to pass instead of "make it with --e2e".
            if (path.parent / MANIFEST).is_file():
                raise EdgeKDError(
                    f"{path} is the model inside a bundle: pass the bundle folder "
                    f"(`edgekd predict {path.parent} ...`), which checks every file it loads"
                ) from None
            if (path.parent / StudentMeta.FILE).is_file():
                raise EdgeKDError(
                    f"{path} is a model of an export folder, not a one-file model: bundle "
                    f"the folder (`edgekd bundle {path.parent} --out BUNDLE`) and predict "
                    f"with BUNDLE, or score it with `edgekd eval {path} --data DATA`"
                ) from None
            raise

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
    refused too: a model swapped in under a new name must not be trusted. Every listed
    name must be a plain file name, and every file a regular file (a symlink, even to a
    file whose sha256 matches, is refused: what is checked must be what is loaded)."""
    manifest = load_json(file_inside(folder, MANIFEST, BUNDLE_FIX), BUNDLE_FIX)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(m, dict) and isinstance(m.get("sha256"), str) for m in files.values()
    ):
        raise EdgeKDError(f"{folder / MANIFEST} lists no files; rebuild with `edgekd bundle`")
    odd = next((n for n in files if not is_plain_name(n)), None)
    if odd is not None:
        raise EdgeKDError(
            f"{folder / MANIFEST} lists {odd!r}, which is not a plain file name in the "
            f"bundle; {BUNDLE_FIX}"
        )
    present = {p.name for p in folder.iterdir()} - {MANIFEST, MARKER}
    unlisted = sorted(present - set(files))
    if unlisted:
        raise EdgeKDError(
            f"bundle file {unlisted[0]} is not in {MANIFEST}: the bundle was changed; "
            "rebuild with `edgekd bundle`"
        )
    for name, meta in files.items():
        if not os.path.lexists(folder / name):
            raise EdgeKDError(f"bundle file {name} is missing; rebuild with `edgekd bundle`")
        path = file_inside(folder, name, BUNDLE_FIX)
        if sha256_file(path) != meta["sha256"]:
            raise EdgeKDError(
                f"bundle file {name} does not match its sha256 in {MANIFEST}; "
                "it was changed or corrupted: rebuild with `edgekd bundle`"
            )
    return BundleManifest.read(folder)
