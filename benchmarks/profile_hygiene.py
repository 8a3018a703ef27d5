"""Does edgekd's measurement hygiene hold up on a busy machine?

    python benchmarks/profile_hygiene.py [--a MODEL] [--b MODEL] [--repeats 12]

A neighbour process pinned to the agent's core burns CPU in random bursts (busy
`burst_ms`, idle 0..`gap_ms`), the way a CI runner's other jobs do. Under it, the
same model is profiled `--repeats` times each way, interleaved:

* one trial of `--runs` calls (what a plain timing loop reports), against
* `--trials` trials of `--runs / --trials` calls, p50/p90 = median of the trials' own.

For each, the spread of the reported p50 and p90 across repeats (max/min and the
coefficient of variation) says how far one CI run's figure can be trusted. Then the
speed ratio of B to A is estimated `--repeats` times two ways: two separate profiles
(ratio of their p50s), against `edgekd profile A --vs B` (alternating trials, median
of per-pair ratios, with its bootstrap 95% interval); we report the spread of each
and how often the interval held the quiet-machine ratio.

Defaults: A = the recipe's int8 BiLSTM, B = its fp32 (runs/sst2-bilstm/student/export).
Writes benchmarks/results/profile_hygiene.json and .md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
EXPORT = REPO / "runs" / "sst2-bilstm" / "student" / "export"

BURNER = """
import os, random, time
os.sched_setaffinity(0, {{{core}}})
rng = random.Random(0)
while True:
    end = time.perf_counter() + {burst_ms} / 1000
    while time.perf_counter() < end:
        pass
    time.sleep(rng.uniform(0, {gap_ms}) / 1000)
"""


def spread(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "max_over_min": max(values) / min(values),
        "cv": statistics.pstdev(values) / mean,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", type=Path, default=EXPORT / "model.int8.onnx")
    p.add_argument("--b", type=Path, default=EXPORT / "model.onnx")
    p.add_argument("--repeats", type=int, default=12)
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seq-len", type=int, default=24)
    p.add_argument("--burst-ms", type=float, default=150)
    p.add_argument("--gap-ms", type=float, default=600)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.repeats = smoke.at_most(args.repeats, smoke.REPEATS)
    args.runs = smoke.at_most(args.runs, smoke.RUNS)
    args.trials = smoke.at_most(args.trials, smoke.TRIALS)

    from edgekd.devices.profile import profile_model

    for model in (args.a, args.b):
        if not model.is_file():
            sys.exit(f"{model} is missing: run `edgekd run examples/recipe-sst2-bilstm.yaml`")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        # The agent on core 0, one thread: the burner below shares that core.
        spec = Path(tmp) / "pinned.yaml"
        spec.write_text("name: pinned\nrunner: local\nthreads: 1\ncpu_affinity: [0]\n")

        def prof(
            model: Path, trials: int, vs: Path | None = None, processes: int = 1
        ) -> dict[str, Any]:
            return profile_model(
                model, str(spec), 1, args.runs, 50, args.seq_len, None, trials, vs,
                processes=processes,
            )  # fmt: skip

        # The quiet-machine ratio: median of 3 alternating runs before any load.
        quiet = statistics.median(
            prof(args.a, args.trials, vs=args.b, processes=3)["vs"]["ratio_b_over_a"]
            for _ in range(smoke.at_most(3, smoke.REPEATS))
        )
        burner = subprocess.Popen(
            [sys.executable, "-c", BURNER.format(core=0, burst_ms=args.burst_ms,
                                                 gap_ms=args.gap_ms)]
        )  # fmt: skip
        try:
            single: dict[str, list[float]] = {"p50_ms": [], "p90_ms": []}
            multi: dict[str, list[float]] = {"p50_ms": [], "p90_ms": []}
            separate: list[float] = []
            flagged = 0
            alternating: dict[int, list[float]] = {1: [], 3: []}
            intervals: dict[int, list[list[float]]] = {1: [], 3: []}
            for _ in range(args.repeats):
                one = prof(args.a, 1)
                many = prof(args.a, args.trials)
                flagged += many["noisy"]
                for key in single:
                    single[key].append(one[key])
                    multi[key].append(many[key])
                b_alone = prof(args.b, args.trials)
                separate.append(b_alone["p50_ms"] / many["p50_ms"])
                for processes in (1, 3):
                    vs = prof(args.a, args.trials, vs=args.b, processes=processes)["vs"]
                    alternating[processes].append(vs["ratio_b_over_a"])
                    intervals[processes].append(vs["ratio_ci95"])
        finally:
            burner.kill()
            burner.wait()

    # What the loaded machine's ratio really is, by every repeat together.
    consensus = statistics.median(alternating[1] + alternating[3])
    result = {
        "benchmark": "profile_hygiene",
        "command": "python " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "smoke": smoke.SMOKE,
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "models": {"a": str(args.a), "b": str(args.b)},
        "settings": {k: v for k, v in vars(args).items() if k not in ("a", "b", "out")},
        "single_trial": {k: spread(v) for k, v in single.items()},
        "median_of_trials": {k: spread(v) for k, v in multi.items()},
        "ratio_quiet": quiet,
        "ratio_loaded_consensus": consensus,
        "ratio_separate_runs": spread(separate),
        "ratio_alternating": {n: spread(v) for n, v in alternating.items()},
        "ci95_covers_quiet_ratio": {
            n: f"{sum(lo <= quiet <= hi for lo, hi in iv)}/{args.repeats}"
            for n, iv in intervals.items()
        },
        "ci95_covers_loaded_consensus": {
            n: f"{sum(lo <= consensus <= hi for lo, hi in iv)}/{args.repeats}"
            for n, iv in intervals.items()
        },
        "noisy_flagged_under_load": f"{flagged}/{args.repeats}",
        "ci95_median_width": {
            n: statistics.median(hi - lo for lo, hi in iv) for n, iv in intervals.items()
        },
        "seconds": round(time.perf_counter() - start, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profile_hygiene.json").write_text(json.dumps(result, indent=2) + "\n")
    s1, sm = result["single_trial"], result["median_of_trials"]
    rs, ra = result["ratio_separate_runs"], result["ratio_alternating"]
    cover, width = result["ci95_covers_quiet_ratio"], result["ci95_median_width"]
    cover_l = result["ci95_covers_loaded_consensus"]
    lines = [
        "# Profiling under a noisy neighbour",
        "",
        f"`{result['command']}`: {args.repeats} repeats, {args.runs} calls each, a burner "
        f"sharing the agent's core ({args.burst_ms:g} ms busy, 0-{args.gap_ms:g} ms idle). "
        f"A = {args.a.name}, B = {args.b.name}, seq {args.seq_len}, 1 thread.",
        "",
        "| reported figure | median | max / min | CV |",
        "|---|---|---|---|",
    ]
    for name, s in (
        ("p50, one trial", s1["p50_ms"]),
        (f"p50, median of {args.trials} trials", sm["p50_ms"]),
        ("p90, one trial", s1["p90_ms"]),
        (f"p90, median of {args.trials} trials", sm["p90_ms"]),
        ("B/A ratio, two separate profiles", rs),
        ("B/A ratio, `--vs --processes 1`", ra[1]),
        ("B/A ratio, `--vs --processes 3`", ra[3]),
    ):
        lines.append(
            f"| {name} | {s['median']:.3f} | {s['max_over_min']:.2f} | {100 * s['cv']:.1f}% |"
        )
    lines += [
        "",
        f"Quiet-machine B/A ratio {quiet:.3f} (median of 3 `--vs --processes 3` runs "
        f"before the burner started); under load, all repeats together give {consensus:.3f}.",
        "",
        "| `--vs` interval | median width | held the quiet ratio | held the loaded ratio |",
        "|---|---|---|---|",
        f"| one process | {width[1]:.3f} | {cover[1]} | {cover_l[1]} |",
        f"| three processes | {width[3]:.3f} | {cover[3]} | {cover_l[3]} |",
        "",
        f"The noise warning (trial medians spread > 10%) fired in "
        f"{result['noisy_flagged_under_load']} loaded profiles.",
        "",
    ]
    text = smoke.markdown("\n".join(lines))
    (args.out / "profile_hygiene.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
