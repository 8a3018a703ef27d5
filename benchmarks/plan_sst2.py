"""How well `edgekd plan` predicts: an untrained candidate's latency and bundle bytes
against the same student once distilled, on SST-2.

    python benchmarks/plan_sst2.py [--shared ../shared] [--max-train 20000]

For each of four sizes (BiLSTM hidden 64, 150 and 300 at 64-d embeddings, and a
2-layer 128-wide BERT) the plan's own measurement (`edgekd.stages.plan.measure`:
built untrained, exported with int8 as a trained student is, bundled, profiled) is
kept; then the same student is distilled (one epoch on `--max-train` rows, no
augmentation: weights, not time to accuracy, are what differ) and exported the same
way. Both shipped models are then timed side by side in one agent session per
process (3 processes × 10 trials × 400 runs, batch 1, one thread, the plan's input
length): the ratio trained/untrained, minus one, is the prediction error. The
plan's p50 from its own run against the trained model's p50 from a separate run
is reported beside it (what a user comparing two separate profiles would see).

Writes benchmarks/results/plan_sst2.json and plan_sst2.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
WORK = smoke.runs_dir(REPO / "runs" / "bench-plan")
SIZES = [
    {"name": "bilstm", "options": {"hidden_size": 64, "embedding_dim": 64}},
    {"name": "bilstm", "options": {"hidden_size": 150, "embedding_dim": 64}},
    {"name": "bilstm", "options": {"hidden_size": 300, "embedding_dim": 64}},
    {"name": "bert", "options": {"layers": 2, "hidden": 128, "heads": 2, "ffn": 512}},
]
SIZES = smoke.pick(SIZES, SIZES[:1])  # smoke: every size takes the same path
# Agent timing: 3 processes × 10 trials × 400 runs; under smoke 3 × 2 × 20.
RUNS, TRIALS = smoke.at_most(400, smoke.RUNS), smoke.at_most(10, smoke.TRIALS)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--max-train", type=int, default=20_000)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.max_train = smoke.rows(args.max_train)

    from edgekd.artifacts import BundleManifest, ExportReport
    from edgekd.config import DataConfig, DistillConfig, ExportConfig, PlanConfig
    from edgekd.data import load_task, median_tokens
    from edgekd.devices.agent import cpu_model
    from edgekd.devices.profile import profile_model
    from edgekd.distill.teacher import load_teacher
    from edgekd.registry import Component
    from edgekd.stages.bundle import make_bundle
    from edgekd.stages.distill import distill
    from edgekd.stages.export import export
    from edgekd.stages.plan import candidate_name, measure, training_rows

    sys.path.insert(0, str(REPO / "benchmarks"))
    from distill_default import revision

    teacher_dir = str(args.shared / "models" / "sst2-minilm-teacher")
    data = DataConfig(spec=str(args.shared / "data" / "sst2"), max_train=args.max_train)
    cfg = PlanConfig(teacher=teacher_dir, data=data, grid=SIZES, runs=RUNS, trials=TRIALS)
    task = training_rows(load_task(data))  # as `edgekd plan` reads it
    teacher, teacher_tok = load_teacher(teacher_dir)
    seq_len = median_tokens(teacher_tok, task.dev.texts)
    shutil.rmtree(WORK, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    for c in cfg.grid:
        name = candidate_name(c)
        folder = WORK / name
        planned = measure(c, task, teacher, teacher_tok, cfg, folder / "untrained", 1, seq_len)
        untrained = folder / "untrained" / "export"
        dcfg = DistillConfig(
            teacher=teacher_dir,
            data=data,
            student=Component.model_validate(c.model_dump()),
            epochs=1,
            augment={"methods": []},
        )
        distill(dcfg, folder / "student")
        report = export(ExportConfig(), folder / "student", folder / "trained")
        make_bundle(folder / "trained", folder / "bundle")
        shipped = report.shipped()
        trained_model = folder / "trained" / report.models[shipped].path
        untrained_model = untrained / ExportReport.read(untrained).models[planned["model"]].path
        both = profile_model(
            untrained_model,
            "local-cpu",
            1,
            RUNS,
            20,
            seq_len,
            None,
            TRIALS,
            vs=trained_model,
            processes=3,
        )
        alone = profile_model(trained_model, "local-cpu", 1, RUNS, 20, seq_len, None, TRIALS)
        vs = both["vs"]
        rows.append(
            {
                "candidate": name,
                "params": planned["params"],
                "untrained_ships": planned["model"],
                "trained_ships": shipped,
                "plan_p50_ms": planned["metrics"]["p50_ms"],
                "trained_p50_ms": alone["p50_ms"],
                "separate_runs_error": alone["p50_ms"] / planned["metrics"]["p50_ms"] - 1,
                "side_by_side_ratio": vs["ratio_b_over_a"],
                "side_by_side_ci95": vs["ratio_ci95"],
                "p90_ratio": vs["p90_ratio_b_over_a"],
                "plan_bundle_bytes": planned["bundle_bytes"],
                "trained_bundle_bytes": BundleManifest.read(folder / "bundle").bytes,
                "trained_accuracy": report.models[shipped].accuracy,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    result = {
        "command": f"python benchmarks/plan_sst2.py --max-train {args.max_train}",
        "smoke": smoke.SMOKE,
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "revision": revision(),
        "seq_len": seq_len,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "plan_sst2.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "plan_sst2.md").write_text(smoke.markdown(markdown(result)))
    print(smoke.markdown(markdown(result)))


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# `edgekd plan`: untrained candidates against their trained students (SST-2)",
        "",
        f"Command: `{result['command']}`. CPU: {result['cpu']}; revision {result['revision']}; "
        f"batch 1, 1 thread, {result['seq_len']} tokens (median dev length).",
        "",
        "| candidate | params | ships (untrained / trained) | trained / untrained p50, side by "
        "side [95% CI] | p90 ratio | plan p50 ms | trained p50 ms (separate run) | bundle bytes "
        "plan / trained |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lo, hi = r["side_by_side_ci95"]
        lines.append(
            f"| {r['candidate']} | {r['params']:,} | {r['untrained_ships']} / "
            f"{r['trained_ships']} | {r['side_by_side_ratio']:.3f} [{lo:.3f}, {hi:.3f}] | "
            f"{r['p90_ratio']:.3f} | {r['plan_p50_ms']:.3f} | {r['trained_p50_ms']:.3f} "
            f"({100 * r['separate_runs_error']:+.1f}%) | {r['plan_bundle_bytes']:,} / "
            f"{r['trained_bundle_bytes']:,} |"
        )
    worst = max(abs(r["side_by_side_ratio"] - 1) for r in result["rows"])
    lines += [
        "",
        f"Largest side-by-side prediction error: {100 * worst:.1f}%. The students were "
        "trained one epoch without augmentation; the bundle's bytes differ only where the "
        "vocabulary does (augmented rows can add word pieces).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
