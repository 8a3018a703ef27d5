"""The transfer set: training texts plus augmented variants, labelled by the teacher(s).

Teacher logits are computed once per (teacher, texts, max length, augmentation,
runtime) and cached (see `cache.py`). The teacher runs on PyTorch fp32, or on an
int8 ONNX export of itself (`teacher_runtime: onnx-int8`), which labels faster;
its speedup and its agreement with the fp32 teacher are measured on dev.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgekd.config import DistillConfig
from edgekd.distill.cache import cache_key, cached_logits, default_cache_dir, teacher_fingerprint
from edgekd.errors import EdgeKDError
from edgekd.progress import console

# (texts, progress description) → logits (N × C, float32), rows in the order of texts
Labeler = Callable[[list[str], str], np.ndarray]
# (config, teacher name, teacher fingerprint) → a faster labeler (the int8 ONNX teacher)
FastLabeler = Callable[[DistillConfig, str, str], Labeler]


def augmented_texts(
    cfg: DistillConfig, train_texts: list[str], tokenizer: Any
) -> tuple[list[str], list[int]]:
    """The transfer set's extra rows (deduplicated variants of the training texts) and,
    per row, the index of the training text it came from."""
    from edgekd.distill.augment import build_augmenter, generate_with_sources, methods_of_stage

    if not methods_of_stage(cfg.augment.methods, "text"):
        return [], []
    mask = getattr(tokenizer, "mask_token", None) or "[MASK]"
    augmenter = build_augmenter(cfg.augment, train_texts, mask)
    with console.status(f"augmenting {len(train_texts):,} texts × {cfg.augment.n_iter}"):
        rows, sources = generate_with_sources(
            train_texts, augmenter, cfg.augment.n_iter, cfg.augment.seed
        )
    if cfg.augment.max_rows is not None and len(rows) > cfg.augment.max_rows:
        rng = random.Random(cfg.augment.seed)
        keep = sorted(rng.sample(range(len(rows)), cfg.augment.max_rows))
        rows, sources = [rows[i] for i in keep], [sources[i] for i in keep]
    console.print(
        f"augmentation {'+'.join(m.name for m in cfg.augment.methods)}: {len(rows):,} new rows"
    )
    return rows, sources


def cache_dir(cfg: DistillConfig) -> Path:
    return Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()


def torch_labeler(cfg: DistillConfig, model: Any, tokenizer: Any) -> Labeler:
    from edgekd.distill.teacher import teacher_logits

    return lambda texts, what: teacher_logits(
        model, tokenizer, texts, cfg.teacher_batch_size, cfg.teacher_max_length, what
    )


def label_splits(
    cfg: DistillConfig,
    fingerprint: str,
    splits: dict[str, list[str]],
    labeler: Labeler,
    runtime: str,
) -> tuple[dict[str, np.ndarray], dict[str, bool]]:
    """Logits per named split, each from the cache when its key matches."""
    from edgekd.distill.augment import text_key

    augmentation = text_key(cfg.augment)
    out, hits = {}, {}
    for split, texts in splits.items():
        key = cache_key(
            fingerprint,
            texts,
            cfg.teacher_max_length,
            augmentation if split == "augmented" else "none",
            runtime,
        )
        out[split], hits[split] = cached_logits(
            cache_dir(cfg), key, lambda t=texts, s=split: labeler(t, f"teacher logits ({s})")
        )
    return out, hits


def compare_runtimes(
    reference: Labeler, fast: Labeler, texts: list[str]
) -> tuple[np.ndarray, dict[str, float]]:
    """Label `texts` with both, timed side by side; the reference's logits and a report."""
    t = time.perf_counter()
    ref = reference(texts, "teacher fp32 (dev, timed)")
    ref_s = time.perf_counter() - t
    t = time.perf_counter()
    got = fast(texts, "teacher int8 (dev, timed)")
    fast_s = time.perf_counter() - t
    return ref, {
        "agreement_with_fp32": float((ref.argmax(1) == got.argmax(1)).mean()),
        "speedup_vs_torch": ref_s / max(fast_s, 1e-9),
        "torch_seconds": ref_s,
        "int8_seconds": fast_s,
    }


def teacher_labels(
    cfg: DistillConfig,
    splits: dict[str, list[str]],
    teacher: Any,
    tokenizer: Any,
    label_names: list[str],
    fast_labeler: FastLabeler | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, bool], dict[str, Any]]:
    """Logits for every split from the configured teacher(s) and runtime.

    Returns (logits, cache hits, runtime report). Dev logits always come from the
    fp32 PyTorch teacher: they are the reference the student is judged against.
    """
    from edgekd.distill.teacher import load_teacher, teacher_label_names

    per_teacher, hits, report = [], {}, {"runtime": cfg.teacher_runtime}
    for i, name in enumerate([cfg.teacher, *cfg.extra_teachers]):
        model, tok = (teacher, tokenizer) if i == 0 else load_teacher(name)
        if teacher_label_names(model.config) != label_names:
            raise EdgeKDError(
                f"teacher {name} has labels {teacher_label_names(model.config)}, "
                f"the first teacher {label_names}; ensemble teachers must agree"
            )
        fp = teacher_fingerprint(name, model)
        reference = torch_labeler(cfg, model, tok)
        if cfg.teacher_runtime == "torch":
            logits, teacher_hits = label_splits(cfg, fp, splits, reference, "torch")
        else:
            if fast_labeler is None:  # the runtime lives a layer up (exporters): injected
                raise EdgeKDError(
                    f"teacher_runtime {cfg.teacher_runtime!r} needs a labeler; use torch"
                )
            fast = fast_labeler(cfg, name, fp)
            rest = {k: v for k, v in splits.items() if k != "dev"}
            logits, teacher_hits = label_splits(cfg, fp, rest, fast, cfg.teacher_runtime)
            logits["dev"], timing = compare_runtimes(reference, fast, splits["dev"])
            teacher_hits["dev"] = False
            if i == 0:
                report.update(timing)
        if i == 0:
            hits = teacher_hits  # the first teacher's cache use is the one reported
        per_teacher.append(logits)
        del model
    if len(per_teacher) == 1:
        return per_teacher[0], hits, report
    from edgekd.distill.losses import ensemble_logits

    combined = {
        split: ensemble_logits(
            [torch.from_numpy(t[split]) for t in per_teacher], cfg.ensemble, cfg.temperature
        ).numpy()
        for split in splits
    }
    return combined, hits, report
