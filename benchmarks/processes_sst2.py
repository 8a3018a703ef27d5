"""One process or two: `edgekd distill` alone, then under `accelerate launch
--num_processes 2`, on the same SST-2 rows, seeds and cached teacher logits.

One command: `python benchmarks/processes_sst2.py` (needs ../shared). The one-process
run labels and caches the teacher's logits; the two-process run reads them, so the runs
differ only in how training is spread: one process on every core, or two processes
(torch distributed over gloo) each on its share, each step's rows split between them
(`edgekd.distill.trainer.split_between`). No augmentation, no time budget and a fixed
epoch count, so both runs do the same work; training seconds are compared. Reported per seed: dev
accuracy of each, their difference (the aim: within ±0.3 points) and the training
seconds of each. Writes benchmarks/results/processes_sst2.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]


def distill_args(args: argparse.Namespace, out: Path, seed: int) -> list[str]:
    return [
        "-m", "edgekd", "distill", "--student", "bilstm",
        "--teacher", str(args.shared / "models" / "sst2-minilm-teacher"),
        "--data", str(args.shared / "data" / "sst2"), "--out", str(out),
        "--epochs", str(args.epochs), "--seed", str(seed),
        "-s", "time_budget=null", "-s", "augment.methods=[]",
        *(["--max-train", str(smoke.ROWS)] if smoke.SMOKE else []),
    ]  # fmt: skip


def launch_args(processes: int) -> list[str]:
    if processes == 1:
        return [sys.executable]
    with socket.socket() as s:  # a free port for the processes to meet on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
        "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(port),
    ]  # fmt: skip


def run(cmd: list[str], env: dict[str, str], out: Path) -> dict:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    metrics = json.loads((out / "metrics.json").read_text())
    return {
        "wall_s": round(time.perf_counter() - start, 1),
        "train_s": metrics["seconds"]["train"],
        "dev_accuracy": metrics["student_accuracy"],
        "processes": metrics["processes"],
        "epochs_run": metrics["epochs_run"],
        "best_epoch": metrics["best_epoch"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-processes"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--render", action="store_true", help="rewrite the .md from the .json")
    args = p.parse_args()
    args.epochs = smoke.at_most(args.epochs, 1)
    args.seeds = args.seeds[: smoke.at_most(len(args.seeds), smoke.REPEATS)]
    if args.render:
        render(json.loads((args.out / "processes_sst2.json").read_text()), args.out)
        return
    if not (args.shared / "data" / "sst2" / "train.tsv").is_file():
        sys.exit(f"{args.shared} has no data/sst2: pass --shared")
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "EDGEKD_CACHE": str(args.work / "cache")}
    rows = []
    for seed in args.seeds:
        row: dict = {"seed": seed}
        for processes in (1, 2):
            out = args.work / f"s{seed}-p{processes}"
            if (out / "metrics.json").is_file():  # a finished run of this command
                out.rename(out.with_name(out.name + f"-old{time.time_ns()}"))
            stale = out.with_name(f".{out.name}.resume")  # an interrupted run's: start fresh
            if stale.is_dir():
                shutil.rmtree(stale)
            cmd = launch_args(processes) + distill_args(args, out, seed)
            row[f"p{processes}"] = run(cmd, env, out)
        row["difference"] = round(row["p2"]["dev_accuracy"] - row["p1"]["dev_accuracy"], 4)
        rows.append(row)
    from distill_default import revision  # beside this file, on sys.path when run

    result = {"epochs": args.epochs, "smoke": smoke.SMOKE, "revision": revision(), "runs": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "processes_sst2.json").write_text(json.dumps(result, indent=2) + "\n")
    render(result, args.out)


def render(result: dict, out: Path) -> None:
    rows = result["runs"]
    md = [
        f"# One process or two: distill on SST-2, {result['epochs']} epochs, no augmentation",
        "",
        "Same rows, seed and cached teacher logits; x86_64, 2 cores (one each for two).",
        "",
        "| seed | dev acc, 1 process | dev acc, 2 processes | difference | "
        "train s, 1 | train s, 2 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        md.append(
            f"| {r['seed']} | {r['p1']['dev_accuracy']:.4f} | {r['p2']['dev_accuracy']:.4f} | "
            f"{r['difference']:+.4f} | {r['p1']['train_s']:.0f} | {r['p2']['train_s']:.0f} |"
        )
    median = statistics.median
    acc1 = median(r["p1"]["dev_accuracy"] for r in rows)
    acc2 = median(r["p2"]["dev_accuracy"] for r in rows)
    t1, t2 = median(r["p1"]["train_s"] for r in rows), median(r["p2"]["train_s"] for r in rows)
    md.append(f"| median | {acc1:.4f} | {acc2:.4f} | {acc2 - acc1:+.4f} | {t1:.0f} | {t2:.0f} |")
    md += ["", f"Revision {result['revision']}."]
    if result.get("smoke"):
        md = [smoke.NOTE, "", *md]
    (out / "processes_sst2.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
