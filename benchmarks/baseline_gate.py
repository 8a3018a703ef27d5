"""How often `edgekd check --baseline` cries wolf, and whether it catches a real slowdown.

    python benchmarks/baseline_gate.py [--student DIR] [--repeats 40]

The SST-2 BiLSTM student (default: the default benchmark's seed-0 student,
runs/bench-default/sst2-seed0/student) is exported once with int8 (the export
writes the per-row predictions the gate pairs). Then, `--repeats` times each:

- identical: the export folder copied, checked against itself with the CLI's
  defaults (3 agent processes × 10 trials × 400 runs, margin 5%), on an idle
  machine, with 1 process instead of 3, and beside a busy process;
- fp32 now, int8 baseline: a real regression (the int8 guard keeps int8 only
  when it is faster), to show the gate calls it;
- int8 now, fp32 baseline: a real speed-up, which must never fail.

A false alarm is an identical pair that fails (any metric). The table gives the
rate with its Clopper-Pearson 95% interval, the median change and interval width.

Writes benchmarks/results/baseline_gate.json and baseline_gate.md.
EDGEKD_BENCH_SMOKE=1: a wiring check on the smallest work (benchmarks/smoke.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import smoke  # benchmarks/ is on the path of its own scripts

REPO = Path(__file__).resolve().parents[1]
WORK = smoke.runs_dir(REPO / "runs" / "bench-baseline")
DEFAULT_STUDENT = smoke.runs_dir(REPO / "runs" / "bench-default") / "sst2-seed0" / "student"


def spin(stop: Any) -> None:
    """A busy neighbour: one core of pure Python arithmetic until told to stop."""
    x = 0
    while not stop.is_set():
        for i in range(10_000):
            x += i * i


def one_check(now: Path, base: Path, processes: int) -> dict[str, Any]:
    from edgekd.config import ProfileConfig
    from edgekd.stages.check import check

    runs, trials = smoke.at_most(400, smoke.RUNS), smoke.at_most(10, smoke.TRIALS)
    timing = ProfileConfig(runs=runs, trials=trials, processes=processes, seq_lens=[64])
    t = time.perf_counter()
    result = check(None, [now], baseline=base, timing=timing)
    seconds = time.perf_counter() - t
    by = {r.metric: r for r in result.regressions}
    return {
        "passed": result.passed,
        "failed": [r.metric for r in result.regressions if not r.passed],
        "seconds": seconds,
        **{
            m: {"worse": by[m].worse, "ci95": list(by[m].ci95 or ()), "status": by[m].status}
            for m in ("p50_ms", "p90_ms")
        },
    }


def condition(
    name: str, now: Path, base: Path, repeats: int, processes: int = 3, busy: bool = False
) -> dict[str, Any]:
    stop = multiprocessing.Event()
    hog = multiprocessing.Process(target=spin, args=(stop,)) if busy else None
    if hog:
        hog.start()
    try:
        runs = []
        for i in range(repeats):
            runs.append(one_check(now, base, processes))
            print(f"{name} {i + 1}/{repeats}: failed {runs[-1]['failed'] or 'nothing'}", flush=True)
    finally:
        if hog:
            stop.set()
            hog.join()
    return {"name": name, "processes": processes, "busy": busy, "runs": runs}


def summarize(c: dict[str, Any]) -> dict[str, Any]:
    from edgekd.stages.baseline import beta_quantile

    runs = c["runs"]
    n, k = len(runs), sum(not r["passed"] for r in runs)
    lo = 0.0 if k == 0 else beta_quantile(0.025, k, n - k + 1)
    hi = 1.0 if k == n else beta_quantile(0.975, k + 1, n - k)
    out = {"name": c["name"], "processes": c["processes"], "busy": c["busy"], "n": n}
    out.update(failed=k, fail_rate=k / n, fail_rate_ci95=[lo, hi])
    for m in ("p50_ms", "p90_ms"):
        out[m] = {
            "median_change": statistics.median(r[m]["worse"] for r in runs),
            "median_ci_width": statistics.median(r[m]["ci95"][1] - r[m]["ci95"][0] for r in runs),
            "failed": sum(r[m]["status"] != "pass" for r in runs),
            # Calibration: how often the interval missed 0 at all (margin 0).
            "ci_excludes_zero": sum(r[m]["ci95"][0] > 0 or r[m]["ci95"][1] < 0 for r in runs),
        }
    out["median_seconds"] = statistics.median(r["seconds"] for r in runs)
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# `edgekd check --baseline`: false alarms and detection",
        "",
        f"Command: `{result['command']}`. CPU: {result['cpu']}; revision {result['revision']}.",
        f"Student: {result['student']} (int8 {result['int8_bytes']:,} B, fp32 "
        f"{result['fp32_bytes']:,} B). Each check times both models side by side: "
        "400 runs × 10 trials per agent process, seq 64, 1 thread, margin 5%.",
        "",
        "| pair | processes | neighbour | checks | failed (rate, 95% CI) | p50 change (median)"
        " | p50 CI width | p90 change | p90 CI width | CI excludes 0 (p50/p90) | s/check |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in result["summary"]:
        lo, hi = s["fail_rate_ci95"]
        lines.append(
            f"| {s['name']} | {s['processes']} | {'busy core' if s['busy'] else 'idle'} | "
            f"{s['n']} | {s['failed']} ({100 * s['fail_rate']:.1f}%, {100 * lo:.1f}–"
            f"{100 * hi:.1f}%) | {100 * s['p50_ms']['median_change']:+.1f}% | "
            f"{100 * s['p50_ms']['median_ci_width']:.1f} pt | "
            f"{100 * s['p90_ms']['median_change']:+.1f}% | "
            f"{100 * s['p90_ms']['median_ci_width']:.1f} pt | "
            f"{s['p50_ms']['ci_excludes_zero']}/{s['p90_ms']['ci_excludes_zero']} | "
            f"{s['median_seconds']:.1f} |"
        )
    lines += [
        "",
        "A failed identical pair is a false alarm; a failed fp32-over-int8 pair is a caught "
        'regression; an int8-over-fp32 pair (a speed-up) must never fail. "CI excludes 0" '
        "counts the checks whose interval alone (margin 0) would have called a difference.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, default=DEFAULT_STUDENT)
    p.add_argument("--repeats", type=int, default=40)
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = p.parse_args()
    args.repeats = smoke.at_most(args.repeats, smoke.REPEATS)

    from edgekd.artifacts import ExportReport
    from edgekd.config import ExportConfig
    from edgekd.devices.agent import cpu_model
    from edgekd.stages.export import export as run_export

    sys.path.insert(0, str(REPO / "benchmarks"))
    from distill_default import revision  # the same revision stamp as every benchmark

    if not args.student.is_dir():
        raise SystemExit(f"{args.student} missing: run benchmarks/distill_default.py first")
    WORK.mkdir(parents=True, exist_ok=True)
    base = WORK / "export"
    if not (base / "predictions.json").is_file():
        run_export(ExportConfig(guard=False), args.student, base, overwrite=True)
    report = ExportReport.read(base)
    same = WORK / "same"
    shutil.rmtree(same, ignore_errors=True)
    shutil.copytree(base, same)
    # One-model views of the export: fp32 as "now" against int8, and the reverse.
    fp32_only, int8_only = WORK / "fp32-only", WORK / "int8-only"
    for folder, keep in ((fp32_only, "fp32"), (int8_only, "int8")):
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(base, folder)
        r = report.model_copy(update={"models": {keep: report.models[keep]}})  # type: ignore[dict-item]
        r.write(folder)
    n = args.repeats
    real = smoke.at_most(max(5, n // 4), smoke.REPEATS)  # checks of a real change
    plan = [
        ("identical", same, base, n, 3, False),
        ("identical", same, base, n, 1, False),
        ("identical", same, base, n, 3, True),
        ("fp32 now, int8 baseline", fp32_only, int8_only, real, 3, False),
        ("int8 now, fp32 baseline", int8_only, fp32_only, real, 3, False),
    ]
    result: dict[str, Any] = {
        "command": f"python benchmarks/baseline_gate.py --repeats {n}",
        "smoke": smoke.SMOKE,
        "cpu": cpu_model(),
        "machine": platform.machine(),
        "revision": revision(),
        "student": str(args.student),
        "int8_bytes": report.models["int8"].bytes,
        "fp32_bytes": report.models["fp32"].bytes,
        "summary": [],
        "conditions": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    for name, now, against, repeats, processes, busy in plan:
        c = condition(name, now, against, repeats, processes, busy)
        result["conditions"].append(c)
        result["summary"].append(summarize(c))
        # Written after every condition: an interrupted run keeps what it measured.
        (args.out / "baseline_gate.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "baseline_gate.md").write_text(smoke.markdown(markdown(result)))
    print(smoke.markdown(markdown(result)))


if __name__ == "__main__":
    main()
