"""The teacher as ONNX: fp32 through optimum's exporter (which validates against PyTorch),
and its dynamic int8 copy: the fast labelers of distillation (`teacher_runtime`)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgekd.artifacts import MODEL_FILES, is_pooled
from edgekd.config import DistillConfig
from edgekd.io import atomic_dir
from edgekd.progress import console
from edgekd.students.predict import OnnxPredictor
from edgekd.threads import core_share


def export_teacher(name_or_path: str, out_dir: str | Path, opset: int | None = None) -> Path:
    """Write an optimum ONNX folder (model.onnx, config, tokenizer); return model.onnx.

    `opset=None` lets optimum pick the opset it recommends for the architecture.
    """
    from optimum.exporters.onnx import main_export
    from transformers import AutoConfig

    from edgekd.distill.teacher import load_teacher

    with atomic_dir(out_dir) as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if is_pooled(AutoConfig.from_pretrained(name_or_path)):  # not an optimum architecture
            model, tokenizer = load_teacher(name_or_path)
            export_pooled(model, tokenizer, tmp / MODEL_FILES["fp32"], opset or 17)
            model.config.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        else:
            # dtype fp32 whatever the stored weights: a checkpoint saved in fp16 (the
            # reference teacher is) would otherwise export an fp16 graph slow on CPUs.
            main_export(name_or_path, tmp, task="text-classification", opset=opset, dtype="fp32")
    return Path(out_dir) / MODEL_FILES["fp32"]


# |ONNX − PyTorch| allowed on the pooled teacher's logits (optimum's own default atol).
POOLED_ATOL = 1e-4


def export_pooled(model: Any, tokenizer: Any, path: Path, opset: int) -> float:
    """`torch.onnx.export` of a mean-pooled teacher (`PooledClassifier`) with the
    tokenizer's inputs, batch and length dynamic; validated against PyTorch on rows of
    several lengths (the max |difference| of the logits, refused above `POOLED_ATOL`)."""
    import onnxruntime as ort
    import torch

    from edgekd.errors import EdgeKDError

    texts = ["a short one", "a somewhat longer text, with a second clause to pad the others"]
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in enc]

    class Logits(torch.nn.Module):  # positional inputs in `names` order → logits
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args, strict=True))).logits

    axes = {n: {0: "batch", 1: "sequence"} for n in names} | {"logits": {0: "batch"}}
    with torch.inference_mode():
        torch.onnx.export(
            Logits().eval(), tuple(enc[n] for n in names), str(path), input_names=names,
            output_names=["logits"], dynamic_axes=axes, opset_version=opset, dynamo=False,
        )  # fmt: skip
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        worst = 0.0
        for batch in (texts, texts[:1], [texts[1] + " and more" * 20]):
            feed = tokenizer(batch, padding=True, return_tensors="pt")
            want = model(**{n: feed[n] for n in names}).logits.numpy()
            got = session.run(None, {n: feed[n].numpy() for n in names})[0]
            worst = max(worst, float(np.abs(got - want).max()))
    if worst > POOLED_ATOL:
        raise EdgeKDError(
            f"the teacher's ONNX logits differ from PyTorch by {worst:.2e} > {POOLED_ATOL:.0e}; "
            "label with --teacher-runtime torch"
        )
    return worst


class OnnxLabelers:
    """The teacher as fp32 and dynamic int8 ONNX, exported once per teacher (by its
    fingerprint, beside the logit cache) on first use: a run whose logits are all
    cached exports nothing. Each runs one single-thread session per core of this
    process's share (`core_share`: all of them, unless processes share the machine)."""

    def __init__(self, cfg: DistillConfig, name: str, fingerprint: str) -> None:
        from edgekd.distill.labeling import cache_root

        self.cfg, self.name = cfg, name
        self.folder = cache_root(cfg) / "teachers" / fingerprint[:32]
        self.predictors: dict[str, OnnxPredictor] = {}

    def predictor(self, kind: str) -> OnnxPredictor:
        if kind not in self.predictors:
            from edgekd.exporters.quantize import DynamicInt8Quantizer

            fp32, int8 = self.folder / MODEL_FILES["fp32"], self.folder / MODEL_FILES["int8"]
            if not fp32.is_file():
                with console.status(f"exporting {self.name} to ONNX for labelling"):
                    export_teacher(self.name, self.folder)
            if kind == "int8" and not int8.is_file():
                tmp = self.folder / f".model.int8.onnx.tmp-{os.getpid()}"
                DynamicInt8Quantizer().quantize(fp32, tmp)
                os.replace(tmp, int8)
            self.predictors[kind] = OnnxPredictor(
                self.folder / MODEL_FILES[kind],
                batch_size=self.cfg.teacher_batch_size,
                max_length=self.cfg.teacher_max_length,
                workers=core_share(),
            )
        return self.predictors[kind]

    def ready(self, kinds: Sequence[str]) -> None:
        """Export (where not on disk yet) and load each of `kinds` ("fp32", "int8") now,
        not at first use: under `accelerate launch` the main process does this before
        the others may load the files it writes."""
        for kind in kinds:
            self.predictor(kind)

    def fp32(self, texts: list[Any], what: str) -> np.ndarray:
        return self.predictor("fp32").logits(texts, what)

    def int8(self, texts: list[Any], what: str) -> np.ndarray:
        return self.predictor("int8").logits(texts, what)
