"""ExecuTorch int8 `.pte` beside onnxruntime int8 on this CPU: size, load time, latency,
accuracy, for the SST-2 BiLSTM student (the export benchmark's ExecuTorch section).

    python benchmarks/executorch_sst2.py [--student DIR] [--rounds 5] [--runs 200]

Needs `pip install -e ".[executorch]"`. The student (default: the default
benchmark's seed-0 student) is exported twice with `--executorch`: once with
`--int8` (model.int8.onnx and the int8 model.pte) and once fp32 (model.onnx and the
fp32 model.pte). Both runtimes at one thread (`_unsafe_reset_threadpool(1)` for
ExecuTorch's XNNPACK pool); each round times every model alternately at batch 1 in
one process: the .pte at its fixed 1 × max_length (padded; the shape it was
exported at), onnxruntime both on the same padded row and on the dev text of median
length (what it really runs: dynamic shapes). Load time: opening the file until the
first call can run (session creation; program + method load), median of 10.
Accuracy and agreement with PyTorch are the export's, on all 872 dev rows.

Writes benchmarks/results/executorch_sst2.json and executorch_sst2.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
WORK = smoke.runs_dir(REPO / "runs" / "bench-executorch")
DEFAULT_STUDENT = smoke.runs_dir(REPO / "runs" / "bench-default") / "sst2-seed0" / "student"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, default=DEFAULT_STUDENT)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.rounds = smoke.at_most(args.rounds, smoke.REPEATS)
    args.runs = smoke.at_most(args.runs, smoke.RUNS)

    import numpy as np
    import onnxruntime as ort
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    from executorch.runtime import Runtime

    from edgekd.artifacts import ExportReport
    from edgekd.config import ExportConfig
    from edgekd.data import load_task
    from edgekd.devices.agent import alternate, cpu_model
    from edgekd.exporters.base import pad_inputs
    from edgekd.stages.export import export, student_data_config
    from edgekd.students.predict import OnnxPredictor

    sys.path.insert(0, str(REPO / "benchmarks"))
    from distill_default import revision

    exports: dict[str, tuple[ExportReport, float]] = {}
    for kind, int8 in (("int8", True), ("fp32", False)):
        folder = WORK / kind
        t = time.perf_counter()
        if not (folder / "export.json").is_file():
            export(
                ExportConfig(int8=int8, executorch=True, guard=False),
                args.student,
                folder,
                overwrite=True,
            )
        exports[kind] = (ExportReport.read(folder), time.perf_counter() - t)

    data = student_data_config(args.student)
    assert data is not None
    texts = load_task(data).dev.texts
    pred = OnnxPredictor(WORK / "int8" / "model.int8.onnx")
    ids = pred.tokenizer.ids(texts)
    median_row = sorted(ids, key=pred.tokenizer.length)[len(ids) // 2]
    length = exports["int8"][0].model_dump()["executorch"]["length"]
    real = pred.feed([median_row])
    padded = pad_inputs(dict(real), 1, length)

    _unsafe_reset_threadpool(1)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1

    def ort_session(path: Path) -> Any:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def et_method(path: Path) -> Any:
        return Runtime.get().load_program(str(path)).load_method("forward")

    def load_ms(open_fn: Any, path: Path) -> float:
        times = []
        for _ in range(smoke.at_most(10, smoke.REPEATS)):
            t = time.perf_counter()
            open_fn(path)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)

    paths = {
        "onnxruntime int8": WORK / "int8" / "model.int8.onnx",
        "onnxruntime fp32": WORK / "fp32" / "model.onnx",
        "executorch int8": WORK / "int8" / "model.pte",
        "executorch fp32": WORK / "fp32" / "model.pte",
    }
    et_args = [torch.from_numpy(padded[k]) for k in ("input_ids", "attention_mask")]
    calls = {}
    for name, path in paths.items():
        if name.startswith("executorch"):
            method = et_method(path)
            calls[name] = lambda m=method: m.execute(et_args)
        else:
            session = ort_session(path)
            calls[f"{name} (padded to {length})"] = lambda s=session: s.run(None, padded)
            calls[f"{name} (median length)"] = lambda s=session: s.run(None, real)
    # Every model against onnxruntime int8 on its real input, alternating (A B B A).
    base = "onnxruntime int8 (median length)"
    timing: dict[str, dict[str, list[float]]] = {n: {"p50": [], "ratio": []} for n in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            out = alternate(calls[base], fn, args.runs, 20, smoke.at_most(5, smoke.TRIALS), seed=0)
            timing[name]["p50"].append(out["b"]["p50_ms"])
            timing[name]["ratio"].append(out["ratio_b_over_a"])

    rows = []
    for name in calls:
        runtime, kind = name.split()[:2]
        report, seconds = exports[kind]
        path = paths[f"{runtime} {kind}"]
        entry = (
            report.model_dump()["executorch"]
            if runtime == "executorch"
            else report.models[kind].model_dump()
        )
        rows.append(
            {
                "model": name,
                "file": str(path.relative_to(WORK)),
                "bytes": path.stat().st_size,
                "load_ms": load_ms(et_method if runtime == "executorch" else ort_session, path),
                "p50_ms": statistics.median(timing[name]["p50"]),
                "vs_ort_int8": statistics.median(timing[name]["ratio"]),
                "accuracy": entry.get("accuracy"),
                "agreement": entry.get("agreement"),
                "max_abs_diff": entry.get("max_abs_diff"),
                "export_s": seconds if runtime == "executorch" else None,
            }
        )
    result = {
        "command": "python benchmarks/executorch_sst2.py "
        f"--rounds {args.rounds} --runs {args.runs}",
        "smoke": smoke.SMOKE,
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "revision": revision(),
        "length": length,
        "median_tokens": len(median_row),
        "rows": rows,
        "np": np.__version__,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "executorch_sst2.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "executorch_sst2.md").write_text(smoke.markdown(markdown(result)))
    print(smoke.markdown(markdown(result)))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# ExecuTorch int8 `.pte` beside onnxruntime int8 (SST-2 BiLSTM, 1 thread, batch 1)",
        "",
        f"Command: `{result['command']}`. CPU: {result['cpu']}; revision {result['revision']}. "
        f"The .pte runs its fixed {result['length']} tokens (padded); the median dev text is "
        f"{result['median_tokens']} tokens.",
        "",
        "| model | bytes | load ms | p50 ms | × onnxruntime int8 (median length) | dev accuracy "
        "| agreement with PyTorch | max logit diff |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        acc = "—" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
        agree = "—" if r["agreement"] is None else f"{r['agreement']:.4f}"
        diff = "—" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}"
        lines.append(
            f"| {r['model']} | {r['bytes']:,} | {r['load_ms']:.1f} | {r['p50_ms']:.3f} | "
            f"{r['vs_ort_int8']:.2f}× | {acc} | {agree} | {diff} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
