"""The one-file model (`export --e2e`) against the two-step path on SST-2: string in,
label out, timed side by side at batch 1 and batch 32; sizes and load times.

    python benchmarks/e2e_sst2.py [--student DIR] [--runs 400] [--trials 10]

The student (default: the default benchmark's seed-0 student) is exported with
`--int8 --e2e`; the export itself checks the one-file model's label on all 872 dev
rows against the Python tokenizer path, at batch 1, 8 and 32. Then two timings, each
alternating the two paths trial by trial (A B, B A, ...) so a busy spell of the
machine falls on both, and reporting the median of the per-trial ratios:

- latency, batch 1: `edgekd profile model.int8.onnx --vs model.e2e.onnx --data sst2`'s
  measurement: both models in one agent process per run (3 processes), each call one
  dev text (cycling through all 872) from string to label: the tokenizers library +
  onnxruntime for the int8 model, onnxruntime alone for model.e2e.onnx. 1 thread.
- throughput, rows/s at batch 1 and 32: `--trials` passes over the 872 dev rows in
  order, `batch` rows a call, in this process: `OnnxPredictor`'s own feed
  (StudentTokenizer: tokenizers' encode_batch, numpy padding) + onnxruntime, against
  one model.e2e.onnx call on the batch's strings. 1 onnxruntime thread each, and
  TOKENIZERS_PARALLELISM=false: the tokenizers library would otherwise spread a batch
  over both cores while the one-file model's tokenizer runs on one.

Writes benchmarks/results/e2e_sst2.json and e2e_sst2.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
WORK = smoke.runs_dir(REPO / "runs" / "bench-e2e")
DEFAULT_STUDENT = smoke.runs_dir(REPO / "runs" / "bench-default") / "sst2-seed0" / "student"
BATCHES = (1, 32)  # one request a call, and a CPU service's batch of 32


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, default=DEFAULT_STUDENT)
    p.add_argument("--runs", type=int, default=400)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.runs = smoke.at_most(args.runs, smoke.RUNS)
    args.trials = smoke.at_most(args.trials, smoke.TRIALS)
    # Before the tokenizers library first runs: its encode_batch then stays on one thread.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    from edgekd.artifacts import E2E_MODEL, MODEL_FILES, ExportReport
    from edgekd.config import ExportConfig
    from edgekd.data import load_task
    from edgekd.devices.agent import cpu_model
    from edgekd.devices.profile import profile_model
    from edgekd.stages.export import export, student_data_config

    sys.path.insert(0, str(REPO / "benchmarks"))
    from distill_default import revision

    report = export(ExportConfig(e2e=True), args.student, WORK, overwrite=True)
    assert report.e2e is not None
    data = student_data_config(args.student)
    assert data is not None
    texts = load_task(data).dev.texts
    two_step, one_file = WORK / MODEL_FILES[report.e2e.source], WORK / E2E_MODEL
    r = profile_model(
        two_step, "local-cpu", 1, args.runs, 20, 64, texts, args.trials, vs=one_file, processes=3
    )
    vs = r["vs"]
    rates = throughput(two_step, one_file, texts, args.trials)
    result: dict[str, Any] = {
        "command": f"python benchmarks/e2e_sst2.py --runs {args.runs} --trials {args.trials}",
        "smoke": smoke.SMOKE,
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "revision": revision(),
        "rows_checked": report.e2e.rows,
        "label_agreement": report.e2e.label_agreement,
        "max_probability_diff": report.e2e.max_probability_diff,
        "two_step": {
            "model": two_step.name,
            "bytes": two_step.stat().st_size,
            "tokenizer_bytes": (WORK / "tokenizer.json").stat().st_size,
            "p50_ms": r["p50_ms"],
            "p90_ms": r["p90_ms"],
            "load_ms": r["load_ms"],
        },
        "one_file": {
            "model": one_file.name,
            "bytes": one_file.stat().st_size,
            "p50_ms": vs["b"]["p50_ms"],
            "p90_ms": vs["b"]["p90_ms"],
            "load_ms": vs["b"]["load_ms"],
        },
        "ratio_p50": vs["ratio_b_over_a"],
        "ratio_p50_ci95": vs["ratio_ci95"],
        "ratio_p90": vs["p90_ratio_b_over_a"],
        "ratio_p90_ci95": vs["p90_ratio_ci95"],
        "accuracy": ExportReport.read(WORK).models[report.e2e.source].accuracy,
        "max_probability_diff_by_batch": report.e2e["max_probability_diff_by_batch"],
        "throughput": rates,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "e2e_sst2.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "e2e_sst2.md").write_text(smoke.markdown(markdown(result)))
    print(smoke.markdown(markdown(result)))


def throughput(two_step: Path, one_file: Path, texts: list[str], trials: int) -> list[dict]:
    """Rows/s of both paths at each of BATCHES: a timed call is one pass over `texts`
    in order, `batch` rows a call; the two paths alternate pass by pass."""
    import numpy as np

    from edgekd.devices.agent import alternate
    from edgekd.students.predict import E2EPredictor, OnnxPredictor

    ids_path = OnnxPredictor(two_step, threads=1)
    file_path = E2EPredictor(one_file, threads=1)
    out = []
    for batch in BATCHES:
        chunks = [texts[a : a + batch] for a in range(0, len(texts), batch)]

        def tokenized(chunks: list[list[str]] = chunks) -> None:
            for chunk in chunks:
                ids_path.session.run(None, ids_path.feed(ids_path.tokenizer.ids(chunk)))

        def in_graph(chunks: list[list[str]] = chunks) -> None:
            for chunk in chunks:
                file_path.session.run(["label"], {"text": np.array(chunk, dtype=object)})

        # A: the one-file model, B: the two-step path, so B/A of the times is the
        # one-file model's rows/s over the two-step path's. One pass per trial, one
        # warm-up pass each.
        cmp = alternate(in_graph, tokenized, trials, 1, trials, seed=0)
        lo, hi = cmp["ratio_ci95"]
        out.append(
            {
                "batch": batch,
                "calls_per_pass": len(chunks),
                "two_step_rows_per_s": len(texts) / (cmp["b"]["p50_ms"] / 1000),
                "one_file_rows_per_s": len(texts) / (cmp["a"]["p50_ms"] / 1000),
                "ratio": cmp["ratio_b_over_a"],
                "ratio_ci95": [lo, hi],
                "trial_ratios": cmp["trial_ratios"],
            }
        )
    return out


def markdown(r: dict[str, Any]) -> str:
    a, b = r["two_step"], r["one_file"]
    lo, hi = r["ratio_p50_ci95"]
    lo9, hi9 = r["ratio_p90_ci95"]
    sizes = list(r["max_probability_diff_by_batch"])
    batches = ", ".join(sizes[:-1]) + f" and {sizes[-1]}"
    return (
        "\n".join(
            [
                "# One-file text→label ONNX against tokenizer + ONNX (SST-2, 1 thread, batch 1 "
                "and 32)",
                "",
                f"Command: `{r['command']}`. CPU: {r['cpu']}; revision {r['revision']}. Labels "
                f"equal on {r['rows_checked']} of {r['rows_checked']} dev rows at batch "
                f"{batches} (max probability difference {r['max_probability_diff']:.1e}); dev "
                f"accuracy {r['accuracy']:.4f}.",
                "",
                "Latency, one text a call (agent processes, p50/p90 of single calls):",
                "",
                "| path | files | bytes | load ms | p50 ms | p90 ms |",
                "|---|---|---|---|---|---|",
                f"| tokenizers + onnxruntime | {a['model']} + tokenizer.json | "
                f"{a['bytes'] + a['tokenizer_bytes']:,} | {a['load_ms']:.1f} | {a['p50_ms']:.3f} | "
                f"{a['p90_ms']:.3f} |",
                f"| onnxruntime + extensions | {b['model']} | {b['bytes']:,} | "
                f"{b['load_ms']:.1f} | {b['p50_ms']:.3f} | {b['p90_ms']:.3f} |",
                "",
                f"One-file / two-step, side by side: p50 {r['ratio_p50']:.3f}× (95% CI {lo:.3f}-"
                f"{hi:.3f}), p90 {r['ratio_p90']:.3f}× ({lo9:.3f}-{hi9:.3f}).",
                "",
                "Throughput, all dev rows in order, `batch` rows a call (one process, passes "
                "alternating; rows/s are medians over passes, the ratio the median of the "
                "per-pass ratios):",
                "",
                "| batch | tokenizers + onnxruntime rows/s | model.e2e.onnx rows/s | one-file / "
                "two-step rows/s (95% CI) |",
                "|---|---|---|---|",
                *(
                    f"| {t['batch']} | {t['two_step_rows_per_s']:,.0f} | "
                    f"{t['one_file_rows_per_s']:,.0f} | {t['ratio']:.3f}× "
                    f"({t['ratio_ci95'][0]:.3f}-{t['ratio_ci95'][1]:.3f}) |"
                    for t in r["throughput"]
                ),
            ]
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
