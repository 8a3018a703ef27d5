"""Labelling on one process or two: `edgekd.distill.labeling.teacher_labels`, the
reference teacher on the same SST-2 rows, alone and under `accelerate launch
--num_processes 2`, where each process labels half the rows (`LabelGroup`).

One command: `python benchmarks/labelling_processes.py` (needs ../shared). Each run is
its own command (one process, or two started by accelerate over gloo) that loads the
teacher, waits for every process, then labels `--rows` rows into an empty logit cache.
Runs alternate 1, 2 then 2, 1 so that a drift in the machine's speed falls on both; each
figure is the median of `--repeats` runs. Reported: rows/s as the time budget sees it
(`teacher_runtime.rows_per_s`: every process's rows over the wall seconds until all
were gathered), the wall seconds of the labelling call, the rows each process
labelled, and the two-process logits against one process's (largest |difference|,
argmax agreement). Writes benchmarks/results/labelling_processes.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import smoke  # benchmarks/ is on the path of its own scripts
from processes_sst2 import launch_args  # the one accelerate launch spelling

REPO = Path(__file__).resolve().parents[1]


def sample_rows(shared: Path, n: int, seed: int = 0) -> list[str]:
    import random

    lines = (shared / "data" / "sst2" / "train.tsv").read_text().splitlines()[1:]
    rows = [line.split("\t")[0] for line in lines]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def worker(args: argparse.Namespace) -> None:
    """One process of a run (all of them under `accelerate launch`): label the rows; the
    main process writes what it measured and the logits."""
    import numpy as np
    from accelerate import PartialState

    from edgekd.config import DistillConfig
    from edgekd.distill.labeling import process_group, teacher_labels
    from edgekd.distill.teacher import at_trained_length, load_teacher, teacher_label_names
    from edgekd.distill.trainer import on_cpu_only
    from edgekd.exporters.teacher import OnnxLabelers

    state = PartialState(cpu=on_cpu_only())
    group = process_group(state)
    teacher = str(args.shared / "models" / "sst2-minilm-teacher")
    cfg = at_trained_length(
        DistillConfig(teacher=teacher, teacher_runtime=args.runtime, cache_dir=str(args.cache))
    )
    texts = sample_rows(args.shared, args.rows)
    model, tok = load_teacher(teacher)
    if group.size > 1:
        group.barrier()  # every process loaded: the labelling starts together
    start = time.perf_counter()
    logits, _, report = teacher_labels(
        cfg, {"train": texts}, model, tok, teacher_label_names(model.config), OnnxLabelers,
        None, group,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if group.main:
        np.save(args.result.with_suffix(".npy"), logits["train"])
        report = {**report, "wall_s": round(wall, 2), "processes": group.size}
        args.result.write_text(json.dumps(report) + "\n")
    if group.size > 1:
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()


def label_run(args: argparse.Namespace, processes: int, rows: int, name: str) -> dict:
    """One run into an empty logit cache (the ONNX export, if any, is kept)."""
    shutil.rmtree(args.work / "cache" / "logits", ignore_errors=True)
    result = args.work / f"{name}.json"
    result.unlink(missing_ok=True)
    cmd = [
        *launch_args(processes), __file__, "--worker", "--shared", str(args.shared),
        "--rows", str(rows), "--runtime", args.runtime, "--cache", str(args.work / "cache"),
        "--result", str(result),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=REPO)
    return json.loads(result.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    work = smoke.runs_dir(REPO / "runs" / "bench-labelling-processes")
    p.add_argument("--work", type=Path, default=work)
    p.add_argument("--rows", type=int, default=8000)
    p.add_argument("--repeats", type=int, default=4, help="runs of each; medians over them")
    p.add_argument("--runtime", default="torch", choices=["torch", "onnx", "onnx-int8", "auto"])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--render", action="store_true", help="rewrite the .md from the .json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return
    args.rows = smoke.at_most(args.rows, smoke.ROWS)
    args.repeats = smoke.at_most(args.repeats, smoke.REPEATS)
    if args.render:
        render(json.loads((args.out / "labelling_processes.json").read_text()), args.out)
        return
    if not (args.shared / "data" / "sst2" / "train.tsv").is_file():
        sys.exit(f"{args.shared} has no data/sst2: pass --shared")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.runtime != "torch":  # the ONNX export (and quantization) once, untimed
        label_run(args, 1, 64, "warm-up")
    runs: list[dict] = []
    for repeat in range(args.repeats):
        for processes in (1, 2) if repeat % 2 == 0 else (2, 1):
            name = f"r{repeat}-p{processes}"
            runs.append({"repeat": repeat, **label_run(args, processes, args.rows, name)})
    result = summarise(args, runs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "labelling_processes.json").write_text(json.dumps(result, indent=2) + "\n")
    render(result, args.out)


def summarise(args: argparse.Namespace, runs: list[dict]) -> dict:
    import numpy as np
    from distill_default import revision  # beside this file, on sys.path when run

    from edgekd.threads import available_cores

    median = statistics.median
    by = {n: [r for r in runs if r["processes"] == n] for n in (1, 2)}
    rate = {n: median(r["rows_per_s"] for r in by[n]) for n in by}
    wall = {n: median(r["wall_s"] for r in by[n]) for n in by}
    # Paired: each repeat's two runs ran back to back.
    paired = [
        b["rows_per_s"] / a["rows_per_s"]
        for a, b in zip(by[1], by[2], strict=True)
        if a["repeat"] == b["repeat"]
    ]
    # Same rows, same logits: the two-process runs against the first one-process run.
    ref = np.load(args.work / "r0-p1.npy")
    diff, agree = 0.0, 1.0
    for r in by[2]:
        got = np.load(args.work / f"r{r['repeat']}-p2.npy")
        diff = max(diff, float(np.abs(got - ref).max()))
        agree = min(agree, float((got.argmax(1) == ref.argmax(1)).mean()))
    return {
        "rows": args.rows,
        "runtime": args.runtime,
        "used": by[2][0].get("used"),
        "repeats": args.repeats,
        "cores": available_cores(),
        "smoke": smoke.SMOKE,
        "revision": revision(),
        "rows_per_s": {"p1": round(rate[1], 1), "p2": round(rate[2], 1)},
        "wall_s": {"p1": wall[1], "p2": wall[2]},
        "ratio_p2_p1": round(rate[2] / rate[1], 3),
        "paired_ratio_median": round(median(paired), 3),
        "rows_by_process": by[2][0]["rows_by_process"],
        "max_abs_diff": diff,
        "argmax_agreement": agree,
        "runs": runs,
    }


def render(result: dict, out: Path) -> None:
    cores = result["cores"]
    shares = result["rows_by_process"]
    md = [
        f"# Labelling on one process or two: {result['rows']:,} SST-2 rows, reference teacher",
        "",
        f"`teacher_runtime: {result['runtime']}` (labelled with {result['used']}), an empty "
        f"logit cache each run; median of {result['repeats']} runs each, alternated; "
        f"{cores} cores.",
        "",
        "| processes | rows/s (the budget's rate) | wall s | rows labelled per process |",
        "|---|---|---|---|",
        f"| 1 | {result['rows_per_s']['p1']:,.0f} | {result['wall_s']['p1']:.1f} | "
        f"{result['rows']:,} |",
        f"| 2 | {result['rows_per_s']['p2']:,.0f} | {result['wall_s']['p2']:.1f} | "
        f"{' + '.join(f'{n:,}' for n in shares)} |",
        "",
        f"Two processes / one: {result['ratio_p2_p1']:.2f}× (median of paired runs "
        f"{result['paired_ratio_median']:.2f}×). Two-process logits against one "
        f"process's: largest |difference| {result['max_abs_diff']:.1e}, argmax agreement "
        f"{result['argmax_agreement']:.2%}.",
        "",
        f"Each of N processes labels 1/N of the rows, so N label N× faster where each has "
        f"cores (or a GPU) of its own: N machines, or N GPUs. On one machine they share its "
        f"cores: one process labels on all {cores} and two on {max(1, cores // 2)} each "
        "(`edgekd.threads.core_share`), the same cores doing the same matrix products, so "
        "expect about 1× here (on 2 cores, certainly); the second process adds its start-up, "
        "a second copy of the teacher and the gather, not compute. A ratio well above 1× on "
        "such a machine comes from threads, not shares: with another program busy, the one "
        "process's multi-thread matrix products wait at each barrier for a thread the "
        "scheduler parked, where one-thread processes never wait (edgekd/threads.py).",
        "",
        f"Revision {result['revision']}.",
    ]
    if result.get("smoke"):
        md = [smoke.NOTE, "", *md]
    (out / "labelling_processes.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
