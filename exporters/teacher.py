"""The teacher as ONNX: fp32 through optimum's exporter (which validates against PyTorch),
and its dynamic int8 copy: the fast labelers of distillation (`teacher_runtime`)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from edgekd.artifacts import MODEL_FILES, is_pooled
from edgekd.config import DistillConfig
from edgekd.io import atomic_dir, source_digest, versions
from edgekd.progress import console
from edgekd.students.predict import OnnxPredictor
from edgekd.threads import core_share


def export_teacher(
    name_or_path: str,
    out_dir: str | Path,
    opset: int | None = None,
    states: bool = False,
    first_token: bool = False,
) -> Path:
    """Write an optimum ONNX folder (model.onnx, config, tokenizer); return model.onnx.

    `opset=None` lets optimum pick the opset it recommends for the architecture.
    `states`: the graph also outputs `hidden`, the last layer's token states (for
    `token_states`), through `torch.onnx.export` as for a pooled teacher.
    `first_token` (the labellers'): where the logits read the last layer's first token
    alone (`first_token_model`), that layer runs for it alone; the same logits, faster.
    """
    from optimum.exporters.onnx import main_export
    from transformers import AutoConfig

    from edgekd.distill.teacher import load_teacher

    with atomic_dir(out_dir) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = AutoConfig.from_pretrained(name_or_path)
        path = tmp / MODEL_FILES["fp32"]
        pruned = False
        if first_token and not states and FIRST_TOKEN & set(config.architectures or []):
            model, tokenizer = load_teacher(name_or_path)
            pruned = export_first_token(model, tokenizer, path, opset or 17)
        if pruned:
            model.config.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        # Not an optimum architecture, or outputs optimum's classification export lacks.
        elif states or is_pooled(config):
            model, tokenizer = load_teacher(name_or_path)
            export_torch(model.float(), tokenizer, path, opset or 17, states)
            model.config.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        else:
            # dtype fp32 whatever the stored weights: a checkpoint saved in fp16 (the
            # reference teacher is) would otherwise export an fp16 graph slow on CPUs.
            main_export(name_or_path, tmp, task="text-classification", opset=opset, dtype="fp32")
    return Path(out_dir) / MODEL_FILES["fp32"]


# |ONNX − PyTorch| allowed on the teacher's logits and states (optimum's own default atol).
POOLED_ATOL = 1e-4
# Rows a rewritten or exported teacher is checked on: short, longer, and padded beside;
# then one of them alone, and a long one.
CHECK_TEXTS = ["a short one", "a somewhat longer text, with a second clause to pad the others"]
LONG_TEXT = CHECK_TEXTS[1] + " and more" * 20
# The classifiers whose logits read the last layer's first token alone: BERT's pooler,
# the heads of the RoBERTa family and ELECTRA (`features[:, 0, :]`), DistilBERT's
# `hidden_state[:, 0]`. Their layers are BERT's (query/key/value, attention output,
# intermediate, output) but for DistilBERT's (q_lin/k_lin/v_lin/out_lin, ffn).
FIRST_TOKEN = frozenset(
    {
        "BertForSequenceClassification",
        "RobertaForSequenceClassification",
        "XLMRobertaForSequenceClassification",
        "CamembertForSequenceClassification",
        "ElectraForSequenceClassification",
        "DistilBertForSequenceClassification",
    }
)


def export_first_token(model: Any, tokenizer: Any, path: Path, opset: int) -> bool:
    """Export `first_token_model(model)` to `path`; False where there is none or it does
    not export (the caller then exports the whole graph), saying why on the console."""
    why = "its last layer for the first token alone is not known to give its logits here"
    try:
        first = first_token_model(model, tokenizer)
        if first is not None:
            export_torch(first, tokenizer, path, opset)
            return True
    # A speed-up only: whatever stops it (a tokenizer without an attention mask, a check
    # past POOLED_ATOL), the whole graph is the labeller it was before.
    except Exception as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
    path.unlink(missing_ok=True)
    console.print(f"labelling with the whole teacher graph: {why}")
    return False


def first_token_model(model: Any, tokenizer: Any) -> Any | None:
    """`model` with its last layer run for the first token alone, where its logits read
    nothing else (a classifier of `FIRST_TOKEN`: its head reads the last layer's first
    state, and only it). None for any other model, or when the two disagree past
    `POOLED_ATOL` on a few rows: the check, not the architecture's name, is what lets a
    pruned graph label.

    Every other position's last-layer attention output and FFN is computed and dropped
    by the full graph. Here the last layer's keys and values still come from every
    position (the first token's query attends to them all), but its query, attention
    output, FFN and layer norms run for that token alone: per token, 2 of the layer's
    12·d² multiply-adds (keys and values; the query, output and FFN make the other 10),
    so a 6-layer teacher does ~5.2 layers' work. What it buys the labellers, side by
    side with the whole graph: benchmarks/results/labelling_margin.md (`--whole`) on the
    reference teacher, benchmarks/results/first_token.md per family.
    """
    import types

    import torch

    config = model.config
    if (
        type(model).__name__ not in FIRST_TOKEN
        or getattr(config, "position_embedding_type", "absolute") != "absolute"
        or getattr(config, "is_decoder", False)
        or getattr(config, "add_cross_attention", False)
    ):
        return None
    parts = _distilbert_parts(model) if hasattr(model, "distilbert") else _bert_parts(model)

    class FirstToken(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self,
            input_ids: Any,
            attention_mask: Any,
            token_type_ids: Any = None,
            output_hidden_states: bool = False,
        ) -> Any:
            h = parts.embed(input_ids, token_type_ids)
            # Padding as the models' extended mask makes it: the dtype's lowest value added.
            added = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
            for layer in parts.layers[:-1]:
                h = parts.run(layer, h, attention_mask, added)
            return types.SimpleNamespace(logits=parts.head(parts.last(h, added)))

    pruned = FirstToken().eval()
    texts = [*CHECK_TEXTS, LONG_TEXT]
    feed = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        want = model(**feed).logits
        got = pruned(**feed).logits
    return pruned if float((want - got).abs().max()) <= POOLED_ATOL else None


def _first_attention(q: Any, k: Any, v: Any, n: int, added: Any) -> Any:
    """Attention of the first token's query `q` (batch, 1, n·d) over keys `k` and values
    `v` (batch, length, n·d), `n` heads, padding masked by `added`: (batch, 1, n·d)."""
    import torch

    d = q.size(-1) // n

    def heads(x: Any) -> Any:  # (batch, length, n·d) → (batch, n, length, d)
        return x.view(x.size(0), -1, n, d).transpose(1, 2)

    probs = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) * d**-0.5 + added, dim=-1)
    return (probs @ heads(v)).transpose(1, 2).reshape(q.size(0), 1, n * d)


class FirstTokenParts(NamedTuple):
    """What `first_token_model` runs of a classifier, in order."""

    embed: Callable[[Any, Any], Any]  # (input_ids, token_type_ids) → states
    layers: Sequence[Any]  # the encoder's layers; all but the last run whole
    run: Callable[[Any, Any, Any, Any], Any]  # (layer, states, 0/1 mask, added mask) → states
    last: Callable[[Any, Any], Any]  # (states, added mask) → the first token's last state
    head: Callable[[Any], Any]  # (batch, 1, width) → logits


def _bert_parts(model: Any) -> FirstTokenParts:
    """The parts of a classifier on BERT's layers: BERT, the RoBERTa family, ELECTRA."""
    base = model.base_model
    project = getattr(base, "embeddings_project", None)  # ELECTRA's embedding width

    def embed(input_ids: Any, token_type_ids: Any) -> Any:
        h = base.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        return h if project is None else project(h)

    def run(layer: Any, h: Any, mask: Any, added: Any) -> Any:
        return layer(h, attention_mask=added)[0]

    def last(h: Any, added: Any) -> Any:
        layer = base.encoder.layer[-1]
        attend = layer.attention.self
        context = _first_attention(
            attend.query(h[:, :1]), attend.key(h), attend.value(h),
            attend.num_attention_heads, added,
        )  # fmt: skip
        first = layer.attention.output(context, h[:, :1])
        return layer.output(layer.intermediate(first), first)

    if type(model).__name__ == "BertForSequenceClassification":

        def head(first: Any) -> Any:  # the pooler reads [CLS]; dropout is off in eval
            return model.classifier(model.dropout(base.pooler(first)))

    else:
        head = model.classifier  # reads `features[:, 0, :]` of its input
    return FirstTokenParts(embed, base.encoder.layer, run, last, head)


def _distilbert_parts(model: Any) -> FirstTokenParts:
    """The same five parts of a `DistilBertForSequenceClassification`."""
    import torch

    base = model.distilbert
    # Its sdpa attention takes the additive mask the model builds; the others the 0/1.
    additive = getattr(model.config, "_attn_implementation", "eager") == "sdpa"

    def embed(input_ids: Any, token_type_ids: Any) -> Any:
        return base.embeddings(input_ids)

    def run(layer: Any, h: Any, mask: Any, added: Any) -> Any:
        return layer(h, attn_mask=added if additive else mask)[-1]

    def last(h: Any, added: Any) -> Any:
        layer = base.transformer.layer[-1]
        attend = layer.attention
        context = _first_attention(
            attend.q_lin(h[:, :1]), attend.k_lin(h), attend.v_lin(h), attend.n_heads, added
        )
        first = layer.sa_layer_norm(attend.out_lin(context) + h[:, :1])
        # `ff_chunk`: the FFN itself, as BERT's intermediate and output run above; `ffn`
        # would split the input by `chunk_size_feed_forward`, which 1 token may not fill.
        return layer.output_layer_norm(layer.ffn.ff_chunk(first) + first)

    def head(first: Any) -> Any:
        pooled = torch.relu(model.pre_classifier(first[:, 0]))
        return model.classifier(model.dropout(pooled))

    return FirstTokenParts(embed, base.transformer.layer, run, last, head)


def export_torch(model: Any, tokenizer: Any, path: Path, opset: int, states: bool = False) -> float:
    """`torch.onnx.export` of a teacher (a mean-pooled `PooledClassifier`, or any with
    `states`: outputs `logits` and `hidden`, the last layer's token states) with the
    tokenizer's inputs, batch and length dynamic; validated against PyTorch on rows of
    several lengths (the max |difference| of every output, refused above `POOLED_ATOL`)."""
    import onnxruntime as ort
    import torch

    from edgekd.errors import EdgeKDError

    texts = CHECK_TEXTS
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]
    outputs = ["logits", "hidden"] if states else ["logits"]

    def reference(**feed: Any) -> list[Any]:
        out = model(**feed, output_hidden_states=states)
        return [out.logits, out.hidden_states[-1]] if states else [out.logits]

    class Outputs(torch.nn.Module):  # positional inputs in `names` order → `outputs`
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return tuple(reference(**dict(zip(names, args, strict=True))))

    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    if states:
        axes["hidden"] = {0: "batch", 1: "sequence"}
    with torch.inference_mode():
        torch.onnx.export(
            Outputs().eval(), tuple(enc[n] for n in names), str(path), input_names=names,
            output_names=outputs, dynamic_axes=axes, opset_version=opset, dynamo=False,
        )  # fmt: skip
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        worst = 0.0
        for batch in (texts, texts[:1], [LONG_TEXT]):
            feed = tokenizer(batch, padding=True, return_tensors="pt")
            want = reference(**{n: feed[n] for n in names})
            got = session.run(outputs, {n: feed[n].numpy() for n in names})
            mask = feed["attention_mask"].numpy().astype(bool)
            for w, g in zip(want, got, strict=True):
                w = w.numpy()
                if w.ndim == 3:  # token states: padding positions carry no meaning
                    w, g = w[mask], g[mask]
                worst = max(worst, float(np.abs(g - w).max()))
    if worst > POOLED_ATOL:
        raise EdgeKDError(
            f"the teacher's ONNX outputs differ from PyTorch by {worst:.2e} > {POOLED_ATOL:.0e}; "
            "label with --teacher-runtime torch"
        )
    return worst


@functools.lru_cache(maxsize=1)
def labeller_code() -> str:
    """The digest of what turns the teacher into its ONNX labellers and runs them: the
    source of the export (this file; the teacher's loading, pooling and file names it
    traces through), of the quantizer and of the labelling loop; the int8 preset this
    CPU resolves to (u8 or s8 weights); and the versions of the libraries they call.
    The export folder and the int8 labels' cache names hold it, so other code, another
    CPU's preset or an onnxruntime that quantizes otherwise exports and labels again
    instead of reading back an int8 it did not make."""
    import platform

    from edgekd import artifacts
    from edgekd.distill import pooled
    from edgekd.distill import teacher as torch_teacher
    from edgekd.exporters import quantize
    from edgekd.students import predict

    modules = (artifacts, pooled, torch_teacher, quantize, predict)
    code = source_digest([Path(__file__), *(Path(str(m.__file__)) for m in modules)])
    h = hashlib.sha256(code.encode())
    h.update(f"\0preset={quantize.resolve_preset('auto').name}\0{platform.machine()}".encode())
    h.update(json.dumps(versions(), sort_keys=True).encode())
    return h.hexdigest()


class OnnxLabelers:
    """The teacher as fp32 and dynamic int8 ONNX, exported once per teacher fingerprint
    and `labeller_code` (a folder named by both, beside the logit cache) on first use: a
    run whose logits are all cached exports nothing. Each runs one single-thread session
    per core of this process's share (`core_share`: all of them, unless processes share
    the machine).
    With `cfg.token_states`, the export also outputs the last layer's token states
    (a folder of its own), which each call records in `sink` when one is set."""

    def __init__(
        self,
        cfg: DistillConfig,
        name: str,
        fingerprint: str,
        workers: Callable[[], int] | None = None,
    ) -> None:
        """`workers`: the sessions each call may run (`OnnxPredictor`'s `active`)."""
        from edgekd.distill.labeling import cache_root

        self.cfg, self.name, self.workers = cfg, name, workers
        self.states = cfg.token_states > 0
        self.code = labeller_code()
        self.folder = (
            cache_root(cfg)
            / "teachers"
            / f"{fingerprint[:32]}-{self.code[:12]}{'-states' if self.states else ''}"
        )
        self.predictors: dict[str, OnnxPredictor] = {}
        self.sink: Any = None  # `edgekd.distill.states.StateSink`, set by the labelling

    def predictor(self, kind: str) -> OnnxPredictor:
        if kind not in self.predictors:
            from edgekd.exporters.quantize import DynamicInt8Quantizer

            fp32, int8 = self.folder / MODEL_FILES["fp32"], self.folder / MODEL_FILES["int8"]
            if not fp32.is_file():
                with console.status(f"exporting {self.name} to ONNX for labelling"):
                    export_teacher(self.name, self.folder, states=self.states, first_token=True)
            if kind == "int8" and not int8.is_file():
                tmp = self.folder / f".model.int8.onnx.tmp-{os.getpid()}"
                # onnxruntime's one scale per embedding table, not the students' one per
                # row: on the reference MiniLM teacher, per row agreed with fp32 on 99.30%
                # of 3,872 SST-2 rows against 99.33% (its int8 error is in the matmuls).
                DynamicInt8Quantizer(embedding="tensor").quantize(fp32, tmp)
                os.replace(tmp, int8)
            self.predictors[kind] = OnnxPredictor(
                self.folder / MODEL_FILES[kind],
                batch_size=self.cfg.teacher_batch_size,
                max_length=self.cfg.teacher_max_length,
                # One thread a session even where the share is one core: onnxruntime's
                # default (0) is every core of the machine, so two processes sharing 2
                # cores would run 4 threads that spin-wait on each other.
                threads=1,
                workers=core_share(),
                active=self.workers,
            )
        return self.predictors[kind]

    def ready(self, kinds: Sequence[str]) -> None:
        """Export (where not on disk yet) and load each of `kinds` ("fp32", "int8") now,
        not at first use: under `accelerate launch` the main process does this before
        the others may load the files it writes."""
        for kind in kinds:
            self.predictor(kind)

    def fp32(self, texts: list[Any], what: str) -> np.ndarray:
        return self.predictor("fp32").logits(texts, what, sink=self.sink)

    def int8(self, texts: list[Any], what: str) -> np.ndarray:
        return self.predictor("int8").logits(texts, what, sink=self.sink)
