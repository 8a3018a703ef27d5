"""The `int8` export format: quantize the fp32 graph as configured, repair accuracy,
then keep int8 unless it runs slower than fp32 on this CPU (the guard)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from edgekd.artifacts import MODEL_FILES
from edgekd.config import ExportConfig
from edgekd.exporters.base import ExportFormat, ExportJob
from edgekd.progress import console
from edgekd.registry import QUANTIZERS

FP32, INT8 = MODEL_FILES["fp32"], MODEL_FILES["int8"]


class Int8Format(ExportFormat):
    name: ClassVar[str] = "int8"

    def wanted(self, cfg: ExportConfig) -> bool:
        return cfg.int8

    def write(self, job: ExportJob) -> None:
        entry = make_int8(
            job.folder,
            job.cfg,
            job.tokenizer,
            job.task,
            lambda p: job.dev_score(p)["accuracy"],
            job.exporter.static_source,
        )
        if entry is not None:
            job.report["models"]["int8"] = entry
        else:
            job.report["int8_refused"] = True


def calibration_feeds(tok: Any, texts: list[Any], n: int, seed: int = 0) -> list[dict[str, Any]]:
    """`n` seeded training rows as feeds of 16 rows each, for static calibration."""
    rng = random.Random(seed)
    rows = rng.sample(texts, min(n, len(texts)))
    return [tok(rows[i : i + 16]) for i in range(0, len(rows), 16)]


def typical_feed(tok: Any, texts: list[Any]) -> dict[str, Any]:
    """One dev text of median length at batch 1: the input the guard times."""
    ids = tok.ids(texts)
    order = sorted(range(len(ids)), key=lambda i: tok.length(ids[i]))
    return dict(tok.pad([ids[order[len(order) // 2]]]))


def make_int8(
    folder: Path,
    cfg: ExportConfig,
    tok: Any,
    task: Any,
    accuracy: Callable[[Path], float],
    static_source: Path | None = None,
) -> dict[str, Any] | None:
    """Quantize `folder/model.onnx` to `folder/model.int8.onnx` as `cfg` asks: the
    configured quantizer, accuracy repair past `max_int8_drop`, then the speed guard.
    Return the int8 entry of the report, or None when the guard refuses int8."""
    from edgekd.exporters.guard import pick_fastest_int8
    from edgekd.exporters.quantize import OP_TYPES, PRESETS
    from edgekd.exporters.repair import quantizable_nodes, repair

    fp32, int8 = folder / FP32, folder / INT8
    calibration = calibration_feeds(tok, task.train.texts, cfg.calibration_samples)

    def source(mode: str) -> Path:
        return static_source if mode == "static" and static_source is not None else fp32

    def quantizer(mode: str, preset: str, exclude: list[str]) -> Any:
        return QUANTIZERS.get(mode)(
            preset=preset,
            per_channel=cfg.per_channel,
            reduce_range=cfg.reduce_range,
            exclude_nodes=exclude,
            calibration_method=cfg.calibration,
            embedding=cfg.int8_embedding,
        )

    mode = cfg.int8_mode
    chosen = quantizer(mode, cfg.preset, [])
    preset = chosen.preset.name
    entry: dict[str, Any] = {"quantizer": chosen.describe()}
    if mode == "static" and "LSTM" in _op_types(fp32):
        entry["note"] = chosen.note
        console.print(f"note: {chosen.note}; dynamic int8 quantizes it")
    excluded: list[str] = []
    if cfg.max_int8_drop is not None:
        fix = repair(
            fp32,
            int8,
            lambda src, dst, ex: quantizer(mode, preset, ex).quantize(
                source(mode), dst, calibration
            ),
            accuracy,
            cfg.max_int8_drop,
            quantizable_nodes(source(mode), OP_TYPES),
            trial_path=folder / ".repair-trial.onnx",  # beside student.json + tokenizer
        )
        excluded = fix["kept_fp32"]
        entry["repair"] = {k: v for k, v in fix.items() if k != "trials"}
        if excluded:
            console.print(f"accuracy repair: kept {', '.join(excluded)} in fp32")
    else:
        chosen.quantize(source(mode), int8, calibration)
    if not cfg.guard:
        return entry
    feed = typical_feed(tok, task.dev.texts)
    configured = f"{mode}/{preset}"
    decision = pick_fastest_int8(fp32, {configured: int8}, feed)
    if decision["chosen"] is None:
        # The configured int8 ran slower than fp32 here: try every other preset and format.
        alternatives = {}
        for other in ("dynamic", "static"):
            for name in PRESETS:
                if f"{other}/{name}" != configured:
                    path = folder / f".{other}-{name}.onnx"
                    quantizer(other, name, excluded).quantize(source(other), path, calibration)
                    alternatives[f"{other}/{name}"] = path
        decision = pick_fastest_int8(fp32, {configured: int8, **alternatives}, feed)
        if decision["chosen"] not in (None, configured):
            os.replace(alternatives[decision["chosen"]], int8)
            kept_mode, name = decision["chosen"].split("/")
            entry["quantizer"] = quantizer(kept_mode, name, excluded).describe()
        for path in alternatives.values():
            path.unlink(missing_ok=True)
    entry["guard"] = decision
    if decision["chosen"] is None:
        int8.unlink()
        console.print(f"int8 refused: {decision['reason']}")
        return None
    console.print(
        f"int8 guard: {decision['chosen']} runs at {decision['speedup_vs_fp32']:.2f}× fp32's "
        f"speed here (refused under 1/{decision['slower_refused_at']:g})"
    )
    return entry


def _op_types(path: Path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}
