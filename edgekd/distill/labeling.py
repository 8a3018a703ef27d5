"""The transfer set: training texts plus augmented variants, labelled by the teacher(s).

Teacher logits are computed once per (teacher, texts, max length, augmentation,
runtime) and cached (see `cache.py`). Runtimes (`teacher_runtime`):

- `torch`: the PyTorch fp32 teacher.
- `onnx`: its fp32 ONNX export on onnxruntime (the same logits to ~1e-5, faster).
- `onnx-int8`: its dynamic int8 export for every row (fastest; agreement measured).
- `auto` (default): int8 for the rows it is sure of, fp32 ONNX for the close calls.
  A seeded sample of the transfer texts (never dev) is labelled both ways: half of
  it sets the int8 margin below which fp32 relabels a row, the other half measures
  the result; if that falls under 99.5% argmax agreement, fp32 labels everything.
  Below `AUTO_MIN_ROWS` uncached rows, the export would cost more than it saves and
  PyTorch labels them.

Dev rows are always labelled in fp32 (PyTorch, or ONNX when the run uses ONNX):
they are the reference the student is judged against. Texts are labelled once each
(duplicates share a row) in length-sorted batches.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from edgekd.artifacts import LabelerCalibration
from edgekd.config import DistillConfig
from edgekd.distill.cache import (
    cache_key,
    cached_logits,
    default_cache_root,
    has_cached,
    hash_texts,
    teacher_fingerprint,
)
from edgekd.distill.transfer import Chained, TextColumn, permute, write_column
from edgekd.errors import EdgeKDError
from edgekd.progress import console

# (texts, progress description) → logits (N × C, float32), rows in the order of texts
Labeler = Callable[[list[Any], str], np.ndarray]

AGREEMENT_FLOOR = 0.995  # int8 labels only where they agree with fp32 on ≥ 99.5% of rows
CALIBRATION_ROWS = 2_000  # 1,000 rows pick the margin, 1,000 others measure it
# Exporting and quantizing the teacher takes ~25 s on 2 cores; at ~470 rows/s (PyTorch)
# vs ~1,300 (auto), labelling 20,000 rows saves ~27 s: below that, PyTorch labels.
AUTO_MIN_ROWS = 20_000
# Bump when the augmented-row files change meaning (transfer.py): old ones are ignored.
TRANSFER_VERSION = 1
MARGIN_SLACK = 1.5  # × the largest int8 margin seen on a disagreement: room for the tail


class OnnxTeacher(Protocol):
    """The teacher as ONNX (built by `edgekd.exporters.teacher`, injected from there)."""

    def fp32(self, texts: list[Any], what: str) -> np.ndarray: ...

    def int8(self, texts: list[Any], what: str) -> np.ndarray: ...


# (config, teacher name, teacher fingerprint) → its ONNX labelers, exported on first use
OnnxRuntime = Callable[[DistillConfig, str, str], OnnxTeacher]


def augmented_texts(
    cfg: DistillConfig, train_texts: list[Any], tokenizer: Any
) -> tuple[TextColumn, np.ndarray]:
    """Every candidate extra row (deduplicated variants of the training texts) in a
    seeded order and, per row, the index of the training text it came from (int32).
    The run keeps a prefix: `augment.max_rows`, or what its time budget affords.

    The rows are an Arrow file in the cache, memory-mapped (`transfer.py`): they are
    generated once per (training texts, augmentation) and streamed to disk as they are
    made, so a large augmentation costs disk, not memory."""
    from edgekd.distill.augment import build_augmenter, methods_of_stage, text_key, variants

    if not methods_of_stage(cfg.augment.methods, "text"):
        return TextColumn.empty(), np.zeros(0, np.int32)
    mask = getattr(tokenizer, "mask_token", None) or "[MASK]"
    h = hashlib.sha256(f"{TRANSFER_VERSION}\x00{text_key(cfg.augment)}\x00{mask}".encode())
    hash_texts(h, train_texts)
    path = cache_root(cfg) / "transfer" / f"{h.hexdigest()[:32]}.arrow"
    rows = TextColumn.read(path)  # None: not there yet, or damaged (it is only a cache)
    if rows is None:
        augmenter = build_augmenter(cfg.augment, train_texts, mask)
        # A phrase dataset already holds the parts of its sentences (n-gram variants, in
        # effect): varying the parts again adds little, varying the sentences adds new rows.
        if cfg.augment.sources == "maximal":
            from edgekd.data import maximal_rows

            picked = maximal_rows(train_texts)
        else:
            picked = list(range(len(train_texts)))
        made = path.with_name(f".{path.stem}.made-{os.getpid()}.arrow")
        pairs = bool(train_texts) and not isinstance(train_texts[0], str)
        try:
            per_text = cfg.augment.variants_per_text(len(train_texts))
            with console.status(f"augmenting {len(picked):,} texts × {per_text}"):
                n = write_column(
                    made,
                    (
                        (variant, picked[i])  # back to indices of train_texts
                        for variant, i in variants(
                            [train_texts[i] for i in picked],
                            augmenter,
                            per_text,
                            cfg.augment.seed,
                            known=train_texts,
                        )
                    ),
                    pairs,
                )
                # A seeded order, so that any cap (`max_rows`, or what a time budget
                # affords) keeps a prefix: a larger cap holds every row of a smaller
                # one, and their labels.
                order = np.array(random.Random(cfg.augment.seed).sample(range(n), n), np.int64)
                permute(TextColumn(made), order, path)
        finally:
            made.unlink(missing_ok=True)
        rows = TextColumn(path)
    console.print(
        f"augmentation {'+'.join(m.name for m in cfg.augment.methods)}: {len(rows):,} new rows"
    )
    return rows, rows.sources


def cache_root(cfg: DistillConfig) -> Path:
    """edgekd's cache (`cache_dir`, else $EDGEKD_CACHE, else ~/.cache/edgekd): teacher
    logits in logits/, ONNX teachers in teachers/, augmented rows in transfer/. Nothing
    cached is written outside it."""
    return Path(cfg.cache_dir) if cfg.cache_dir else default_cache_root()


def cache_dir(cfg: DistillConfig) -> Path:
    """The teacher-logit cache."""
    return cache_root(cfg) / "logits"


def deduplicated(labeler: Labeler) -> Labeler:
    """Label each distinct text once (augmentation and phrase datasets repeat rows)."""

    def label(texts: list[Any], what: str) -> np.ndarray:
        first: dict[Any, int] = {}
        distinct: list[Any] = []
        inverse = []
        for t in texts:
            k = t if isinstance(t, str) else tuple(t)
            if k not in first:
                first[k] = len(distinct)
                distinct.append(t)
            inverse.append(first[k])
        if len(distinct) == len(texts):
            return labeler(texts, what)
        return labeler(distinct, what)[np.array(inverse)]

    return label


def torch_labeler(cfg: DistillConfig, model: Any, tokenizer: Any) -> Labeler:
    from edgekd.distill.teacher import teacher_logits

    return lambda texts, what: teacher_logits(
        model, tokenizer, texts, cfg.teacher_batch_size, cfg.teacher_max_length, what
    )


def margins(logits: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 logit per row (logit units): how sure the labeler is."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def pick_margin(fp32: np.ndarray, int8: np.ndarray) -> float:
    """The int8 margin under which a row is relabelled in fp32: every disagreement seen
    lies below it (with `MARGIN_SLACK`); 0 when int8 never disagreed."""
    wrong = fp32.argmax(1) != int8.argmax(1)
    return float(MARGIN_SLACK * margins(int8)[wrong].max()) if wrong.any() else 0.0


def calibration_sample(texts: Sequence[Any], seed: int) -> list[Any]:
    return random.Random(seed).sample(texts, min(CALIBRATION_ROWS, len(texts)))


def calibrate(onnx: OnnxTeacher, sample: list[Any]) -> LabelerCalibration:
    """Pick the relabel margin on one half of `sample`, measure it on the other."""
    f = onnx.fp32(sample, "calibrating labelers (fp32)")
    q = onnx.int8(sample, "calibrating labelers (int8)")
    half = len(sample) // 2
    margin = pick_margin(f[:half], q[:half])
    fb, qb = f[half:], q[half:]
    low = margins(qb) < margin
    hybrid = np.where(low[:, None], fb, qb)
    agree = float((hybrid.argmax(1) == fb.argmax(1)).mean()) if len(fb) else 0.0
    return LabelerCalibration(
        choice="hybrid" if agree >= AGREEMENT_FLOOR else "onnx",
        margin=margin,
        n=len(fb),
        int8_agreement=float((qb.argmax(1) == fb.argmax(1)).mean()) if len(fb) else 0.0,
        hybrid_agreement=agree,
        relabelled=float(low.mean()) if len(fb) else 0.0,
        floor=AGREEMENT_FLOOR,
    )


def hybrid_labeler(onnx: OnnxTeacher, margin: float) -> Labeler:
    """int8 logits, with the rows whose int8 margin is under `margin` redone in fp32."""

    def label(texts: list[Any], what: str) -> np.ndarray:
        out = onnx.int8(texts, what)
        low = np.flatnonzero(margins(out) < margin)
        if len(low):
            out[low] = onnx.fp32([texts[i] for i in low], f"{what}: fp32 for close calls")
        return out

    return label


class Meter:
    """Rows the teacher labelled in this run (cache hits excluded) and the seconds
    they took: the labelling rate a time budget plans with."""

    def __init__(self) -> None:
        self.rows, self.seconds = 0, 0.0

    def add(self, rows: int, seconds: float) -> None:
        self.rows, self.seconds = self.rows + rows, self.seconds + seconds

    def rate(self) -> float | None:
        """Rows per second, or None before any row was labelled."""
        return self.rows / self.seconds if self.rows and self.seconds > 0 else None


def label_splits(
    cfg: DistillConfig,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    labelers: dict[str, tuple[Labeler, str]],
    width: int,
    plan: AugmentedPlan | None = None,
    meter: Meter | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, bool]]:
    """Logits per named split, each from the cache when its key matches. `labelers`:
    split → (labeler, runtime name in the cache key). The augmented split goes in
    chunks (`label_chunks`, under `plan`); `width` is the number of labels."""
    out, hits = {}, {}
    meter = meter or Meter()
    for split, texts in splits.items():
        labeler, runtime = labelers[split]
        if split == "augmented":
            out[split], hits[split] = label_chunks(
                cfg, fingerprint, texts, labeler, runtime, width, plan or AugmentedPlan(), meter
            )
            continue
        started = time.perf_counter()

        def compute(
            texts: Sequence[Any] = texts, split: str = split, labeler: Labeler = labeler
        ) -> np.ndarray:
            return labeler(list(texts), f"teacher logits ({split})")

        out[split], hits[split] = cached_logits(
            cache_dir(cfg),
            split_key(cfg, fingerprint, split, texts, runtime),
            compute,
            rows=len(texts),
            width=width,
        )
        if not hits[split]:
            meter.add(len(texts), time.perf_counter() - started)
    return out, hits


AUGMENT_CHUNK = 8_192  # augmented rows per cache file: a killed run redoes at most one


class AugmentedPlan:
    """How many augmented rows to label: at most `limit`, and, with `room`, only while
    `room(rows, seconds)` agrees to grow the set to `rows` at an estimated cost of
    `seconds` of labelling (0 for a cached chunk)."""

    def __init__(
        self, limit: int | None = None, room: Callable[[int, float], bool] | None = None
    ) -> None:
        self.limit, self.room = limit, room


def augmented_chunks(texts: Sequence[Any], limit: int | None) -> list[tuple[int, int]]:
    """[start, stop) of each chunk of `texts[:limit]`, at fixed offsets so that a cap
    shares every whole chunk with a larger one (and its cached labels)."""
    n = len(texts) if limit is None else min(limit, len(texts))
    return [(a, min(a + AUGMENT_CHUNK, n)) for a in range(0, n, AUGMENT_CHUNK)]


def label_chunks(
    cfg: DistillConfig,
    fingerprint: str,
    texts: Sequence[Any],
    labeler: Labeler,
    runtime: str,
    width: int,
    plan: AugmentedPlan,
    meter: Meter,
) -> tuple[np.ndarray, bool]:
    """Logits of a prefix of `texts`: chunk by chunk, each cached on its own (an
    interrupted run keeps its finished chunks), stopping where `plan` says."""
    parts, all_hit = [np.zeros((0, width), np.float32)], True
    for a, b in augmented_chunks(texts, plan.limit):
        key = split_key(cfg, fingerprint, "augmented", texts[a:b], runtime)
        rate = meter.rate()
        cached = has_cached(cache_dir(cfg), key)
        cost = 0.0 if cached or rate is None else (b - a) / rate
        if plan.room is not None and not plan.room(b, cost):
            break
        started = time.perf_counter()

        def compute(a: int = a, b: int = b) -> np.ndarray:
            return labeler(list(texts[a:b]), f"teacher logits (augmented {b:,} of {len(texts):,})")

        logits, hit = cached_logits(cache_dir(cfg), key, compute, rows=b - a, width=width)
        if not hit:
            meter.add(b - a, time.perf_counter() - started)
        parts.append(logits)
        all_hit = all_hit and hit
    return np.concatenate(parts), all_hit


def split_key(
    cfg: DistillConfig, fingerprint: str, split: str, texts: Sequence[Any], runtime: str
) -> str:
    from edgekd.distill.augment import text_key

    augmentation = text_key(cfg.augment) if split == "augmented" else "none"
    return cache_key(fingerprint, texts, cfg.teacher_max_length, augmentation, runtime)


def calibration_path(cfg: DistillConfig, key: str) -> Path:
    return cache_dir(cfg) / f"{key}.calibration.json"


def cached_calibration(
    cfg: DistillConfig, key: str, onnx: OnnxTeacher, sample: list[Any]
) -> LabelerCalibration:
    """`calibrate`, once per (teacher, sample): stored beside the logits it decides."""
    path = calibration_path(cfg, key)
    if path.is_file():
        try:
            return LabelerCalibration.read(path)
        except EdgeKDError:  # damaged: it is only a cache
            pass
    result = calibrate(onnx, sample)
    path.parent.mkdir(parents=True, exist_ok=True)
    result.write(path)
    return result


def teacher_labels(
    cfg: DistillConfig,
    splits: dict[str, Sequence[Any]],
    teacher: Any,
    tokenizer: Any,
    label_names: list[str],
    onnx_runtime: OnnxRuntime | None = None,
    plan: AugmentedPlan | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, bool], dict[str, Any]]:
    """Logits for every split from the configured teacher(s) and runtime.

    `splits["augmented"]`, when given, holds every candidate row: the calibration
    sample is drawn from all of them (so a cap never changes it), but only the prefix
    `plan` allows is labelled, and its logits cover that prefix.
    Returns (logits, cache hits, runtime report: what labelled the transfer set, why,
    the calibration when int8 took part, and rows/s over the rows labelled).
    """
    from edgekd.distill.teacher import load_teacher, teacher_label_names

    per_teacher: list[dict[str, np.ndarray]] = []
    hits: dict[str, bool] = {}
    report: dict[str, Any] = {"runtime": cfg.teacher_runtime}
    plan = plan or AugmentedPlan()
    width = len(label_names)
    for i, name in enumerate([cfg.teacher, *cfg.extra_teachers]):
        model, tok = (teacher, tokenizer) if i == 0 else load_teacher(name)
        if teacher_label_names(model.config) != label_names:
            raise EdgeKDError(
                f"teacher {name} has labels {teacher_label_names(model.config)}, "
                f"the first teacher {label_names}; ensemble teachers must agree"
            )
        fp = teacher_fingerprint(name, model)
        labelers, info = choose_labelers(
            cfg, name, fp, splits, model, tok, onnx_runtime, plan.limit
        )
        meter = Meter()
        logits, teacher_hits = label_splits(cfg, fp, splits, labelers, width, plan, meter)
        if i == 0:
            hits = teacher_hits  # the first teacher's cache use is the one reported
            report.update(info)
            if meter.rows:
                report["rows_per_s"] = round(meter.rows / max(meter.seconds, 1e-9), 1)
            if "augmented" in logits:
                # The first teacher chose how many augmented rows fit; the others match.
                plan = AugmentedPlan(limit=len(logits["augmented"]))
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


def choose_labelers(
    cfg: DistillConfig,
    name: str,
    fingerprint: str,
    splits: dict[str, Sequence[Any]],
    model: Any,
    tokenizer: Any,
    onnx_runtime: OnnxRuntime | None,
    limit: int | None = None,
) -> tuple[dict[str, tuple[Labeler, str]], dict[str, Any]]:
    """Per split, the labeler and its cache name; and what was chosen, with why.
    Nothing is exported or calibrated while the cache holds every split."""
    runtime = cfg.teacher_runtime

    def torch_only(info: dict[str, Any]) -> tuple[dict[str, tuple[Labeler, str]], dict[str, Any]]:
        torch_fn = deduplicated(torch_labeler(cfg, model, tokenizer))
        return {s: (torch_fn, "torch") for s in splits}, {"used": "torch", **info}

    if runtime == "torch":
        return torch_only({})
    transfer = {k: v for k, v in splits.items() if k != "dev"}
    # Drawn from the rows as one sequence, without copying them out of their files.
    sample = calibration_sample(Chained(list(transfer.values())), cfg.seed)
    cal_key = cache_key(fingerprint, sample, cfg.teacher_max_length, "calibration")
    # auto's labels depend on the margin its calibration picks: the key names the sample.
    tag = f"auto:{cal_key[:16]}" if runtime == "auto" else runtime
    if runtime == "auto":
        parts = (  # one chunk's texts at a time
            (split, v[a:b])
            for split, v in transfer.items()
            for a, b in (augmented_chunks(v, limit) if split == "augmented" else [(0, len(v))])
        )
        pending: int = sum(
            len(v)
            for split, v in parts
            if not has_cached(cache_dir(cfg), split_key(cfg, fingerprint, split, v, tag))
        )
        if 0 < pending < AUTO_MIN_ROWS and not calibration_path(cfg, cal_key).is_file():
            return torch_only(
                {"why": f"{pending:,} rows to label, under {AUTO_MIN_ROWS:,}: not worth an export"}
            )
    if onnx_runtime is None:  # the ONNX export lives a layer up (exporters): injected
        raise EdgeKDError(f"teacher_runtime {runtime!r} needs the ONNX teacher; use torch")
    onnx = onnx_runtime(cfg, name, fingerprint)  # exports on first use only
    fp32 = deduplicated(onnx.fp32)
    labelers: dict[str, tuple[Labeler, str]] = {"dev": (fp32, "onnx")} if "dev" in splits else {}
    info: dict[str, Any] = {"used": runtime}
    chosen: Labeler = fp32
    if runtime in ("onnx-int8", "auto") and sample:
        cal = cached_calibration(cfg, cal_key, onnx, sample)
        info["calibration"] = cal.model_dump(exclude={"kind"})
        if runtime == "onnx-int8":
            chosen = deduplicated(onnx.int8)
        elif cal.choice == "hybrid":
            chosen, info["used"] = deduplicated(hybrid_labeler(onnx, cal.margin)), "hybrid"
        else:
            info["used"] = "onnx"
            info["why"] = (
                f"int8 with fp32 close calls agreed on {cal.hybrid_agreement:.2%}, "
                f"under {AGREEMENT_FLOOR:.1%}: fp32 labels everything"
            )
    labelers |= {s: (chosen, tag) for s in transfer}
    return labelers, info
