"""The whole chain on full SST-2 with the reference teacher, measured side by side.

    python benchmarks/chain_sst2.py [--shared ../shared] [--students default,word]
        [--rounds 5] [--runs 300]

Distils the students named by --students: `default` is what a user gets from
`edgekd distill --student bilstm` and `edgekd export --int8` (every default, its
13-minute time budget included, on the teacher's own word pieces); `word` is the same
with Tang et al.'s word vocabulary of its own, the BiLSTM export_sst2.py reads.
Exports each to fp32 + dynamic int8 ONNX, exports the teacher to fp32 ONNX (optimum)
and, as the peer baseline, quantizes it with optimum's ORTQuantizer (avx512_vnni,
dynamic, per-channel). Then times every model at batch 1, 1 thread, in interleaved
rounds (each round runs every model once, in a fresh process), and reports the
median over rounds of each round's median, next to an onnxruntime floor: an identity
graph fed the same input. About 15 minutes on 2 cores for `default` alone, 30 with
`word`.

Writes benchmarks/results/chain_sst2.json and chain_sst2.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import smoke  # benchmarks/ is on the path of its own scripts
import tasks

REPO = Path(__file__).resolve().parents[1]
# The students, as distill fields over the defaults. `default`: `edgekd distill
# --student bilstm` as shipped. `word`: the same with Tang et al.'s own word vocabulary.
ARMS: dict[str, dict[str, Any]] = {
    "default": {},
    "word": {"student": {"name": "bilstm", "options": {"vocab": "word"}}},
}
# Smoke: the training rows, the transfer set and the time budget cut to the smallest.
SMALL: dict[str, Any] = (
    {"time_budget": smoke.BUDGET_MIN, "augment": {"max_rows": smoke.AUGMENTED}}
    if smoke.SMOKE
    else {}
)


def identity_floor(path: Path) -> Path:
    """The cheapest graph onnxruntime can run on the same input: its per-call overhead."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    y = helper.make_tensor_value_info("logits", TensorProto.INT64, ["batch", "sequence"])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["input_ids"], ["logits"])], "floor", [x], [y]
    )
    # IR 10: onnxruntime 1.31 reads IR ≤ 13; onnx 1.23 would write 14.
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10),
        str(path),
    )
    return path


def quantize_teacher_with_optimum(onnx_dir: Path, out_dir: Path) -> Path:
    """The peer baseline: optimum's ORTQuantizer, avx512_vnni preset, dynamic, per-channel."""
    from optimum.onnxruntime import ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    quantizer = ORTQuantizer.from_pretrained(onnx_dir, file_name="model.onnx")
    qconfig = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=True)
    quantizer.quantize(save_dir=out_dir, quantization_config=qconfig)
    # A complete model folder, like the fp32 one: config (labels) and tokenizer beside it.
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(onnx_dir / name, out_dir / name)
    return out_dir / "model_quantized.onnx"


def timed_rounds(
    models: dict[str, Path], rounds: int, runs: int, seq_len: int, texts: list[Any]
) -> dict[str, dict[str, Any]]:
    """Interleave models round by round; keep each round's p50/p90 and e2e p50."""
    from edgekd.devices.profile import profile_model

    per: dict[str, list[dict[str, Any]]] = {name: [] for name in models}
    for r in range(rounds):
        for name, path in models.items():
            prof = profile_model(
                path, threads=1, runs=runs, warmup=max(10, runs // 10), seq_len=seq_len, texts=texts
            )
            per[name].append(prof)
            print(f"round {r + 1}/{rounds} {name}: p50 {prof['p50_ms']:.3f} ms", flush=True)
    out = {}
    for name, profs in per.items():
        med = {
            k: statistics.median(p[k] for p in profs)
            for k in ("p50_ms", "p90_ms", "load_ms", "peak_rss_mb")
        }
        p50s = [p["p50_ms"] for p in profs]
        med["p50_ms_rounds"] = p50s
        if all("end_to_end" in p for p in profs):
            med["e2e_p50_ms"] = statistics.median(p["end_to_end"]["p50_ms"] for p in profs)
        med["bytes"] = profs[0]["bytes"]
        med["cpu"] = profs[0]["cpu"]
        out[name] = med
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-chain"))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--students", default="default", help=f"Of: {', '.join(ARMS)}.")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    arms = args.students.split(",")
    if unknown := set(arms) - set(ARMS):
        p.error(f"--students: no {', '.join(sorted(unknown))}; valid: {', '.join(ARMS)}")
    args.rounds = smoke.at_most(args.rounds, smoke.REPEATS)
    args.runs = smoke.at_most(args.runs, smoke.RUNS)

    from edgekd.artifacts import MODEL_FILES
    from edgekd.config import DataConfig, DistillConfig, ExportConfig
    from edgekd.data import align_labels, load_task
    from edgekd.stages.distill import distill as run_distill
    from edgekd.stages.export import export as run_export

    FP32, INT8 = MODEL_FILES["fp32"], MODEL_FILES["int8"]
    from edgekd.exporters.teacher import export_teacher
    from edgekd.students.predict import OnnxPredictor, score

    teacher = args.shared / "models" / "sst2-minilm-teacher"
    data = DataConfig(spec=str(args.shared / "data" / "sst2"), max_train=smoke.rows(None))
    args.work.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    students: dict[str, dict[str, Any]] = {}
    for arm in arms:
        sdir, edir = args.work / f"student-{arm}", args.work / f"export-{arm}"
        # A cold teacher-logit cache per student, as a first run has: a warm one would
        # skip the labelling and spend its minutes on epochs.
        cache = args.work / f"cache-{arm}"
        shutil.rmtree(cache, ignore_errors=True)
        cfg = DistillConfig.model_validate(
            {
                "teacher": str(teacher),
                "data": data,
                "seed": args.seed,
                "cache_dir": str(cache),
                **ARMS[arm],
                **SMALL,
            }
        )
        metrics = run_distill(cfg, sdir, overwrite=True).model_dump()
        # `edgekd export --int8` as a user runs it: the int8 guard keeps fp32 only where
        # int8 runs slower on this CPU (never, for a BiLSTM, on the CPUs measured).
        report = run_export(ExportConfig(int8=True), sdir, edir, overwrite=True).model_dump()
        students[arm] = {"metrics": metrics, "export": report, "dir": edir}

    teacher_onnx = export_teacher(str(teacher), args.work / "teacher-onnx")
    teacher_q = quantize_teacher_with_optimum(
        args.work / "teacher-onnx", args.work / "teacher-optimum-int8"
    )
    task = load_task(DataConfig(spec=data.spec))
    tpred = OnnxPredictor(teacher_onnx)
    dev = align_labels(task, tpred.label_names).dev
    t_ref = score(tpred, dev.texts, dev.labels)
    acc = {"teacher fp32 (ONNX)": t_ref["accuracy"]}
    acc["teacher int8 (optimum avx512_vnni)"] = score(
        OnnxPredictor(teacher_q), dev.texts, dev.labels
    )["accuracy"]

    models: dict[str, Path] = {
        "teacher fp32 (ONNX)": teacher_onnx,
        "teacher int8 (optimum avx512_vnni)": teacher_q,
    }
    for arm, s in students.items():
        for kind, fname in (("fp32", FP32), ("int8", INT8)):
            name = f"BiLSTM ({arm}) {kind}"
            models[name] = s["dir"] / fname
            acc[name] = s["export"]["models"][kind]["accuracy"]
    models["ORT floor (identity)"] = identity_floor(args.work / "floor.onnx")

    # One sequence length for every model: the median dev length in teacher tokens
    # (with [CLS]/[SEP]), so "the same input" means the same number of positions.
    lengths = [len(x) for x in tpred.tokenizer.ids(dev.texts)]
    seq_len = int(np.median(lengths))
    timing = timed_rounds(models, args.rounds, args.runs, seq_len, dev.texts)

    t = timing["teacher fp32 (ONNX)"]
    rows = []
    for name, m in timing.items():
        row = {
            "model": name,
            "accuracy": acc.get(name),
            **m,
            "retention": acc[name] / acc["teacher fp32 (ONNX)"] if name in acc else None,
            # The floor is a yardstick, not a candidate: no ratios for it.
            "smaller_than_teacher": t["bytes"] / m["bytes"] if name in acc else None,
            "faster_than_teacher": t["p50_ms"] / m["p50_ms"] if name in acc else None,
        }
        rows.append(row)
    result = {
        "benchmark": "chain_sst2",
        "smoke": smoke.SMOKE,
        "command": "python benchmarks/chain_sst2.py "
        + " ".join(
            f"--{k.replace('_', '-')} {v}"
            for k, v in vars(args).items()
            if k in ("students", "rounds", "runs") and v is not None
        ),
        "revision": tasks.revision(),
        "machine": {"cpu": t["cpu"], "python": platform.python_version(), "cores_used": 1},
        "seq_len": seq_len,
        "teacher_pytorch_accuracy": students[next(iter(students))]["metrics"]["teacher_accuracy"],
        "students": {
            v: {
                k: s["metrics"][k]
                for k in (
                    "student_accuracy",
                    "agreement",
                    "params",
                    "params_without_embeddings",
                    "n_augmented",
                    "vocab_size",
                    "best_epoch",
                    "epochs_run",
                    "seconds",
                )
            }
            for v, s in students.items()
        },
        "rows": rows,
        "seconds_total": round(time.perf_counter() - start, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chain_sst2.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "chain_sst2.md").write_text(smoke.markdown(markdown(result)))
    print(smoke.markdown(markdown(result)))


def markdown(r: dict[str, Any]) -> str:
    lines = [
        "# Chain benchmark: SST-2, reference MiniLM teacher → BiLSTM → int8 ONNX",
        "",
        f"Command: `{r['command']}`. Revision {r['revision']}; CPU: {r['machine']['cpu']}, "
        "1 thread, batch 1, "
        f"synthetic input of {r['seq_len']} tokens (median SST-2 dev length in teacher "
        "tokens); e2e = tokenize + infer each of the 872 dev sentences; peak RSS is the "
        "profiling process's own (onnxruntime + numpy + model). Latencies are the "
        "median over interleaved rounds of each round's median; ratios are against the "
        "teacher fp32 ONNX measured in the same rounds.",
        "",
        "| model | dev acc | retention | bytes | smaller | p50 ms | p90 ms | e2e p50 ms | faster "
        "| load ms | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        acc = "—" if row["accuracy"] is None else f"{row['accuracy']:.4f}"
        ret = "—" if row["retention"] is None else f"{100 * row['retention']:.1f}%"
        e2e = f"{row['e2e_p50_ms']:.3f}" if "e2e_p50_ms" in row else "—"
        smaller, faster = (
            "—" if row[k] is None else f"{row[k]:.1f}×"
            for k in ("smaller_than_teacher", "faster_than_teacher")
        )
        lines.append(
            f"| {row['model']} | {acc} | {ret} | {row['bytes']:,} | {smaller} | "
            f"{row['p50_ms']:.3f} | {row['p90_ms']:.3f} | {e2e} | {faster} | "
            f"{row['load_ms']:.1f} | {row['peak_rss_mb']:.1f} |"
        )
    lines += [
        "",
        "Students (PyTorch):",
        "",
        "| student | dev acc | agreement | params | params w/o embeddings | vocab size | "
        "augmented rows | best epoch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v, s in r["students"].items():
        lines.append(
            f"| {v} | {s['student_accuracy']:.4f} | {s['agreement']:.4f} | "
            f"{s['params']:,} | {s['params_without_embeddings']:,} | "
            f"{s['vocab_size']:,} | {s['n_augmented']:,} | {s['best_epoch']}/{s['epochs_run']} |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
