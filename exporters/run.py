"""`edgekd export`: student folder → validated fp32 ONNX (+ int8), both re-scored on dev."""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgekd.config import DataConfig, DistillConfig, ExportConfig, load_yaml, save_config, validate
from edgekd.data import load_task
from edgekd.errors import EdgeKDError
from edgekd.io import atomic_dir, read_json, tree_bytes, write_json
from edgekd.progress import console
from edgekd.registry import EXPORTERS, QUANTIZERS
from edgekd.students import STUDENT_FILE

FP32, INT8 = "model.onnx", "model.int8.onnx"


def student_data_config(student_dir: Path) -> DataConfig | None:
    """The data a student was distilled on, from its resolved config.yaml."""
    path = student_dir / "config.yaml"
    if not path.is_file():
        return None
    return validate(DistillConfig, load_yaml(path), str(path)).data


def run_export(
    student_dir: str | Path,
    out_dir: str | Path,
    cfg: ExportConfig,
    data: DataConfig | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Export, validate, quantize and re-score; write `export.json` and return it."""
    from edgekd.data import align_labels
    from edgekd.io import check_output
    from edgekd.students.predict import OnnxPredictor, StudentPredictor, score

    check_output(out_dir, overwrite)
    student_dir = Path(student_dir)
    reference = StudentPredictor(student_dir)
    model, tok = reference.model, reference.tokenizer
    data = data or student_data_config(student_dir)
    if data is None:
        raise EdgeKDError(f"{student_dir} has no config.yaml naming its data; pass --data")
    task = align_labels(load_task(data), reference.label_names)
    # Real dev rows in the validation too: dummy ids alone would miss e.g. long texts.
    check = [tok(task.dev.texts[i : i + 16]) for i in range(0, min(len(task.dev), 64), 16)]
    exporter = EXPORTERS.get(model.name)(atol=cfg.atol, opset=cfg.opset)

    report: dict[str, Any] = {"student": str(student_dir), "atol": cfg.atol, "models": {}}
    metrics_path = student_dir / "metrics.json"
    if metrics_path.is_file():
        report["teacher_accuracy"] = read_json(metrics_path).get("teacher_accuracy")
    with atomic_dir(out_dir, overwrite) as tmp:
        t = time.perf_counter()
        max_diff = exporter.export(model, tmp / FP32, check)
        report["models"]["fp32"] = {"max_abs_diff": max_diff}
        if exporter.fusions:
            report["models"]["fp32"]["fusions"] = exporter.fusions
        tok.save(tmp)
        shutil.copy(student_dir / STUDENT_FILE, tmp / STUDENT_FILE)
        ref = score(reference, task.dev.texts, task.dev.labels)
        report["student_accuracy"] = ref["accuracy"]

        def dev_score(path: Path) -> dict[str, Any]:
            return score(
                OnnxPredictor(path), task.dev.texts, task.dev.labels, reference=ref["predictions"]
            )

        if cfg.int8:
            int8 = make_int8(
                tmp, cfg, tok, task, lambda p: dev_score(p)["accuracy"], exporter.static_source
            )
            if int8 is not None:
                report["models"]["int8"] = int8
            else:
                report["int8_refused"] = True
        if exporter.static_source is not None:
            exporter.static_source.unlink(missing_ok=True)
        if cfg.executorch:
            report["executorch"] = make_pte(model, tmp / "model.pte", check, exporter)
        report["seconds_export"] = round(time.perf_counter() - t, 2)
        if cfg.mobile or cfg.fixed_shape:
            shipped = tmp / (INT8 if "int8" in report["models"] else FP32)
            report["mobile"] = make_mobile(shipped, cfg, check, preset_platform(cfg))

        for name, entry in report["models"].items():
            path = tmp / (FP32 if name == "fp32" else INT8)
            result = dev_score(path)
            entry.update(
                {
                    "path": path.name,
                    "bytes": tree_bytes(path),
                    "accuracy": result["accuracy"],
                    "agreement": result["agreement"],
                }
            )
        report["n_dev"] = len(task.dev)
        if "int8" in report["models"]:
            report["int8_drop"] = (
                report["models"]["fp32"]["accuracy"] - report["models"]["int8"]["accuracy"]
            )
        save_config(cfg, tmp / "config.yaml")
        write_json(tmp / "export.json", report)
    return report


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
        # The configured int8 lost to fp32 here: try every other preset and format.
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
        f"int8 guard: {decision['chosen']} is {decision['speedup_vs_fp32']:.2f}× faster "
        "than fp32 here"
    )
    return entry


def _op_types(path: Path) -> set[str]:
    import onnx

    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def preset_platform(cfg: ExportConfig) -> str | None:
    """The `.ort` converter's target platform for the configured preset."""
    from edgekd.exporters.quantize import resolve_preset

    return "arm" if resolve_preset(cfg.preset).name == "arm64" else "amd64"


def make_mobile(
    model: Path, cfg: ExportConfig, check: list[dict[str, Any]], platform: str | None
) -> dict[str, Any]:
    """`.ort` (+ required operators) for `model`, a fixed-shape variant on request, each
    checked against the ONNX model it came from, and the mobile usability report."""
    import numpy as np

    from edgekd.exporters.base import pad_inputs
    from edgekd.exporters.mobile import fixed_shape, to_ort, usability

    out: dict[str, Any] = {}
    variants = [(model, None)]
    if cfg.fixed_shape:
        batch, seq = (int(x) for x in cfg.fixed_shape.split("x"))
        fixed = model.with_name(f"{model.stem}.fixed.onnx")
        variants.append((fixed_shape(model, fixed, batch, seq), (batch, seq)))
    for onnx_path, shape in variants:
        files = to_ort(onnx_path, model.parent, platform)
        feeds = check if shape is None else [pad_inputs(f, *shape) for f in check[:1]]
        diff = max(
            float(np.abs(a - b).max())
            for a, b in zip(
                run_model(files[".ort"], feeds), run_model(onnx_path, feeds), strict=True
            )
        )
        out[onnx_path.name] = {
            "ort": files[".ort"].name,
            "ort_bytes": files[".ort"].stat().st_size,
            "required_operators": files[".required_operators.config"].name,
            "max_abs_diff_vs_onnx": diff,
            "usability": usability(onnx_path),
        }
        console.print(f"mobile: {files['.ort'].name} ({diff:.1e} from its ONNX model)")
    return out


def run_model(path: Path, feeds: list[dict[str, Any]]) -> list[Any]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    return [session.run(None, {k: v for k, v in f.items() if k in names})[0] for f in feeds]


def make_pte(model: Any, path: Path, check: list[dict[str, Any]], exporter: Any) -> dict[str, Any]:
    """ExecuTorch `.pte` at batch 1 × the student's max length, checked row by row
    against the PyTorch student on the same real dev rows as the ONNX model."""
    import numpy as np

    from edgekd.exporters.base import pad_inputs
    from edgekd.exporters.executorch import export_pte, run_pte

    if model.name != "bilstm":
        raise EdgeKDError(f"the ExecuTorch export covers the bilstm student, not {model.name!r}")
    length = model.config.max_length
    export_pte(model, path, length)
    rows = [
        {k: v[i : i + 1, : int(f["attention_mask"][i].sum())] for k, v in f.items()}
        for f in check
        for i in range(f["input_ids"].shape[0])
    ]
    got = run_pte(path, [pad_inputs(r, 1, length) for r in rows])
    want = [exporter.torch_logits(model, r) for r in rows]
    diff = max(float(np.abs(a - b).max()) for a, b in zip(got, want, strict=True))
    if diff > exporter.atol:
        raise EdgeKDError(f".pte logits differ from PyTorch by {diff:.2e} > atol {exporter.atol}")
    console.print(f"executorch: {path.name} ({diff:.1e} from PyTorch)")
    return {"path": path.name, "bytes": path.stat().st_size, "length": length, "max_abs_diff": diff}
