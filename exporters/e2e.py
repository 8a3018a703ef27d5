"""One-file text→label ONNX (`edgekd export --e2e`): the tokenizer inside the graph.

`model.e2e.onnx` takes a batch of N texts, a 1-D string tensor [N], and returns
`label` (int64 [N]) and `probabilities` (float [N, labels]), one row per text; its label
names are in its metadata (`edgekd.labels`), so the file alone is a deployment. A
sentence-pair model takes an [N, 2] string tensor instead, one [first, second] row per
pair. Each model declares the rank it reads, so onnxruntime refuses the other spelling
before anything runs ("Invalid rank for input: text Got: 1 Expected: 2"): a 1-D
["first", "second"], one pair as these files once spelled it, is no longer read as a
batch of two single texts by a pair model, nor as a pair by a single-text model; the
edgekd predictor (`E2EPredictor`) says so in its own words first. In the graph:

1. a Loop over the N rows, each tokenized alone (BasicTokenizer reads one string):
   onnxruntime-extensions' `BasicTokenizer`: BERT normalisation (lowercase, accents,
   control characters) and pre-tokenisation (whitespace, punctuation, CJK), words out;
2. a word vocabulary: each word's id (`LabelEncoder`, unknown words → [UNK]); a
   WordPiece vocabulary: `WordpieceTokenizer` splits each word greedily, then the
   graph turns a word with any [UNK] piece into one [UNK] (what `tokenizers` does;
   the op alone keeps the pieces before the failure: "xyzzy" → x ##y [UNK]);
3. truncation to the student's max length (a pair: `tokenizers`' longest-first),
   [CLS]/[SEP] and type ids for BERT students, the [UNK] fill of an empty row; the row
   then padded to max length, the Loop's fixed-shape output;
4. after the Loop, the batch cut to its longest row, with StudentTokenizer.pad's
   layout: [PAD] ids, a mask of each row's length, type ids 0 on padding;
5. the shipped model (int8 when the export kept one) run once on the padded batch,
   softmax and argmax. Every student masks its padding (packed or masked LSTM steps,
   masked pooling, attention masks), so in fp32 a padded row gives its batch-1 logits;
   a dynamic-int8 model scales its activations over the whole call, so its rows move
   in the last digits with their batch, exactly as the two-step path's do.

What it covers, and why not more:
- WordPiece vocabularies (the teacher's pieces) and word vocabularies. A word
  vocabulary is a WordPiece vocabulary without `##` pieces: greedy WordPiece then
  finds a word whole or gives [UNK], as the word-level lookup does.
- BERT normalisation and pre-tokenisation only, which every edgekd student uses.
  A BPE or Unigram (SentencePiece) tokenizer would need another op and is refused.
- An empty batch ([0], or [0, 2]) returns [0] labels and [0, labels] probabilities:
  the model runs one [PAD] row, cut off again, since onnxruntime 1.31 crashes the
  process (a segfault) running the int8 BiLSTM on a batch of 0 rows.
- Rows tokenized one at a time, in a Loop: measured side by side on SST-2 dev at
  batch 32 (2 shared cores), the in-graph tokenizer was ~80 µs of a row's ~420 µs
  (the BiLSTM most of the rest); of those 80, ~20 are the Loop and BasicTokenizer
  alone (the op that reads one string), ~27 WordPiece and the lookup, the rest the
  per-row truncation and [UNK] steps. One WordpieceTokenizer call over all rows'
  words would need ragged truncation (a pair's longest-first rule reads both sides'
  full lengths) to save at most those ~30-40 µs, a tenth of a row. The Loop costs a
  batch-1 call ~20 µs against the one-row graph of before (282 → 308 µs a text).
- A NUL character ends a text inside the op (a C string): "a\x00b" reads as "a",
  where `tokenizers` reads "ab".
- Running it needs `onnxruntime-extensions` beside onnxruntime (its op library
  is registered on the session), on the device as here.

Every dev row is predicted through the file and through the Python tokenizer path at
batch 1, 8 and 32, the same consecutive rows in each call on both sides; a single
different label fails the export.
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
from edgekd.students.predict import E2E_LABELS, E2EPredictor, OnnxPredictor, softmax

CONTRIB = "ai.onnx.contrib"  # onnxruntime-extensions' operator domain
ML = "ai.onnx.ml"  # LabelEncoder


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
        texts = job.task.dev.texts
        build_e2e(
            source,
            json.loads(job.tokenizer.tokenizer.to_str()),
            meta.max_length,
            meta.add_special_tokens,
            meta.id2label,
            path,
            pairs=bool(texts) and not isinstance(texts[0], str),
        )
        job.report["e2e"] = {"source": kind, **validate_e2e(path, source, job.task.dev.texts)}
        console.print(
            f"e2e: {path.name} ({path.stat().st_size:,} B, from {kind}): same label as the "
            f"tokenizer path on all {len(job.task.dev.texts):,} dev rows at batch "
            + ", ".join(map(str, BATCH_SIZES[:-1]))
            + f" and {BATCH_SIZES[-1]}"
        )


def check_tokenizer(spec: dict[str, Any]) -> dict[str, int]:
    """The vocabulary of a `tokenizers` JSON `spec` the graph can reproduce exactly,
    or a one-line error naming what it cannot."""
    model, norm, pre = spec["model"], spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if model["type"] not in ("WordPiece", "WordLevel"):
        raise EdgeKDError(
            f"--e2e covers WordPiece and word vocabularies; this tokenizer is "
            f"{model['type']} (onnxruntime-extensions has no exact op for it here)"
        )
    if norm.get("type") != "BertNormalizer" or pre.get("type") != "BertPreTokenizer":
        raise EdgeKDError(
            "--e2e needs BERT normalisation and pre-tokenisation (every edgekd student has "
            f"them); this tokenizer has {norm.get('type')} and {pre.get('type')}"
        )
    vocab: dict[str, int] = model["vocab"]
    if model.get("unk_token", "[UNK]") not in vocab:
        raise EdgeKDError("--e2e needs an [UNK] token in the vocabulary; re-distill the student")
    return vocab


def build_e2e(
    source: Path,
    spec: dict[str, Any],
    max_length: int,
    special: bool,
    labels: list[str],
    out: Path,
    pairs: bool = False,
) -> None:
    """Write `out`: `source` (an exported student) behind the in-graph tokenizer;
    `pairs`: it reads sentence pairs, an [N, 2] string tensor (a siamese student always
    does)."""
    import onnx
    from onnx import TensorProto, compose, helper

    model = onnx.load(str(source))
    # An input with an initializer of its name (an early-exit graph's exit_threshold) has
    # a default: the one-file model keeps it as a constant, the export's threshold.
    defaults = {i.name for i in model.graph.initializer}
    fed = [i for i in model.graph.input if i.name not in defaults]
    del model.graph.input[:]
    model.graph.input.extend(fed)
    inputs = [i.name for i in fed]
    pairs = pairs or "input_ids_b" in inputs
    g = Graph(spec, check_tokenizer(spec))
    # The Loop body: one row of the batch, tokenized as a one-row call always was.
    text = g.row(pairs)
    if special:
        for token in ("[CLS]", "[SEP]"):
            if token not in g.vocab:
                raise EdgeKDError(f"--e2e: a BERT student's vocabulary has no {token}")
        if pairs:
            g.bert_pair(text, max_length)
        else:
            core = g.op("Slice", [g.pieces(text, "a"), g.const(0), g.const(max_length - 2)])
            ids = g.op(
                "Concat", [g.const(g.vocab["[CLS]"]), core, g.const(g.vocab["[SEP]"])], axis=0
            )
            g.rows(ids, g.op("ConstantOfShape", [g.op("Shape", [ids])], value=int_tensor(0)))
    elif "input_ids_b" in inputs:  # the siamese BiLSTM: each side on its own
        for side, start, suffix in (("a", 0, ""), ("b", 1, "_b")):
            half = g.op("Slice", [text, g.const(start), g.const(start + 1)])
            g.plain(g.pieces(half, side), max_length, suffix)
    else:
        g.plain(g.pieces(text, "a"), max_length, "")
    g.batch(inputs, max_length)
    # Each side of a pair has its own length (one shared symbolic name would tell
    # onnxruntime the two are equal, and it would reuse one buffer for both).
    shape: list[str | int] = ["batch", 2] if pairs else ["batch"]
    pre = helper.make_graph(
        g.nodes,
        "tokenizer",
        [helper.make_tensor_value_info("text", TensorProto.STRING, shape)],
        [
            helper.make_tensor_value_info(
                name, TensorProto.INT64, ["batch", "tokens_b" if name.endswith("_b") else "tokens"]
            )
            for name in inputs
        ],
        initializer=g.inits,
    )
    opsets = {o.domain: o.version for o in model.opset_import}
    pre_model = helper.make_model(
        pre,
        opset_imports=[
            helper.make_opsetid("", opsets.get("", 17)),
            helper.make_opsetid(CONTRIB, 1),
            helper.make_opsetid(ML, 2),
        ],
        ir_version=model.ir_version,
    )
    merged = compose.merge_models(
        pre_model, model, io_map=[(n, n) for n in inputs], producer_name="edgekd"
    )
    logits = model.graph.output[0].name
    first = [g.const(0), g.count]  # the batch's own rows (an empty batch ran one dummy)
    merged.graph.node.extend(
        [
            # Cut after the row-wise ops: onnxruntime's ArgMax of an empty [0, labels]
            # returns [0, labels], not [0].
            helper.make_node("Softmax", [logits], ["e2e/probabilities"], axis=-1),
            helper.make_node("ArgMax", [logits], ["e2e/label"], axis=-1, keepdims=0),
            helper.make_node("Slice", ["e2e/probabilities", *first], ["probabilities"]),
            helper.make_node("Slice", ["e2e/label", *first], ["label"]),
        ]
    )
    del merged.graph.output[:]
    merged.graph.output.extend(
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info(
                "probabilities", TensorProto.FLOAT, ["batch", len(labels)]
            ),
        ]
    )
    helper.set_model_props(merged, {E2E_LABELS: json.dumps(labels)})
    onnx.checker.check_model(merged)
    onnx.save(merged, str(out))


class Graph:
    """The tokenizer graph under construction: nodes (first the Loop body's, then the
    batch's), int64 constants, fresh names."""

    def __init__(self, spec: dict[str, Any], vocab: dict[str, int]) -> None:
        self.spec, self.vocab = spec, vocab
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.names = 0
        model = spec["model"]
        self.unk = vocab[model.get("unk_token", "[UNK]")]
        self.wordpiece = model["type"] == "WordPiece"
        # StudentTokenizer's fill for a row with no tokens: [UNK], else [PAD] (0 if none).
        self.fill = self.unk if self.unk else vocab.get("[PAD]", 0)
        # StudentTokenizer.pad's id: the two-step path pads with it, and an int8 model
        # scales its activations over the whole batch, padding included, so the one-file
        # model pads with the same id to run the same computation.
        self.pad = vocab.get("[PAD]", 0)
        # Per side ("" or a siamese "_b"): one row's ids and (BERT) type ids, 1-D.
        self.sides: dict[str, tuple[str, str | None]] = {}
        self.count = ""  # the batch's row count, [N], once `batch` has built the Loop

    def const(self, value: int) -> str:
        """An int64 [1] constant, added once."""
        return self.constant(value, (1,))

    def scalar(self, value: int) -> str:
        """An int64 scalar constant, added once."""
        return self.constant(value, ())

    def constant(self, value: int, shape: tuple[int, ...]) -> str:
        from onnx import numpy_helper

        name = f"e2e/const{'_' if shape else '_scalar_'}{value}".replace("-", "minus_")
        if all(i.name != name for i in self.inits):
            array = np.full(shape, value, np.int64)
            self.inits.append(numpy_helper.from_array(array, name))
        return name

    def block(self, value: int, length: int) -> str:
        """An int64 [length] constant of `value`, added once."""
        from onnx import numpy_helper

        name = f"e2e/block_{value}x{length}"
        if all(i.name != name for i in self.inits):
            self.inits.append(numpy_helper.from_array(np.full(length, value, np.int64), name))
        return name

    def op(self, kind: str, ins: list[str], out: str | None = None, **kw: Any) -> str:
        from onnx import helper

        if out is None:
            self.names += 1
            out = f"e2e/{kind.lower()}_{self.names}"
        domain = CONTRIB if kind in ("BasicTokenizer", "WordpieceTokenizer") else None
        domain = ML if kind == "LabelEncoder" else domain
        self.nodes.append(helper.make_node(kind, ins, [out], domain=domain, **kw))
        return out

    def row(self, pairs: bool) -> str:
        """The Loop body's row of `text` (iteration `e2e/i`): a [1] string, what
        BasicTokenizer takes, or a pair's [2]."""
        # Slice, not Gather: onnxruntime 1.31's Gather of a [1, 2] string row keeps its
        # first string and blanks the second (["c", "d"] → ["c", ""]).
        i = self.op("Unsqueeze", ["e2e/i", self.const(0)])
        end = self.op("Add", [i, self.const(1)])
        row = self.op("Slice", ["text", i, end, self.const(0)])
        return self.op("Reshape", [row, self.const(-1)]) if pairs else row

    def batch(self, inputs: list[str], max_length: int) -> None:
        """Close the Loop body over the rows and, after it, build the student's inputs
        (`inputs`): each side's ids padded to the batch's longest row, its mask and
        (BERT) type ids, as StudentTokenizer.pad lays them out."""
        from onnx import TensorProto, helper

        # A scan output must have one shape every iteration: each row is padded to
        # max_length (truncation keeps at most that many ids; 32 rows × 128 ids × 8 B =
        # 32 KB at most), and the stacked [N, max_length] is cut to the longest row below.
        # Two ops a row (append max_length fill values, keep max_length): every body op
        # runs once per row, and the Loop alone adds ~20 µs to a batch-1 call (SST-2, the
        # one-row graph of before against this one, side by side).
        width = self.const(max_length)

        def padded(row: str, fill: int) -> str:
            block = self.block(fill, max_length)
            return self.op("Slice", [self.op("Concat", [row, block], axis=0), self.const(0), width])

        outs: list[tuple[str, int, int]] = []  # body output, its length, its fill value
        for suffix, (ids, types) in self.sides.items():
            outs.append((padded(ids, self.pad), max_length, self.pad))
            outs.append((self.op("Shape", [ids], f"e2e/row_length{suffix}"), 1, 1))
            if types is not None and "token_type_ids" in inputs:
                outs.append((padded(types, 0), max_length, 0))
        cond = self.op("Identity", ["e2e/cond"])
        body = helper.make_graph(
            self.nodes,
            "row",
            [
                helper.make_tensor_value_info("e2e/i", TensorProto.INT64, []),
                helper.make_tensor_value_info("e2e/cond", TensorProto.BOOL, []),
            ],
            [helper.make_tensor_value_info(cond, TensorProto.BOOL, [])]
            + [helper.make_tensor_value_info(o, TensorProto.INT64, [n]) for o, n, _ in outs],
        )
        self.nodes = []
        count = self.op("Shape", ["text"], start=0, end=1)  # [N]
        rows = self.op("Squeeze", [count, self.const(0)])  # N, the Loop's trip count
        stacked = [f"e2e/batch_{i}" for i in range(len(outs))]  # [N, max_length] or [N, 1]
        self.nodes.append(helper.make_node("Loop", [rows, ""], stacked, body=body))
        # An empty batch gets one [PAD] row of length 1, cut off the outputs again
        # (`self.count`): onnxruntime 1.31 segfaults running the int8 BiLSTM on a batch
        # of 0 rows. For N ≥ 1 this adds max(1 − N, 0) = 0 rows: the same inputs.
        extra = self.op("Max", [self.op("Sub", [self.const(1), count]), self.const(0)])
        filled = []
        for name, (_, n, fill) in zip(stacked, outs, strict=True):
            shape = self.op("Concat", [extra, self.const(n)], axis=0)
            dummy = self.op("ConstantOfShape", [shape], value=int_tensor(fill))
            filled.append(self.op("Concat", [name, dummy], axis=0))
        self.count = count
        names = iter(filled)
        for suffix, (_, types) in self.sides.items():
            ids, lengths = next(names), next(names)
            longest = self.op("ReduceMax", [lengths], keepdims=0)  # a scalar
            end = self.op("Unsqueeze", [longest, self.const(0)])
            cut = [self.const(0), end, self.const(1)]  # axis 1 up to the longest row
            self.op("Slice", [ids, *cut], f"input_ids{suffix}")
            position = self.op("Range", [self.scalar(0), longest, self.scalar(1)])
            inside = self.op("Less", [position, lengths])  # [L] < [N, 1]: [N, L]
            self.op("Cast", [inside], f"attention_mask{suffix}", to=TensorProto.INT64)
            if types is not None and "token_type_ids" in inputs:
                self.op("Slice", [next(names), *cut], "token_type_ids")

    def pieces(self, text: str, side: str) -> str:
        """Token ids of a one-string tensor, untruncated, no specials: what
        `tokenizers` gives with add_special_tokens=False."""
        from onnx import helper

        norm = self.spec.get("normalizer") or {}
        lowercase = bool(norm.get("lowercase", True))
        accents = norm.get("strip_accents")
        words = self.op(
            "BasicTokenizer",
            [text],
            f"e2e/words_{side}",
            do_lower_case=int(lowercase),
            # BertNormalizer's strip_accents None means "as lowercase" (BERT's own rule).
            strip_accents=int(lowercase if accents is None else accents),
            tokenize_chinese_chars=int(norm.get("handle_chinese_chars", True)),
            tokenize_punctuation=1,
            remove_control_chars=int(norm.get("clean_text", True)),
        )
        tokens = sorted(self.vocab, key=self.vocab.__getitem__)
        lookup: dict[str, Any] = {
            "keys_strings": tokens,
            "values_int64s": [self.vocab[t] for t in tokens],
            "default_int64": self.unk,
        }
        if not self.wordpiece:  # a word vocabulary: each word whole, or [UNK]
            return self.op("LabelEncoder", [words], **lookup)
        model = self.spec["model"]
        outs = [f"e2e/pieces_{side}", f"e2e/splits_{side}", f"e2e/begin_{side}", f"e2e/end_{side}"]
        self.nodes.append(
            helper.make_node(
                "WordpieceTokenizer",
                [words, self.const_empty()],
                outs,
                domain=CONTRIB,
                vocab=json.dumps(self.vocab),
                suffix_indicator=model.get("continuing_subword_prefix", "##"),
                unknown_token=model.get("unk_token", "[UNK]"),
                max_input_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
            )
        )
        pieces, _, begin, end = outs
        ids = self.op("LabelEncoder", [pieces], **lookup)
        # A word with any [UNK] piece becomes one [UNK], as in `tokenizers`.
        unk = self.op("Cast", [self.op("Equal", [ids, self.const(self.unk)])], to=7)  # int64
        seen = self.op("CumSum", [self.op("Concat", [self.const(0), unk], axis=0), self.const(0)])
        count = self.op("Sub", [self.op("Gather", [seen, end]), self.op("Gather", [seen, begin])])
        word_unk = self.op("Greater", [count, self.const(0)])
        starts = self.op(
            "ScatterElements",
            [
                self.op("Mul", [unk, self.const(0)]),
                begin,
                self.op("Add", [self.op("Mul", [begin, self.const(0)]), self.const(1)]),
            ],
        )
        word = self.op("Sub", [self.op("CumSum", [starts, self.const(0)]), self.const(1)])
        piece_unk = self.op("Gather", [word_unk, word])
        first = self.op("Cast", [starts], to=9)  # bool
        keep = self.op("Or", [self.op("Not", [piece_unk]), first])
        value = self.op("Where", [piece_unk, self.const(self.unk), ids])
        return self.op("Compress", [value, keep], axis=0)

    def const_empty(self) -> str:
        from onnx import numpy_helper

        if all(i.name != "e2e/empty" for i in self.inits):
            self.inits.append(numpy_helper.from_array(np.zeros(0, np.int64), "e2e/empty"))
        return "e2e/empty"

    def rows(self, ids: str, types: str | None = None, suffix: str = "") -> None:
        """One side of one row: its ids and (BERT) type ids, 1-D; `batch` pads them."""
        self.sides[suffix] = (ids, types)

    def plain(self, core: str, max_length: int, suffix: str) -> None:
        """No specials: the first max_length ids, or the fill token when there are none."""
        cut = self.op("Slice", [core, self.const(0), self.const(max_length)])
        filled = self.op("Concat", [cut, self.const(self.fill)], axis=0)
        keep = self.op("Max", [self.op("Shape", [cut]), self.const(1)])
        self.rows(self.op("Slice", [filled, self.const(0), keep]), suffix=suffix)

    def bert_pair(self, row: str, max_length: int) -> None:
        """[CLS] a [SEP] b [SEP] of a pair's `row` ([2] strings) with `tokenizers`'
        longest-first truncation.

        With n₁ ≤ n₂ the two sides' lengths and budget M = max_length − 3 (three
        specials), tokenizers keeps (truncation.rs, LongestFirst): everything when
        n₁ + n₂ ≤ M; else the longer side cut to max(n₁, M − n₁) (to n₁ when n₁ > M);
        and when that still exceeds M, M // 2 and M // 2 + M % 2 tokens.
        """
        op, const = self.op, self.const
        budget, half = const(max_length - 3), const((max_length - 3) // 2)
        cores, lengths = [], []
        for side, start in (("a", 0), ("b", 1)):
            text = op("Slice", [row, const(start), const(start + 1)])
            cores.append(self.pieces(text, side))
            lengths.append(op("Shape", [cores[-1]]))
        na, nb = lengths
        short = op("Min", [na, nb])
        longer = op("Max", [short, op("Sub", [budget, short])])
        longer = op("Where", [op("Greater", [short, budget]), short, longer])
        both = op("Greater", [op("Add", [short, longer]), budget])
        short = op("Where", [both, half, short])
        longer = op("Where", [both, op("Add", [half, const((max_length - 3) % 2)]), longer])
        swap = op("Greater", [na, nb])
        cut = op("Greater", [op("Add", [na, nb]), budget])
        keep_a = op("Where", [cut, op("Where", [swap, longer, short]), na])
        keep_b = op("Where", [cut, op("Where", [swap, short, longer]), nb])
        a = op("Slice", [cores[0], const(0), keep_a])
        b = op("Slice", [cores[1], const(0), keep_b])
        cls, sep = const(self.vocab["[CLS]"]), const(self.vocab["[SEP]"])
        ids = op("Concat", [cls, a, sep, b, sep], axis=0)
        zeros = op(
            "ConstantOfShape", [op("Add", [op("Shape", [a]), const(2)])], value=int_tensor(0)
        )
        ones = op("ConstantOfShape", [op("Add", [op("Shape", [b]), const(1)])], value=int_tensor(1))
        self.rows(ids, op("Concat", [zeros, ones], axis=0))


def int_tensor(value: int) -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor("value", TensorProto.INT64, [1], [value])


# Batch sizes the export checks the one-file model at: one text a call, a small batch,
# and the batch benchmarks/e2e_sst2.py times (a CPU service's). 8 and 32 do not divide
# SST-2's 872 dev rows (872 = 27 × 32 + 8): a short last batch is checked as well.
BATCH_SIZES = (1, 8, 32)


def validate_e2e(
    path: Path, source: Path, texts: list[Any], batch_sizes: tuple[int, ...] = BATCH_SIZES
) -> dict[str, Any]:
    """Predict every row through `path` and through `source` with the Python tokenizer,
    at each batch size, the same consecutive rows in each call on both sides (dynamic
    int8 scales activations over the whole call, padding included, so only the same
    batch is the same computation); any different label fails the export."""
    one_file = E2EPredictor(path)
    diffs: dict[str, float] = {}
    for size in batch_sizes:
        got = one_file.probabilities(texts, batch_size=size)
        two_step = OnnxPredictor(source, batch_size=size)
        want = softmax(two_step.logits(texts, in_order=True))
        differ = np.flatnonzero(got.argmax(1) != want.argmax(1))
        if len(differ):
            i = int(differ[0])
            raise EdgeKDError(
                f"model.e2e.onnx labels {len(differ)} dev row(s) differently from the "
                f"tokenizer path at batch {size} (first: row {i}, {texts[i]!r}); drop --e2e "
                "and report this tokenizer"
            )
        diffs[str(size)] = float(np.abs(got - want).max()) if len(texts) else 0.0
    return {
        "path": path.name,
        "bytes": path.stat().st_size,
        "rows": len(texts),
        "label_agreement": 1.0,
        "max_probability_diff": max(diffs.values(), default=0.0),
        "max_probability_diff_by_batch": diffs,
    }
