"""Score any model the same way: an HF classifier folder or id, a student folder, or an
ONNX file (with its tokenizer beside it).

`OnnxPredictor` needs only onnxruntime, numpy and tokenizers: it is what a
deployment runs, so it must not pull in torch or transformers.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from edgekd.artifacts import HF_CONFIG, TOKENIZER, StudentMeta, file_inside
from edgekd.data import TOKENS_PER_ROW, length_sorted_batches
from edgekd.errors import EdgeKDError
from edgekd.failures import first_line
from edgekd.io import load_json, parse_json
from edgekd.students import STUDENT_FILE
from edgekd.students.tokenizer import StudentTokenizer, read_tokenizer

HF_MAX_LENGTH = 128  # tokens per text for HF-layout ONNX models (teachers)


class Predictor(Protocol):
    label_names: list[str]

    def logits(self, texts: list[str]) -> np.ndarray: ...


def reads_pairs(input_names: list[str], add_special_tokens: bool) -> bool | None:
    """Whether a model takes sentence pairs (True), single texts (False) or either (None):
    a siamese pair model has a second input (`input_ids_b`); one without it or special
    tokens reads one text per row; one with [CLS]/[SEP] reads a pair as one row."""
    if "input_ids_b" in input_names:
        return True
    return None if add_special_tokens else False


def check_rows(texts: list[Any], pairs: bool | None, model: str | Path) -> None:
    """Refuse in one line rows of the other kind than `model` reads (`reads_pairs`).
    Without this a pair model given one text died inside onnxruntime or torch (an
    internal error, exit 4), and a single-text model given pairs silently read only
    each pair's first text."""
    if pairs is None:
        return
    i = next((i for i, t in enumerate(texts) if isinstance(t, str) != (not pairs)), None)
    if i is None:
        return
    if pairs:
        raise EdgeKDError(
            f"{model} reads sentence pairs, but row {i + 1} is a single text; give pairs: "
            "--text-pair-column with --data, or 'first<TAB>second' lines with --file"
        )
    raise EdgeKDError(
        f"{model} reads one text per row, but row {i + 1} is a sentence pair; drop "
        "--text-pair-column, or give one text per line (no tab) with --file"
    )


def open_session(path: Path, options: Any, fix: str) -> Any:
    """An onnxruntime session on a model file that may be crafted: what onnxruntime
    refuses at load (an IR version or opset it does not know, external data named
    outside the model's folder) is one line that names the file, not an internal error
    (exit 4)."""
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's own classes (Fail, InvalidGraph, NoSuchFile, ...)
        raise EdgeKDError(
            f"{path} is not a valid model onnxruntime {ort.__version__} can load "
            f"({ort_reason(e)}); {fix}"
        ) from e


def ort_reason(e: BaseException) -> str:
    """onnxruntime's reason without its wrapping: `[ONNXRuntimeError] : 1 : FAIL : Load
    model from P failed:/onnxruntime_src/core/graph/model.cc:256 onnxruntime::Model::
    Model(...) Unsupported model IR version: 99, ...` says only the last part to a user
    (the C++ frame filled the 160 characters a line keeps)."""
    text = first_line(e, limit=1000)
    text = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", text)
    text = re.sub(r"^Load model from .*? failed:", "", text)
    text = re.sub(r"^/\S+:\d+ .*?\) (?=[A-Z])", "", text)  # source file:line and signature
    return text[:160]


def check_output(
    session: Any, path: Path, labels: int, fix: str, name: str | None = None, rank: int | None = 2
) -> None:
    """Refuse, before any row runs, a graph whose output `name` (None: its first) cannot
    hold one score per label: none at all, another rank, or [batch, 3] beside 2 label
    names. Unchecked, each was an internal error after the first batch had run.
    `rank` None: any rank (a one-file model of before batching)."""
    outputs = {o.name: o.shape for o in session.get_outputs()}
    name = name if name is not None else next(iter(outputs), None)
    if name not in outputs:
        what = f"{name} output" if name else "outputs"
        raise EdgeKDError(f"{path} has no {what} to read scores from; {fix}")
    shape = outputs[name]
    # A dimension onnxruntime cannot tell is a name or None; only a number can disagree.
    if (rank is not None and len(shape) != rank) or (
        shape and isinstance(shape[-1], int) and shape[-1] != labels
    ):
        want = ["batch"] * ((rank or 2) - 1) + [labels]
        raise EdgeKDError(
            f"{path}'s {name} output is {shape}, not {want} (one score per label it names); {fix}"
        )


def check_scores(scores: np.ndarray, rows: int, labels: int, path: Path, fix: str) -> None:
    """Refuse a batch's scores of another shape than [rows, labels] (a crafted graph whose
    output width `check_output` could not read): numpy would raise a bare ValueError."""
    if scores.shape != (rows, labels):
        raise EdgeKDError(
            f"{path} returned scores of shape {list(scores.shape)}, not [{rows}, {labels}] "
            f"(rows × labels); {fix}"
        )


class OnnxPredictor:
    """An ONNX classifier run with onnxruntime on the CPU."""

    def __init__(
        self,
        path: str | Path,
        threads: int = 0,
        batch_size: int = 64,
        max_length: int = HF_MAX_LENGTH,
        workers: int = 1,
        active: Callable[[], int] | None = None,
    ) -> None:
        """`workers` > 1: that many single-thread sessions run batches side by side (bulk
        labelling). On 2 cores this is ~1.2-1.4× one 2-thread session, and with no
        intra-op pool there is nothing to spin-wait, so a busy machine slows it in
        proportion instead of stalling it (benchmarks/labelling_load.py). `active`: how
        many of them a call runs, asked at each call (all when unset); the distill stage
        leaves a core to the student while it trains beside the labelling."""
        import onnxruntime as ort

        self.path = Path(path)
        folder = self.path.parent
        if os.path.lexists(folder / STUDENT_FILE):  # an edgekd export or bundle
            # Its files are read from its own folder only: a symlink there is refused
            # (`file_inside`), and student.json is checked and typed before use.
            fix = "re-create the folder with `edgekd export` or `edgekd bundle`"
            meta = StudentMeta.read(file_inside(folder, STUDENT_FILE, fix))
            self.label_names = list(meta.id2label)
            self.tokenizer = StudentTokenizer(
                read_tokenizer(file_inside(folder, TOKENIZER, fix), fix, meta.vocab_size),
                meta.max_length,
                meta.add_special_tokens,
            )
        elif (folder / HF_CONFIG).is_file() and (folder / TOKENIZER).is_file():
            # An HF/optimum export. Links are followed here: a Hugging Face cache folder
            # is made of links into its blob store, and the user named this model file.
            # Still regular files only (no FIFO to hang on), JSON checked as everywhere.
            fix = "re-export the model (optimum-cli export onnx)"
            config = load_json(folder / HF_CONFIG, fix)
            id2label = config.get("id2label") if isinstance(config, dict) else None
            if not isinstance(id2label, dict | None):
                raise EdgeKDError(f"{folder / HF_CONFIG}: id2label is not a mapping; {fix}")
            if not id2label:
                raise EdgeKDError(f"{folder / HF_CONFIG} names no labels (id2label); {fix}")
            self.label_names = [str(id2label.get(str(i), i)) for i in range(len(id2label))]
            self.tokenizer = StudentTokenizer(
                read_tokenizer(folder / TOKENIZER, fix), max_length, True
            )
        else:
            raise EdgeKDError(
                f"{path}: no {STUDENT_FILE} or config.json + tokenizer.json beside "
                "it; export with `edgekd export` or optimum"
            )
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1 if workers > 1 else threads
        # Errors only: an early-exit graph's overridable `exit_threshold` draws a warning
        # at every load.
        options.log_severity_level = 3
        self.fix = fix
        self.sessions = [open_session(self.path, options, fix) for _ in range(workers)]
        self.session = self.sessions[0]
        check_output(self.session, self.path, len(self.label_names), fix)
        self.active = active
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.pairs = reads_pairs(self.input_names, self.tokenizer.add_special_tokens)
        self.batch_size = batch_size

    def feed(self, ids: list[Any]) -> dict[str, np.ndarray]:
        enc = self.tokenizer.pad(ids)
        if "token_type_ids" in self.input_names and "token_type_ids" not in enc:
            enc["token_type_ids"] = np.zeros_like(enc["input_ids"])
        return {k: v for k, v in enc.items() if k in self.input_names}

    def logits(
        self,
        texts: list[str],
        description: str | None = None,
        in_order: bool = False,
        sink: Any = None,
    ) -> np.ndarray:
        """Logits in the order of `texts`; with `description`, a progress bar. Batches
        are rows of similar length; `in_order`: consecutive rows instead, the batches a
        caller sends (what the one-file model's export check compares it on). `sink`
        (`edgekd.distill.states.StateSink`): each batch's `hidden` output (a teacher
        exported with its token states) is recorded there, by text."""
        import contextlib

        check_rows(texts, self.pairs, self.path)
        ids = self.tokenizer.packed_ids(texts)
        out = np.zeros((len(texts), len(self.label_names)), dtype=np.float32)
        with contextlib.ExitStack() as stack:
            bar = job = None
            if description:
                from edgekd.progress import progress_bar

                bar = stack.enter_context(progress_bar())
                job = bar.add_task(description, total=len(texts), rate="")
            size = self.batch_size
            batches = (
                [list(range(a, min(a + size, len(texts)))) for a in range(0, len(texts), size)]
                if in_order
                else length_sorted_batches(ids.lengths().tolist(), size, size * TOKENS_PER_ROW)
            )

            running = len(self.sessions)
            if self.active is not None:
                running = max(1, min(running, self.active()))

            def run(worker: int) -> None:
                # onnxruntime releases the GIL inside run(): the workers overlap.
                for idx in batches[worker::running]:
                    feed = self.feed([ids[i] for i in idx])
                    outputs = self.sessions[worker].run(None, feed)
                    check_scores(outputs[0], len(idx), out.shape[1], self.path, self.fix)
                    out[idx] = outputs[0]
                    if sink is not None:  # outputs[1]: the teacher's `hidden`
                        sink.record([texts[i] for i in idx], outputs[1], feed["input_ids"])
                    if bar is not None and job is not None:
                        bar.update(job, advance=len(idx))

            if running == 1:
                run(0)
            else:
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(running) as pool:
                    list(pool.map(run, range(running)))
        return out


def softmax(logits: np.ndarray) -> np.ndarray:
    """Class probabilities per row of logits (shifted by the row max: no overflow)."""
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)  # type: ignore[no-any-return]


E2E_LABELS = "edgekd.labels"  # metadata key of a one-file model's label names (JSON list)


def extensions_library() -> str | None:
    """onnxruntime-extensions' operator library, found without importing the package
    (its import pulls in onnx and more: ~3 s and ~300 MB). None: not installed. The
    profiling agent has the same lookup: it runs on devices without edgekd."""
    import importlib.util
    import os

    spec = importlib.util.find_spec("onnxruntime_extensions")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for name in sorted(os.listdir(folder)):
            if name.startswith("_extensions_pydll") and name.endswith((".so", ".pyd", ".dylib")):
                return os.path.join(folder, name)
    return None


def extension_options(threads: int = 0) -> Any:
    """Session options with onnxruntime-extensions' operators registered (the in-graph
    tokenizer of `model.e2e.onnx`)."""
    import onnxruntime as ort

    library = extensions_library()
    if library is None:
        raise EdgeKDError(
            "a model.e2e.onnx needs onnxruntime-extensions: pip install onnxruntime-extensions"
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.register_custom_ops_library(library)
    return options


class E2EPredictor:
    """A one-file text→label model (`edgekd export --e2e`): `batch_size` texts, or pairs,
    per call; label names from its own metadata. onnxruntime, numpy and
    onnxruntime-extensions only."""

    def __init__(self, path: str | Path, threads: int = 0, batch_size: int = 32) -> None:
        """`batch_size`: rows per call. 32 is where the one-file model was timed against
        the two-step path (benchmarks/results/e2e_sst2.md); an int8 model scales its
        activations over the whole call, so the same rows batched otherwise can differ
        in the last digits (the export checks labels at batch 1, 8 and 32)."""
        self.path = Path(path)
        fix = "make it with `edgekd export --e2e`"
        self.session = open_session(self.path, extension_options(threads), fix)
        names = self.session.get_modelmeta().custom_metadata_map.get(E2E_LABELS)
        if names is None:
            raise EdgeKDError(f"{path} has no {E2E_LABELS} metadata; {fix}")
        try:
            labels = parse_json(names, f"{path}'s {E2E_LABELS} metadata")
        except json.JSONDecodeError:
            labels = None
        if not isinstance(labels, list) or not all(isinstance(n, str) for n in labels):
            raise EdgeKDError(f"{path}'s {E2E_LABELS} metadata is not a JSON list of names; {fix}")
        self.label_names = labels
        one_row = self.session.get_outputs()[0].shape == [1]
        rank = None if one_row else 2
        check_output(self.session, self.path, len(labels), fix, "probabilities", rank)
        self.fix = fix
        # [N, 2] strings: a pair model. A file of edgekd before batching says `label` is
        # [1] (its graph reads one row a call, a pair as a [2] tensor): still read so,
        # one row a call, so a bundle shipped then keeps working.
        self.pairs: bool | None = len(self.session.get_inputs()[0].shape) == 2
        self.one_row = one_row
        if self.one_row:
            self.pairs = None  # that graph cannot tell; it reads what it is given
        self.batch_size = 1 if self.one_row else batch_size

    def probabilities(self, texts: list[Any], batch_size: int | None = None) -> np.ndarray:
        """Class probabilities per text (a pair: a (first, second) tuple), `batch_size`
        (default: the predictor's) consecutive rows a call."""
        check_rows(texts, self.pairs, self.path)
        size = 1 if self.one_row else batch_size or self.batch_size
        out = np.zeros((len(texts), len(self.label_names)), dtype=np.float32)
        for start in range(0, len(texts), size):
            chunk = texts[start : start + size]
            if self.one_row:
                text = chunk[0]
                rows = np.array([text] if isinstance(text, str) else list(text), dtype=object)
            else:  # [N] texts, or [N, 2] pairs
                rows = np.array([list(t) for t in chunk] if self.pairs else chunk, object)
            scores = self.session.run(["probabilities"], {"text": rows})[0]
            if self.one_row:
                scores = scores.reshape(1, -1)  # one row's scores, whatever rank it gave
            check_scores(scores, len(chunk), len(self.label_names), self.path, self.fix)
            out[start : start + len(chunk)] = scores
        return out

    def logits(self, texts: list[Any]) -> np.ndarray:
        """Log-probabilities: logits up to a per-row constant (the same argmax), so
        `score` and every reader of a `Predictor` take this model too."""
        with np.errstate(divide="ignore"):
            return np.log(self.probabilities(texts))


class StudentPredictor:
    def __init__(self, folder: str | Path) -> None:
        from edgekd.students.base import load_student

        self.folder = folder
        self.model, self.tokenizer, self.label_names = load_student(folder)
        self.pairs = reads_pairs(list(self.model.onnx_inputs()), self.tokenizer.add_special_tokens)

    def logits(self, texts: list[str]) -> np.ndarray:
        from edgekd.students.base import predict_logits

        check_rows(texts, self.pairs, self.folder)
        return predict_logits(self.model, self.tokenizer, self.tokenizer.ids(texts))


def class_scores(pred: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Matthews correlation and macro F1 of label ids `pred` against `gold`: the metrics
    of unbalanced tasks, where accuracy flatters a model that favours the common label
    (CoLA's dev is 69% acceptable: always saying so scores 0.69, and MCC 0).

    MCC is Gorodkin's (2004) multiclass form over the confusion matrix C (s rows, c of
    them right, t_k true and p_k predicted of label k):
        (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)),
    0 when a side is constant (the denominator is 0), as scikit-learn defines it. Macro
    F1 averages 2TP / (2TP + FP + FN) over the labels seen in either array."""
    pred, gold = np.asarray(pred, dtype=np.int64), np.asarray(gold, dtype=np.int64)
    if len(pred) == 0:
        return {"mcc": 0.0, "macro_f1": 0.0}
    k = int(max(pred.max(), gold.max())) + 1
    confusion = np.zeros((k, k), dtype=np.float64)  # float: s² overflows no int type
    np.add.at(confusion, (gold, pred), 1)
    s, c = confusion.sum(), np.trace(confusion)
    t, p = confusion.sum(1), confusion.sum(0)
    denominator = np.sqrt((s * s - p @ p) * (s * s - t @ t))
    mcc = float((c * s - p @ t) / denominator) if denominator > 0 else 0.0
    tp = np.diag(confusion)
    seen = (t + p) > 0
    f1 = 2 * tp[seen] / (t[seen] + p[seen])  # 2TP + FP + FN = true + predicted
    return {"mcc": mcc, "macro_f1": float(f1.mean())}


def score(
    predictor: Predictor, texts: list[Any], labels: list[int], reference: np.ndarray | None = None
) -> dict[str, Any]:
    """Accuracy, MCC and macro F1 of `texts` (or sentence pairs) on gold `labels`, and
    agreement with `reference` predictions if given."""
    pred = predictor.logits(texts).argmax(1)
    result: dict[str, Any] = {
        "accuracy": float((pred == np.array(labels)).mean()),
        **class_scores(pred, np.array(labels)),
        "n": len(labels),
    }
    if reference is not None:
        result["agreement"] = float((pred == reference).mean())
    result["predictions"] = pred
    return result
