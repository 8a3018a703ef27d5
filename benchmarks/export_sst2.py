"""Export and quantization variants side by side: fp32, dynamic and static int8 per CPU
preset, small-embedding BiLSTMs, and optimum's ORTQuantizer on the same BERT student.

    python benchmarks/export_sst2.py [--shared ../shared] [--bilstm DIR] [--bert DIR]
        [--size-variants] [--rounds 5] [--runs 100]

Students: the SST-2 BiLSTM (word vocabulary, full training set; default
runs/bench-chain/student-word, distilled if missing) and a 3-layer BERT student
(default: runs/bench-methods/bert3_KD-s0 from methods_sst2.py, distilled if
missing). With --size-variants it also distils, on the same word vocabulary, a
BiLSTM with Tang et al.'s 300-d table (the default is 64-d) and one with a rank-32
factorised table, and trims the word student's vocabulary to words seen twice; each
is reported against the untrimmed student.

Every model of one student is timed in the same process, alternating, at batch 1
on an input of the median dev length, with 1 and 2 threads; the table shows the
median over rounds of each round's p50 and p90. Accuracy is on all 872 dev rows.

Writes benchmarks/results/export_sst2.json and export_sst2.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts
from distill_default import cpu, revision  # the stamp every benchmark writes

REPO = Path(__file__).resolve().parents[1]
WORK = smoke.runs_dir(REPO / "runs" / "bench-export")
CHAIN = smoke.runs_dir(REPO / "runs" / "bench-chain")
# Smoke: one preset (the presets differ only in a field), both modes.
PRESETS = smoke.pick(("avx2", "avx512_vnni", "arm64"), ("avx2",))


def timings(paths: dict[str, Path], texts: list[Any], threads: int, rounds: int, runs: int) -> dict:
    """p50 and p90 (ms) per model, side by side; each model reads the dev text of median
    length in its own tokens, at batch 1."""
    from edgekd.exporters.guard import measure

    feeds = {n: median_feed(p, texts) for n, p in paths.items()}
    return measure(paths, feeds, rounds, runs, threads)


def median_feed(model: Path, texts: list[Any]) -> dict[str, Any]:
    """The model's own inputs for the dev text of median length in its tokens."""
    from edgekd.students.predict import OnnxPredictor

    pred = OnnxPredictor(model)
    ids = pred.tokenizer.ids(texts)
    return pred.feed([sorted(ids, key=pred.tokenizer.length)[len(ids) // 2]])


def variants(student: Path, out: Path, data: Any) -> dict[str, dict[str, Any]]:
    """fp32 plus int8 per mode × preset, each exported and scored by run_export."""
    from edgekd.artifacts import MODEL_FILES
    from edgekd.config import ExportConfig
    from edgekd.stages.export import export as run_export

    FP32, INT8 = MODEL_FILES["fp32"], MODEL_FILES["int8"]

    models: dict[str, dict[str, Any]] = {}
    for mode in ("dynamic", "static"):
        for preset in PRESETS:
            folder = out / f"{mode}-{preset}"
            cfg = ExportConfig(int8_mode=mode, preset=preset, guard=False)  # type: ignore[arg-type]
            report = run_export(cfg, student, folder, data).model_dump()
            if "fp32" not in models:
                models["fp32"] = {**report["models"]["fp32"], "path": folder / FP32}
            models[f"{mode} int8 {preset}"] = {**report["models"]["int8"], "path": folder / INT8}
    return models


def optimum_int8(student: Path, out: Path) -> Path:
    """The peer: optimum's exporter, then ORTQuantizer with its avx512_vnni preset."""
    from optimum.exporters.onnx import main_export
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    main_export(str(student), out / "onnx", task="text-classification", dtype="fp32")
    quantizer = ORTQuantizer.from_pretrained(out / "onnx", file_name="model.onnx")
    qconfig = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=True)
    quantizer.quantize(save_dir=out / "int8", quantization_config=qconfig)
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(out / "onnx" / name, out / "int8" / name)
    return out / "int8" / "model_quantized.onnx"


def word_bilstm(**options: Any) -> dict[str, Any]:
    """Distil fields of a BiLSTM on the word vocabulary with `options`: every BiLSTM here
    reads it, so a size variant differs from the base in its table alone."""
    return {"student": {"name": "bilstm", "options": {"vocab": "word", **options}}}


def ensure_student(path: Path, fields: dict[str, Any], shared: Path, rows: int | None) -> Path:
    from edgekd.config import DataConfig, DistillConfig
    from edgekd.stages.distill import distill as run_distill

    if not (path / "student.json").is_file():
        cfg = DistillConfig.model_validate(
            {
                "teacher": str(shared / "models" / "sst2-minilm-teacher"),
                "data": DataConfig(spec=str(shared / "data" / "sst2"), max_train=smoke.rows(rows)),
                **fields,
                **({"epochs": 1} if smoke.SMOKE else {}),
            }
        )
        run_distill(cfg, path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--bilstm", type=Path, default=CHAIN / "student-word")
    methods = smoke.runs_dir(REPO / "runs" / "bench-methods")
    p.add_argument("--bert", type=Path, default=methods / "bert3_KD-s0")
    p.add_argument("--size-variants", action="store_true")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=100)
    args = p.parse_args()
    args.rounds = smoke.at_most(args.rounds, smoke.REPEATS)
    args.runs = smoke.at_most(args.runs, smoke.RUNS)

    from edgekd.config import DataConfig
    from edgekd.data import align_labels, load_task
    from edgekd.students.predict import OnnxPredictor, score
    from edgekd.students.trim import trim_student

    start = time.perf_counter()
    data = DataConfig(spec=str(args.shared / "data" / "sst2"))
    task = load_task(data)
    students = {
        "BiLSTM (word)": ensure_student(
            args.bilstm,
            word_bilstm(),
            args.shared,
            None,
        ),
        "BERT-3": ensure_student(
            args.bert,
            {"student": {"name": "bert", "options": {"layers": 3}}, "epochs": 3, "batch_size": 32},
            args.shared,
            2000,
        ),
    }
    results: dict[str, Any] = {}
    for label, student in students.items():
        out = WORK / label.split()[0].lower()
        models = variants(student, out, data)
        if label == "BERT-3":
            q = optimum_int8(student, out / "optimum")
            pred = OnnxPredictor(q)
            dev = align_labels(task, pred.label_names).dev
            models["optimum int8 avx512_vnni"] = {
                "path": q,
                "bytes": q.stat().st_size,
                "accuracy": score(pred, dev.texts, dev.labels)["accuracy"],
            }
        paths = {name: m["path"] for name, m in models.items()}
        timed = {t: timings(paths, task.dev.texts, t, args.rounds, args.runs) for t in (1, 2)}
        results[label] = {
            "seq_len": int(median_feed(paths["fp32"], task.dev.texts)["input_ids"].shape[1]),
            "models": {
                name: {
                    "accuracy": m["accuracy"],
                    "bytes": m["bytes"],
                    **{f"{k}_{t}t": timed[t][name][k] for t in (1, 2) for k in ("p50", "p90")},
                }
                for name, m in models.items()
            },
        }

    sizes: dict[str, Any] = {}
    if args.size_variants:
        base = students["BiLSTM (word)"]
        small = {
            # The default is 64-d: the comparison is Tang et al.'s plain 300-d table.
            "embedding_dim 300": ensure_student(
                WORK / "bilstm-dim300",
                word_bilstm(embedding_dim=300, embedding_rank=None),
                args.shared,
                None,
            ),
            "rank-32 factorised": ensure_student(
                WORK / "bilstm-rank32",
                word_bilstm(embedding_rank=32),
                args.shared,
                None,
            ),
        }
        trimmed = WORK / "bilstm-trim2"
        trim_student(base, trimmed, load_task(data).train.texts, min_freq=2)
        small["trimmed (min_freq 2)"] = trimmed
        for name, folder in {"untrimmed": base, **small}.items():
            sizes[name] = variants_dynamic(folder, WORK / "size" / name.replace(" ", "_"), data)
        # The shipping question: each small int8 student against the teacher's fp32 ONNX,
        # timed side by side (each on the median dev text in its own tokens).
        teacher = CHAIN / "teacher-onnx" / "model.onnx"
        if not teacher.is_file():
            from edgekd.exporters.teacher import export_teacher

            teacher = export_teacher(
                str(args.shared / "models" / "sst2-minilm-teacher"), teacher.parent
            )
        paths = {"teacher fp32": teacher}
        paths |= {n: WORK / "size" / n.replace(" ", "_") / "model.int8.onnx" for n in sizes}
        vs = timings(paths, task.dev.texts, 1, args.rounds, args.runs)
        teacher_bytes = teacher.stat().st_size
        for name in sizes:
            sizes[name]["p50_1t"] = vs[name]["p50"]
            sizes[name]["faster_than_teacher"] = vs["teacher fp32"]["p50"] / vs[name]["p50"]
            sizes[name]["smaller_than_teacher"] = teacher_bytes / sizes[name]["int8_bytes"]
        sizes["teacher fp32"] = {"p50_1t": vs["teacher fp32"]["p50"], "bytes": teacher_bytes}
    meta = {
        "command": "python benchmarks/export_sst2.py"
        + (" --size-variants" if args.size_variants else ""),
        "revision": revision(),
        "cpu": f"{platform.machine()}, {cpu()}",
        "smoke": smoke.SMOKE,
        "minutes": (time.perf_counter() - start) / 60,
    }
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "students": results, "size_variants": sizes}
    (out / "export_sst2.json").write_text(json.dumps(payload, indent=1, default=str))
    (out / "export_sst2.md").write_text(smoke.markdown(markdown(payload)))
    print(smoke.markdown(markdown(payload)))


def variants_dynamic(student: Path, out: Path, data: Any) -> dict[str, Any]:
    """Bytes and accuracy of a student's fp32 and dynamic int8 (auto preset) exports."""
    from edgekd.config import ExportConfig
    from edgekd.stages.export import export as run_export

    r = run_export(ExportConfig(guard=False), student, out, data).model_dump()
    return {
        "fp32_bytes": r["models"]["fp32"]["bytes"],
        "int8_bytes": r["models"]["int8"]["bytes"],
        "fp32_accuracy": r["models"]["fp32"]["accuracy"],
        "int8_accuracy": r["models"]["int8"]["accuracy"],
    }


def markdown(payload: dict[str, Any]) -> str:
    meta = payload["meta"]
    lines = [
        f"# Export variants on SST-2 ({meta['cpu']})",
        "",
        f"`{meta['command']}` at {meta.get('revision', 'an unrecorded revision')}.",
        "",
    ]
    for label, r in payload["students"].items():
        fp = r["models"]["fp32"]
        lines += [
            f"## {label} (batch 1, {r['seq_len']} tokens; p50/p90 ms, median of rounds)",
            "",
            "| model | dev acc | bytes | p50 1t | p90 1t | p50 2t | p90 2t | vs fp32 1t |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, m in r["models"].items():
            lines.append(
                f"| {name} | {m['accuracy']:.4f} | {m['bytes']:,} | {m['p50_1t']:.3f} | "
                f"{m['p90_1t']:.3f} | {m['p50_2t']:.3f} | {m['p90_2t']:.3f} | "
                f"{fp['p50_1t'] / m['p50_1t']:.2f}× |"
            )
        lines.append("")
    if payload["size_variants"]:
        base = payload["size_variants"]["untrimmed"]
        teacher = payload["size_variants"]["teacher fp32"]
        lines += [
            "## Small embeddings (BiLSTM, dynamic int8, auto preset) vs the teacher's fp32 ONNX",
            "",
            f"Teacher fp32 ONNX: {teacher['bytes']:,} B, p50 {teacher['p50_1t']:.3f} ms "
            "(1 thread, batch 1, timed side by side with the students).",
            "",
            "| variant | int8 bytes | smaller | int8 dev acc | Δ acc vs untrimmed | "
            "p50 ms | faster |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, v in payload["size_variants"].items():
            if name == "teacher fp32":
                continue
            lines.append(
                f"| {name} | {v['int8_bytes']:,} | {v['smaller_than_teacher']:.1f}× | "
                f"{v['int8_accuracy']:.4f} | {v['int8_accuracy'] - base['int8_accuracy']:+.4f} | "
                f"{v['p50_1t']:.3f} | {v['faster_than_teacher']:.1f}× |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
