"""What a thread-count-exact student costs: `edgekd distill` epochs with MKL's strict
mode (edgekd's default) against without it, side by side, and whether the weights
depend on the thread count.

One command: `python benchmarks/thread_exact.py` (needs ../shared). Teacher logits
are cached first, so every timed run only trains. Variants, alternating in each of
`--repeats` rounds (the order flips every round, so a drift in the machine's speed
falls on both):
  strict:  the default (`import edgekd` sets MKL_CBWR=AUTO,STRICT);
  loose:   MKL_CBWR=AUTO (a user's own setting wins): MKL's fastest kernels, and the
           ThreadGovernor keeps one thread count for the run (edgekd.threads);
and once each after the rounds: `strict` pinned to one core, to compare its weights.
Reported: median epoch seconds per variant, their ratio, and the sha256 of each run's
model.safetensors (strict: all equal, on all cores and on one, if exact).
Writes benchmarks/results/thread_exact.{json,md}.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
EPOCH = re.compile(r"^epoch (\d+): .*, ([\d.]+) s$")


def one_core() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def distill(args: argparse.Namespace, out: Path, env: dict[str, str], pinned: bool) -> dict:
    cmd = [
        sys.executable, "-m", "edgekd", "distill",
        "--teacher", str(args.shared / "models" / "sst2-minilm-teacher"),
        "--data", str(args.shared / "data" / "sst2"), "--max-train", str(args.rows),
        "--epochs", str(args.epochs), "--patience", "99", "--seed", "0",
        "-s", "time_budget=null", "--out", str(out), "--overwrite", *smoke.distill_args(),
    ]  # fmt: skip
    done = subprocess.run(
        cmd, env=env, capture_output=True, text=True, preexec_fn=one_core if pinned else None
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    epochs = [float(m[2]) for line in done.stderr.splitlines() if (m := EPOCH.match(line))]
    digest = hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest()
    return {"epoch_s": epochs, "sha256": digest}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    p.add_argument("--work", type=Path, default=smoke.runs_dir(REPO / "runs" / "bench-exact"))
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.rows = smoke.at_most(args.rows, smoke.ROWS)
    args.epochs = smoke.at_most(args.epochs, 1)
    args.repeats = smoke.at_most(args.repeats, smoke.REPEATS)
    if not (args.shared / "data" / "sst2" / "train.tsv").is_file():
        sys.exit(f"{args.shared} has no data/sst2: pass --shared")
    args.work.mkdir(parents=True, exist_ok=True)
    base = {**os.environ, "EDGEKD_CACHE": str(args.work / "cache")}
    base.pop("MKL_CBWR", None)
    envs = {"strict": base, "loose": {**base, "MKL_CBWR": "AUTO"}}
    distill(args, args.work / "warm", base, pinned=False)  # labels once, into the cache
    runs: dict[str, list[dict]] = {"strict": [], "loose": []}
    for r in range(args.repeats):
        order = ["strict", "loose"] if r % 2 == 0 else ["loose", "strict"]
        for name in order:
            runs[name].append(distill(args, args.work / name, envs[name], pinned=False))
    one = distill(args, args.work / "strict-one-core", base, pinned=True)
    median = {k: statistics.median(s for r in v for s in r["epoch_s"]) for k, v in runs.items()}
    hashes = {k: sorted({r["sha256"] for r in v}) for k, v in runs.items()}
    exact = len(hashes["strict"]) == 1 and hashes["strict"] == [one["sha256"]]
    result = {
        "smoke": smoke.SMOKE,
        "rows": args.rows,
        "epochs": args.epochs,
        "repeats": args.repeats,
        "median_epoch_s": median,
        "strict_over_loose": round(median["strict"] / median["loose"], 3),
        "strict_same_weights_on_all_and_one_core": exact,
        "distinct_weights": {**{k: len(v) for k, v in hashes.items()}},
        "runs": {**runs, "strict_one_core": one},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "thread_exact.json").write_text(json.dumps(result, indent=2) + "\n")
    md = [
        f"# Thread-count-exact training: distill, {args.rows:,} SST-2 rows, 2 cores",
        "",
        "| figure | value |",
        "|---|---|",
        f"| median epoch, strict (default) / loose (MKL_CBWR=AUTO) | "
        f"{median['strict']:.1f} s / {median['loose']:.1f} s |",
        f"| strict / loose | {result['strict_over_loose']} |",
        f"| strict: same weights in {args.repeats} runs on all cores and one on one core | "
        f"{'yes' if exact else 'NO'} |",
        f"| loose: distinct weights in {args.repeats} runs | {len(hashes['loose'])} |",
    ]
    text = smoke.markdown("\n".join(md) + "\n")
    (args.out / "thread_exact.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
