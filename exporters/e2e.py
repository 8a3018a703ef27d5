"""One-file text→label ONNX (`edgekd export --e2e`): the tokenizer inside the graph.

`model.e2e.onnx` takes a string tensor and returns `label` (int64 [1]) and
`probabilities` (float [1, labels]); its label names are in its metadata
(`edgekd.labels`), so the file alone is a deployment. The tokenizer is
onnxruntime-extensions' `BertTokenizer` op (BERT normalisation, basic
tokenisation, greedy WordPiece), then a few standard ops shape its ids into the
student's inputs, then the shipped model (int8 when the export kept one), then
softmax and argmax.

What it covers, and why not more:
- WordPiece vocabularies (the teacher's pieces) and word vocabularies. A word
  vocabulary is a WordPiece vocabulary without `##` pieces: greedy WordPiece then
  finds a word whole or gives [UNK], as the word-level lookup does.
- BERT normalisation and pre-tokenisation only, which every edgekd student uses.
  A BPE or Unigram (SentencePiece) tokenizer would need another op and is refused.
- One row per call: `["text"]`, or `["first", "second"]` for a sentence pair. The
  `BertTokenizer` op encodes one sequence (or one pair) per call; batching would
  need a Loop over rows, and an edge deployment classifies one text at a time.
- Running it needs `onnxruntime-extensions` beside onnxruntime (its op library
  is registered on the session), on the device as here.

Every dev row is predicted through the file and through the Python tokenizer
path at batch 1; a single different label fails the export.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekd.artifacts import E2E_MODEL, MODEL_FILES, StudentMeta
from edgekd.config import ExportConfig
from edgekd.errors import EdgeKDError
from edgekd.exporters.base import ExportFormat, ExportJob
from edgekd.progress import console
from edgekd.students.predict import E2E_LABELS, E2EPredictor, OnnxPredictor

CONTRIB = "ai.onnx.contrib"  # onnxruntime-extensions' operator domain


class E2EFormat(ExportFormat):
    """`model.e2e.onnx`: string in, label and probabilities out."""

    name: ClassVar[str] = "e2e"

    def wanted(self, cfg: ExportConfig) -> bool:
        return cfg.e2e

    def write(self, job: ExportJob) -> None:
        kind = "int8" if "int8" in job.report["models"] else "fp32"
        source = job.folder / MODEL_FILES[kind]
        meta = StudentMeta.read(job.folder)
        path = job.folder / E2E_MODEL
        build_e2e(
            source,
            json.loads(job.tokenizer.tokenizer.to_str()),
            meta.max_length,
            meta.add_special_tokens,
            meta.id2label,
            path,
        )
        job.report["e2e"] = {"source": kind, **validate_e2e(path, source, job.task.dev.texts)}
        console.print(
            f"e2e: {path.name} ({path.stat().st_size:,} B, from {kind}): same label as the "
            f"tokenizer path on all {len(job.task.dev.texts):,} dev rows"
        )


def tokenizer_attributes(spec: dict[str, Any], max_length: int) -> dict[str, Any]:
    """The `BertTokenizer` op's attributes for a `tokenizers` JSON `spec`, or a one-line
    error naming what the op cannot reproduce."""
    model, norm, pre = spec["model"], spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if model["type"] not in ("WordPiece", "WordLevel"):
        raise EdgeKDError(
            f"--e2e covers WordPiece and word vocabularies; this tokenizer is "
            f"{model['type']} (onnxruntime-extensions' BertTokenizer cannot run it)"
        )
    if norm.get("type") != "BertNormalizer" or pre.get("type") != "BertPreTokenizer":
        raise EdgeKDError(
            "--e2e needs BERT normalisation and pre-tokenisation (every edgekd student has "
            f"them); this tokenizer has {norm.get('type')} and {pre.get('type')}"
        )
    vocab: dict[str, int] = model["vocab"]
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise EdgeKDError("--e2e needs token ids 0..n-1 without gaps; re-distill the student")
    tokens = sorted(vocab, key=vocab.__getitem__)
    # The op brackets every row with [CLS] … [SEP]. A word vocabulary may lack them:
    # they are appended past the model's ids, and the graph cuts them off again.
    for special in ("[CLS]", "[SEP]"):
        if special not in vocab:
            tokens.append(special)
    lowercase = bool(norm.get("lowercase", True))
    accents = norm.get("strip_accents")
    return {
        "vocab_file": "\n".join(tokens),
        "do_lower_case": int(lowercase),
        # BertNormalizer's strip_accents None means "as lowercase" (BERT's own rule).
        "strip_accents": int(lowercase if accents is None else accents),
        "tokenize_chinese_chars": int(norm.get("handle_chinese_chars", True)),
        "unk_token": model.get("unk_token", "[UNK]"),
        "suffix_indicator": model.get("continuing_subword_prefix", "##"),
        "max_length": max_length,
        "truncation_strategy_name": "longest_first",
    }


def build_e2e(
    source: Path,
    spec: dict[str, Any],
    max_length: int,
    special: bool,
    labels: list[str],
    out: Path,
) -> None:
    """Write `out`: `source` (an exported student) behind the in-graph tokenizer."""
    import onnx
    from onnx import TensorProto, compose, helper, numpy_helper

    model = onnx.load(str(source))
    inputs = [i.name for i in model.graph.input]
    siamese = "input_ids_b" in inputs
    # A student without [CLS]/[SEP] keeps max_length tokens between the two the op adds.
    attrs = tokenizer_attributes(spec, max_length if special else max_length + 2)
    vocab = spec["model"]["vocab"]
    unk = vocab.get(spec["model"].get("unk_token", "[UNK]"))
    # StudentTokenizer's fill for a row with no tokens: [UNK], else [PAD] (id 0 if none).
    fill = unk if unk else vocab.get("[PAD]", 0)
    nodes: list[Any] = []
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "e2e/zero"),
        numpy_helper.from_array(np.array([1], np.int64), "e2e/one"),
        numpy_helper.from_array(np.array([-1], np.int64), "e2e/minus_one"),
        numpy_helper.from_array(np.array([fill], np.int64), "e2e/fill"),
    ]

    def tokenize(text: str, suffix: str) -> list[str]:
        outs = [f"e2e/ids{suffix}", f"e2e/types{suffix}", f"e2e/mask{suffix}"]
        nodes.append(helper.make_node("BertTokenizer", [text], outs, domain=CONTRIB, **attrs))
        return outs

    def as_row(flat: str, name: str) -> None:
        nodes.append(helper.make_node("Unsqueeze", [flat, "e2e/zero"], [name]))

    def ones_like(row: str, name: str) -> None:
        nodes.append(helper.make_node("Shape", [row], [f"{name}/shape"]))
        one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
        nodes.append(helper.make_node("ConstantOfShape", [f"{name}/shape"], [name], value=one))

    def without_specials(text: str, suffix: str) -> None:
        """ids of `text` with [CLS] and [SEP] cut off, never empty (the fill token)."""
        ids = tokenize(text, suffix)[0]
        core, filled = f"e2e/core{suffix}", f"e2e/filled{suffix}"
        length, keep, flat = f"e2e/len{suffix}", f"e2e/keep{suffix}", f"e2e/flat{suffix}"
        nodes.append(helper.make_node("Slice", [ids, "e2e/one", "e2e/minus_one"], [core]))
        nodes.append(helper.make_node("Concat", [core, "e2e/fill"], [filled], axis=0))
        nodes.append(helper.make_node("Shape", [core], [length]))
        nodes.append(helper.make_node("Max", [length, "e2e/one"], [keep]))
        nodes.append(helper.make_node("Slice", [filled, "e2e/zero", keep], [flat]))
        as_row(flat, f"input_ids{suffix}")
        ones_like(f"input_ids{suffix}", f"attention_mask{suffix}")

    if special:  # one op call: [CLS] a [SEP] (b [SEP]), with its type ids
        ids, types, mask = tokenize("text", "")
        as_row(ids, "input_ids")
        as_row(types, "token_type_ids")
        as_row(mask, "attention_mask")
    elif siamese:  # each side on its own, as the Python path encodes a pair
        inits.append(numpy_helper.from_array(np.array([2], np.int64), "e2e/two"))
        nodes.append(helper.make_node("Slice", ["text", "e2e/zero", "e2e/one"], ["e2e/first"]))
        nodes.append(helper.make_node("Slice", ["text", "e2e/one", "e2e/two"], ["e2e/second"]))
        without_specials("e2e/first", "")
        without_specials("e2e/second", "_b")
    else:
        without_specials("text", "")
    row = ["batch", "sequence"]
    pre = helper.make_graph(
        nodes,
        "tokenizer",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["rows"])],
        [helper.make_tensor_value_info(name, TensorProto.INT64, row) for name in inputs],
        initializer=inits,
    )
    opsets = {o.domain: o.version for o in model.opset_import}
    pre_model = helper.make_model(
        pre,
        opset_imports=[
            helper.make_opsetid("", opsets.get("", 17)),
            helper.make_opsetid(CONTRIB, 1),
        ],
        ir_version=model.ir_version,
    )
    merged = compose.merge_models(
        pre_model, model, io_map=[(n, n) for n in inputs], producer_name="edgekd"
    )
    logits = model.graph.output[0].name
    merged.graph.node.extend(
        [
            helper.make_node("Softmax", [logits], ["probabilities"], axis=-1),
            helper.make_node("ArgMax", [logits], ["label"], axis=-1, keepdims=0),
        ]
    )
    del merged.graph.output[:]
    merged.graph.output.extend(
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [1]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, len(labels)]),
        ]
    )
    helper.set_model_props(merged, {E2E_LABELS: json.dumps(labels)})
    onnx.checker.check_model(merged)
    onnx.save(merged, str(out))


def validate_e2e(path: Path, source: Path, texts: list[Any]) -> dict[str, Any]:
    """Predict every row through `path` and through `source` with the Python tokenizer,
    both at batch 1 (dynamic int8 scales activations per batch, so only batch 1 is
    the same computation); any different label fails the export."""
    got = E2EPredictor(path).probabilities(texts)
    want = softmax(OnnxPredictor(source, batch_size=1).logits(texts))
    differ = np.flatnonzero(got.argmax(1) != want.argmax(1))
    if len(differ):
        i = int(differ[0])
        raise EdgeKDError(
            f"model.e2e.onnx labels {len(differ)} dev row(s) differently from the tokenizer "
            f"path (first: row {i}, {texts[i]!r}); drop --e2e and report this tokenizer"
        )
    diff = float(np.abs(got - want).max()) if len(texts) else 0.0
    return {
        "path": path.name,
        "bytes": path.stat().st_size,
        "rows": len(texts),
        "label_agreement": 1.0,
        "max_probability_diff": diff,
    }


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)
