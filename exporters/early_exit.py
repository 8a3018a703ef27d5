"""ONNX export of a FastBERT early-exit student: one graph that really stops early.

The graph is built from one exported piece per layer, nested in ONNX `If` nodes:

    layer 1 + exit 1 → all rows decided? ─ yes → (logits, exit layer)
                                          └ no  → layer 2 + exit 2 → all decided? ─ ...

Each piece carries, per row, the logits and exit layer decided so far and whether
the row is decided; a row is decided at the first layer whose normalised entropy
(`uncertainty`) is below `exit_threshold`, and keeps that layer's logits. A piece
runs only when some row in the batch is still undecided, so at batch 1 (an edge
device's usual call) the layers after the row's exit layer are never computed, and
a batch's rows get exactly the predictions they would get alone.

`exit_threshold` is a graph input with a default (an initializer of the same name,
which onnxruntime lets a caller override): callers that know nothing of early exit
feed token ids as to any student and get the default; `edgekd profile` and
validation feed each threshold they sweep. The graph's outputs are `logits` and
`exit_layer` (1..M, int64).

Validation compares the graph with the student's `early_exit` in PyTorch at every
threshold of `THRESHOLDS`, row by row: the exit layers must be equal (a row whose
uncertainty lies within `TIE` of the threshold may fall either way, and is counted)
and the logits within atol.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgekd.errors import EdgeKDError
from edgekd.exporters.bert import BertExporter

THRESHOLD = "exit_threshold"
# The thresholds every export is validated at, and that export and profile sweep by
# default: 0 never exits early (the full model); 1 exits after layer 1 unless the
# prediction is exactly uniform.
THRESHOLDS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
# fp32 rounding of an entropy near 0.5 is ~1e-7; a row within 1e-5 of the threshold
# may exit one layer apart in ONNX and PyTorch without either being wrong.
TIE = 1e-5
# One opset for every piece and the graph nesting them (17: LayerNormalization is one op).
OPSET = 17


class EarlyExitExporter(BertExporter):
    output_names: ClassVar[tuple[str, ...]] = ("logits", "exit_layer")

    def __init__(self, atol: float = 1e-4, opset: int = 17) -> None:
        super().__init__(atol, opset)
        self.ties = 0  # rows whose exit layer differed within TIE of a threshold
        self.default_threshold = 0.0  # what the graph does when no threshold is fed

    def _export(self, model: Any, path: Path) -> None:
        import onnx

        model.eval()
        with tempfile.TemporaryDirectory() as tmp:
            pieces = [
                export_piece(model, m, Path(tmp) / f"layer{m}.onnx", self.dummy_inputs(model))
                for m in range(1, model.config.layers + 1)
            ]
            graph = nest(pieces, model.num_labels, self.default_threshold)
        out = onnx.helper.make_model(
            graph,
            opset_imports=[onnx.helper.make_opsetid("", OPSET)],
            producer_name="edgekd",
        )
        out.ir_version = pieces[0].ir_version
        meta = out.metadata_props.add()
        meta.key, meta.value = "edgekd.early_exit", f"layers={model.config.layers}"
        onnx.checker.check_model(out)
        onnx.save(out, str(path))

    def onnx_outputs(
        self, session: Any, inputs: dict[str, np.ndarray], threshold: float
    ) -> tuple[np.ndarray, np.ndarray]:
        feed = {**inputs, THRESHOLD: np.array(threshold, dtype=np.float32)}
        logits, layers = session.run(["logits", "exit_layer"], feed)
        return logits, layers

    def validate(
        self, model: Any, path: Path, check_inputs: list[dict[str, np.ndarray]] | None = None
    ) -> float:
        import onnxruntime as ort
        import torch

        from edgekd.students.bert import uncertainty

        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: the overridable threshold warns
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        worst = 0.0
        for raw in [self.dummy_inputs(model), *(check_inputs or [])]:
            inputs = self.check_feed(raw)
            tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
            with torch.inference_mode():
                final, hidden = model(**tensors, return_hidden=True)
                every = model.layer_logits(hidden, final, tensors["attention_mask"])
                every = uncertainty(torch.stack(every)).numpy()
            for threshold in THRESHOLDS:
                got, got_layer = self.onnx_outputs(session, inputs, threshold)
                with torch.inference_mode():
                    want, want_layer = model.early_exit(**tensors, threshold=threshold)
                want, want_layer = want.numpy(), want_layer.numpy()
                for row in np.flatnonzero(got_layer != want_layer):
                    first = min(got_layer[row], want_layer[row]) - 1
                    if abs(every[first, row] - threshold) > TIE:
                        raise EdgeKDError(
                            f"the early-exit graph stops row {row} at layer {got_layer[row]}, "
                            f"PyTorch at layer {want_layer[row]} (threshold {threshold}); "
                            "this is an exporter bug, please report it"
                        )
                    self.ties += 1
                same = got_layer == want_layer
                if same.any():
                    worst = max(worst, float(np.abs(got[same] - want[same]).max()))
        if worst > self.atol:
            raise EdgeKDError(
                f"early-exit ONNX logits differ from PyTorch by {worst:.2e} > atol "
                f"{self.atol:.0e}; raise --atol only if that difference is acceptable"
            )
        return worst


def piece_module(model: Any, m: int) -> Any:
    """Layer m of `model` with its exit, as a module of tensors in, tensors out."""
    import torch
    from torch import nn

    from edgekd.students.bert import uncertainty

    bert = model.encoder()
    layers = model.config.layers

    class Piece(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = bert.encoder.layer[m - 1]
            if m == 1:
                self.embeddings = bert.embeddings
            if m == layers:
                self.pooler, self.classifier = bert.pooler, model.classifier
            else:
                self.exit = model.exits[m - 1]

        def decide(
            self,
            hidden: torch.Tensor,
            tokens: torch.Tensor,
            threshold: torch.Tensor,
            logits: torch.Tensor,
            exit_layer: torch.Tensor,
            done: torch.Tensor,
        ) -> tuple[torch.Tensor, ...]:
            if m == layers:
                mine = self.classifier(self.pooler(hidden))
                take = ~done  # the last layer answers every undecided row
            else:
                mine = self.exit(hidden, tokens)
                take = ~done & (uncertainty(mine) < threshold)
            logits = torch.where(take.unsqueeze(-1), mine, logits)
            exit_layer = torch.where(take, torch.full_like(exit_layer, m), exit_layer)
            done = done | take
            return logits, exit_layer, done, done.all()

        def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            if m == 1:
                input_ids, attention_mask, token_type_ids, threshold = args
                hidden = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
                # BertModel's eager mask: 0 on real keys, the dtype's minimum on padding.
                mask = (1.0 - attention_mask[:, None, None, :].to(hidden.dtype)) * torch.finfo(
                    hidden.dtype
                ).min
                tokens = attention_mask.to(hidden.dtype)  # 1 on real tokens: exits' means
                batch = input_ids.shape[0]
                logits = hidden.new_zeros(batch, model.num_labels)
                exit_layer = torch.zeros_like(input_ids[:, 0])
                done = torch.zeros_like(input_ids[:, 0], dtype=torch.bool)
            else:
                hidden, mask, tokens, threshold, logits, exit_layer, done = args
            hidden = self.layer(hidden, attention_mask=mask)[0]
            decided = self.decide(hidden, tokens, threshold, logits, exit_layer, done)
            return (hidden, mask, tokens, *decided) if m == 1 else (hidden, *decided)

    return Piece().eval()


def names(m: int) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of piece m: values shared across pieces go by these names."""
    decided = [f"logits{m}", f"exit{m}", f"done{m}", f"all{m}"]
    if m == 1:
        return ["input_ids", "attention_mask", "token_type_ids", THRESHOLD], [
            "hidden1",
            "mask",
            "tokens",
            *decided,
        ]
    before = [f"logits{m - 1}", f"exit{m - 1}", f"done{m - 1}"]
    return [f"hidden{m - 1}", "mask", "tokens", THRESHOLD, *before], [f"hidden{m}", *decided]


def export_piece(model: Any, m: int, path: Path, dummy: dict[str, np.ndarray]) -> Any:
    """Piece m exported alone (TorchScript exporter), its internal names prefixed `L{m}/`
    so that no two pieces share one once nested."""
    import onnx
    import torch

    ins, outs = names(m)
    ids = torch.from_numpy(dummy["input_ids"])
    batch, seq = ids.shape
    hidden = model.hf_config.hidden_size
    example: tuple[Any, ...]
    if m == 1:
        example = (
            ids,
            torch.from_numpy(dummy["attention_mask"]),
            torch.from_numpy(dummy["token_type_ids"]),
            torch.tensor(0.5),
        )
    else:
        example = (
            torch.randn(batch, seq, hidden),
            torch.zeros(batch, 1, 1, seq),
            torch.ones(batch, seq),
            torch.tensor(0.5),
            torch.zeros(batch, model.num_labels),
            torch.zeros(batch, dtype=torch.int64),
            torch.zeros(batch, dtype=torch.bool),
        )
    # Batch and sequence stay dynamic on every value that has them.
    sequence_axis = {"mask": 3, "tokens": 1}
    sequence_axis |= dict.fromkeys(("input_ids", "attention_mask", "token_type_ids"), 1)
    dynamic: dict[str, dict[int, str]] = {}
    for name in [*ins, *outs]:
        if name == THRESHOLD or name.startswith("all"):
            continue  # scalars
        dims = {0: "batch"}
        axis = 1 if name.startswith("hidden") else sequence_axis.get(name)
        if axis is not None:
            dims[axis] = "sequence"
        dynamic[name] = dims
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            piece_module(model, m),
            example,
            str(path),
            input_names=ins,
            output_names=outs,
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )
    piece = onnx.load(str(path))
    keep = set(ins) | set(outs)
    renamed = {
        name: f"L{m}/{name}"
        for node in piece.graph.node
        for name in [*node.input, *node.output]
        if name and name not in keep
    }
    renamed.update({i.name: f"L{m}/{i.name}" for i in piece.graph.initializer})
    for node in piece.graph.node:
        node.name = f"L{m}/{node.name}"
        node.input[:] = [renamed.get(n, n) for n in node.input]
        node.output[:] = [renamed.get(n, n) for n in node.output]
    for init in piece.graph.initializer:
        init.name = renamed[init.name]
    del piece.graph.value_info[:]
    return piece


def nest(pieces: list[Any], num_labels: int, default_threshold: float) -> Any:
    """The whole graph: piece 1 at the top, each later piece inside the `else` branch of
    an `If` on whether every row was decided by the piece before."""
    import onnx
    from onnx import TensorProto, helper

    layers = len(pieces)

    def tail(m: int, out: tuple[str, str]) -> list[Any]:
        """Nodes that run pieces m..M and write (logits, exit layer) to `out`."""
        nodes = list(pieces[m - 1].graph.node)
        if m == layers:
            return [
                *nodes,
                helper.make_node("Identity", [f"logits{m}"], [out[0]], name=f"L{m}/out_logits"),
                helper.make_node("Identity", [f"exit{m}"], [out[1]], name=f"L{m}/out_exit"),
            ]
        then_out = (f"L{m}/then_logits", f"L{m}/then_exit")
        else_out = (f"L{m}/else_logits", f"L{m}/else_exit")
        then = helper.make_graph(
            [
                helper.make_node("Identity", [f"logits{m}"], [then_out[0]]),
                helper.make_node("Identity", [f"exit{m}"], [then_out[1]]),
            ],
            f"exit_after_layer{m}",
            [],
            [output(then_out[0], TensorProto.FLOAT), output(then_out[1], TensorProto.INT64)],
        )
        # Each piece's weights live in the branch that runs it: constants there, so
        # onnxruntime pre-packs them as it does a plain graph's (weights passed in from
        # the outer scope are inputs to the branch, not constants).
        rest = helper.make_graph(
            tail(m + 1, else_out),
            f"layers_after_{m}",
            [],
            [output(else_out[0], TensorProto.FLOAT), output(else_out[1], TensorProto.INT64)],
            list(pieces[m].graph.initializer),
        )
        branch = helper.make_node(
            "If", [f"all{m}"], list(out), name=f"L{m}/exit", then_branch=then, else_branch=rest
        )
        return [*nodes, branch]

    def output(name: str, dtype: int) -> Any:
        return helper.make_value_info(name, helper.make_tensor_type_proto(dtype, None))

    def token_input(name: str) -> Any:
        return helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])

    threshold = helper.make_tensor_value_info(THRESHOLD, TensorProto.FLOAT, [])
    default = onnx.numpy_helper.from_array(np.array(default_threshold, dtype=np.float32), THRESHOLD)
    return helper.make_graph(
        tail(1, ("logits", "exit_layer")),
        "early_exit",
        [token_input(n) for n in ("input_ids", "attention_mask", "token_type_ids")] + [threshold],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", num_labels]),
            helper.make_tensor_value_info("exit_layer", TensorProto.INT64, ["batch"]),
        ],
        [default, *pieces[0].graph.initializer],
    )


# ------------------------------------------------------------ thresholds: measure, choose


def layer_outputs(model: Any, tok: Any, texts: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(logits: layers × rows × labels, uncertainty: layers × rows) of every row at every
    exit, in PyTorch: one forward pass serves every threshold."""
    import torch

    from edgekd.data import length_sorted_batches
    from edgekd.students.bert import uncertainty

    ids = tok.ids(texts)
    layers = model.config.layers
    logits = np.zeros((layers, len(ids), model.num_labels), dtype=np.float32)
    model.eval()
    with torch.inference_mode():
        for idx in length_sorted_batches([tok.length(x) for x in ids], 64):
            enc = {k: torch.from_numpy(v) for k, v in tok.pad([ids[i] for i in idx]).items()}
            final, hidden = model(**enc, return_hidden=True)
            every = model.layer_logits(hidden, final, enc["attention_mask"])
            logits[:, idx] = torch.stack(every).numpy()
    return logits, uncertainty(torch.from_numpy(logits)).numpy()


def decide(
    logits: np.ndarray, uncertain: np.ndarray, threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """(label, exit layer 1..M) per row at `threshold`: the student's `early_exit` rule."""
    certain = uncertain < np.float32(threshold)
    certain[-1] = True
    first = certain.argmax(0)
    return logits[first, np.arange(logits.shape[1])].argmax(-1), first + 1


def exit_points(
    logits: np.ndarray, uncertain: np.ndarray, gold: np.ndarray, thresholds: tuple[float, ...]
) -> list[dict[str, float]]:
    """Accuracy, agreement with the full model and mean exit layer at each threshold."""
    full = logits[-1].argmax(-1)
    return [point(t, *decide(logits, uncertain, t), gold, full) for t in thresholds]


def point(
    threshold: float, labels: np.ndarray, layers: np.ndarray, gold: np.ndarray, full: np.ndarray
) -> dict[str, float]:
    """One threshold's accuracy, agreement with the full model (and its lower bound) and
    mean exit layer."""
    same = labels == full
    return {
        "threshold": threshold,
        "accuracy": float((labels == gold).mean()),
        "agreement": float(same.mean()),
        "agreement_low": wilson_low(int(same.sum()), len(same)),
        "mean_exit_layer": float(layers.mean()),
    }


# One-sided 95% normal quantile: a threshold whose agreement on new rows is under the
# target clears its bound about 1 time in 20 (per threshold; ten are tried, but their
# row sets overlap, each exiting a subset of the next one's exits).
Z95 = 1.6449


def wilson_low(hits: int, n: int, z: float = Z95) -> float:
    """Wilson score lower bound of a proportion hits/n (0 for no rows). Unlike the point
    estimate it grows with n: 200/200 gives n / (n + z²) = 200 / 202.7 = 0.987, so 200
    perfect rows cannot show 0.99, and 500/500 (0.995) can."""
    if n == 0:
        return 0.0
    p, z2 = hits / n, z * z
    centre = p + z2 / (2 * n)
    spread = z * float(np.sqrt(p * (1 - p) / n + z2 / (4 * n * n)))
    return (centre - spread) / (1 + z2 / n)


def rows_to_show(agreement: float, z: float = Z95) -> int:
    """Fewest rows on which a perfect score's lower bound n / (n + z²) reaches
    `agreement`: n ≥ z² a / (1 − a), 268 for 0.99."""
    return int(np.ceil(z * z * agreement / (1 - agreement))) if agreement < 1 else 0


def choose_threshold(
    points: list[dict[str, float]], rows: int, min_agreement: float, min_accuracy: float | None
) -> tuple[float, str]:
    """The fastest threshold (fewest layers per row) whose agreement with the full model,
    at its 95% lower bound on `rows` held-out rows, and accuracy hold; 0 (every layer)
    when none does. Returns it and the rule, in words.

    The bound, not the share seen: on 200 rows a share of 0.99 is 2 misses, and a
    threshold picked as the fastest of ten that scrape past it agrees less on new rows
    (on SST-2 it shipped 1.5 points below the full model)."""
    rule = f"agreement ≥ {min_agreement:g} (95% lower bound)"
    if min_accuracy is not None:
        rule += f", accuracy ≥ {min_accuracy:g}"
    holding = [
        p
        for p in points
        if p["agreement_low"] >= min_agreement
        and (min_accuracy is None or p["accuracy"] >= min_accuracy)
    ]
    if holding:
        best = min(holding, key=lambda p: (p["mean_exit_layer"], -p["agreement"]))
        return best["threshold"], f"fastest meeting {rule} on {rows} held-out rows"
    why = f"no threshold met {rule} on {rows} held-out rows"
    needed = rows_to_show(min_agreement)
    if rows < needed:
        why += f" (showing {min_agreement:g} takes ≥ {needed} rows; raise selection_rows)"
    return 0.0, why + ": every layer runs"


def onnx_exit_points(
    path: Path,
    tok: Any,
    texts: list[Any],
    gold: np.ndarray,
    full: np.ndarray,
    thresholds: tuple[float, ...],
) -> list[dict[str, float]]:
    """`exit_points` of an exported graph (fp32 or int8), each threshold fed to it."""
    import onnxruntime as ort

    from edgekd.data import length_sorted_batches

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    ids = tok.ids(texts)
    batches = length_sorted_batches([tok.length(x) for x in ids], 32)
    out = []
    for threshold in thresholds:
        labels = np.zeros(len(ids), dtype=np.int64)
        layers = np.zeros(len(ids), dtype=np.int64)
        for idx in batches:
            enc = tok.pad([ids[i] for i in idx])
            feed = {k: v for k, v in enc.items() if k in names}
            if "token_type_ids" in names and "token_type_ids" not in feed:
                feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
            feed[THRESHOLD] = np.array(threshold, dtype=np.float32)
            logits, layer = session.run(["logits", "exit_layer"], feed)
            labels[idx], layers[idx] = logits.argmax(-1), layer
        out.append(point(threshold, labels, layers, gold, full))
    return out
